"""Issue 12 acceptance: a project's devcontainer.json, against a real Docker engine.

Driven like the other acceptance modules (the installed ``cloister`` command, its own
config and data directories, one guardian for the module). The projects build FROM
the local ``debian:bookworm-slim``: no registry, no internet.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import pytest

from cloister_cli.container import devoverrides
from tests import terminal
from tests.cli.cli_support import (
    BASE_IMAGE,
    SLIM_IMAGE,
    CloisterCli,
    Result,
    docker_executable,
    environment,
    exec_in,
    exec_ok,
    git,
    guardian,
    inspect,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
)

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_devcontainer.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  cpus: 1.5
  pids: 256
"""
# An ENTRYPOINT that would leave a trace in the project: a cloister never runs it.
DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN printf '#!/bin/sh\\ntouch /work/.entrypoint-ran\\nexec "$@"\\n' > /usr/local/bin/trace \\
    && chmod 0755 /usr/local/bin/trace
ENTRYPOINT ["/usr/local/bin/trace"]
"""
DEVCONTAINER = """\
{
  // the project's own: Cloister keeps what cannot weaken the cloister
  "build": {"dockerfile": "Dockerfile"},
  "runArgs": ["--privileged", "--shm-size=128m"],
  "mounts": [
    "source=${localEnv:HOME}/.ssh,target=/root/.ssh,type=bind",
    "source=cache,target=/cache,type=volume"
  ],
  "containerEnv": {"PROJECT_MODE": "devcontainer", "HOME": "/elsewhere"},
  "postCreateCommand": "echo made > /work/.made-by-post-create"
}
"""


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    with guardian(
        docker_client, tmp_path_factory.mktemp("cloister-devcontainer"), CONFIG, skip_or_fail
    ) as tool:
        yield tool


@pytest.fixture
def project(cli: CloisterCli, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A repository with a devcontainer; its cloister, volume and images removed after."""
    name = unique("devc")
    repo = make_repo(tmp_path / name)
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "Dockerfile").write_text(DOCKERFILE, encoding="utf-8")
    (repo / ".devcontainer" / "devcontainer.json").write_text(DEVCONTAINER, encoding="utf-8")
    git(repo, "add", ".devcontainer")
    git(repo, "commit", "-q", "-m", "devcontainer")
    try:
        yield repo, name
    finally:
        if name in cli.listing():
            cli.run("stop", name)
        remove_containers([name])  # and a dry run's, which carries its label
        docker_cli = docker_executable()
        run_command(
            [docker_cli, "volume", "rm", "-f", devoverrides.volume_name(name, "cache")], timeout=60
        )
        images = run_command(
            [docker_cli, "images", "-q", f"cloister-project-{name}"], timeout=60
        ).stdout.split()
        if images:
            run_command([docker_cli, "rmi", "-f", *images], timeout=120)


def start(cli: CloisterCli, repo: Path, *args: str) -> Result:
    return cli.ok("start", "-d", *args, cwd=repo, timeout=600)


def image_of(name: str) -> str:
    return str(inspect(name)["Image"])


def test_a_devcontainer_is_built_and_run_hardened(
    cli: CloisterCli, project: tuple[Path, str]
) -> None:
    repo, name = project
    first = start(cli, repo, "--yes")
    output = squash(first.stderr)
    # What was not honoured is named, with its reason and its line.
    assert "devcontainer.json:4: runArgs[0] '--privileged': dropped" in output, first.describe()
    assert "mounts[0] 'source=${localEnv:HOME}/.ssh,target=/root/.ssh,type=bind': refused" in output
    assert "~/.ssh (your SSH keys)" in output
    document = inspect(name)
    host = document["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["Init"] is True
    assert host["ShmSize"] == 128 * 1024 * 1024
    assert list(host["NetworkMode"].split()) == [cli.container(name)]  # its own network
    targets = {mount["Destination"]: mount for mount in document["Mounts"]}
    assert "/root/.ssh" not in targets
    assert targets["/cache"]["Type"] == "volume"
    assert targets["/cache"]["Name"] == devoverrides.volume_name(name, "cache")
    assert document["Config"]["Image"].startswith(f"cloister-project-{name}:")
    env = environment(document)
    assert env["PROJECT_MODE"] == "devcontainer"
    assert env["HOME"] == "/home/cloister"  # Cloister's own variables win
    # postCreateCommand ran inside, as the user, in /work.
    assert (repo / ".made-by-post-create").read_text(encoding="utf-8") == "made\n"
    assert "postCreateCommand failed" not in output
    # The cloister layer: hostexec is in the project's own image.
    assert exec_ok(name, "test -x /usr/local/bin/hostexec && echo ok").stdout.strip() == "ok"
    # The image's own ENTRYPOINT did not run (it is there, and would have left its trace).
    assert document["Config"]["Entrypoint"] == ["sleep"]
    assert exec_ok(name, "test -x /usr/local/bin/trace && echo ok").stdout.strip() == "ok"
    assert not (repo / ".entrypoint-ran").exists()
    built = image_of(name)

    cli.ok("stop", name)
    again = start(cli, repo)  # the shape is unchanged: no question, no --yes
    assert "building" not in again.stderr, again.describe()
    assert image_of(name) == built


def test_a_changed_devcontainer_needs_a_yes(cli: CloisterCli, project: tuple[Path, str]) -> None:
    repo, name = project
    start(cli, repo, "--yes")
    # The file that shapes the next cloister is a protected path: the agent cannot edit it.
    edit = (
        'sed -i \'s/"PROJECT_MODE": "devcontainer"/"PROJECT_MODE": "widened"/\''
        " .devcontainer/devcontainer.json"
    )
    assert exec_in(name, edit).returncode != 0
    cli.ok("stop", name)
    # It still changes behind the cloister's back (a branch of the agent's merged, a
    # project that drops .devcontainer from protect.paths): the next start asks.
    path = repo / ".devcontainer" / "devcontainer.json"
    text = path.read_text(encoding="utf-8")
    widened = text.replace('"PROJECT_MODE": "devcontainer"', '"PROJECT_MODE": "widened"')
    assert widened != text
    path.write_text(widened, encoding="utf-8")
    refused = cli.fails("start", "-d", cwd=repo)
    assert "not started" in refused.stderr, refused.describe()
    assert ".devcontainer/devcontainer.json" in refused.stderr
    assert "--yes" in refused.stderr
    assert name not in cli.listing()
    # At a terminal the difference is shown, and the start waits for the human's answer.
    shown, status = answer_in_terminal(cli, repo, "n")
    assert '-  "containerEnv": {"PROJECT_MODE": "devcontainer"' in shown, shown
    assert '+  "containerEnv": {"PROJECT_MODE": "widened"' in shown, shown
    assert status == 1
    assert name not in cli.listing()
    shown, status = answer_in_terminal(cli, repo, "y")
    assert status == 0, shown
    assert environment(inspect(name))["PROJECT_MODE"] == "widened"


def answer_in_terminal(cli: CloisterCli, repo: Path, answer: str) -> tuple[str, int]:
    """`cloister start -d` on a terminal: what it showed before asking, and its exit
    status after *answer*."""
    return terminal.answer_in_terminal(
        [str(cli.executable), "start", "-d"],
        cwd=repo,
        env=cli.env,
        question=b"Start with them?",
        answer=answer,
    )


# The fields a dry run's docker run must reproduce, as `docker inspect` shows them.
HOST_FIELDS = (
    "SecurityOpt",
    "CapDrop",
    "CapAdd",
    "Privileged",
    "Init",
    "NetworkMode",
    "Memory",
    "NanoCpus",
    "PidsLimit",
    "ShmSize",
    "Tmpfs",
    "ReadonlyRootfs",
)


def _mounts(document: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    return sorted(
        (
            mount["Type"],
            mount.get("Name") or mount["Source"] if mount["Type"] == "volume" else mount["Source"],
            mount["Destination"],
            mount["RW"],
        )
        for mount in document["Mounts"]
    )


def _public_env(document: dict[str, Any], token: str) -> dict[str, str]:
    return {key: value for key, value in environment(document).items() if token not in value}


def test_the_dry_run_command_starts_the_same_container(
    cli: CloisterCli, project: tuple[Path, str]
) -> None:
    repo, name = project
    planned = cli.ok("start", "--dry-run", "--json", cwd=repo, timeout=600).json()
    assert not (cli.config_dir / "tokens" / name).exists()
    assert not (cli.data_dir / "accounts" / name).exists()
    assert planned["cloister"] == name
    assert "***" in planned["command"]
    start(cli, repo, "--yes")
    real = inspect(name)
    real_token = cli.token(name)

    fresh = secrets.token_urlsafe(32)
    argv = [item.replace("***", fresh) for item in shlex.split(planned["command"])]
    assert argv[:2] == ["docker", "run"]
    argv[0] = docker_executable()
    dry_name = f"{cli.container(name)}-dry"  # the real one holds the name
    argv[argv.index("--name") + 1] = dry_name
    made = run_command(argv, timeout=120)
    assert made.returncode == 0, made.describe()
    try:
        dry = json.loads(run_command([docker_executable(), "inspect", dry_name]).stdout)[0]
        for field in HOST_FIELDS:
            assert dry["HostConfig"].get(field) == real["HostConfig"].get(field), field
        for field in ("User", "WorkingDir", "Image", "Labels", "Hostname", "Cmd"):
            assert dry["Config"].get(field) == real["Config"].get(field), field
        assert _mounts(dry) == _mounts(real)
        assert set(dry["NetworkSettings"]["Networks"]) == set(real["NetworkSettings"]["Networks"])
        assert _public_env(dry, fresh) == _public_env(real, real_token)
        assert set(environment(dry)) == set(environment(real))
    finally:
        run_command([docker_executable(), "rm", "-f", dry_name], timeout=60)
