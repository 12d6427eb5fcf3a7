"""The e2e suite's shared containers: one fake internet for the session, and one stack
(guardian) per host user, shared by the attack families that do not stop or break it.

``stack`` is parametrized by host user (root, then the non-root user): pytest runs every
test of one user's stack before it makes the other's, so one guardian runs at a time.
Families that stop, kill or restart a guardian (fail closed, faults) make their own with
:func:`tests.e2e.harness.running_stack`.
"""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from tests.cli.cli_support import HostUser, host_user
from tests.conftest import SkipOrFail
from tests.e2e.harness import (
    HOST_KINDS,
    FakeInternet,
    HostKind,
    Stack,
    fake_internet,
    running_stack,
)


@pytest.fixture(scope="session")
def internet(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FakeInternet]:
    with fake_internet(docker_client, tmp_path_factory.mktemp("internet")) as made:
        yield made


@pytest.fixture(scope="session")
def nonroot_user(skip_or_fail: SkipOrFail) -> Iterator[HostUser]:
    """The suite's non-root host user, for the whole session (its lock is held once)."""
    with host_user(skip_or_fail) as user:
        yield user


def user_of(request: pytest.FixtureRequest, kind: HostKind) -> HostUser | None:
    """The host user a *kind* stack runs as (None: the tests' own)."""
    if kind == "root":
        return None
    user: HostUser = request.getfixturevalue("nonroot_user")
    return user


@pytest.fixture(scope="session", params=HOST_KINDS)
def stack(
    request: pytest.FixtureRequest,
    docker_client: docker.DockerClient,
    internet: FakeInternet,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[Stack]:
    kind: HostKind = request.param
    scratch = tmp_path_factory.mktemp(f"stack-{kind}")
    user = user_of(request, kind)
    with running_stack(user, docker_client, internet, scratch, skip_or_fail) as made:
        yield made


@pytest.fixture(scope="module", params=HOST_KINDS)
def own_stack(
    request: pytest.FixtureRequest,
    docker_client: docker.DockerClient,
    internet: FakeInternet,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[Stack]:
    """A guardian of the module's own, one per host user: for the families that stop,
    kill or restart it (never the shared ``stack``)."""
    user = user_of(request, request.param)
    module = request.module.__name__.rpartition(".")[2]
    scratch = tmp_path_factory.mktemp(f"{module}-{request.param}")
    with running_stack(user, docker_client, internet, scratch, skip_or_fail) as made:
        yield made
