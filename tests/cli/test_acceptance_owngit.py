"""Issue 18 acceptance: the agent's work comes back from its own git directory.

From inside a real cloister started by the real ``cloister`` command, once as root and
once as a non-root host user (the module runs twice, one guardian each): the agent's
commits arrive as ``refs/cloister/…`` (and fast-forward where one is due), the human's
reach the cloister, a worktree cloister's branch comes back, ``hostexec git push``
pushes the agent's branch, and the start tells where the git directory is.

The attacks on the own git directory (forged index, made-up operations, replace refs,
links, FIFOs, deep trees, filter drivers, protected paths, wipes) are the host-boundary
family of the e2e suite: tests/e2e/test_host_boundary.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    HostUser,
    Result,
    exec_in,
    exec_ok,
    git,
    git_executable,
    guardian,
    host_user,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
)
from tests.waiting import free_port, wait_until

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SYNC_SECONDS = 20.0  # the watch syncs within seconds; a loaded CI machine gets leeway
CONFIG = f"""\
# Written by tests/cli/test_acceptance_owngit.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
guardian:
  ui_port: {{port}}
hostexec:
  auto_approve:
    - pattern: "^git (status|log|diff)( .*)?$"
    - pattern: "^git checkout [A-Za-z0-9._/:-]+$"
    - pattern: "^git (restore --source=[A-Za-z0-9._/:-]+ [A-Za-z0-9._/-]+)$"
    - pattern: "^git push origin [A-Za-z0-9._/-]+$"
"""


# -- one guardian per host user ------------------------------------------------------------------


@pytest.fixture(scope="module", params=["root", "non-root"])
def user(request: pytest.FixtureRequest, skip_or_fail: SkipOrFail) -> Iterator[HostUser | None]:
    if request.param == "root":
        yield None
        return
    with host_user(skip_or_fail) as account:
        yield account


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
    user: HostUser | None,
) -> Iterator[CloisterCli]:
    root = tmp_path_factory.mktemp("owngit") if user is None else user.mktemp("owngit")
    config = CONFIG.format(port=free_port())
    with guardian(docker_client, root, config, skip_or_fail, user=user) as tool:
        yield tool


@dataclass
class Scene:
    """A repository of the host user's and its cloister."""

    cli: CloisterCli
    user: HostUser | None
    repo: Path
    name: str
    started: list[str]

    def git(self, *args: str) -> str:
        return git(self.repo, *args, user=self.user)

    def human(self, *args: str) -> str:
        """The human's own git (failures are fine); everything it printed."""
        argv = [git_executable(), "-C", str(self.repo), *args]
        result = (
            run_command(argv, timeout=60) if self.user is None else self.user.run(argv, timeout=60)
        )
        return result.stdout + result.stderr

    def start(self, *args: str, name: str | None = None) -> Result:
        started = self.cli.ok("start", "-d", *args, cwd=self.repo)
        self.started.append(name or self.name)
        return started

    def write(self, relative: str, text: str) -> Path:
        path = self.repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if self.user is not None:
            self.user.adopt(path)
        return path


@pytest.fixture
def scene(cli: CloisterCli, user: HostUser | None) -> Iterator[Scene]:
    name = unique("own")
    base = cli.root / f"{name}-host"
    if user is None:
        base.mkdir()
    else:
        made = user.run(["mkdir", "--", str(base)])
        assert made.returncode == 0, made.describe()
    repo = make_repo(base / name, user=user)
    started: list[str] = []
    found = Scene(cli, user, repo, name, started)
    try:
        yield found
    finally:
        for each in started:
            cli.run("stop", each)
        remove_containers(started)


# -- the agent's normal work arrives -------------------------------------------------------------


def test_the_agents_work_arrives_and_yours_reaches_it(scene: Scene) -> None:
    scene.start()
    branch = scene.git("symbolic-ref", "--short", "HEAD")
    exec_ok(scene.name, "echo one > one.txt && git add one.txt && git commit -qm 'agent one'")
    # The watch brings it back within seconds, and your branch fast-forwards.
    wait_until(
        lambda: scene.git("log", "-1", "--format=%s") == "agent one", SYNC_SECONDS, "a fast-forward"
    )
    assert scene.git("status", "--porcelain") == ""
    exec_ok(
        scene.name,
        "git checkout -qb topic && echo t > t.txt && git add t.txt && git commit -qm topic"
        " && git checkout -q -",
    )
    scene.cli.ok("sync", scene.name)
    assert scene.git("log", "-1", "--format=%s", f"refs/cloister/{scene.name}/topic") == "topic"
    assert "topic" not in scene.git("branch", "--list")  # never one of yours
    # Yours reach it: your commit on the branch it left alone.
    scene.write("human.txt", "h\n")
    scene.git("add", "human.txt")
    scene.git("commit", "-qm", "human two")
    scene.cli.ok("sync", scene.name)
    inside = exec_ok(scene.name, "git log -1 --format=%s && git status --porcelain").stdout
    assert inside.splitlines() == ["human two"], inside
    assert f"host/{branch}" in exec_ok(scene.name, "git branch -a").stdout
    stopped = scene.cli.ok("stop", scene.name)
    assert not (scene.cli.data_dir / "gitdirs" / scene.name).exists(), stopped.describe()
    assert "error" not in scene.human("fsck").lower()


def test_a_worktree_cloisters_branch_comes_back(scene: Scene) -> None:
    worktree_name = f"{scene.name}-feature"
    started = scene.start("-b", "feature", name=worktree_name)
    assert worktree_name in squash(started.stderr), started.describe()
    directory = scene.cli.worktree(scene.name, "feature")
    # The human's git there is told it is no repository, rather than read the agent's.
    argv = [git_executable(), "-C", str(directory), "status"]
    there = run_command(argv) if scene.user is None else scene.user.run(argv)
    assert there.returncode != 0, there.describe()
    assert "not a git repository" in there.stderr, there.describe()
    exec_ok(worktree_name, "echo f > f.txt && git add f.txt && git commit -qm feature-work")
    scene.cli.ok("sync", worktree_name)
    assert scene.git("log", "-1", "--format=%s", "feature") == "feature-work"
    assert scene.git("rev-parse", "feature") == scene.git(
        "rev-parse", f"refs/cloister/{worktree_name}/feature"
    )
    listed = scene.cli.json("worktree", "list", "--json")
    assert [row["dirty"] for row in listed if row["path"] == str(directory)] == [False]


def test_hostexec_git_push_pushes_the_agents_branch(scene: Scene, tmp_path: Path) -> None:
    remote = scene.repo.parent / "remote.git"
    git(scene.repo.parent, "init", "-q", "--bare", str(remote), user=scene.user)
    port = free_port()
    daemon_argv = [
        git_executable(), "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
        f"--base-path={scene.repo.parent}", "--listen=127.0.0.1", f"--port={port}",
        str(scene.repo.parent),
    ]  # fmt: skip
    command = daemon_argv if scene.user is None else scene.user.command(daemon_argv)
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        scene.git("remote", "add", "origin", f"git://127.0.0.1:{port}/remote.git")
        scene.start()
        exec_ok(
            scene.name,
            "git checkout -qb shipped && echo s > s.txt && git add s.txt && git commit -qm shipped",
        )
        pushed = exec_in(scene.name, "hostexec git push origin shipped")
        assert pushed.returncode == 0, pushed.describe()
        assert git(remote, "log", "-1", "--format=%s", "shipped", user=scene.user) == "shipped"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def test_the_start_tells_where_the_git_directory_is(scene: Scene) -> None:
    scene.start()
    where = exec_ok(scene.name, "git rev-parse --absolute-git-dir && cat .git/config").stdout
    assert where.splitlines()[0] == "/work/.git"
    assert "Written by Cloister" in where
    assert exec_in(scene.name, "echo x >> .git/config").returncode != 0  # read-only
    assert exec_in(scene.name, "touch .git/hooks/pre-commit").returncode != 0
    # It starts where the human's is, but the human's own .git is not in the container
    # (git init made a `description` there, which the cloister's has not).
    assert scene.git("rev-parse", "HEAD") in exec_ok(scene.name, "git rev-parse HEAD").stdout
    assert (scene.repo / ".git" / "description").exists()
    assert exec_in(scene.name, "test -e /work/.git/description").returncode != 0
