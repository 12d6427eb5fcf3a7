"""Issue 13 acceptance: ``cloister gc`` cleans what a cloister left (a real engine).

Through the real ``cloister`` command and a real guardian: a cloister that went without
a finished ``stop``, and a worktree whose repository is gone. The agent's attempts on
the repository (``rm -rf /work/.git``, ``reset --hard`` with ``gc --prune=now``) and
``cloister restore`` bringing it back are the host-boundary family of the e2e suite
(tests/e2e/test_host_boundary.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    exec_ok,
    git,
    remove_containers,
)
from tests.cli.test_acceptance import Cloisters, new_repo

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_restore.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
"""


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
