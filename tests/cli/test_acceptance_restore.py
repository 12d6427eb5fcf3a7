"""Issue 13 acceptance: a session loses nothing (snapshots, ``restore``, ``gc``).

Through the real ``cloister`` command and a real guardian: the agent destroys the
repository from inside a cloister (``rm -rf /work/.git``; ``reset --hard`` and ``gc
--prune=now``), and ``cloister restore`` brings back its history, branches and the
uncommitted work it had at start. ``cloister gc`` cleans what a cloister that went
without a finished ``stop`` left in the repository and the config directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from cloister_cli import gitguard
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    exec_ok,
    git,
    guardian,
    remove_containers,
    run_command,
    squash,
)
from tests.cli.test_acceptance import Cloisters, new_repo

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_restore.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
"""


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    root = tmp_path_factory.mktemp("cloister-restore")
    with guardian(docker_client, root, CONFIG, skip_or_fail) as tool:
        yield tool


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()


def with_history(repo: Path) -> dict[str, str]:
    """Commits, a branch, a tag and uncommitted work of every kind; what must come back."""
    for number in range(5):
        (repo / f"file{number}.txt").write_text(f"version {number}\n", encoding="utf-8")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"commit {number}")
    git(repo, "branch", "side", "HEAD~2")
    git(repo, "tag", "v1", "HEAD~1")
    git(repo, "gc", "-q")
    (repo / "file0.txt").write_text("unstaged\n", encoding="utf-8")
    (repo / "file1.txt").write_text("staged\n", encoding="utf-8")
    git(repo, "add", "file1.txt")
    (repo / "notes.txt").write_text("untracked\n", encoding="utf-8")
    return state(repo)


def state(repo: Path) -> dict[str, str]:
    return {
        "log": git(repo, "log", "--all", "--format=%H %s"),
        "refs": git(repo, "for-each-ref", "--format=%(objectname) %(refname)"),
        "head": git(repo, "symbolic-ref", "HEAD"),
        "staged": git(repo, "diff", "--cached"),
        "unstaged": git(repo, "diff"),
        "untracked": git(repo, "ls-files", "--others", "--exclude-standard"),
        "notes": (repo / "notes.txt").read_text(encoding="utf-8"),
    }


def test_rm_rf_dot_git_inside_is_restored(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "wipe")
    before = with_history(repo)
    started = cloisters.start(repo, name)
    assert "snapshot" in squash(started.stderr), started.describe()
    exec_ok(name, "rm -rf /work/.git 2>/dev/null; rm -f notes.txt; echo agent > file2.txt; true")
    assert not (repo / ".git" / "objects").exists()
    assert not (repo / ".git" / "HEAD").exists()

    refused = cli.fails("restore", name)
    assert "stop it first" in refused.output, refused.describe()
    cli.ok("stop", name)
    listed = cli.json("restore", name, "--list", "--json")
    assert [item["kind"] for item in listed] == ["start"]
    restored = cli.ok("restore", name)
    assert "restored" in restored.stdout, restored.describe()
    assert "undoes this" in squash(restored.stderr), restored.describe()

    assert state(repo) == before
    assert (repo / "file2.txt").read_text(encoding="utf-8") == "version 2\n"
    fsck = run_command(["git", "-C", str(repo), "fsck", "--connectivity-only"], timeout=60)
    assert fsck.returncode == 0, fsck.describe()
    # The agent's version is kept too: the restore snapshotted what was there first.
    kinds = [item["kind"] for item in cli.json("restore", name, "--list", "--json")]
    assert sorted(kinds) == ["before-restore", "start"]


def test_reset_hard_and_gc_prune_now_inside_are_restored(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "reset")
    before = with_history(repo)
    cloisters.start(repo, name)
    exec_ok(
        name,
        "git reset -q --hard HEAD~3 && git branch -f side HEAD && git tag -d v1"
        " && git reflog expire --expire=now --all && git gc -q --prune=now",
    )
    assert "commit 4" not in git(repo, "log", "--all", "--format=%s")
    cli.ok("stop", name)
    cli.ok("restore", name)
    assert state(repo) == before


def test_gc_cleans_up_after_a_cloister_whose_stop_was_killed(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    """``cloister stop`` removes the container first: killed right after, it leaves the
    token, the commondir pin, the placeholders and the git guard."""
    repo, name = new_repo(tmp_path, "killed")
    cloisters.start(repo, name)
    remove_containers([name])
    token = cli.token_file(name)
    pin = repo / ".git" / "commondir"
    assert token.exists()
    assert pin.exists()
    assert gitguard.MARK in (repo / ".git" / "config").read_text(encoding="utf-8")
    placeholders_before = {path.name for path in repo.iterdir()}

    survey = cli.json("gc", "--dry-run", "--json")
    assert name in survey["dead_cloisters"]
    assert token.exists()  # a dry run changes nothing

    cleaned = cli.ok("gc")
    assert f"cleaned up after cloister {name}" in cleaned.stdout, cleaned.describe()
    assert not token.exists()
    assert not pin.exists()
    assert gitguard.MARK not in (repo / ".git" / "config").read_text(encoding="utf-8")
    left = {path.name for path in repo.iterdir()}
    assert left <= placeholders_before
    assert left == {".git", "README.md"}  # every empty stand-in is gone
    assert git(repo, "status", "--porcelain") == ""
    again = cli.json("gc", "--dry-run", "--json")
    assert name not in again["dead_cloisters"]


def test_gc_asks_before_removing_an_orphan_worktree(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "orphan")
    cloisters.start(repo, f"{name}-topic", "-b", "topic")
    cli.ok("stop", f"{name}-topic")
    worktree = cli.worktree(name, "topic")
    assert worktree.is_dir()
    assert cli.json("gc", "--dry-run", "--json")["orphan_worktrees"] == []
    shutil.rmtree(repo)  # the repository is gone: its worktree belongs to nothing

    orphans = cli.json("gc", "--dry-run", "--json")["orphan_worktrees"]
    assert [item["path"] for item in orphans] == [str(worktree)]
    kept = cli.ok("gc")  # no terminal to ask on: kept
    assert "--yes removes it" in kept.stderr, kept.describe()
    assert worktree.is_dir()
    cli.ok("gc", "--yes")
    assert not worktree.exists()
