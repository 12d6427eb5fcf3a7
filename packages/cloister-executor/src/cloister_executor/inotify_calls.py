"""The inotify system calls (through ctypes), their constants and the event format.

The standard library has no inotify; :mod:`cloister_executor.inotify` builds the tree
watcher on these. Linux only: elsewhere :func:`available` returns False.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

# <sys/inotify.h>
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000

WATCH_MASK = (
    IN_CREATE
    | IN_MOVED_TO
    | IN_CLOSE_WRITE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_ATTRIB
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_DONT_FOLLOW
    | IN_ONLYDIR
    | IN_EXCL_UNLINK
)

READ_SIZE = 256 * 1024
# Reads per read() call. The cap keeps a writer that is faster than we are from
# stopping read() from ever returning. The fd stays readable, so the next call continues.
MAX_READS = 64

_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then name
_PROC_FD = Path("/proc/self/fd")
# Open errors meaning that the entry is gone or is no longer a directory. The parent's
# events report that, so the directory is skipped and is not kept as "unwatchable".
_VANISHED = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})

ChangeKind = Literal["created", "moved_in", "written", "deleted", "moved_out", "attrib", "overflow"]

_KINDS: tuple[tuple[int, ChangeKind], ...] = (
    (IN_CREATE, "created"),
    (IN_MOVED_TO, "moved_in"),
    (IN_CLOSE_WRITE, "written"),
    (IN_DELETE, "deleted"),
    (IN_MOVED_FROM, "moved_out"),
    (IN_ATTRIB, "attrib"),
)


@dataclass(frozen=True, slots=True)
class Change:
    """One change: *path* is the entry that changed (the watched directory / a name).

    For ``overflow``, *path* is a watched root: events were lost and it needs a rescan.
    """

    path: Path
    kind: ChangeKind
    is_dir: bool


class WatchLimitError(OSError):
    """Out of inotify watches (``ENOSPC``) or instances: the tree is not fully covered.

    When this is raised from :meth:`TreeWatcher.read`, ``changes`` holds what was read
    before the error, so the caller can still act on it.
    """

    changes: list[Change]

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.changes = []


def _limit(name: str) -> str:
    try:
        return (Path("/proc/sys/fs/inotify") / name).read_text(encoding="ascii").strip()
    except OSError:
        return "unknown"


def _watch_error(code: int, directory: Path) -> OSError:
    if code == errno.ENOSPC:
        return WatchLimitError(
            code,
            "out of inotify watches: raise the sysctl fs.inotify.max_user_watches"
            f" (now {_limit('max_user_watches')})",
            str(directory),
        )
    return OSError(code, os.strerror(code), str(directory))


class _Libc:
    """The three inotify calls, typed, raising OSError on failure."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self._init1 = libc.inotify_init1
        self._init1.argtypes = [ctypes.c_int]
        self._init1.restype = ctypes.c_int
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._add.restype = ctypes.c_int
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        self._rm.restype = ctypes.c_int

    def init1(self, flags: int) -> int:
        fd = int(self._init1(flags))
        if fd < 0:
            code = ctypes.get_errno()
            if code in {errno.EMFILE, errno.ENFILE}:
                raise WatchLimitError(
                    code,
                    "cannot create an inotify instance: raise the sysctl"
                    f" fs.inotify.max_user_instances (now {_limit('max_user_instances')})"
                    " or the open-file limit",
                )
            raise OSError(code, os.strerror(code))
        return fd

    def add_watch(self, fd: int, target: bytes, mask: int, directory: Path) -> int:
        wd = int(self._add(fd, target, mask))
        if wd < 0:
            raise _watch_error(ctypes.get_errno(), directory)
        return wd

    def rm_watch(self, fd: int, wd: int) -> None:
        # EINVAL means that the watch went with its directory already, which is fine.
        self._rm(fd, wd)


@functools.cache
def _libc() -> _Libc | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return _Libc(ctypes.CDLL(None, use_errno=True))
    except (OSError, AttributeError):  # no libc symbols, or a libc without inotify
        return None


def available() -> bool:
    """True where inotify can be used (Linux with a libc that exports it)."""
    return _libc() is not None


class RawEvent(NamedTuple):
    """One ``struct inotify_event``; *name* is empty for events about the directory itself."""

    wd: int
    mask: int
    cookie: int
    name: bytes


def parse_events(data: bytes) -> list[RawEvent]:
    """Split a buffer read from an inotify fd into its events (the name's NUL padding removed)."""
    events: list[RawEvent] = []
    offset, end = 0, len(data)
    while offset < end:
        if end - offset < _EVENT.size:
            raise ValueError(f"truncated inotify event header at offset {offset}")
        wd, mask, cookie, length = _EVENT.unpack_from(data, offset)
        offset += _EVENT.size
        if offset + length > end:
            raise ValueError(f"truncated inotify event name at offset {offset}")
        name = data[offset : offset + length].split(b"\0", 1)[0]
        offset += length
        events.append(RawEvent(wd, mask, cookie, name))
    return events
