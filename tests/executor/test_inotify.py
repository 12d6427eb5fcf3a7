"""Recursive inotify watching of directory trees (``cloister_executor.inotify``).

Everything runs on the real filesystem in ``tmp_path``. An event is queued by the
kernel before the syscall that causes it returns, so a ``read()`` right after an
operation made by this process sees it. Where another process or the event loop is
involved, waiting is done on the fd with a deadline, never with a fixed sleep.
The kernel's own list of watches (``/proc/self/fdinfo``) is checked against the
watcher's, so a leaked watch shows up.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import select
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cloister_executor import inotify_calls
from cloister_executor.inotify import Change, TreeWatcher, WatchLimitError, available
from cloister_executor.inotify_calls import IN_CREATE, IN_ISDIR, IN_Q_OVERFLOW, parse_events

pytestmark = pytest.mark.skipif(not available(), reason="inotify is Linux only")

TIMEOUT = 5.0


@pytest.fixture
def watcher() -> Iterator[TreeWatcher]:
    with TreeWatcher() as tree_watcher:
        yield tree_watcher


def kernel_watches(watcher: TreeWatcher) -> int:
    """How many watches the kernel holds for the watcher's fd."""
    info = Path(f"/proc/self/fdinfo/{watcher.fileno()}").read_text(encoding="ascii")
    return sum(line.startswith("inotify wd:") for line in info.splitlines())


def drain(watcher: TreeWatcher) -> list[Change]:
    """Everything pending, including what new watches made while it was being read."""
    changes: list[Change] = []
    while batch := watcher.read():
        changes += batch
    return changes


def wait_for(
    watcher: TreeWatcher, wanted: Callable[[Change], bool], timeout: float = TIMEOUT
) -> list[Change]:
    """Read until a change matches *wanted*; everything read so far is returned."""
    deadline = time.monotonic() + timeout
    changes: list[Change] = []
    while not any(wanted(change) for change in changes):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no matching change within {timeout}s; got {changes}")
        select.select([watcher.fileno()], [], [], remaining)
        changes += watcher.read()
    return changes


def git_dir(root: Path) -> Path:
    """A small .git-like tree: objects/00..ff, refs/heads/a/b, logs, info."""
    git = root / ".git"
    for sub in ("objects/info", "objects/pack", "refs/heads/a/b", "refs/tags", "logs/refs"):
        (git / sub).mkdir(parents=True)
    for number in range(256):
        (git / "objects" / f"{number:02x}").mkdir()
    (git / "index").write_bytes(b"DIRC")
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    return git


# --- what is reported -----------------------------------------------------------------


def test_a_symlink_made_in_a_nested_existing_directory_is_reported(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    nested = tmp_path / "refs" / "heads" / "a" / "b"
    nested.mkdir(parents=True)
    watcher.add_tree(tmp_path)
    (nested / "evil").symlink_to("/etc/passwd")
    assert watcher.read() == [Change(nested / "evil", "created", is_dir=False)]
    assert watcher.read() == []


def test_a_fifo_is_reported(tmp_path: Path, watcher: TreeWatcher) -> None:
    (tmp_path / "objects" / "ab").mkdir(parents=True)
    watcher.add_tree(tmp_path)
    os.mkfifo(tmp_path / "objects" / "ab" / "pipe")
    assert Change(tmp_path / "objects" / "ab" / "pipe", "created", is_dir=False) in drain(watcher)


def test_a_directory_populated_before_anything_was_read_is_scanned(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    watcher.add_tree(tmp_path)
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)  # only the creation of a/ makes an event: b/ and c/ are unwatched
    (deep / "link").symlink_to("/")
    (deep / "file").write_text("x")
    changes = drain(watcher)
    assert Change(tmp_path / "a", "created", is_dir=True) in changes
    assert Change(tmp_path / "a" / "b", "created", is_dir=True) in changes
    assert Change(deep, "created", is_dir=True) in changes
    assert Change(deep / "link", "created", is_dir=False) in changes
    assert Change(deep / "file", "created", is_dir=False) in changes
    # And the new directories are watched from now on.
    assert {tmp_path / "a", tmp_path / "a" / "b", deep} <= watcher.watched
    (deep / "later").symlink_to("/")
    assert watcher.read() == [Change(deep / "later", "created", is_dir=False)]


def test_a_symlink_renamed_into_the_tree_is_moved_in(tmp_path: Path, watcher: TreeWatcher) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "refs").mkdir(parents=True)
    outside.mkdir()
    (outside / "link").symlink_to("/etc")
    watcher.add_tree(tree)
    (outside / "link").rename(tree / "refs" / "HEAD")
    assert watcher.read() == [Change(tree / "refs" / "HEAD", "moved_in", is_dir=False)]


def test_a_file_replaced_by_rename_is_moved_in(tmp_path: Path, watcher: TreeWatcher) -> None:
    git = git_dir(tmp_path)
    watcher.add_tree(git)
    temp = git / "index.lock"
    temp.write_bytes(b"DIRC evil")
    temp.replace(git / "index")
    changes = watcher.read()
    assert Change(git / "index", "moved_in", is_dir=False) in changes
    assert Change(temp, "moved_out", is_dir=False) in changes


def test_close_after_write_is_reported_as_written(tmp_path: Path, watcher: TreeWatcher) -> None:
    git = git_dir(tmp_path)
    watcher.add_tree(git)
    with (git / "objects" / "info" / "alternates").open("w") as alternates:
        alternates.write("/elsewhere/objects\n")
        assert watcher.read() == [
            Change(git / "objects" / "info" / "alternates", "created", is_dir=False)
        ]
    assert watcher.read() == [
        Change(git / "objects" / "info" / "alternates", "written", is_dir=False)
    ]
    with (git / "index").open("r+b") as index:
        index.write(b"XXXX")
    assert watcher.read() == [Change(git / "index", "written", is_dir=False)]


def test_a_write_by_another_process_is_seen(tmp_path: Path, watcher: TreeWatcher) -> None:
    git = git_dir(tmp_path)
    watcher.add_tree(git)
    subprocess.run(
        [sys.executable, "-c", "import sys; open(sys.argv[1], 'wb').write(b'x')", git / "index"],
        check=True,
        timeout=TIMEOUT,
    )
    wait_for(watcher, lambda change: change == Change(git / "index", "written", is_dir=False))


def test_deletion_and_attribute_changes_are_reported(tmp_path: Path, watcher: TreeWatcher) -> None:
    (tmp_path / "file").write_text("x")
    watcher.add_tree(tmp_path)
    (tmp_path / "file").chmod(0o600)
    (tmp_path / "file").unlink()
    assert watcher.read() == [
        Change(tmp_path / "file", "attrib", is_dir=False),
        Change(tmp_path / "file", "deleted", is_dir=False),
    ]


# --- which directories are watched ----------------------------------------------------


def test_a_git_directory_of_hundreds_of_subdirectories_is_watched(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    git = git_dir(tmp_path)
    for number in range(44):  # 300 and more, like a repository with many refs
        (git / "refs" / "heads" / f"topic-{number}").mkdir()
    directories = {git} | {path for path in git.rglob("*") if path.is_dir()}
    assert len(directories) > 300
    watcher.add_tree(git)
    assert watcher.watched == directories
    assert kernel_watches(watcher) == len(directories)
    (git / "objects" / "ab" / "cdef").symlink_to("/etc/shadow")
    (git / "refs" / "heads" / "topic-43" / "main").symlink_to("/")
    assert watcher.read() == [
        Change(git / "objects" / "ab" / "cdef", "created", is_dir=False),
        Change(git / "refs" / "heads" / "topic-43" / "main", "created", is_dir=False),
    ]


def test_adding_a_tree_again_changes_nothing(tmp_path: Path, watcher: TreeWatcher) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    watcher.add_tree(tmp_path)
    watcher.add_tree(tmp_path / "." / "a" / "..")
    assert watcher.roots == {tmp_path}
    assert len(watcher.watched) == kernel_watches(watcher) == 3
    (tmp_path / "a" / "b" / "x").symlink_to("/")
    assert watcher.read() == [Change(tmp_path / "a" / "b" / "x", "created", is_dir=False)]


def test_add_directory_is_not_recursive(tmp_path: Path, watcher: TreeWatcher) -> None:
    (tmp_path / "sub").mkdir()
    watcher.add_directory(tmp_path)
    (tmp_path / "sub" / "x").symlink_to("/")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "y").symlink_to("/")
    assert drain(watcher) == [Change(tmp_path / "new", "created", is_dir=True)]
    assert watcher.watched == {tmp_path}


def test_symlinks_are_not_followed(tmp_path: Path, watcher: TreeWatcher) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    (outside / "deep").mkdir(parents=True)
    (tree / "objects").symlink_to(outside)
    watcher.add_tree(tree)
    assert watcher.watched == {tree}
    (outside / "deep" / "x").symlink_to("/")
    (outside / "y").write_text("x")
    assert watcher.read() == []
    with pytest.raises(NotADirectoryError, match="symlink"):
        watcher.add_tree(tree / "objects")
    assert watcher.roots == {tree}


def test_a_missing_root_raises_and_leaves_nothing(tmp_path: Path, watcher: TreeWatcher) -> None:
    with pytest.raises(FileNotFoundError):
        watcher.add_tree(tmp_path / "missing")
    assert watcher.roots == frozenset()
    assert watcher.watched == frozenset()


def test_a_directory_moved_in_from_outside_is_watched_at_its_new_path(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    (outside / "pack" / "deep").mkdir(parents=True)
    (outside / "pack" / "deep" / "link").symlink_to("/")
    watcher.add_tree(tree)
    (outside / "pack").rename(tree / "pack")
    changes = drain(watcher)
    assert changes[0] == Change(tree / "pack", "moved_in", is_dir=True)
    assert Change(tree / "pack" / "deep" / "link", "created", is_dir=False) in changes
    assert watcher.watched == {tree, tree / "pack", tree / "pack" / "deep"}
    (tree / "pack" / "deep" / "second").symlink_to("/")
    assert watcher.read() == [Change(tree / "pack" / "deep" / "second", "created", is_dir=False)]


def test_a_directory_renamed_inside_the_tree_is_watched_at_its_new_path(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    (tmp_path / "refs" / "heads" / "a" / "b").mkdir(parents=True)
    watcher.add_tree(tmp_path)
    (tmp_path / "refs" / "heads").rename(tmp_path / "moved")
    changes = drain(watcher)
    assert Change(tmp_path / "refs" / "heads", "moved_out", is_dir=True) in changes
    assert Change(tmp_path / "moved", "moved_in", is_dir=True) in changes
    expected = {tmp_path, tmp_path / "refs"} | {
        tmp_path / "moved",
        tmp_path / "moved" / "a",
        tmp_path / "moved" / "a" / "b",
    }
    assert watcher.watched == expected
    assert kernel_watches(watcher) == len(expected)
    (tmp_path / "moved" / "a" / "b" / "x").symlink_to("/")
    assert watcher.read() == [Change(tmp_path / "moved" / "a" / "b" / "x", "created", False)]


def test_a_directory_moved_out_of_the_tree_is_forgotten(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "sub" / "deep").mkdir(parents=True)
    outside.mkdir()
    watcher.add_tree(tree)
    (tree / "sub").rename(outside / "sub")
    assert drain(watcher) == [Change(tree / "sub", "moved_out", is_dir=True)]
    assert watcher.watched == {tree}
    assert kernel_watches(watcher) == 1
    (outside / "sub" / "deep" / "x").symlink_to("/")
    assert watcher.read() == []


def test_deleting_a_watched_subtree_drops_its_watches(tmp_path: Path, watcher: TreeWatcher) -> None:
    git = git_dir(tmp_path)
    watcher.add_tree(tmp_path)
    before = len(watcher.watched)
    assert kernel_watches(watcher) == before
    shutil.rmtree(git / "objects")
    changes = drain(watcher)
    assert Change(git / "objects", "deleted", is_dir=True) in changes
    assert len(watcher.watched) == before - 259  # objects, info, pack and 00..ff
    assert kernel_watches(watcher) == len(watcher.watched)
    assert not any(path.is_relative_to(git / "objects") for path in watcher.watched)
    shutil.rmtree(git)
    drain(watcher)
    assert watcher.watched == {tmp_path}
    assert kernel_watches(watcher) == 1


def test_a_directory_deleted_and_made_again_before_a_read_is_watched(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    (tmp_path / "d").mkdir()
    watcher.add_tree(tmp_path)
    (tmp_path / "d").rmdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").symlink_to("/")
    changes = drain(watcher)
    assert Change(tmp_path / "d" / "x", "created", is_dir=False) in changes
    assert watcher.watched == {tmp_path, tmp_path / "d"}
    assert kernel_watches(watcher) == 2
    (tmp_path / "d" / "y").symlink_to("/")
    assert watcher.read() == [Change(tmp_path / "d" / "y", "created", is_dir=False)]


def test_a_deleted_root_is_reported_and_forgotten(tmp_path: Path, watcher: TreeWatcher) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    watcher.add_tree(root)
    shutil.rmtree(root)
    assert Change(root, "deleted", is_dir=True) in drain(watcher)
    assert watcher.roots == frozenset()
    assert watcher.watched == frozenset()
    assert kernel_watches(watcher) == 0


def test_a_moved_root_is_reported_and_forgotten(tmp_path: Path, watcher: TreeWatcher) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    watcher.add_tree(root)
    root.rename(tmp_path / "elsewhere")
    assert drain(watcher) == [Change(root, "moved_out", is_dir=True)]
    assert watcher.roots == frozenset()
    assert kernel_watches(watcher) == 0


def test_remove_stops_events(tmp_path: Path, watcher: TreeWatcher) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "a" / "b").mkdir(parents=True)
    second.mkdir()
    watcher.add_tree(first)
    watcher.add_tree(second)
    watcher.remove(first)
    watcher.remove(first)  # again: nothing to do
    assert watcher.roots == {second}
    assert watcher.watched == {second}
    assert kernel_watches(watcher) == 1
    (first / "a" / "b" / "x").symlink_to("/")
    (first / "c").mkdir()
    (second / "y").symlink_to("/")
    assert drain(watcher) == [Change(second / "y", "created", is_dir=False)]


def test_removing_a_root_inside_another_tree_keeps_that_tree_watched(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    watcher.add_tree(tmp_path)
    watcher.add_tree(tmp_path / "a")
    watcher.remove(tmp_path / "a")
    assert watcher.roots == {tmp_path}
    assert len(watcher.watched) == kernel_watches(watcher) == 3
    (tmp_path / "a" / "b" / "x").symlink_to("/")
    assert watcher.read() == [Change(tmp_path / "a" / "b" / "x", "created", is_dir=False)]


def test_a_path_too_long_to_watch_is_listed_as_unwatchable(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    # Deeper than PATH_MAX (4096): made relative to directory fds, as an attacker can.
    name = "d" * 250
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(18):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    watcher.add_tree(tmp_path)
    assert len(watcher.unwatchable) == 1
    (too_long,) = watcher.unwatchable
    assert len(os.fsencode(too_long)) >= 4096
    assert too_long.parent in watcher.watched


def test_an_unwatchable_directory_is_tried_again_when_its_attributes_change(
    tmp_path: Path, watcher: TreeWatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root, permissions do not refuse a watch, so the refusal (EACCES, as for a
    # directory made unreadable) is simulated for one directory, once.
    locked = tmp_path / "locked"
    real_add_watch = watcher._libc.add_watch
    refused: list[Path] = []

    def add_watch(fd: int, target: bytes, mask: int, directory: Path) -> int:
        if directory == locked and not refused:
            refused.append(directory)
            raise inotify_calls._watch_error(errno.EACCES, directory)
        return real_add_watch(fd, target, mask, directory)

    monkeypatch.setattr(watcher._libc, "add_watch", add_watch)
    watcher.add_tree(tmp_path)
    locked.mkdir()
    (locked / "x").symlink_to("/")
    assert drain(watcher) == [Change(locked, "created", is_dir=True)]
    assert watcher.unwatchable == {locked}
    locked.chmod(0o755)  # what makes it readable again also reports it: watch and scan now
    changes = drain(watcher)
    assert Change(locked / "x", "created", is_dir=False) in changes
    assert watcher.unwatchable == frozenset()
    assert locked in watcher.watched
    shutil.rmtree(locked)
    drain(watcher)
    assert watcher.watched == {tmp_path}


def test_running_out_of_watches_raises_with_what_was_read(
    tmp_path: Path, watcher: TreeWatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher.add_tree(tmp_path)

    def add_watch(fd: int, target: bytes, mask: int, directory: Path) -> int:
        raise inotify_calls._watch_error(errno.ENOSPC, directory)

    monkeypatch.setattr(watcher._libc, "add_watch", add_watch)
    (tmp_path / "link").symlink_to("/")
    (tmp_path / "new").mkdir()
    with pytest.raises(WatchLimitError, match=r"fs\.inotify\.max_user_watches") as raised:
        watcher.read()
    assert raised.value.changes == [
        Change(tmp_path / "link", "created", is_dir=False),
        Change(tmp_path / "new", "created", is_dir=True),
    ]
    with pytest.raises(WatchLimitError):
        watcher.add_tree(tmp_path / "new")


def test_a_symlink_swapped_in_above_a_new_directory_does_not_lead_outside(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "refs").mkdir(parents=True)
    (outside / "sub").mkdir(parents=True)
    watcher.add_tree(tree)
    # refs/ becomes a symlink to outside/ before the watcher has read anything, then a
    # stale event makes it look at refs/sub, which now resolves to outside/sub.
    (tree / "refs").rename(tree / "old")
    (tree / "refs").symlink_to(outside)
    changes: list[Change] = []
    watcher._walk(tree / "refs" / "sub", recursive=True, report=changes, strict=False)
    assert changes == []
    assert not any(path.is_relative_to(tree / "refs" / "sub") for path in watcher.watched)
    assert kernel_watches(watcher) == len(watcher.watched)


# --- the raw buffer and overflow ------------------------------------------------------


def raw_event(wd: int, mask: int, name: bytes = b"", cookie: int = 0) -> bytes:
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", wd, mask, cookie, len(padded)) + padded


def test_the_parser_splits_events_and_strips_the_padding() -> None:
    data = (
        raw_event(1, IN_CREATE, b"link")
        + raw_event(2, IN_CREATE | IN_ISDIR, b"x" * 16, cookie=7)
        + raw_event(-1, IN_Q_OVERFLOW)
    )
    assert parse_events(data) == [
        (1, IN_CREATE, 0, b"link"),
        (2, IN_CREATE | IN_ISDIR, 7, b"x" * 16),
        (-1, IN_Q_OVERFLOW, 0, b""),
    ]
    with pytest.raises(ValueError, match="truncated"):
        parse_events(data[:-1])
    with pytest.raises(ValueError, match="truncated"):
        parse_events(raw_event(1, IN_CREATE, b"link")[:20])


def test_an_overflow_is_reported_once_per_root(tmp_path: Path, watcher: TreeWatcher) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    watcher.add_tree(first)
    watcher.add_directory(second)
    changes = watcher._handle(raw_event(-1, IN_Q_OVERFLOW))
    assert sorted(changes, key=lambda change: change.path) == [
        Change(first, "overflow", is_dir=True),
        Change(second, "overflow", is_dir=True),
    ]
    assert watcher.watched == {first, second}


def test_an_overflow_watches_what_was_made_while_events_were_lost(
    tmp_path: Path, watcher: TreeWatcher
) -> None:
    (tmp_path / "gone").mkdir()
    watcher.add_tree(tmp_path)
    (tmp_path / "new" / "deep").mkdir(parents=True)
    (tmp_path / "gone").rename(tmp_path / "renamed")
    os.read(watcher.fileno(), 1 << 16)  # the events are lost, as in an overflow
    changes = watcher._handle(raw_event(-1, IN_Q_OVERFLOW))
    assert changes == [Change(tmp_path, "overflow", is_dir=True)]
    expected = {tmp_path, tmp_path / "new", tmp_path / "new" / "deep", tmp_path / "renamed"}
    assert watcher.watched == expected
    assert kernel_watches(watcher) == len(expected)
    (tmp_path / "new" / "deep" / "x").symlink_to("/")
    (tmp_path / "renamed" / "y").symlink_to("/")
    assert drain(watcher) == [
        Change(tmp_path / "new" / "deep" / "x", "created", is_dir=False),
        Change(tmp_path / "renamed" / "y", "created", is_dir=False),
    ]


def test_the_watch_limit_error_names_the_sysctl(tmp_path: Path) -> None:
    error = inotify_calls._watch_error(errno.ENOSPC, tmp_path)
    assert isinstance(error, WatchLimitError)
    assert isinstance(error, OSError)
    assert error.errno == errno.ENOSPC
    assert "fs.inotify.max_user_watches" in str(error)
    assert str(tmp_path) in str(error)
    assert isinstance(inotify_calls._watch_error(errno.EACCES, tmp_path), PermissionError)


def test_elsewhere_the_module_reports_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    inotify_calls._libc.cache_clear()
    try:
        assert not available()
        with pytest.raises(OSError, match="Linux only"):
            TreeWatcher()
    finally:
        monkeypatch.undo()
        inotify_calls._libc.cache_clear()
    assert available()


# --- the event loop and the lifecycle -------------------------------------------------


def test_changes_delivers_a_change_made_after_it_started(tmp_path: Path) -> None:
    (tmp_path / "refs").mkdir()
    link = tmp_path / "refs" / "evil"

    async def main() -> list[Change]:
        loop = asyncio.get_running_loop()
        with TreeWatcher() as watcher:
            watcher.add_tree(tmp_path)
            async with asyncio.timeout(1.0), contextlib.aclosing(watcher.changes()) as batches:
                loop.call_soon(link.symlink_to, "/")  # runs once changes() is waiting
                async for batch in batches:
                    return batch
            # The reader is gone again: nothing left registered for the fd.
            assert not loop.remove_reader(watcher.fileno())
        raise AssertionError("the iteration ended")

    assert asyncio.run(main()) == [Change(link, "created", is_dir=False)]


def test_close_ends_a_waiting_changes_iteration(tmp_path: Path) -> None:
    async def main() -> list[list[Change]]:
        loop = asyncio.get_running_loop()
        watcher = TreeWatcher()
        watcher.add_tree(tmp_path)
        loop.call_soon(watcher.close)
        async with asyncio.timeout(1.0):
            return [batch async for batch in watcher.changes()]

    assert asyncio.run(main()) == []


def test_a_closed_watcher_refuses_use(tmp_path: Path) -> None:
    watcher = TreeWatcher()
    watcher.add_tree(tmp_path)
    fd = watcher.fileno()
    watcher.close()
    watcher.close()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed"):
        watcher.read()
    with pytest.raises(ValueError, match="closed"):
        watcher.add_tree(tmp_path)
    assert watcher.watched == frozenset()


def test_a_watch_budget_leaves_the_rest_unwatched(tmp_path: Path) -> None:
    for index in range(10):
        (tmp_path / f"d{index}").mkdir()
    with TreeWatcher(max_watches=4) as limited:
        limited.add_tree(tmp_path)
        assert len(limited.watched) == 4
        assert limited.full
        assert len(limited.unwatchable) == 7
