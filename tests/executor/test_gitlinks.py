"""Gitlinks of an index: the quick look, git's list, and moving a repository away."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cloister_executor import gitlinks
from tests.git_support import hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


def test_an_index_without_gitlinks_needs_no_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert gitlinks.none_in(repo / ".git" / "index")
    make_repo(repo / "sub")
    run_git(repo, "add", "sub")
    assert not gitlinks.none_in(repo / ".git" / "index")
    assert asyncio.run(gitlinks.listed(repo)) == ["sub"]


def test_a_split_index_is_asked_of_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    make_repo(repo / "sub")
    run_git(repo, "add", "sub")
    run_git(repo, "update-index", "--split-index")
    assert list((repo / ".git").glob("sharedindex.*"))
    assert not gitlinks.none_in(repo / ".git" / "index")
    assert asyncio.run(gitlinks.listed(repo)) == ["sub"]


def test_an_unreadable_index_is_asked_of_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".git" / "index").unlink()
    (repo / ".git" / "index").symlink_to(tmp_path / "elsewhere")
    assert not gitlinks.none_in(repo / ".git" / "index")


def test_moving_away_never_goes_through_a_link(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    human = make_repo(tmp_path / "human")
    (repo / "v").symlink_to(human)
    with pytest.raises(OSError, match=r"Not a directory|Too many levels"):
        asyncio.run(gitlinks.move_repository_away(repo, "v", tmp_path / "q"))
    assert (human / ".git").is_dir()
    make_repo(repo / "sub")
    moved = asyncio.run(gitlinks.move_repository_away(repo, "sub", tmp_path / "q"))
    assert moved == tmp_path / "q" / "sub" / ".git"
    assert moved.is_dir()
    assert not (repo / "sub" / ".git").exists()
    assert asyncio.run(gitlinks.move_repository_away(repo, "sub", tmp_path / "q")) is None
