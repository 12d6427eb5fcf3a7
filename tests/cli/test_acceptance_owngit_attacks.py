"""Attacks on the own-git-directory design that worked when it was first built (an
attacker's read of issue 18's change), each kept as a test that must hold now.

Each test is a hostile agent inside a real cloister started by the real ``cloister``
command, and the human using Cloister and git as people do. Every test failed on the
design as it was before its fix; none is marked xfail.

Attacks, and the test of each:

* a FIFO in its git directory: every sync waits 300 s for the export
  (test_a_fifo_in_its_git_directory_hangs_no_sync);
* a branch name that is not UTF-8 kills the executor daemon
  (test_a_branch_not_in_utf8_leaves_the_executor_running), and every later
  ``cloister start`` of the project dies with a traceback
  (test_a_branch_not_in_utf8_lets_the_project_start_again);
* a fresh worktree is written with the human's filter drivers
  (test_a_fresh_worktree_runs_no_filter_of_yours), and so is ``hostexec git status``
  (test_hostexec_git_status_runs_no_filter_of_yours);
* a link over a protected path's parent fast-forwards the human's branch
  (test_a_link_over_a_protected_parent_is_not_fast_forwarded).
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
    Result,
    docker_executable,
    exec_in,
    exec_ok,
    free_port,
    git,
    git_executable,
    guardian,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
    wait_until,
)

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SYNC_SECONDS = 20.0
# A sync of a cloister whose git directory is ordinary takes about a second; a minute
# leaves room for a loaded machine (the export's own limit is 300 s).
SYNC_LIMIT = 60.0
LABEL_SYNC = "org.cloister.sync"  # cloister_core.stack.LABEL_SYNC
CONFIG = f"""\
# Written by tests/cli/test_acceptance_owngit_attacks.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
guardian:
  ui_port: {{port}}
hostexec:
  auto_approve:
    - pattern: "^git (status|log|diff)( .*)?$"
"""


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    root = tmp_path_factory.mktemp("owngit-attacks")
    config = CONFIG.format(port=free_port())
    with guardian(docker_client, root, config, skip_or_fail) as tool:
        yield tool


@dataclass
class Scene:
    cli: CloisterCli
    repo: Path
    name: str
    marker: Path  # a filter driver of the human's touches it
    started: list[str]

    def git(self, *args: str) -> str:
        return git(self.repo, *args)

    def start(self, *args: str, name: str | None = None) -> Result:
        started = self.cli.run("start", "-d", *args, cwd=self.repo)
        self.started.append(name or self.name)
        return started


@pytest.fixture
def scene(cli: CloisterCli) -> Iterator[Scene]:
    name = unique("atk")
    base = cli.root / f"{name}-host"
    base.mkdir()
    repo = make_repo(base / name)
    started: list[str] = []
    found = Scene(cli, repo, name, base / "filter-ran", started)
    try:
        yield found
    finally:
        for each in dict.fromkeys(started):
            remove_sync_containers(each)
            cli.run("stop", each, timeout=900)
            remove_sync_containers(each)
        remove_containers(list(dict.fromkeys(started)))
        if not executor_runs(cli):
            cli.run("guardian", "start", timeout=900)  # the next test needs the executor


def executor_runs(cli: CloisterCli) -> bool:
    daemon = f"cloister_executor.main serve --config-dir {cli.config_dir} "
    return run_command(["pgrep", "-f", daemon], timeout=30).returncode == 0


def remove_sync_containers(cloister: str) -> None:
    """The export containers of *cloister*'s syncs (a hanging one is waited on for 300 s)."""
    listed = run_command(
        [docker_executable(), "ps", "-aq", "--filter", f"label={LABEL_SYNC}={cloister}"], timeout=30
    )
    ids = listed.stdout.split()
    if ids:
        run_command([docker_executable(), "rm", "-f", *ids], timeout=60)


# -- a FIFO in the agent's git directory -----------------------------------------------------


def test_a_fifo_in_its_git_directory_hangs_no_sync(scene: Scene) -> None:
    """git in the export container opens the FIFO and waits for a writer that never
    comes; the sync holds the cloister's lock for the export's 300 s, and the watch's
    sync, `cloister sync`, `cloister stop` and hostexec git push queue behind it (a
    `cloister stop` took 10 minutes, and the agent's work stayed behind)."""
    assert scene.start().returncode == 0
    exec_ok(scene.name, "echo a > a.txt && git add a.txt && git commit -qm agent")
    fifo = scene.cli.data_dir / "gitdirs" / scene.name / "refs" / "heads" / "zz"
    exec_ok(scene.name, "mkfifo .git/refs/heads/zz")
    try:
        synced = scene.cli.run("sync", scene.name, timeout=SYNC_LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`cloister sync` was still running after {SYNC_LIMIT:g}s", pytrace=False)
    finally:
        fifo.unlink(missing_ok=True)
        remove_sync_containers(scene.name)  # the watch's and ours, waiting on the FIFO
    assert "Traceback" not in synced.output, synced.describe()


# -- branch names that are not UTF-8 ---------------------------------------------------------

LATIN1_BRANCH = "git branch $'caf\\xe9'"  # a valid ref name for git: bytes, not text


def _audit_says(scene: Scene, text: str) -> bool:
    log = scene.cli.data_dir / "logs" / f"{scene.name}.log"
    return log.exists() and text in log.read_text(encoding="utf-8", errors="replace")


def test_a_branch_not_in_utf8_leaves_the_executor_running(scene: Scene) -> None:
    """The watch's sync meets a branch whose name is bytes, not text: it does not come
    back (a note in the cloister's log says so, in ASCII), and the executor daemon runs
    on (its log line once held the name as a lone surrogate, and the daemon died)."""
    assert scene.start().returncode == 0
    assert exec_in(scene.name, "hostexec git status --short").returncode == 0
    exec_ok(scene.name, LATIN1_BRANCH + " && git commit -q --allow-empty -m agent")
    wait_until(lambda: _audit_says(scene, "does not come back"), SYNC_SECONDS, "the watch's sync")
    assert executor_runs(scene.cli), "the executor daemon died"
    after = exec_in(scene.name, "hostexec git status --short")
    assert after.returncode == 0, after.describe()
    agent = scene.git("for-each-ref", "--format=%(refname)", f"refs/cloister/{scene.name}/")
    assert agent.split() == [f"refs/cloister/{scene.name}/" + scene.git("branch", "--show-current")]


def test_a_branch_not_in_utf8_lets_the_project_start_again(scene: Scene) -> None:
    """A start makes the cloister's refs from the human's (and the agent's branches of
    an earlier session): names that are bytes, not text, are written back as the same
    bytes, and never break a start (once one in refs/cloister/ did, every time)."""
    assert scene.start().returncode == 0
    exec_ok(scene.name, LATIN1_BRANCH)
    scene.cli.ok("stop", scene.name)
    head = scene.git("rev-parse", "HEAD")
    weird = [git_executable(), "-C", str(scene.repo), "update-ref"]
    for ref in (b"refs/heads/caf\xe9", f"refs/cloister/{scene.name}/caf".encode() + b"\xe9"):
        subprocess.run([*weird, ref, head], check=True, capture_output=True, timeout=60)
    again = scene.start()
    assert again.returncode == 0, again.describe()
    assert "Traceback" not in again.output, again.describe()
    # The human's branch is there too, its name the same bytes (od: no text decoding).
    inside = exec_ok(scene.name, "git for-each-ref --format='%(refname)' refs/heads/ | od -c")
    assert "c   a   f 351" in inside.stdout, inside.stdout


# -- the human's filter drivers on the agent's files -----------------------------------------


def _probe_filter(scene: Scene, which: str) -> None:
    """A filter driver of the human's (git-lfs's is the usual one: its smudge fetches
    from the URL the agent writes in .lfsconfig, from the host, past the proxy)."""
    scene.git("config", f"filter.probe.{which}", f'sh -c "echo ran >> {scene.marker}; cat"')
    other = "smudge" if which == "clean" else "clean"
    scene.git("config", f"filter.probe.{other}", "cat")


def test_a_fresh_worktree_runs_no_filter_of_yours(scene: Scene) -> None:
    """A worktree cloister whose directory is empty at start (the agent emptied it, or
    the human removed the worktree) is written with `read-tree -u` of its branch, the
    agent's commits: the agent's .gitattributes picks the human's drivers."""
    _probe_filter(scene, "smudge")
    name = f"{scene.name}-feature"
    assert scene.start("-b", "feature", name=name).returncode == 0
    exec_ok(
        name,
        "echo '*.txt filter=probe' > .gitattributes && echo payload > x.txt"
        " && git add .gitattributes x.txt && git commit -qm agent"
        " && rm -rf /work/* /work/.gitattributes",
    )
    scene.cli.ok("stop", name)
    assert scene.git("log", "-1", "--format=%s", "feature") == "agent"
    again = scene.start("-b", "feature", name=name)
    assert again.returncode == 0, again.describe()
    assert not scene.marker.exists(), "a filter driver of the human's ran on the agent's files"


def test_hostexec_git_status_runs_no_filter_of_yours(scene: Scene) -> None:
    """`hostexec git status` and `git diff` (auto-approved here, as in most configs) run
    the human's clean filter on whatever file the agent's .gitattributes names (status
    when the size is the same and the stat data not, diff always)."""
    _probe_filter(scene, "clean")
    assert scene.start().returncode == 0
    exec_ok(scene.name, "echo 'README.md filter=probe' > .gitattributes && echo HELLO > README.md")
    for command in ("hostexec git status --short", "hostexec git diff --stat"):
        said = exec_in(scene.name, command)
        assert said.returncode == 0, said.describe()
    assert not scene.marker.exists(), "a filter driver of the human's ran on the agent's files"


# -- protected paths -------------------------------------------------------------------------


def test_a_link_over_a_protected_parent_is_not_fast_forwarded(scene: Scene) -> None:
    """`.vscode/tasks.json` is protected, and absent: the agent commits `.vscode` as a
    link to a directory of its own holding a tasks.json that runs on folder open. The
    hazard check compares paths only (`.vscode` is not `.vscode/tasks.json`), so the
    human's branch fast-forwards silently, `cloister review` finds nothing, and the
    human's next `git restore .` (status shows `.vscode` deleted) makes the link."""
    head = scene.git("rev-parse", "HEAD")
    assert scene.start().returncode == 0
    exec_ok(
        scene.name,
        'mkdir -p evil && echo \'{"version": "2.0.0", "tasks": [{"label": "x",'
        ' "type": "shell", "command": "touch $MARKER",'
        ' "runOptions": {"runOn": "folderOpen"}}]}\' > evil/tasks.json'
        " && git add evil/tasks.json"
        " && link=$(printf evil | git hash-object -w --stdin)"
        " && git update-index --add --cacheinfo 120000,$link,.vscode"
        " && git commit -qm 'editor settings'",
    )
    synced = scene.cli.ok("sync", scene.name)
    scene.cli.ok("stop", scene.name)
    scene.git("restore", ".")
    tasks = scene.repo / ".vscode" / "tasks.json"
    assert scene.git("rev-parse", "HEAD") == head, squash(synced.output)
    assert not tasks.exists(), "the agent's folder-open task is at .vscode/tasks.json"
