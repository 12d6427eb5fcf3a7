"""The CLI's git calls against real temporary repositories (no network, no global config).

:func:`hermetic_git` and :func:`make_repo` are shared with the other CLI tests that
need a repository.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cloister_cli.repo import git
from cloister_cli.repo.git import GitError
from tests.git_support import hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def test_toplevel(repo: Path, tmp_path: Path) -> None:
    (repo / "src" / "deep").mkdir(parents=True)
    assert git.toplevel(repo) == repo
    assert git.toplevel(repo / "src" / "deep") == repo
    (tmp_path / "plain").mkdir()
    assert git.toplevel(tmp_path / "plain") is None


def test_git_dirs_of_a_main_checkout(repo: Path) -> None:
    assert git.layout(repo) == git.Layout(repo, repo / ".git", repo / ".git")
    (repo / "sub").mkdir()
    assert git.layout(repo / "sub").common_dir == repo / ".git"  # relative answer made absolute


def test_git_dirs_of_a_linked_worktree(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "feature"
    run_git(repo, "worktree", "add", "-q", "-b", "feature", str(tree))
    own = repo / ".git" / "worktrees" / "feature"
    assert git.layout(tree) == git.Layout(tree, own, repo / ".git")
    assert git.toplevel(tree) == tree


def test_find_layout_is_layout_or_none_outside_git(repo: Path, tmp_path: Path) -> None:
    (repo / "src").mkdir()
    assert git.find_layout(repo / "src") == git.layout(repo / "src")
    (tmp_path / "plain").mkdir()
    assert git.find_layout(tmp_path / "plain") is None
    assert git.find_layout(repo / ".git") is None  # no work tree there


def test_git_dir_outside_a_repository_carries_gits_message(tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        git.layout(tmp_path)
    message = str(caught.value)
    assert message.startswith(
        f"git -C {tmp_path} rev-parse --show-toplevel --absolute-git-dir --git-common-dir failed: "
    )
    assert "not a git repository" in message


def test_remote_url(repo: Path) -> None:
    assert git.remote_url(repo) is None
    run_git(repo, "remote", "add", "upstream", "https://example.invalid/other.git")
    assert git.remote_url(repo) is None  # only origin counts
    run_git(repo, "remote", "add", "origin", "git@example.invalid:me/api.git")
    assert git.remote_url(repo) == "git@example.invalid:me/api.git"


def test_branch_exists(repo: Path) -> None:
    assert git.branch_exists(repo, "main")
    assert not git.branch_exists(repo, "feature")
    run_git(repo, "tag", "v1")
    assert not git.branch_exists(repo, "v1")  # a tag is not a branch
    run_git(repo, "branch", "feature")
    assert git.branch_exists(repo, "feature")


@pytest.mark.parametrize("branch", ["feature/login", "Fix_Bug#12", "ok-1.2", "main"])
def test_check_branch_name_accepts(repo: Path, branch: str) -> None:
    git.check_branch_name(repo, branch)


@pytest.mark.parametrize(
    "branch",
    ["a..b", "-x", "x.lock", "has space", "a~b", "a^b", "a:b", "trailing/", "x@{y}",
     ".hidden", "a/.b", "HEAD", "a\\b", ""],
)  # fmt: skip
def test_check_branch_name_refuses(repo: Path, branch: str) -> None:
    with pytest.raises(GitError, match="is not a valid branch name"):
        git.check_branch_name(repo, branch)


def test_run_is_hardened_and_checks(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\n", encoding="utf-8")
    hook.chmod(0o755)
    git.run(repo, "commit", "-q", "--allow-empty", "-m", "no hook")
    assert not marker.exists()  # hooks off for Cloister's own git
    failed = git.run(repo, "rev-parse", "--verify", "nothing", check=False)
    assert failed.returncode != 0
    with pytest.raises(GitError, match=r"^git -C .* rev-parse --verify nothing failed: "):
        git.run(repo, "rev-parse", "--verify", "nothing")


def test_hooks_directory_honours_core_hooks_path(repo: Path) -> None:
    assert git.hooks_directory(repo) == repo / ".git" / "hooks"
    run_git(repo, "config", "core.hooksPath", ".githooks")
    assert git.hooks_directory(repo) == repo / ".githooks"


def test_git_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(GitError, match=r"^git is not installed$"):
        git.toplevel(tmp_path)


def test_gitlinks_with_names_that_are_no_utf8(repo: Path) -> None:
    name = os.fsdecode(b"x\xffy")
    make_repo(repo / name)
    run_git(repo, "add", name)
    assert git.gitlinks(repo) == [name]
    assert (repo / git.gitlinks(repo)[0] / ".git").is_dir()
