"""Watching directory trees with inotify, recursively, without following symlinks.

Why: the host must notice, within microseconds, when an untrusted process (in a
container that shares the directory through a bind mount) plants a symlink or a FIFO
in a git directory, replaces a file there or writes one that git trusts, so that it
can undo it before the human's git reads it. Writes made in the container reach a
watch on the host because a bind mount shares the inodes and dentries the kernel
reports on. (Docker Desktop's file sharing is another filesystem and sends no events.)

An inotify watch covers one directory, so a tree needs a watch per directory, and
directories made later must be watched as they appear. A new directory is watched as
soon as its creation event is read, then scanned once, and what it already holds is
reported as ``created``, because entries made before the watch existed produce no
event. After a queue overflow every tree is walked again (a directory made while
events were being lost would otherwise stay unwatched) and each root is reported once
as ``overflow``, meaning "rescan it".

A directory is opened with ``O_NOFOLLOW`` and watched through that descriptor
(``/proc/self/fd/N``; by path, with ``IN_DONT_FOLLOW``, where ``/proc`` is not
mounted), and a subdirectory's ``..`` must be the directory it was found in. So
swapping a directory for a symlink during a walk cannot move a watch outside the tree.

The standard library has no inotify, so this uses ctypes. It works on Linux only:
elsewhere the module still imports and :func:`available` returns False. A watcher is
not thread-safe: use it from one thread (one event loop).
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from cloister_executor.inotify_calls import (
    _KINDS,
    _PROC_FD,
    _VANISHED,
    IN_ATTRIB,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    IN_UNMOUNT,
    MAX_READS,
    READ_SIZE,
    WATCH_MASK,
    Change,
    ChangeKind,
    RawEvent,
    WatchLimitError,
    _libc,
    available,
    parse_events,
)

__all__ = ["Change", "ChangeKind", "TreeWatcher", "WatchLimitError", "available"]


@dataclass(slots=True)
class _Watch:
    wd: int
    identity: tuple[int, int]  # (st_dev, st_ino) of the directory when it was watched
    recursive: bool = False


def _identity(result: os.stat_result) -> tuple[int, int]:
    return (result.st_dev, result.st_ino)


def _absolute(path: Path) -> Path:
    # Normalized as text, not resolved: resolving would follow symlinks.
    return Path(os.path.normpath(Path(path).absolute()))


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class TreeWatcher:
    """Watches directory trees recursively: every existing subdirectory at add time, and
    every directory created or moved in later (watched as soon as its creation event is
    read, and scanned once then, reporting its existing entries as ``created``, because
    entries made before the watch was added produce no event).

    An entry may be reported more than once (by an event and by a scan). A directory
    that cannot be watched, for example because it is unreadable or its path is too
    long, is skipped and listed in :attr:`unwatchable`. It is tried again when its
    attributes change.
    """

    def __init__(self, *, max_watches: int | None = None) -> None:
        """*max_watches*: directories past this many are not watched (listed in
        :attr:`unwatchable`, :attr:`full` set): inotify watches are a budget of the
        user's, shared with editors and file watchers, and a tree may be grown on purpose."""
        libc = _libc()
        if libc is None:
            raise OSError(errno.ENOSYS, "inotify is not available here (Linux only)")
        self._libc = libc
        # IN_NONBLOCK and IN_CLOEXEC are O_NONBLOCK and O_CLOEXEC by definition.
        self._fd = libc.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self._via_proc = _PROC_FD.is_dir()
        self._watches: dict[Path, _Watch] = {}
        self._by_wd: dict[int, Path] = {}
        self._children: dict[Path, set[Path]] = {}  # parent path -> its watched subdirectories
        self._roots: dict[Path, bool] = {}  # root -> recursive
        self._unwatchable: set[Path] = set()
        self._waiter: asyncio.Future[None] | None = None
        self._max_watches = max_watches
        self.full = False  # a directory was left unwatched because of max_watches

    # --- what is watched ------------------------------------------------------------

    @property
    def roots(self) -> frozenset[Path]:
        """The paths given to :meth:`add_tree` and :meth:`add_directory` that are still watched."""
        return frozenset(self._roots)

    @property
    def watched(self) -> frozenset[Path]:
        """Every directory that has a watch now."""
        return frozenset(self._watches)

    @property
    def unwatchable(self) -> frozenset[Path]:
        """Directories inside trees that could not be watched (e.g. unreadable or too deep)."""
        return frozenset(self._unwatchable)

    def add_tree(self, root: Path) -> None:
        """Watch *root* and every directory below it; symlinks are not followed.

        Calling it again for a root that is already watched does nothing. If an error is
        raised after *root* itself was watched, the watches made so far are kept, and
        :meth:`remove` drops them.
        """
        self._add_root(root, recursive=True)

    def add_directory(self, directory: Path) -> None:
        """Watch *directory* itself, not the directories below it."""
        self._add_root(directory, recursive=False)

    def remove(self, root: Path) -> None:
        """Stop watching *root* and everything below it. Does nothing if it is not watched.

        A directory that is still inside another recursive tree keeps its watches. Only
        its registration as a root goes.
        """
        root = _absolute(root)
        for path in [path for path in self._roots if path.is_relative_to(root)]:
            del self._roots[path]
        if any(
            recursive and root.is_relative_to(other) for other, recursive in self._roots.items()
        ):
            return  # still inside a tree that is watched
        for path in [path for path in self._watches if path.is_relative_to(root)]:
            if path in self._watches:
                self._drop(path)
        self._forget_unwatchable(root)

    # --- reading --------------------------------------------------------------------

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("the TreeWatcher is closed")
        return self._fd

    def read(self) -> list[Change]:
        """Every change pending now, without blocking (an empty list when there is none)."""
        fd = self.fileno()
        chunks: list[bytes] = []
        for _ in range(MAX_READS):
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return self._handle(b"".join(chunks)) if chunks else []

    async def changes(self) -> AsyncGenerator[list[Change], None]:
        """Batches of changes as they arrive. The iteration ends when the watcher is closed.

        The fd is registered with the loop only while waiting. A batch held by the
        consumer therefore does not keep a level-triggered reader firing. Use one
        iterator at a time.
        """
        loop = asyncio.get_running_loop()
        while self._fd >= 0:
            batch = self.read()
            if batch:
                yield batch
                continue
            fd = self._fd
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            loop.add_reader(fd, _wake, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if self._fd == fd:  # close() has already removed it otherwise
                    loop.remove_reader(fd)

    def close(self) -> None:
        """Close the fd, which drops every watch, and end a waiting :meth:`changes`."""
        if self._fd < 0:
            return
        waiter = self._waiter
        if waiter is not None:
            waiter.get_loop().remove_reader(self._fd)
            _wake(waiter)
        os.close(self._fd)
        self._fd = -1
        self._watches.clear()
        self._by_wd.clear()
        self._children.clear()
        self._roots.clear()
        self._unwatchable.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- events ---------------------------------------------------------------------

    def _handle(self, data: bytes) -> list[Change]:
        """The changes in *data* (raw inotify events), with the watches updated to match."""
        changes: list[Change] = []
        overflowed = False
        try:
            for event in parse_events(data):
                if event.mask & IN_Q_OVERFLOW:
                    overflowed = True
                else:
                    self._event(event, changes)
            if overflowed:
                roots = list(self._roots)
                self._resync()
                changes.extend(Change(root, "overflow", is_dir=True) for root in roots)
        except WatchLimitError as error:
            error.changes = changes
            raise
        return changes

    def _event(self, event: RawEvent, changes: list[Change]) -> None:
        directory = self._by_wd.get(event.wd)
        if directory is None:  # a watch that is gone already: the event is stale
            return
        mask = event.mask
        if not event.name:
            self._self_event(directory, mask, changes)
            return
        child = directory / os.fsdecode(event.name)
        is_dir = bool(mask & IN_ISDIR)
        for bit, kind in _KINDS:
            if mask & bit:
                changes.append(Change(child, kind, is_dir))
        if not is_dir:
            return
        if mask & (IN_MOVED_FROM | IN_DELETE):
            self._gone(child)
        elif self._watches[directory].recursive and (
            mask & (IN_CREATE | IN_MOVED_TO) or (mask & IN_ATTRIB and child not in self._watches)
        ):
            # New or moved in: watch it and report what it holds. An attribute change on
            # an unwatched directory is a retry (e.g. it was unreadable and is not now).
            self._walk(child, recursive=True, report=changes, strict=False)

    def _self_event(self, directory: Path, mask: int, changes: list[Change]) -> None:
        """An event about a watched directory itself. Only roots are reported, because
        for any other directory the parent's watch has reported the change already."""
        is_root = directory in self._roots
        if mask & IN_MOVE_SELF:
            # Any other directory was dropped on its parent's IN_MOVED_FROM. If this wd
            # maps to a directory here, a scan has re-watched it at its new path.
            if is_root:
                changes.append(Change(directory, "moved_out", is_dir=True))
                del self._roots[directory]
                self._drop(directory)
        elif mask & (IN_DELETE_SELF | IN_UNMOUNT | IN_IGNORED):
            if is_root:
                changes.append(Change(directory, "deleted", is_dir=True))
                del self._roots[directory]
            self._drop(directory)
        elif mask & IN_ATTRIB and is_root:
            changes.append(Change(directory, "attrib", is_dir=True))

    def _gone(self, child: Path) -> None:
        """A subdirectory was moved away or deleted: forget it and everything below it."""
        self._forget_unwatchable(child)
        watch = self._watches.get(child)
        if watch is None or child in self._roots:  # a root is handled by its own events
            return
        try:
            now = os.lstat(child)
        except OSError:
            pass
        else:
            if stat.S_ISDIR(now.st_mode) and _identity(now) == watch.identity:
                return  # the event is about an older directory; this one is watched already
        self._drop(child)

    def _resync(self) -> None:
        """After lost events: watch what is there now and drop watches whose paths are stale."""
        seen: set[Path] = set()
        for root, recursive in list(self._roots.items()):
            try:
                self._walk(root, recursive=recursive, report=None, strict=True, seen=seen)
            except WatchLimitError:
                raise
            except OSError:  # the root itself is gone
                self._roots.pop(root, None)
        for path in [path for path in self._watches if path not in seen]:
            if path in self._watches:
                self._drop(path)

    # --- watches --------------------------------------------------------------------

    def _add_root(self, root: Path, *, recursive: bool) -> None:
        self.fileno()
        root = _absolute(root)
        before = self._roots.get(root)
        self._roots[root] = bool(before) or recursive
        try:
            self._walk(root, recursive=recursive, report=None, strict=True)
        except BaseException:
            if root not in self._watches:
                if before is None:
                    del self._roots[root]
                else:
                    self._roots[root] = before
            raise

    def _walk(
        self,
        top: Path,
        *,
        recursive: bool,
        report: list[Change] | None,
        strict: bool,
        seen: set[Path] | None = None,
    ) -> None:
        """Watch *top* and, if *recursive*, every directory below it, listing each one
        after its watch exists, so an entry is either listed or reported by an event.

        Entries found are appended to *report* as ``created``. With *strict*, failing to
        watch *top* raises. Other directories that fail are skipped.
        """
        stack = [top]
        visited: set[tuple[int, int]] = set()  # a bind mount may show a directory twice
        while stack:
            directory = stack.pop()
            try:
                fd = self._open(directory)
            except OSError as error:
                if strict and directory == top:
                    raise _not_a_directory(error, directory) from None
                self._skip(directory, error)
                continue
            try:
                identity = _identity(os.fstat(fd))
                if identity in visited:
                    continue
                visited.add(identity)
                if self._max_watches is not None and len(self._watches) >= self._max_watches:
                    self.full = True
                    self._unwatchable.add(directory)
                    continue
                self._watch(directory, fd, identity, recursive=recursive)
                if seen is not None:
                    seen.add(directory)
                if recursive:
                    stack.extend(_list(directory, fd, report))
            except WatchLimitError:
                raise
            except OSError as error:
                if strict and directory == top:
                    raise
                self._skip(directory, error)
            finally:
                os.close(fd)

    def _open(self, directory: Path) -> int:
        """Open *directory* itself (never a symlink). Below a root, its ``..`` must be the
        watched parent, so a symlink swapped in higher up cannot lead outside the tree."""
        fd = os.open(
            directory,
            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        )
        if directory in self._roots:
            return fd
        parent = self._watches.get(directory.parent)
        try:
            if parent is None or _identity(os.stat("..", dir_fd=fd)) != parent.identity:
                raise FileNotFoundError(
                    errno.ENOENT, "no longer inside the watched directory", str(directory)
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _watch(
        self, directory: Path, fd: int, identity: tuple[int, int], *, recursive: bool
    ) -> None:
        if self._via_proc:  # exactly the directory opened, whatever its path leads to now
            target, mask = os.fsencode(_PROC_FD / str(fd)), WATCH_MASK & ~IN_DONT_FOLLOW
        else:
            target, mask = os.fsencode(directory), WATCH_MASK
        wd = self._libc.add_watch(self._fd, target, mask, directory)
        self._map(directory, _Watch(wd, identity, recursive))
        self._unwatchable.discard(directory)

    def _map(self, path: Path, watch: _Watch) -> None:
        old = self._watches.get(path)
        if old is not None:
            if old.wd == watch.wd:
                old.recursive = old.recursive or watch.recursive
                return
            # Another directory now has this path: the old one's watches go, and this
            # path stays a root if it was one.
            root = self._roots.get(path)
            self._drop(path, keep=watch.wd)
            if root is not None:
                self._roots[path] = root
        elsewhere = self._by_wd.get(watch.wd)
        if elsewhere is not None:
            # The same directory under another path: it moved, and the event saying so
            # is still queued. Its old subtree's paths are stale. The walk re-watches them.
            self._drop(elsewhere, keep=watch.wd)
        self._watches[path] = watch
        self._by_wd[watch.wd] = path
        self._children.setdefault(path.parent, set()).add(path)

    def _drop(self, top: Path, keep: int | None = None) -> None:
        """Forget *top* and the watched directories below it, removing their watches."""
        stack = [top]
        while stack:
            path = stack.pop()
            stack.extend(self._children.pop(path, ()))
            watch = self._watches.pop(path, None)
            if watch is None:
                continue
            del self._by_wd[watch.wd]
            self._roots.pop(path, None)
            siblings = self._children.get(path.parent)
            if siblings is not None:
                siblings.discard(path)
                if not siblings:
                    del self._children[path.parent]
            if watch.wd != keep:
                self._libc.rm_watch(self._fd, watch.wd)
        self._forget_unwatchable(top)

    def _skip(self, directory: Path, error: OSError) -> None:
        if error.errno not in _VANISHED:
            self._unwatchable.add(directory)

    def _forget_unwatchable(self, top: Path) -> None:
        if self._unwatchable:
            self._unwatchable = {path for path in self._unwatchable if not path.is_relative_to(top)}


def _list(directory: Path, fd: int, report: list[Change] | None) -> list[Path]:
    """The subdirectories of the open *directory*; every entry goes to *report* as created."""
    subdirectories: list[Path] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            path = directory / entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if report is not None:
                report.append(Change(path, "created", is_dir))
            if is_dir:
                subdirectories.append(path)
    return subdirectories


def _not_a_directory(error: OSError, directory: Path) -> OSError:
    """``ELOOP`` from ``O_NOFOLLOW`` reads badly: say that it is a symlink."""
    if error.errno == errno.ELOOP:
        return NotADirectoryError(
            errno.ENOTDIR, "a symlink, not a directory (symlinks are not followed)", str(directory)
        )
    return error
