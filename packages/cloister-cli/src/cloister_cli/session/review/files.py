"""Reading what an agent left behind without being led elsewhere by it.

Everything here is hostile input: a file may be a symbolic link to one of the human's
secrets, a FIFO that blocks whoever opens it, or gigabytes long. So every file and
directory is opened as :mod:`cloister_core.beneath` does: every directory below a trusted
root is entered with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's descriptor (a
planted link in the middle of a path is never crossed), only regular files are read
(``O_NOFOLLOW | O_NONBLOCK``), and at most :data:`READ_LIMIT` bytes of each.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cloister_core import beneath

READ_LIMIT = 1024 * 1024

EntryKind = Literal["file", "symlink", "directory", "fifo", "other"]


def digest(*parts: bytes | str) -> str:
    """A short, stable digest of *parts* (each length-prefixed, so boundaries count)."""
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry as found (never followed): a file's first MiB, a link's text."""

    path: Path  # absolute
    kind: EntryKind
    data: bytes = b""  # regular files only: at most READ_LIMIT bytes
    size: int = 0
    link: str | None = None  # symbolic links only, as written
    mode: int = 0
    error: str | None = None  # a regular file that could not be read

    @property
    def truncated(self) -> bool:
        return self.size > len(self.data)

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @property
    def content_digest(self) -> str:
        """What identifies the content: the bytes read and the size (a link: its text)."""
        if self.kind == "symlink":
            return digest("symlink", self.link or "")
        return digest(self.kind, self.data, str(self.size))

    @property
    def executable(self) -> bool:
        return self.kind == "file" and bool(self.mode & 0o111)


def _kind(mode: int) -> EntryKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "fifo"
    return "other"


def read_entry(name: str | Path, *, dir_fd: int | None = None) -> Entry | None:
    """What is at *name* (relative to *dir_fd* if given); None when nothing is there.

    Only a regular file is opened, and the opened descriptor is checked to be the one
    ``lstat`` saw, so a swap in between is never read.
    """
    path = Path(name)
    try:
        info = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        return Entry(path, "other", error=error.strerror)
    kind = _kind(info.st_mode)
    if kind == "symlink":
        try:
            link: str | None = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            link = None
        return Entry(path, kind, link=link, mode=info.st_mode)
    if kind != "file":
        return Entry(path, kind, size=info.st_size, mode=info.st_mode)
    try:
        data, opened = beneath.read_at(dir_fd, name, READ_LIMIT, expect=info)
    except beneath.ChangedError:
        return Entry(path, "other", error="changed while being read")
    except OSError as error:
        return Entry(path, "file", size=info.st_size, mode=info.st_mode, error=error.strerror)
    return Entry(path, "file", data, opened.st_size, mode=opened.st_mode)


def read_below(root: Path, relative: str) -> Entry | None:
    """:func:`read_entry` of ``root/relative`` without crossing a link on the way."""
    *parents, name = relative.split("/")
    with beneath.open_directory(root, parents) as fd:
        if fd is None:
            return None
        entry = read_entry(name, dir_fd=fd)
    if entry is None:
        return None
    return _with_path(entry, root / relative)


def _with_path(entry: Entry, path: Path) -> Entry:
    return Entry(path, entry.kind, entry.data, entry.size, entry.link, entry.mode, entry.error)


def read_tree(root: Path, relative: str, *, limit: int = 2000) -> list[Entry]:
    """Every non-directory entry below ``root/relative`` (links not followed), by path."""
    found: list[Entry] = []
    pending = [relative]
    while pending and len(found) < limit:
        current = pending.pop()
        with beneath.open_directory(root, current.split("/")) as fd:
            if fd is None:
                continue
            try:
                names = sorted(os.listdir(fd))  # noqa: PTH208 - a descriptor, not a path
            except OSError:
                continue
            for name in names:
                entry = read_entry(name, dir_fd=fd)
                if entry is None:
                    continue
                if entry.kind == "directory":
                    pending.append(f"{current}/{name}")
                else:
                    found.append(_with_path(entry, root / current / name))
    return sorted(found, key=lambda item: item.path)


def inside(path: str | Path, root: str | Path) -> bool:
    """Whether *path* is *root* or below it, compared as normalised strings."""
    normal = os.path.normpath(path)
    base = os.path.normpath(root)
    return normal == base or normal.startswith(base.rstrip("/") + "/")


def lexical_target(link_path: Path, text: str) -> str:
    """Where a link at *link_path* saying *text* points, resolved without the disk."""
    return os.path.normpath(Path(link_path).parent / text)


def shorten(text: str, width: int = 120) -> str:
    """*text* on one line, cut to *width* characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
