"""A snapshot taken, the repository damaged as an agent can, and restored, with real git."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.session.snapshots import restore, take
from cloister_cli.session.snapshots.choose import chosen, records_of
from cloister_core import beneath
from cloister_core.snapshots import SnapshotError, SnapshotRecord, read_records
from tests.cli.session.snapshots.conftest import Scene
from tests.git_support import GIT, run_git

# What `rm -rf /work/.git` inside a cloister cannot remove: its read-only mounts.
MOUNTED = ("config", "hooks", "commondir", "remotes", "branches")


def wipe_git_directory(git_dir: Path) -> None:
    for entry in git_dir.iterdir():
        if entry.name in MOUNTED:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def test_rm_rf_dot_git_is_undone(scene: Scene) -> None:
    before = scene.state()
    record = take(scene.paths, scene.target(), scene.settings)
    (scene.repo / "file2.txt").write_text("the agent's edit\n", encoding="utf-8")
    (scene.repo / "agent.txt").write_text("the agent's file\n", encoding="utf-8")
    wipe_git_directory(scene.repo / ".git")
    with pytest.raises(subprocess.CalledProcessError):
        scene.git("log")

    outcome = restore(scene.paths, record, scene.settings)

    after = scene.state()
    files = after.pop("files")
    status = after.pop("status")
    expected_files = before.pop("files")
    expected_status = before.pop("status")
    assert after == before
    assert isinstance(files, dict)
    assert isinstance(expected_files, dict)
    assert files == expected_files | {"agent.txt": b"the agent's file\n"}
    assert set(str(status).splitlines()) == {*str(expected_status).splitlines(), "?? agent.txt"}
    fsck = scene.git("fsck", "--no-progress", "--connectivity-only")  # fails on a missing object
    assert "missing" not in fsck
    assert "broken" not in fsck
    assert str(scene.repo / ".git" / "objects") in outcome.rebuilt
    # What the agent had is kept: its edit is in the snapshot made first.
    assert outcome.before is not None
    assert outcome.before.kind == "before-restore"


def test_reset_hard_and_gc_prune_now_are_undone(scene: Scene) -> None:
    before = scene.state()
    record = take(scene.paths, scene.target(), scene.settings)
    scene.git("reset", "-q", "--hard", "HEAD~3")
    scene.git("branch", "-f", "side", "HEAD~1")
    scene.git("branch", "-D", "side")
    scene.git("tag", "-d", "v1")
    scene.git("reflog", "expire", "--expire=now", "--all")
    scene.git("gc", "-q", "--prune=now")
    assert "commit 4" not in scene.git("log", "--all", "--format=%s")

    outcome = restore(scene.paths, record, scene.settings)

    assert scene.state() == before
    assert set(outcome.changed) == {"refs/heads/main", "refs/heads/side", "refs/tags/v1"}
    assert outcome.rebuilt == []


def test_refs_made_since_are_kept_and_a_restore_is_undone_by_the_one_before(
    scene: Scene,
) -> None:
    record = take(scene.paths, scene.target(), scene.settings)
    scene.git("commit", "-q", "-am", "the agent's commit")
    scene.git("branch", "agent-work")
    after_session = scene.state()

    outcome = restore(scene.paths, record, scene.settings)
    assert outcome.kept == ["refs/heads/agent-work"]
    assert "the agent's commit" in scene.git("log", "agent-work", "-1", "--format=%s")
    assert scene.git("log", "main", "-1", "--format=%s") == "commit 4"
    assert outcome.before is not None

    restore(scene.paths, outcome.before, scene.settings)
    assert scene.state() == after_session


def test_a_linked_worktree_is_restored(scene: Scene, tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    scene.git("worktree", "add", "-q", "-b", "feature", str(worktree))
    (worktree / "file3.txt").write_text("feature work\n", encoding="utf-8")
    target = type(scene.target()).of("api-feature", "api", worktree)
    record = take(scene.paths, target, scene.settings)
    assert record.head_ref == "refs/heads/feature"
    git_dir = Path(record.git_dir)
    (git_dir / "HEAD").unlink()
    (git_dir / "index").unlink()
    shutil.rmtree(scene.repo / ".git" / "objects")
    shutil.rmtree(scene.repo / ".git" / "refs")
    (scene.repo / ".git" / "packed-refs").unlink()
    (worktree / "file3.txt").write_text("damaged\n", encoding="utf-8")

    restore(scene.paths, record, scene.settings)

    assert run_git(worktree, "symbolic-ref", "HEAD") == "refs/heads/feature"
    assert (worktree / "file3.txt").read_text(encoding="utf-8") == "feature work\n"
    assert run_git(worktree, "status", "--porcelain") == "M file3.txt"
    assert scene.git("log", "-1", "--format=%s", "main") == "commit 4"


def test_links_planted_in_the_git_directory_are_not_followed(scene: Scene, tmp_path: Path) -> None:
    record = take(scene.paths, scene.target(), scene.settings)
    elsewhere = tmp_path / "humans-directory"
    elsewhere.mkdir()
    objects = scene.repo / ".git" / "objects"
    shutil.rmtree(objects)
    objects.symlink_to(elsewhere)

    restore(scene.paths, record, scene.settings)

    assert list(elsewhere.iterdir()) == []
    assert objects.is_dir()
    assert not objects.is_symlink()
    assert scene.git("log", "-1", "--format=%s") == "commit 4"


def test_the_newest_start_is_chosen_and_a_running_check_is_the_commands(scene: Scene) -> None:
    first = take(scene.paths, scene.target(), scene.settings)
    second = take(scene.paths, scene.target(), scene.settings)
    records = records_of(scene.paths, "api")
    assert chosen(records, None).id == second.id  # by time, then id
    assert chosen(records, first.id).id == first.id
    assert records_of(scene.paths, "other") == []
    with pytest.raises(SnapshotError, match="no snapshot kept"):
        chosen([], None)


def test_an_index_with_conflicts_is_noted(scene: Scene) -> None:
    scene.git("stash", "-q", "-u")
    scene.git("checkout", "-q", "-b", "other", "HEAD~1")
    (scene.repo / "file4.txt").write_text("other side\n", encoding="utf-8")
    scene.git("add", "file4.txt")
    scene.git("commit", "-q", "-am", "other")
    merge = subprocess.run(
        [GIT, "-C", str(scene.repo), "merge", "main"], capture_output=True, check=False
    )
    assert merge.returncode != 0  # a conflict in file4.txt
    record = take(scene.paths, scene.target(), scene.settings)
    assert record.index_tree is None
    assert record.worktree_tree is not None
    outcome = restore(scene.paths, record, scene.settings)
    assert any("conflicts" in note for note in outcome.notes)
    assert "<<<<<<<" in (scene.repo / "file4.txt").read_text(encoding="utf-8")


def test_a_project_file_of_the_humans_outside_is_never_touched(scene: Scene) -> None:
    # Restoring writes only below the repository; a record is checked data.
    record = take(scene.paths, scene.target(), scene.settings)
    assert all(".." not in name for name in record.files)
    assert read_records(scene.paths, "api") == [record]
    assert scene.paths.snapshot_dir("api").stat().st_mode & 0o777 == 0o700


# -- across filesystems: what is moved aside is copied, within bounds ----------------------

# The module (the package's name `restore` is the function).
restore_module = importlib.import_module("cloister_cli.session.snapshots.restore")


def _in_the_way(scene: Scene, make: Callable[[Path], object]) -> SnapshotRecord:
    """A snapshot with a tracked file ``cfg``; then ``cfg/.env``, ignored, made by
    *make* where the snapshot's ``cfg`` goes: a restore must move it out of the way."""
    (scene.repo / "cfg").write_text("a tracked file\n", encoding="utf-8")
    scene.git("add", "cfg")
    scene.git("commit", "-qm", "cfg")
    record = take(scene.paths, scene.target(), scene.settings)
    scene.git("rm", "-q", "cfg")
    (scene.repo / "cfg").mkdir()
    (scene.repo / ".git" / "info" / "exclude").write_text(".env\n", encoding="utf-8")
    make(scene.repo / "cfg" / ".env")
    return record


def _restored(scene: Scene, record: SnapshotRecord) -> list[str]:
    """The restore's notes; the snapshot's ``cfg`` is back whatever was in its way."""
    outcome = restore(scene.paths, record, scene.settings)
    assert (scene.repo / "cfg").read_text(encoding="utf-8") == "a tracked file\n"
    return outcome.notes


def _sparse(path: Path) -> None:
    with path.open("wb") as file:
        file.truncate(256 * 1024 * 1024)  # an agent's `truncate -s 1T`, smaller


def test_an_ignored_file_in_the_way_is_copied_aside_from_another_filesystem(
    far_scene: Scene,
) -> None:
    record = _in_the_way(far_scene, lambda path: path.write_text("KEY=1\n", encoding="utf-8"))
    notes = _restored(far_scene, record)
    displaced = far_scene.paths.snapshot_dir("api") / "displaced" / record.id
    assert (displaced / "worktree" / "cfg" / ".env").read_text(encoding="utf-8") == "KEY=1\n"
    assert f"1 ignored file(s) in the way were moved to {displaced}" in notes


def test_a_sparse_file_in_the_way_is_not_copied(far_scene: Scene) -> None:
    record = _in_the_way(far_scene, _sparse)
    notes = _restored(far_scene, record)
    assert notes == [
        "'cfg/.env' was in the way and not moved aside ('.env' is a sparse file of"
        " 268435456 bytes (0 on disk): not copied to another filesystem): git replaced it"
    ]
    displaced = far_scene.paths.snapshot_dir("api") / "displaced"
    assert not (displaced / record.id / "worktree" / "cfg" / ".env").exists()


def test_a_file_in_the_way_over_the_limit_is_not_copied(
    far_scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restore_module, "DISPLACE_LIMIT", 100)
    record = _in_the_way(far_scene, lambda path: path.write_bytes(b"x" * 1000))
    (note,) = _restored(far_scene, record)
    assert note == (
        "'cfg/.env' was in the way and not moved aside ('.env' is 1000 bytes, over 100:"
        " not copied to another filesystem): git replaced it"
    )


def test_a_fifo_in_the_way_is_moved_aside_as_a_fifo(
    far_scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git lists no FIFO: one is there when the file it listed was swapped for it since."""
    record = _in_the_way(far_scene, lambda path: path.write_text("KEY=1\n", encoding="utf-8"))
    planted = far_scene.repo / "cfg" / ".env"
    real = beneath.parent_of

    @contextlib.contextmanager
    def swapping(root: Path, relative: str) -> Iterator[tuple[int, str]]:
        if root / relative == planted and planted.is_file():
            planted.unlink()
            os.mkfifo(planted)
        with real(root, relative) as found:
            yield found

    monkeypatch.setattr(beneath, "parent_of", swapping)
    notes = _restored(far_scene, record)
    displaced = far_scene.paths.snapshot_dir("api") / "displaced" / record.id
    assert stat.S_ISFIFO((displaced / "worktree" / "cfg" / ".env").lstat().st_mode)
    assert f"1 ignored file(s) in the way were moved to {displaced}" in notes


def test_a_file_swapped_after_it_was_looked_at_is_not_copied(
    far_scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = _in_the_way(far_scene, lambda path: path.write_text("KEY=1\n", encoding="utf-8"))
    real = beneath.move_out

    def swapping(dir_fd: int, name: str, destination: Path, **bounds: Any) -> None:
        os.rename(name, f"{name}.kept", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # keeps its inode
        os.mkfifo(name, dir_fd=dir_fd)
        real(dir_fd, name, destination, **bounds)

    monkeypatch.setattr(beneath, "move_out", swapping)
    (note,) = _restored(far_scene, record)
    assert note == (
        "'cfg/.env' was in the way and not moved aside ('.env' changed since it was looked"
        " at): git replaced it"
    )


def test_an_object_file_swapped_for_a_sparse_one_is_removed_not_copied(
    far_scene: Scene,
) -> None:
    record = take(far_scene.paths, far_scene.target(), far_scene.settings)
    pack = next(name for name in record.files if name.endswith(".pack"))
    original = far_scene.repo / ".git" / "objects" / pack
    swapped = original.with_name("swap")
    _sparse(swapped)
    swapped.replace(original)
    outcome = restore(far_scene.paths, record, far_scene.settings)
    assert (
        f"object file {pack} had other contents and was removed ('{Path(pack).name}' is a"
        " sparse file of 268435456 bytes (0 on disk): not copied to another filesystem)"
    ) in outcome.notes
    assert original.stat().st_size < 1024 * 1024  # the pool's, placed back
    check = subprocess.run(
        [GIT, "-C", str(far_scene.repo), "fsck", "--no-progress"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
