"""Cloister run by a non-root host user, against a real Docker engine.

CI runs as root, so the other acceptance modules see cloisters of uid 0. Here the real
``cloister`` console script runs as the throwaway system user of
:func:`tests.cli.cli_support.host_user` (made if missing, given the Docker socket's
group): that user starts the module's one guardian, makes a repository of its own,
starts a cloister in it, and the cloister's processes and files must be that user's,
never root's.

The user's guardian is an instance of its own (its data directory): others on the engine
run on. The module puts its approval UI on a free port, and stops its guardian and every
cloister of its directories at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    HostUser,
    docker_executable,
    exec_ok,
    git,
    guardian,
    host_user,
    inspect,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
)
from tests.waiting import free_port

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SERVICES = ("proxy", "approval", "gateway", "credentials")


@pytest.fixture(scope="module")
def user(skip_or_fail: SkipOrFail) -> Iterator[HostUser]:
    """The non-root user, with a temporary directory of its own."""
    with host_user(skip_or_fail) as account:
        yield account


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient, user: HostUser, skip_or_fail: SkipOrFail
) -> Iterator[CloisterCli]:
    """``cloister`` as that user, and the guardian it started."""
    config = (
        "# Written by tests/cli/test_acceptance_nonroot.py\n"
        f"defaults:\n  image: {SLIM_IMAGE}\n"
        f"guardian:\n  ui_port: {free_port()}\n"
    )
    with guardian(
        docker_client,
        user.mktemp("cli"),
        config,
        skip_or_fail,
        user=user,
    ) as tool:
        yield tool


def process_uid(pid: int) -> int:
    """The real uid of a host process (``Uid:`` in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for process {pid}")


def inspect_container(container: str) -> str:
    """The user a container runs as (``docker inspect``'s Config.User)."""
    result = run_command(
        [docker_executable(), "inspect", "--format", "{{.Config.User}}", container], timeout=30
    )
    assert result.returncode == 0, result.describe()
    return result.stdout.strip()


def test_a_non_root_user_runs_the_guardian_and_a_cloister_as_itself(
    cli: CloisterCli, user: HostUser
) -> None:
    assert user.uid != 0
    assert user.gid != 0

    # The guardian is that user's: its services and its host executor.
    status = cli.json("guardian", "status", "--json")
    assert status["running"] is True, status
    assert process_uid(status["executor_pid"]) == user.uid
    for service in SERVICES:
        assert inspect_container(cli.instance.service(service)) == user.owner, service

    # A repository of that user's own.
    name = unique("nonroot")
    repo = make_repo(cli.root / name, user=user)
    assert all(user.owns(path) for path in (repo, repo / "README.md", repo / ".git" / "HEAD"))
    head = git(repo, "rev-parse", "HEAD", user=user)

    try:
        started = cli.ok("start", "-d", cwd=repo)
        assert f"cloister {name} " in squash(started.stderr), started.describe()
        assert cli.listing()[name]["path"] == str(repo.resolve())

        document = inspect(name)
        assert document["Config"]["User"] == user.owner
        assert exec_ok(name, "id -u").stdout.strip() == str(user.uid)
        assert exec_ok(name, "id -g").stdout.strip() == str(user.gid)

        exec_ok(name, "echo made inside > /work/inside.txt")
        inside = repo / "inside.txt"
        assert inside.read_text(encoding="utf-8") == "made inside\n"
        assert user.owns(inside), (inside.stat().st_uid, inside.stat().st_gid)
        assert git(repo, "rev-parse", "HEAD", user=user) == head

        stopped = cli.ok("stop", name)
        assert f"stopped {name}" in stopped.stdout, stopped.describe()
        assert name not in cli.listing()
    finally:
        remove_containers([name])


# A service answering one line on a port, with what debian:bookworm-slim has (perl-base).
# `$$` is compose's `$`: a compose file interpolates `$s`.
ECHO_SERVICE = (
    "use IO::Socket::INET;"
    "my $$s = IO::Socket::INET->new(LocalPort => 7000, Listen => 5, ReuseAddr => 1) or die;"
    'while (my $$c = $$s->accept) { print $$c "hello from svc\\n"; close $$c }'
)


def test_a_non_root_user_gets_a_compose_service_and_a_local_feature(
    cli: CloisterCli, user: HostUser
) -> None:
    """Issue 22 as that user: the Feature's lock file is the user's, the Feature's cache
    is in the user's data directory, and the service beside the cloister answers it by
    its name; ``stop`` removes both."""
    name = unique("nrcompose")
    repo = make_repo(cli.root / name, user=user)
    folder = repo / ".devcontainer"
    feature = folder / "hello"
    feature.mkdir(parents=True)
    (feature / "devcontainer-feature.json").write_text(
        json.dumps({"id": "hello", "version": "1.0.0", "options": {"word": {"type": "string"}}})
    )
    (feature / "install.sh").write_text('#!/bin/sh\necho "$WORD $(id -u)" > /opt/hello\n')
    (feature / "install.sh").chmod(0o755)
    compose = {
        "services": {
            "app": {"image": SLIM_IMAGE},
            "svc": {"image": SLIM_IMAGE, "command": ["perl", "-e", ECHO_SERVICE]},
        }
    }
    (folder / "compose.yaml").write_text(json.dumps(compose))
    document = {
        "dockerComposeFile": "compose.yaml",
        "service": "app",
        "features": {"./hello": {"word": "hi"}},
    }
    (folder / "devcontainer.json").write_text(json.dumps(document))
    user.adopt(folder)
    service = cli.instance.sidecar(name, "svc")
    try:
        started = cli.ok("start", "-d", "--yes", cwd=repo)
        assert exec_ok(name, "cat /opt/hello").stdout == "hi 0\n", started.describe()
        assert exec_ok(name, "id -u").stdout.strip() == str(user.uid)
        answer = exec_ok(name, "exec 3<>/dev/tcp/svc/7000 && head -n1 <&3")
        assert answer.stdout == "hello from svc\n", answer.describe()
        lock = folder / "devcontainer-lock.json"
        assert not lock.exists() or user.owns(lock)  # a local Feature is not locked
        running = run_command(
            [docker_executable(), "inspect", "--format", "{{.State.Running}}", service],
            timeout=30,
        )
        assert running.stdout.strip() == "true", running.describe()
        cli.ok("stop", name)
        gone = run_command([docker_executable(), "inspect", service], timeout=30)
        assert gone.returncode != 0, gone.describe()
    finally:
        run_command([docker_executable(), "rm", "-f", service], timeout=60)
        remove_containers([name])
