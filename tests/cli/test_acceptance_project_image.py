"""A project's Dockerfile on Cloister's agent image, through the real CLI, as a non-root
host user.

The agent images end as root, so a Dockerfile ``FROM`` one runs its ``RUN`` steps as
root, as it would on any Debian or Ubuntu image; the cloister made from the result still
runs as the host user's uid:gid, whatever ``USER`` the project's Dockerfile ends with. A
step that fails is shown to the person: its ``Step N/M`` line and what it printed.

The real ``cloister`` console script runs as the throwaway user of
:func:`tests.cli.cli_support.host_user` (as ``test_acceptance_nonroot.py`` does: CI runs
as root, where "not root" could not be seen), with a guardian of its own. The steps need
no network (the machine has none to give): ``apt-get clean``, ``dpkg --configure -a``,
``useradd`` and writing under ``/opt`` all need root. The project images are removed at
the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from cloister_cli.images.projectimages import PROJECT_LABEL
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    HostUser,
    exec_ok,
    guardian,
    host_user,
    inspect,
    make_repo,
    remove_containers,
    squash,
    unique,
)
from tests.waiting import free_port

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

ROOT_STEPS = (
    "RUN apt-get clean && dpkg --configure -a && mkdir /opt/tool"
    " && useradd --no-create-home extra && id -u > /opt/tool/built-by\n"
)


@pytest.fixture(scope="module")
def user(skip_or_fail: SkipOrFail) -> Iterator[HostUser]:
    with host_user(skip_or_fail) as account:
        yield account


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient, user: HostUser, skip_or_fail: SkipOrFail
) -> Iterator[CloisterCli]:
    config = (
        "# Written by tests/cli/test_acceptance_project_image.py\n"
        f"defaults:\n  image: {SLIM_IMAGE}\n"
        f"guardian:\n  ui_port: {free_port()}\n"
    )
    with guardian(docker_client, user.mktemp("cli"), config, skip_or_fail, user=user) as tool:
        yield tool


@pytest.fixture
def project(docker_client: docker.DockerClient) -> Iterator[str]:
    """A unique project name; its images are removed at the end."""
    name = unique("pimg")
    try:
        yield name
    finally:
        for image in docker_client.images.list(filters={"label": f"{PROJECT_LABEL}={name}"}):
            docker_client.images.remove(str(image.id), force=True)


def repo_with_dockerfile(cli: CloisterCli, user: HostUser, name: str, steps: str) -> Path:
    """A repository of *user*'s with a ``.cloister/Dockerfile`` on the agent image."""
    repo = make_repo(cli.root / name, user=user)
    (repo / ".cloister").mkdir()
    (repo / ".cloister" / "Dockerfile").write_text(
        "ARG CLOISTER_BASE\nFROM ${CLOISTER_BASE}\n" + steps, encoding="utf-8"
    )
    user.adopt(repo / ".cloister")
    return repo


def test_a_dockerfile_on_the_agent_image_builds_as_root_and_runs_as_the_user(
    cli: CloisterCli, user: HostUser, project: str
) -> None:
    assert user.uid != 0
    # Its own USER root at the end: the cloister's user is still the host user's.
    repo = repo_with_dockerfile(cli, user, project, ROOT_STEPS + "USER root\n")
    try:
        started = cli.ok("start", "-d", "--yes", cwd=repo)
        assert f"cloister {project} " in squash(started.stderr), started.describe()

        assert inspect(project)["Config"]["User"] == user.owner
        assert exec_ok(project, "id -u").stdout.strip() == str(user.uid)
        assert exec_ok(project, "id -g").stdout.strip() == str(user.gid)
        # What the steps did as root is there.
        built = exec_ok(project, "cat /opt/tool/built-by && id -un extra")
        assert built.stdout.split() == ["0", "extra"]
        cli.ok("stop", project)
    finally:
        remove_containers([project])


def test_a_failing_step_is_shown_with_its_output(
    cli: CloisterCli, user: HostUser, project: str
) -> None:
    failing = "RUN echo working on it; echo the-reason >&2; exit 3"
    repo = repo_with_dockerfile(cli, user, project, f"RUN true\n{failing}\n")
    try:
        result = cli.fails("start", "-d", "--yes", cwd=repo)
    finally:
        remove_containers([project])
    error = result.stderr
    assert "building .cloister/Dockerfile: The command" in error, result.describe()
    assert "returned a non-zero code: 3" in error, result.describe()
    assert f" : {failing}\n" in error, result.describe()  # the step's own line
    assert "  | the-reason\n" in error, result.describe()
    assert "  | working on it\n" in error, result.describe()
    assert project not in cli.listing()
