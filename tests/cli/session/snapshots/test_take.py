"""Taking snapshots with real git: what is kept, what is left out, what is never written."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cloister_cli.session.snapshots import take
from cloister_cli.session.snapshots.pool import object_files
from cloister_core.config.models import SnapshotsConfig
from cloister_core.snapshots import pool_dir, read_records
from tests.cli.session.snapshots.conftest import Scene
from tests.git_support import make_repo, run_git


def test_the_repository_is_not_written(scene: Scene) -> None:
    git_dir = scene.repo / ".git"
    index = (git_dir / "index").read_bytes()
    objects = object_files(git_dir / "objects")
    take(scene.paths, scene.target(), scene.settings)
    assert (git_dir / "index").read_bytes() == index
    assert object_files(git_dir / "objects") == objects


def test_what_is_kept(scene: Scene) -> None:
    record = take(scene.paths, scene.target(), scene.settings)
    assert record.head_ref == "refs/heads/main"
    assert record.head_commit == scene.git("rev-parse", "HEAD")
    assert set(record.refs) == {"refs/heads/main", "refs/heads/side", "refs/tags/v1"}
    assert record.refs["refs/tags/v1"] == scene.git("rev-parse", "v1")  # the tag object
    assert record.index_tree is not None
    assert record.worktree_tree is not None
    files = scene.kept("ls-tree", "-r", "--name-only", record.worktree_tree).splitlines()
    assert "notes.txt" in files  # untracked
    assert "build/out.bin" not in files  # ignored
    assert scene.kept("show", f"{record.worktree_tree}:file0.txt") == "unstaged change"
    assert scene.kept("show", f"{record.index_tree}:file0.txt") == "version 0"
    assert scene.kept("show", f"{record.index_tree}:file1.txt") == "staged change"
    assert any(name.startswith("pack/") and name.endswith(".pack") for name in record.files)


def test_big_untracked_files_and_nested_repositories_are_left_out(scene: Scene) -> None:
    (scene.repo / "dataset.bin").write_bytes(b"x" * 4096)
    make_repo(scene.repo / "vendor" / "lib")
    settings = SnapshotsConfig(untracked_file_limit="1k")
    record = take(scene.paths, scene.target(), settings)
    assert "dataset.bin" in record.skipped
    assert "vendor/lib/" in record.skipped
    assert record.worktree_tree is not None
    files = scene.kept("ls-tree", "-r", "--name-only", record.worktree_tree).splitlines()
    assert "dataset.bin" not in files
    assert "notes.txt" in files


def test_a_big_tracked_change_and_a_fifo_keep_what_the_index_has(scene: Scene) -> None:
    (scene.repo / "file3.txt").write_bytes(b"y" * 4096)  # tracked, changed, too big
    (scene.repo / "file4.txt").unlink()  # tracked, deleted
    os.mkfifo(scene.repo / "pipe")  # git keeps none (and nothing may block on it)
    record = take(scene.paths, scene.target(), SnapshotsConfig(untracked_file_limit="1k"))
    assert "file3.txt" in record.skipped
    assert record.worktree_tree is not None
    assert scene.kept("show", f"{record.worktree_tree}:file3.txt") == "version 3"
    files = scene.kept("ls-tree", "-r", "--name-only", record.worktree_tree).splitlines()
    assert "file4.txt" not in files
    assert "pipe" not in files
    assert "notes.txt" in files


def test_a_detached_head_and_an_unborn_branch(scene: Scene, tmp_path: Path) -> None:
    scene.git("checkout", "-q", "--detach", "HEAD~1")
    record = take(scene.paths, scene.target(), scene.settings)
    assert record.head_ref is None
    assert record.head_commit == scene.git("rev-parse", "HEAD")
    empty = tmp_path / "empty"
    empty.mkdir()
    run_git(empty, "init", "-q", "-b", "trunk")
    (empty / "first.txt").write_text("not committed yet\n", encoding="utf-8")
    target = type(scene.target()).of("empty", "empty", empty)
    record = take(scene.paths, target, scene.settings)
    assert record.head_ref == "refs/heads/trunk"
    assert record.head_commit is None
    assert record.refs == {}
    assert record.worktree_tree is not None


def test_starts_after_the_first_add_only_what_is_new(scene: Scene) -> None:
    first = take(scene.paths, scene.target(), scene.settings)
    pool = pool_dir(scene.paths, "api")
    inodes = {name: (pool / name).stat().st_ino for name in first.files}
    second = take(scene.paths, scene.target(), scene.settings)
    assert set(second.files) == set(first.files)
    assert {name: (pool / name).stat().st_ino for name in second.files} == inodes
    # Hard links (or clones) of the repository's packs: no second copy of the history.
    pack = next(name for name in first.files if name.endswith(".pack"))
    original = (scene.repo / ".git" / "objects" / pack).stat()
    placed = (pool / pack).stat()
    assert placed.st_ino == original.st_ino or placed.st_size == original.st_size


def test_old_snapshots_expire_and_their_files_go(scene: Scene) -> None:
    settings = SnapshotsConfig(keep=2)
    pool = pool_dir(scene.paths, "api")
    now = datetime.now(UTC)
    oldest = take(scene.paths, scene.target(), settings, now=now - timedelta(hours=2))
    only_oldest = set(oldest.files)
    (scene.repo / "notes.txt").write_text("a later version\n", encoding="utf-8")
    take(scene.paths, scene.target(), settings, now=now - timedelta(hours=1))
    take(scene.paths, scene.target(), settings, now=now)
    kept = read_records(scene.paths, "api")
    assert oldest.id not in {record.id for record in kept}
    assert len(kept) == 2
    needed = {name for record in kept for name in record.files}
    gone = only_oldest - needed
    assert gone  # the first version of notes.txt and its tree
    assert not any((pool / name).exists() for name in gone)
    assert all((pool / name).exists() for name in needed)


def test_two_starts_at_once(scene: Scene) -> None:
    errors: list[BaseException] = []

    def one(cloister: str) -> None:
        try:
            take(scene.paths, scene.target(cloister), scene.settings)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one, args=(f"api-{number}",)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    records = read_records(scene.paths, "api")
    assert len(records) == 4
    pool = pool_dir(scene.paths, "api")
    assert all((pool / name).is_file() for record in records for name in record.files)
    assert not any((scene.paths.snapshot_dir("api") / "tmp").iterdir())


def test_the_pool_is_private(scene: Scene) -> None:
    take(scene.paths, scene.target(), scene.settings)
    assert scene.paths.snapshot_dir("api").stat().st_mode & 0o077 == 0
