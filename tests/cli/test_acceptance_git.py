"""Issue 9 acceptance: nothing the agent writes may run or read on the host.

Each escape is tried as a hostile agent would, from inside a real cloister (``docker
exec`` as the cloister's user), through the real ``cloister`` command; then the host
runs what would fall for it: ``hostexec git`` from inside, and the human's own git on
the host while the cloister runs and after it stopped. A planted command only
``touch``-es a marker file on the host: the marker is the proof that code ran.

Like tests/cli/test_acceptance.py this module starts one guardian and stops it at the
end; one test stops it in between (to plant without the host daemon's guard) and
starts it again.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import docker.errors
import pytest

from cloister_cli import gitguard
from tests.cli.cli_support import (
    GUARDIAN_TIMEOUT,
    SLIM_IMAGE,
    CloisterCli,
    exec_in,
    exec_ok,
    git,
    guardian,
    inspect,
    make_repo,
    run_command,
    squash,
)
from tests.cli.test_acceptance import Cloisters, new_repo

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_git.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
hostexec:
  auto_approve:
    - pattern: "^git (status|log|diff)( .*)?$"
  git_guard: {{mode}}
"""
SECRET = "SECRET-LINE-4f1d the-human-s-private-data"


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    root = tmp_path_factory.mktemp("cloister-git")
    with guardian(docker_client, root, CONFIG.format(mode="pause"), skip_or_fail) as tool:
        yield tool


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    cli.write_config(CONFIG.format(mode="pause"))
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "home-secret"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return path


def human(repo: Path, *args: str) -> str:
    """The human's own git on the host; everything it printed."""
    result = run_command(["git", "-C", str(repo), *args], timeout=60)
    return result.stdout + result.stderr


def hostexec(name: str, *argv: str) -> str:
    """``hostexec ARGV`` from inside; everything it printed."""
    result = exec_in(name, shlex.join(["hostexec", *argv]))
    return result.stdout + result.stderr


# The agent's own repository, committed into the project as a gitlink (escape 1).
PLANT_GITLINK = (
    "mkdir sub && cd sub && git init -q && git config user.name a && git config user.email a@b"
    " && echo s > f && git add f && git commit -qm s"
    ' && git config core.fsmonitor "touch $MARKER; echo" && cd ..'
    " && git add sub && git commit -qm 'add sub'"
)


# -- 1. a repository of the agent's, as a gitlink ---------------------------------------------


def test_a_planted_gitlink_runs_nothing_on_the_host(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "gitlink")
    marker = tmp_path / "planted-code-ran"
    cloisters.start(repo, name)
    exec_ok(
        name,
        f"MARKER={marker}; {PLANT_GITLINK}",
    )
    # .gitmodules could override the guard's settings: it is read-only (a stand-in here).
    assert (
        exec_in(
            name, "printf '[submodule \"s\"]\\n\\tpath = sub\\n\\tignore = none\\n' > .gitmodules"
        ).returncode
        != 0
    )

    # hostexec: the first command learns that the repository was moved away.
    first = hostexec(name, "git", "status")
    assert "moved sub/.git out of the project" in first
    for command in (["git", "status"], ["git", "log", "--oneline"], ["git", "diff"]):
        hostexec(name, *command)
    # The human, while the cloister runs:
    (repo / "sub" / "f").write_text("changed\n", encoding="utf-8")
    for command in (["status"], ["diff"], ["add", "-A"], ["commit", "-qam", "human"]):
        human(repo, *command)
    assert not marker.exists(), "host git ran the agent's fsmonitor"

    stopped = cli.ok("stop", name)
    text = squash(stopped.output)
    assert "quarantined" in text, stopped.describe()
    assert "sub/.git" in text, stopped.describe()
    assert "it would have run: git runs `touch" in text, stopped.describe()
    assert "(core.fsmonitor)" in text, stopped.describe()
    for command in (["status"], ["diff"], ["add", "-A"]):
        human(repo, *command)
    assert not marker.exists()
    assert gitguard.MARK not in (repo / ".git" / "config").read_text(encoding="utf-8")


def test_without_the_host_daemon_stop_reports_it_and_the_guard_holds(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    """The guard daemon runs with the guardian; a cloister outlives a guardian stop. Then
    only the repository's own settings protect the human's porcelain git, `cloister
    stop` names what was planted and keeps them, and `review --fix` neutralises it."""
    repo, name = new_repo(tmp_path, "noguard")
    marker = tmp_path / "planted-code-ran"
    cloisters.start(repo, name)
    try:
        cli.ok("guardian", "stop")
        exec_ok(
            name,
            f"MARKER={marker}; {PLANT_GITLINK}",
        )
        (repo / "sub" / "f").write_text("changed\n", encoding="utf-8")
        for command in (["status"], ["diff"], ["commit", "-qam", "human"]):
            human(repo, *command)
        assert not marker.exists(), "the human's porcelain git entered the planted repository"

        stopped = cli.ok("stop", name)
        text = squash(stopped.output)
        assert "sub" in text, stopped.describe()
        assert f"touch {marker}" in text, stopped.describe()
        assert "core.fsmonitor" in text, stopped.describe()
        assert "guard stays" in text, stopped.describe()
        assert gitguard.MARK in (repo / ".git" / "config").read_text(encoding="utf-8")

        fixed = cli.run("review", name, "--fix", "--yes")
        assert "moved" in fixed.output, fixed.describe()
        assert not (repo / "sub" / ".git").exists()
        for command in (["status"], ["diff"], ["add", "-A"], ["commit", "-qam", "after"]):
            human(repo, *command)
        assert not marker.exists()
        assert gitguard.MARK not in (repo / ".git" / "config").read_text(encoding="utf-8")
    finally:
        cli.ok("guardian", "start", timeout=GUARDIAN_TIMEOUT)


# -- 2. links in the git directory -------------------------------------------------------------


@pytest.mark.parametrize("location", ["objects/info/alternates", "packed-refs", "shallow"])
def test_a_link_in_the_git_directory_reveals_nothing(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path, secret: Path, location: str
) -> None:
    cli.write_config(CONFIG.format(mode="undo"))  # refuse, but do not pause: hostexec answers
    repo, name = new_repo(tmp_path, "link")
    cloisters.start(repo, name)
    answer = exec_in(name, f"ln -sf {secret} .git/{location} && hostexec git status")
    said = answer.stdout + answer.stderr
    assert answer.returncode != 0
    assert f".git/{location}" in said, answer.describe()
    assert SECRET not in said
    assert "refused" in said
    log = hostexec(name, "git", "log")
    assert SECRET not in log
    assert "refused from now on" in log
    assert not (repo / ".git" / location).is_symlink()
    for command in (["status"], ["diff"], ["log"], ["commit", "-qam", "x", "--allow-empty"]):
        assert SECRET not in human(repo, *command)
    stopped = cli.ok("stop", name)
    assert f"removed {repo.resolve()}/.git/{location}" in squash(stopped.output), stopped.describe()


def test_a_cloister_that_plants_a_link_is_paused(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path, secret: Path
) -> None:
    repo, name = new_repo(tmp_path, "pause")
    cloisters.start(repo, name)
    exec_ok(name, f"ln -s {secret} .git/packed-refs")
    deadline = time.monotonic() + 10
    while not inspect(name)["State"]["Paused"]:
        assert time.monotonic() < deadline, "the cloister was not paused"
        time.sleep(0.05)
    assert not (repo / ".git" / "packed-refs").is_symlink()
    assert SECRET not in human(repo, "status")
    assert cli.listing()[name]["status"] == "paused"
    refused = cli.fails("start", "-d", cwd=repo)
    assert "paused by Cloister's git guard" in squash(refused.stderr)
    stopped = cli.ok("stop", name)
    text = squash(stopped.output)
    assert "Cloister removed" in text, stopped.describe()
    assert "Cloister paused" in text, stopped.describe()


# -- 3. hooks that live in the work tree ----------------------------------------------------------


def hooked_repo(path: Path, hooks_dir: str) -> Path:
    """A repository whose hook (in *hooks_dir*) appends to $HOOK_LOG when set."""
    repo = make_repo(path)
    hook = repo / hooks_dir / "pre-commit"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(
        '#!/bin/sh\n[ -n "$HOOK_LOG" ] && echo ran >> "$HOOK_LOG"\nexit 0\n', encoding="utf-8"
    )
    hook.chmod(0o755)
    return repo


def test_hooks_in_the_work_tree_stay_the_humans(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo = hooked_repo(tmp_path / "husky" / f"hooks-{tmp_path.name[-6:]}", ".husky")
    git(repo, "add", ".husky")
    git(repo, "commit", "-qm", "hooks")
    git(repo, "config", "core.hooksPath", ".husky")
    name = repo.name
    marker = tmp_path / "agent-hook-ran"
    started = cloisters.start(repo, name)
    assert ".husky" in squash(started.stderr), started.describe()
    for attempt in (
        f"echo 'touch {marker}' >> .husky/pre-commit",
        "rm -rf .husky",
        "mv .husky .husky-old",
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > .husky/post-commit",
    ):
        assert exec_in(name, attempt).returncode != 0, attempt
    # The agent still commits; the hook runs in the cloister (HOOK_LOG unset there).
    exec_ok(
        name,
        "echo x > x && git add x && git commit -qm inside",  # identity: the repository's
    )
    log = tmp_path / "human-hook-log"
    (repo / "y").write_text("y\n", encoding="utf-8")
    git(repo, "add", "y")
    committed = run_command(
        ["env", f"HOOK_LOG={log}", "git", "-C", str(repo), "commit", "-qm", "human"], timeout=60
    )
    assert committed.returncode == 0, committed.describe()
    assert log.read_text(encoding="utf-8") == "ran\n"  # the human's own hook ran
    assert not marker.exists()
    assert git(repo, "log", "--format=%s", "-2").splitlines() == ["human", "inside"]


def test_the_humans_git_hooks_still_run(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo = hooked_repo(tmp_path / f"githooks-{tmp_path.name[-6:]}", ".git/hooks")
    name = repo.name
    cloisters.start(repo, name)
    assert exec_in(name, "echo 'touch /x' >> .git/hooks/pre-commit").returncode != 0
    log = tmp_path / "human-hook-log"
    committed = run_command(
        [
            "env",
            f"HOOK_LOG={log}",
            "git",
            "-C",
            str(repo),
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "h",
        ],
        timeout=60,
    )
    assert committed.returncode == 0, committed.describe()
    assert log.read_text(encoding="utf-8") == "ran\n"
