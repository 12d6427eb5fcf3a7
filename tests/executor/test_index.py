"""What an index names: git's own list, checked; a forged index rebuilt; moving away."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cloister_executor import index
from tests.git_support import blob, forge_index, hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


def test_gitlinks_and_unsafe_entries(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    found = asyncio.run(index.scan(repo / ".git"))
    assert found == index.IndexScan((), ())
    make_repo(repo / "sub")
    run_git(repo, "add", "sub")
    assert asyncio.run(index.scan(repo / ".git")).gitlinks == ("sub",)
    head = run_git(repo, "rev-parse", "HEAD")
    forge_index(
        repo,
        [
            (0o100644, blob(repo, "x"), "README"),
            (0o100644, blob(repo, "y"), "../secret"),
            (0o100755, blob(repo, "z"), ".git/hooks/post-checkout"),
            (0o160000, head, "x/../evil"),
        ],
    )
    found = asyncio.run(index.scan(repo / ".git"))
    assert found.gitlinks == ()
    assert {path for path, _ in found.unsafe} == {
        "../secret",
        ".git/hooks/post-checkout",
        "x/../evil",
    }


def test_a_forged_index_is_rebuilt_from_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    victim = tmp_path / "victim"
    forge_index(repo, [(0o100755, blob(repo, "#!/bin/sh\ntouch x\n"), "../victim")])
    moved = asyncio.run(index.rebuild(repo / ".git", tmp_path / "q"))
    assert moved == tmp_path / "q" / "index"
    assert moved.is_file()
    assert asyncio.run(index.scan(repo / ".git")).unsafe == ()
    run_git(repo, "restore", ".")  # what would have written ../victim
    assert not victim.exists()
    assert run_git(repo, "ls-files") == "README"


def test_moving_away_never_goes_through_a_link(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    human = make_repo(tmp_path / "human")
    (repo / "v").symlink_to(human)
    with pytest.raises(OSError, match=r"Not a directory|Too many levels"):
        asyncio.run(index.move_repository_away(repo, "v", tmp_path / "q"))
    assert (human / ".git").is_dir()
    make_repo(repo / "sub")
    moved = asyncio.run(index.move_repository_away(repo, "sub", tmp_path / "q"))
    assert moved == tmp_path / "q" / "sub" / ".git"
    assert moved.is_dir()
    assert not (repo / "sub" / ".git").exists()
    assert asyncio.run(index.move_repository_away(repo, "sub", tmp_path / "q")) is None
