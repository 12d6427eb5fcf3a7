"""``cloister start -b BRANCH``'s worktree: a directory with a ``.git`` pointer file that
names a path that exists only inside a cloister (its files are written by the cloister's
git directory, :mod:`cloister_cli.repo.gitdirs`), never a worktree registered with the human's
repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cloister_cli.container.cloisters import CloisterStartError
from cloister_cli.repo import git
from cloister_cli.start.worktree import make_worktree
from cloister_core.owngit import POINTER
from tests.git_support import GIT, hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "src" / "api")


def registered(repo: Path) -> list[str]:
    """The work trees the human's repository knows of."""
    listed = run_git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line.removeprefix("worktree ") for line in listed if line.startswith("worktree ")]


def test_a_new_branch_is_made_from_head_and_the_pointer_written(repo: Path, tmp_path: Path) -> None:
    destination = tmp_path / "data" / "worktrees" / "api" / "feature-login"
    make_worktree(repo, destination, "feature/login")
    assert (destination / ".git").read_text(encoding="utf-8") == POINTER
    assert sorted(path.name for path in destination.iterdir()) == [".git"]  # files: later
    assert run_git(repo, "rev-parse", "feature/login") == run_git(repo, "rev-parse", "HEAD")
    assert run_git(repo, "symbolic-ref", "--short", "HEAD") == "main"  # untouched
    assert registered(repo) == [str(repo)]  # the human's repository knows nothing of it


def test_the_humans_git_there_finds_no_repository(repo: Path, tmp_path: Path) -> None:
    """Rather than the agent's state: its .git names a path that exists only inside."""
    destination = tmp_path / "trees" / "feature"
    make_worktree(repo, destination, "feature")
    result = subprocess.run(
        [GIT, "-C", str(destination), "status"], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert git.toplevel(destination) is None


def test_an_existing_branch_is_left_where_it_is(repo: Path, tmp_path: Path) -> None:
    run_git(repo, "checkout", "-q", "-b", "existing")
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    tip = run_git(repo, "rev-parse", "HEAD")
    run_git(repo, "checkout", "-q", "main")
    make_worktree(repo, tmp_path / "trees" / "existing", "existing")
    assert run_git(repo, "rev-parse", "existing") == tip


def test_making_it_again_changes_nothing(repo: Path, tmp_path: Path) -> None:
    destination = tmp_path / "trees" / "feature"
    make_worktree(repo, destination, "feature")
    (destination / "work").write_text("the agent's\n", encoding="utf-8")
    make_worktree(repo, destination, "feature")
    assert (destination / "work").read_text(encoding="utf-8") == "the agent's\n"
    assert (destination / ".git").read_text(encoding="utf-8") == POINTER


def test_an_invalid_name_is_refused_before_touching_disk(repo: Path, tmp_path: Path) -> None:
    destination = tmp_path / "trees" / "x"
    with pytest.raises(git.GitError, match=re.escape("'a..b' is not a valid branch name")):
        make_worktree(repo, destination, "a..b")
    assert not destination.parent.exists()


def test_a_repository_without_a_commit_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    with pytest.raises(CloisterStartError, match="-b needs a commit to start from"):
        make_worktree(repo, tmp_path / "trees" / "feature", "feature")
    assert not (tmp_path / "trees").exists()


def test_a_git_directory_there_is_refused(repo: Path, tmp_path: Path) -> None:
    destination = tmp_path / "trees" / "feature"
    (destination / ".git").mkdir(parents=True)
    with pytest.raises(CloisterStartError, match=r"\.git is not the file Cloister makes"):
        make_worktree(repo, destination, "feature")
    assert (destination / ".git").is_dir()


def test_a_git_link_there_is_refused_and_not_followed(repo: Path, tmp_path: Path) -> None:
    destination = tmp_path / "trees" / "feature"
    destination.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("gitdir: /somewhere/else\n", encoding="utf-8")
    (destination / ".git").symlink_to(elsewhere)
    with pytest.raises(CloisterStartError, match=r"\.git is not the file Cloister makes"):
        make_worktree(repo, destination, "feature")
    assert (destination / ".git").is_symlink()
    assert elsewhere.read_text(encoding="utf-8") == "gitdir: /somewhere/else\n"
    (destination / ".git").unlink()
    (destination / ".git").symlink_to(tmp_path / "dangling")
    with pytest.raises(CloisterStartError, match=r"\.git is not the file Cloister makes"):
        make_worktree(repo, destination, "feature")
    assert not (tmp_path / "dangling").exists()


def test_an_older_cloisters_worktree_is_converted(repo: Path, tmp_path: Path) -> None:
    """Made with `git worktree add`: its files stay, its .git becomes Cloister's pointer."""
    destination = tmp_path / "trees" / "feature"
    run_git(repo, "worktree", "add", "-q", "-b", "feature", str(destination))
    (destination / "work").write_text("the agent's\n", encoding="utf-8")
    make_worktree(repo, destination, "feature")
    assert (destination / ".git").read_text(encoding="utf-8") == POINTER
    assert (destination / "work").read_text(encoding="utf-8") == "the agent's\n"
    assert (destination / "README").read_text(encoding="utf-8") == "hello\n"
    assert git.branch_exists(repo, "feature")


def test_the_repository_forgets_an_older_cloisters_worktree(repo: Path, tmp_path: Path) -> None:
    destination = tmp_path / "trees" / "feature"
    run_git(repo, "worktree", "add", "-q", "-b", "feature", str(destination))
    make_worktree(repo, destination, "feature")
    assert registered(repo) == [str(repo)]
