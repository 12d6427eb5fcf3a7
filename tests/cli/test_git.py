"""The CLI's git calls against real temporary repositories (no network, no global config).

:func:`hermetic_git` and :func:`make_repo` are shared with the other CLI tests that
need a repository.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from cloister_cli import git
from cloister_cli.git import GitError
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
    assert git.common_dir(repo) == repo / ".git"
    (repo / "sub").mkdir()
    assert git.common_dir(repo / "sub") == repo / ".git"  # relative answer made absolute


def test_git_dirs_of_a_linked_worktree(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "feature"
    git.add_worktree(repo, tree, "feature")
    assert git.layout(tree).git_dir == repo / ".git" / "worktrees" / "feature"
    assert git.common_dir(tree) == repo / ".git"
    assert git.toplevel(tree) == tree


def test_git_dir_outside_a_repository_carries_gits_message(tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        git.layout(tmp_path)
    message = str(caught.value)
    assert message.startswith(
        f"git rev-parse --show-toplevel --absolute-git-dir --git-common-dir failed in {tmp_path}: "
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


def test_add_worktree_new_branch_from_head(repo: Path, tmp_path: Path) -> None:
    destination = tmp_path / "data" / "worktrees" / "api" / "feature-login"
    git.add_worktree(repo, destination, "feature/login")
    assert (destination / "README").read_text(encoding="utf-8") == "hello\n"
    assert git.current_branch(destination) == "feature/login"
    assert git.branch_exists(repo, "feature/login")
    assert run_git(destination, "rev-parse", "HEAD") == run_git(repo, "rev-parse", "HEAD")
    assert git.current_branch(repo) == "main"  # the main checkout is untouched


def test_add_worktree_checks_out_an_existing_branch(repo: Path, tmp_path: Path) -> None:
    run_git(repo, "checkout", "-q", "-b", "existing")
    (repo / "NEW").write_text("on existing\n", encoding="utf-8")
    run_git(repo, "add", "NEW")
    run_git(repo, "commit", "-q", "-m", "second")
    tip = run_git(repo, "rev-parse", "HEAD")
    run_git(repo, "checkout", "-q", "main")
    destination = tmp_path / "trees" / "existing"
    git.add_worktree(repo, destination, "existing")
    assert run_git(destination, "rev-parse", "HEAD") == tip
    assert (destination / "NEW").is_file()
    assert run_git(repo, "branch", "--format=%(refname:short)").splitlines() == [
        "existing",
        "main",
    ]


def test_add_worktree_refuses_an_invalid_name_before_touching_disk(
    repo: Path, tmp_path: Path
) -> None:
    destination = tmp_path / "trees" / "x"
    with pytest.raises(GitError, match=re.escape("'a..b' is not a valid branch name")):
        git.add_worktree(repo, destination, "a..b")
    assert not destination.parent.exists()


def test_add_worktree_error_carries_gits_stderr(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        git.add_worktree(repo, tmp_path / "trees" / "main", "main")  # checked out already
    message = str(caught.value)
    assert message.startswith(f"git worktree add {tmp_path / 'trees' / 'main'} main failed in")
    assert "already checked out" in message


def test_is_dirty(repo: Path) -> None:
    assert not git.is_dirty(repo)
    (repo / "untracked").write_text("x", encoding="utf-8")
    assert git.is_dirty(repo)
    (repo / "untracked").unlink()
    (repo / "README").write_text("changed\n", encoding="utf-8")
    assert git.is_dirty(repo)
    run_git(repo, "add", "README")
    assert git.is_dirty(repo)  # staged counts too
    run_git(repo, "commit", "-q", "-m", "change")
    assert not git.is_dirty(repo)


def test_current_branch(repo: Path) -> None:
    assert git.current_branch(repo) == "main"
    run_git(repo, "checkout", "-q", "--detach")
    assert git.current_branch(repo) is None


def test_list_worktrees(repo: Path, tmp_path: Path) -> None:
    assert git.list_worktrees(repo) == [(repo, "main")]
    feature = tmp_path / "trees" / "with space"
    git.add_worktree(repo, feature, "feature/x")
    detached = tmp_path / "trees" / "detached"
    run_git(repo, "worktree", "add", "-q", "--detach", str(detached))
    main, *linked = git.list_worktrees(repo)
    assert main == (repo, "main")
    assert sorted(linked) == [(detached, None), (feature, "feature/x")]
    assert git.list_worktrees(feature) == git.list_worktrees(repo)  # from any of them


def test_remove_a_clean_worktree(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "clean"
    git.add_worktree(repo, tree, "clean")
    git.remove_worktree(repo, tree, force=False)
    assert not tree.exists()
    assert git.list_worktrees(repo) == [(repo, "main")]
    assert git.branch_exists(repo, "clean")  # the branch stays


def test_remove_a_dirty_worktree_needs_force(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "dirty"
    git.add_worktree(repo, tree, "dirty")
    (tree / "work-in-progress").write_text("x", encoding="utf-8")
    with pytest.raises(GitError) as caught:
        git.remove_worktree(repo, tree, force=False)
    assert str(caught.value).startswith(f"git worktree remove {tree} failed in {repo}: ")
    assert "contains modified or untracked files" in str(caught.value)
    assert (tree / "work-in-progress").exists()
    git.remove_worktree(repo, tree, force=True)
    assert not tree.exists()
    assert git.list_worktrees(repo) == [(repo, "main")]


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
