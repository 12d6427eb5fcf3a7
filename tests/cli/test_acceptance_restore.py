"""Issue 13 acceptance: a session loses nothing (snapshots, ``restore``, ``gc``).

Through the real ``cloister`` command and a real guardian: the agent destroys what it
can from inside a cloister (``rm -rf /work/.git``, which is its own git directory now;
``reset --hard`` and ``gc --prune=now``; the work tree), the human's repository keeps
its history, and ``cloister restore`` brings back the uncommitted work it had at start.
``cloister gc`` cleans what a cloister that went without a finished ``stop`` left.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

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


def state(repo: Path, *, partial: bool = False) -> dict[str, str]:
    return {
        "log": git(repo, "log", "--all", "--format=%H %s"),
        # the human's refs (the agent's come back under refs/cloister/ and stay)
        "refs": "\n".join(
            line
            for line in git(repo, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
            if " refs/cloister/" not in line
        ),
        "head": git(repo, "symbolic-ref", "HEAD"),
        "staged": git(repo, "diff", "--cached"),
        "unstaged": git(repo, "diff"),
        "untracked": git(repo, "ls-files", "--others", "--exclude-standard"),
        "notes": "" if partial else (repo / "notes.txt").read_text(encoding="utf-8"),
    }


def test_rm_rf_dot_git_inside_is_restored(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "wipe")
    before = with_history(repo)
    started = cloisters.start(repo, name)
    assert "snapshot" in squash(started.stderr), started.describe()
    history = {key: before[key] for key in ("log", "refs", "head", "staged")}
    exec_ok(name, "rm -rf /work/.git 2>/dev/null; rm -f notes.txt; echo agent > file2.txt; true")
    # Its own git directory went; the human's is not even mounted.
    assert {key: state(repo, partial=True)[key] for key in history} == history

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
    # In its own git directory: the human's history is all there, and the agent's
    # branch comes back beside it (not a fast-forward: it went backwards).
    assert "commit 4" in git(repo, "log", "--all", "--format=%s")
    cli.ok("stop", name)
    branch = git(repo, "symbolic-ref", "--short", "HEAD")
    agent_refs = git(repo, "for-each-ref", "--format=%(refname)", f"refs/cloister/{name}/")
    assert f"refs/cloister/{name}/{branch}" in agent_refs.split()
    assert state(repo)["log"].splitlines()[0] in git(repo, "log", "--all", "--format=%H %s")
    cli.ok("restore", name)
    after = state(repo)
    assert {key: after[key] for key in ("head", "staged", "unstaged", "untracked", "notes")} == {
        key: before[key] for key in ("head", "staged", "unstaged", "untracked", "notes")
    }
    fsck = run_command(["git", "-C", str(repo), "fsck"], timeout=60)
    assert fsck.returncode == 0, fsck.describe()


def test_gc_cleans_up_after_a_cloister_whose_stop_was_killed(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    """``cloister stop`` removes the container first: killed right after, it leaves the
    token, the placeholders and the cloister's git directory with its commits."""
    repo, name = new_repo(tmp_path, "killed")
    cloisters.start(repo, name)
    exec_ok(name, "echo late > late.txt && git add late.txt && git commit -qm late")
    remove_containers([name])
    token = cli.token_file(name)
    own = cli.data_dir / "gitdirs" / name
    assert token.exists()
    assert own.is_dir()
    placeholders_before = {path.name for path in repo.iterdir()}

    survey = cli.json("gc", "--dry-run", "--json")
    assert name in survey["dead_cloisters"]
    assert token.exists()  # a dry run changes nothing

    cleaned = cli.ok("gc")
    assert f"cleaned up after cloister {name}" in cleaned.stdout, cleaned.describe()
    assert not token.exists()
    assert not own.exists()  # synced, then removed
    branch = git(repo, "symbolic-ref", "--short", "HEAD")
    assert "late" in git(repo, "log", "--format=%s", f"refs/cloister/{name}/{branch}")
    left = {path.name for path in repo.iterdir()}
    assert left <= placeholders_before
    assert left == {".git", "README.md", "late.txt"}  # every empty stand-in is gone
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
