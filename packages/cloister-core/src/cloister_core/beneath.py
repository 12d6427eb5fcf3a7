"""File operations below a directory the agent can rearrange, never following a link.

The guard acts on paths inside a project's git directory and work tree while the agent
runs: between the moment it decides and the moment it acts, the agent can replace a
directory on the way with a symbolic link to somewhere of the human's. So every
operation walks from a directory the agent cannot replace (the git directory is a
mount point in the cloister; the work tree is its root), one component at a time,
with ``O_NOFOLLOW``, and acts relative to the last directory's descriptor.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def parent_of(root: Path, relative: str) -> Iterator[tuple[int, str]]:
    """A descriptor of the directory holding *relative* (below *root*) and its name.

    Raises :class:`OSError` (``ELOOP``, ``ENOTDIR``, ``ENOENT``) when a directory on
    the way is a link, not a directory, or gone.
    """
    parts = [part for part in PurePosixPath(relative).parts if part not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(f"not a path below {root}: {relative!r}")
    fd = os.open(root, _DIRECTORY)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        yield fd, parts[-1]
    finally:
        os.close(fd)


def lstat_below(root: Path, relative: str) -> os.stat_result | None:
    """``lstat`` of *relative* below *root*; None when it, or the way to it, is not there."""
    try:
        with parent_of(root, relative) as (fd, name):
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None


def readlink_below(root: Path, relative: str) -> str | None:
    """What the link *relative* below *root* says; None when it is no link."""
    try:
        with parent_of(root, relative) as (fd, name):
            return os.readlink(name, dir_fd=fd)
    except OSError:
        return None


def unlink_special(root: Path, relative: str) -> str | None:
    """Remove *relative* if it is a symbolic link or a FIFO; what it pointed at (or "")."""
    with parent_of(root, relative) as (fd, name):
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not (stat.S_ISLNK(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
            return None
        target = os.readlink(name, dir_fd=fd) if stat.S_ISLNK(info.st_mode) else ""
        os.unlink(name, dir_fd=fd)
        return target


def replace_file(root: Path, relative: str, content: str | bytes, mode: int = 0o644) -> None:
    """Replace *relative* with a regular file holding *content* (atomic rename)."""
    payload = content.encode("utf-8") if isinstance(content, str) else content
    with parent_of(root, relative) as (fd, name):
        temporary = f".{name}.{secrets.token_hex(4)}.tmp"
        file = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=fd,
        )
        try:
            os.fchmod(file, mode)  # whatever the umask
            view = memoryview(payload)
            while view:
                view = view[os.write(file, view) :]
            os.fsync(file)
        except BaseException:
            os.close(file)
            os.unlink(temporary, dir_fd=fd)
            raise
        os.close(file)
        os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)


def make_directories(root: Path, relative: str, mode: int = 0o700) -> None:
    """Create the directories of *relative* below *root* one by one, following no link.

    A component that exists as anything but a real directory (a link the agent put
    there) raises :class:`OSError`.
    """
    parts = [part for part in PurePosixPath(relative).parts if part not in ("", ".")]
    if ".." in parts:
        raise OSError(f"not a path below {root}: {relative!r}")
    fd = os.open(root, _DIRECTORY)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, mode, dir_fd=fd)
            next_fd = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    finally:
        os.close(fd)


# -- one file the agent may have written -------------------------------------------------
#
# The one way such a file is opened: its last component never followed (the directories on
# the way are the caller's to enter, from a descriptor: :func:`parent_of`, :func:`open_dir`),
# never blocking (a FIFO planted there must not hang the host), closed on exec; then checked,
# before a byte is read, to be a regular file, and the very file ``lstat`` saw when the
# caller looked first (a swap in between is never read); and read only as far as a bound.

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


class NotRegularError(OSError):
    """What was opened is no regular file (a FIFO, a directory)."""


class TooLargeError(OSError):
    """The file holds more than :func:`read_file_bounded` was allowed to read."""


class ChangedError(OSError):
    """What was opened is not the file ``lstat`` saw: it was swapped meanwhile."""


class SparseError(TooLargeError):
    """The file is mostly holes: copied, each hole would be written out in full."""


SPARSE_MINIMUM = 1024 * 1024
"""Smaller files may look sparse by a block's rounding (or be stored inline)."""


def is_sparse(info: os.stat_result) -> bool:
    """Whether the file *info* describes has less than half its size on disk (over
    :data:`SPARSE_MINIMUM`): no tool Cloister copies for writes one, an agent's
    ``truncate -s 1T`` does."""
    return info.st_size > SPARSE_MINIMUM and info.st_blocks * 512 < info.st_size // 2


def open_dir(name: str | Path, *, dir_fd: int | None = None) -> int:
    """A descriptor of the directory *name* (in *dir_fd* when given), not through a link.

    Raises :class:`OSError` (``ELOOP`` or ``ENOTDIR`` for a link, ``ENOENT``); the caller
    closes it.
    """
    return os.open(name, _DIRECTORY, dir_fd=dir_fd)


def open_regular(
    name: str | Path,
    *,
    dir_fd: int | None = None,
    expect: os.stat_result | None = None,
    follow_links: bool = False,
) -> int:
    """A descriptor of the regular file *name* (in *dir_fd* when given), opened as above.

    *expect* is what ``lstat`` said of *name*: another file there now raises
    :class:`ChangedError`. Raises :class:`OSError` (``ELOOP`` for a link, unless
    *follow_links*) and :class:`NotRegularError`. The caller closes the descriptor; it is
    non-blocking, which a regular file ignores.
    """
    flags = _READ & ~os.O_NOFOLLOW if follow_links else _READ
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if expect is not None and (info.st_dev, info.st_ino) != (expect.st_dev, expect.st_ino):
            raise ChangedError(errno.ESTALE, "changed while being read", os.fspath(name))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularError(f"{os.fspath(name)} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_prefix(fd: int, limit: int) -> bytes:
    """At most *limit* bytes from *fd*'s position on."""
    chunks: list[bytes] = []
    left = limit
    while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_at(
    dir_fd: int | None, name: str | Path, limit: int, *, expect: os.stat_result | None = None
) -> tuple[bytes, os.stat_result]:
    """At most *limit* bytes of the regular file *name* in *dir_fd* (:func:`open_regular`),
    and its ``fstat`` (whose size tells whether there was more)."""
    fd = open_regular(name, dir_fd=dir_fd, expect=expect)
    try:
        return read_prefix(fd, limit), os.fstat(fd)
    finally:
        os.close(fd)


def read_regular(root: Path, relative: str, limit: int = 64 * 1024) -> str | None:
    """The text of *relative* when it is a regular file (no link followed), else None."""
    data = read_regular_bytes(root, relative, limit)
    return data.decode("utf-8", "replace") if data is not None else None


def read_regular_bytes(root: Path, relative: str, limit: int) -> bytes | None:
    """At most *limit* bytes of *relative* when it is a regular file (no link followed)."""
    try:
        with parent_of(root, relative) as (fd, name):
            return read_at(fd, name, limit)[0]
    except OSError:
        return None


def read_file_bounded(path: Path, limit: int, *, follow_links: bool = True) -> bytes:
    """The content of *path*, a regular file of at most *limit* bytes: the one read of a
    file the agent may have written, by its path (:func:`read_regular_bytes` reads one
    beneath a root). Raises :class:`OSError` (ELOOP for a link when not *follow_links*),
    :class:`NotRegularError` or :class:`TooLargeError`."""
    descriptor = open_regular(path, follow_links=follow_links)
    try:
        data = read_prefix(descriptor, limit + 1)
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise TooLargeError(f"{path} is over {limit} bytes")
    return data


def move_out(
    dir_fd: int, name: str, destination: Path, *, expect: os.stat_result, limit: int
) -> None:
    """Move *name* (in *dir_fd*) to *destination*, a path of Cloister's own (its directory
    is made). *expect* is what the caller's ``lstat`` (or ``fstat``) said of *name*:
    another entry there now raises :class:`ChangedError`, nothing moved.

    Renamed when it can be; on another filesystem, a regular file is copied (opened as
    :func:`open_regular` does, at most *limit* bytes) and unlinked, a link or a FIFO
    made again there (neither holds more than its link text), and
    :class:`SparseError`, :class:`TooLargeError` or :class:`NotRegularError` (a
    directory, a socket, a device) is raised for the rest, the entry left where it is.
    """
    _check_same(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), expect, name)
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(name, destination, src_dir_fd=dir_fd)
        return
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
    if stat.S_ISLNK(expect.st_mode):
        text = os.readlink(name, dir_fd=dir_fd)
        _check_same(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), expect, name)
        destination.symlink_to(text)
    elif stat.S_ISFIFO(expect.st_mode):
        os.mkfifo(destination, stat.S_IMODE(expect.st_mode) & 0o777)
    elif stat.S_ISREG(expect.st_mode):
        _copy_out(dir_fd, name, destination, expect, limit)
    else:
        raise NotRegularError(f"{name!r} is no file, link or FIFO: not moved to another filesystem")
    os.unlink(name, dir_fd=dir_fd)


def _copy_out(
    dir_fd: int, name: str, destination: Path, expect: os.stat_result, limit: int
) -> None:
    source = open_regular(name, dir_fd=dir_fd, expect=expect)
    try:
        info = os.fstat(source)
        if is_sparse(info):
            raise SparseError(
                f"{name!r} is a sparse file of {info.st_size} bytes ({info.st_blocks * 512}"
                " on disk): not copied to another filesystem"
            )
        if info.st_size > limit:
            raise TooLargeError(
                f"{name!r} is {info.st_size} bytes, over {limit}: not copied to another filesystem"
            )
        writer = destination.open("xb")
        try:
            with writer:
                _copy_at_most(source, writer, limit + 1)  # bounded even if it grows meanwhile
                if writer.tell() > limit:
                    raise TooLargeError(
                        f"{name!r} grew over {limit} bytes: not copied to another filesystem"
                    )
        except BaseException:
            destination.unlink(missing_ok=True)  # a part is no copy
            raise
    finally:
        os.close(source)


def _copy_at_most(source: int, writer: BinaryIO, limit: int) -> None:
    left = limit
    while left > 0 and (chunk := os.read(source, min(_CHUNK, left))):
        writer.write(chunk)
        left -= len(chunk)


def _check_same(info: os.stat_result, expect: os.stat_result, name: str) -> None:
    if (info.st_dev, info.st_ino) != (expect.st_dev, expect.st_ino):
        raise ChangedError(f"{name!r} changed since it was looked at")


def proc_path(fd: int, name: str) -> Path:
    """A path naming *name* in the directory *fd* without a walk through links
    (``/proc/self/fd``), for the tools that take only paths."""
    return Path(f"/proc/self/fd/{fd}") / name


def unlink_regular(root: Path, relative: str) -> bool:
    """Remove *relative* if it is a regular file; whether it was."""
    with parent_of(root, relative) as (fd, name):
        if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            return False
        os.unlink(name, dir_fd=fd)
        return True


def is_real_directory(root: Path, relative: str) -> bool:
    """Whether *relative* below *root* is a directory reached through no link."""
    info = lstat_below(root, relative)
    return info is not None and stat.S_ISDIR(info.st_mode)


def remove_if_empty(root: Path, relative: str) -> bool:
    """Remove an empty directory or an empty regular file; whether one was removed."""
    try:
        with parent_of(root, relative) as (fd, name):
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                os.rmdir(name, dir_fd=fd)  # fails unless empty
            elif stat.S_ISREG(info.st_mode) and info.st_size == 0:
                os.unlink(name, dir_fd=fd)
            else:
                return False
    except OSError:
        return False
    return True


@contextlib.contextmanager
def open_directory(root: Path, parts: Sequence[str] = ()) -> Iterator[int | None]:
    """A descriptor of ``root/parts…``, each part entered without following links.

    Yields None when a part is missing, not a directory, or a symbolic link: what git
    would reach through a link there is reported elsewhere, never read here.
    """
    try:
        fd = os.open(root, _DIRECTORY)
    except OSError:
        yield None
        return
    try:
        for part in parts:
            try:
                child = os.open(part, _DIRECTORY, dir_fd=fd)
            except OSError:
                yield None
                return
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


# -- whole trees ------------------------------------------------------------------------
#
# ``os.walk`` and ``shutil.rmtree`` recurse on Python's stack, so a tree the agent nests a
# thousand levels deep stops them (RecursionError), and ``os.fwalk`` keeps a descriptor
# open per level. These hold the top and the current directory open, whatever the depth:
# a step down opens the child relative to its parent with ``O_NOFOLLOW``; a step up takes
# ``..`` when it is still the directory recorded on the way down, and walks down again
# from the top otherwise (the agent may have moved things meanwhile).


@dataclass(slots=True)
class _Level:
    """A directory on the way down: its name in the one above, which directory it was,
    where its path ends (:func:`fwalk`), and the subdirectories still to visit, last first."""

    name: str
    identity: tuple[int, int]
    end: int = 0
    pending: list[str] | None = None


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _open_same(dir_fd: int, level: _Level) -> int | None:
    """*level* opened again from *dir_fd*; None when that name is another directory now."""
    try:
        fd = os.open(level.name, _DIRECTORY, dir_fd=dir_fd)
    except OSError:
        return None
    if _identity(fd) != level.identity:
        os.close(fd)
        return None
    return fd


def _descend(base: int, levels: list[_Level]) -> int | None:
    """A descriptor of the deepest of *levels* still reached from *base* by their names;
    *levels* is cut after it. None (and *levels* emptied) when not even the first is."""
    current = base
    for depth, level in enumerate(levels):
        below = _open_same(current, level)
        if below is None:
            del levels[depth:]
            return current if current != base else None
        if current != base:
            os.close(current)
        current = below
    return current if current != base else None


def _climb(fd: int, base: int, levels: list[_Level]) -> int | None:
    """From *fd* (a subdirectory of ``levels[-1]``, closed here) up to ``levels[-1]``.

    ``..`` is that directory unless the agent moved things; then the way is walked again
    from *base* (see :func:`_descend`).
    """
    try:
        up = os.open("..", _DIRECTORY, dir_fd=fd)
    except OSError:
        up = None
    finally:
        os.close(fd)
    if up is not None:
        if _identity(up) == levels[-1].identity:
            return up
        os.close(up)
    return _descend(base, levels)


def _is_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _open_listed(
    dir_fd: int, name: str, where: str, onerror: Callable[[OSError], object] | None
) -> tuple[int, list[str], list[str]] | None:
    """*name* in *dir_fd* opened (no link followed) and listed whole: its descriptor, its
    subdirectories and the rest. None after telling *onerror* when that fails."""
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=dir_fd)
    except OSError as error:
        if onerror is not None:
            onerror(OSError(error.errno, error.strerror, where))
        return None
    directories: list[str] = []
    others: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                (directories if _is_directory(entry) else others).append(entry.name)
    except OSError as error:
        os.close(fd)
        if onerror is not None:
            onerror(OSError(error.errno, error.strerror, where))
        return None
    return fd, directories, others


def fwalk(
    root: Path, *, onerror: Callable[[OSError], object] | None = None
) -> Iterator[tuple[str, list[str], list[str], int]]:
    """:func:`walk`, with a descriptor of each directory (as ``os.fwalk`` gives), valid
    until the next step: acting relative to it reaches that directory whatever its path
    is, or how long, by then."""
    top = os.fspath(root)
    try:
        base = os.open(root, _DIRECTORY)
    except OSError as error:
        if onerror is not None:
            onerror(error)
        return
    levels: list[_Level] = []
    fd = base  # the directory of levels[-1]; base itself only before the first step
    path = top
    step: tuple[str, str] | None = (".", top)  # the directory to enter next: name in fd, path
    try:
        while True:
            if step is not None:
                name, where = step
                step = None
                opened = _open_listed(fd, name, where, onerror)
                if opened is not None:
                    child, directories, others = opened
                    if fd != base:
                        os.close(fd)
                    fd, path = child, where
                    levels.append(_Level(name, _identity(fd), len(path)))
                    yield path, directories, others, fd
                    # As os.walk: what the caller left in the list is visited, in order.
                    levels[-1].pending = directories[::-1]
            if not levels:
                return
            pending = levels[-1].pending
            if pending:
                name = pending.pop()
                step = (name, os.path.join(path, name))  # noqa: PTH118 - os.walk's strings
                continue
            levels.pop()
            if not levels:
                return
            up = _climb(fd, base, levels)
            fd = base  # closed by _climb
            if up is None:
                return
            fd, path = up, path[: levels[-1].end]  # a directory's path begins its children's
    finally:
        if fd != base:
            os.close(fd)
        os.close(base)


def walk(
    root: Path, *, onerror: Callable[[OSError], object] | None = None
) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)`` top-down, never following a link, however deep the tree.

    A link to a directory is among the other names, and so is *root* when it is a link
    (nothing is walked). Subdirectories the caller removes from the list it is given are
    not visited. A directory that cannot be opened or listed is skipped, after
    *onerror* is told.
    """
    for path, directories, others, _ in fwalk(root, onerror=onerror):
        yield path, directories, others


def _loosen(fd: int, *, by_path: bool = False) -> bool:
    """Make the directory *fd* 0700 when it is ours and locked; whether it was changed.

    An ``O_PATH`` descriptor (*by_path*) cannot be ``fchmod``-ed: its ``/proc`` name is,
    and that reaches the directory it was opened on, never a link.
    """
    try:
        info = os.fstat(fd)
        if (
            not stat.S_ISDIR(info.st_mode)
            or info.st_uid != os.geteuid()
            or stat.S_IMODE(info.st_mode) & 0o700 == 0o700
        ):
            return False
        if by_path:
            os.chmod(f"/proc/self/fd/{fd}", 0o700)  # noqa: PTH101 - a descriptor's name
        else:
            os.fchmod(fd, 0o700)
    except OSError:
        return False
    return True


class _Removal:
    """One :func:`remove_tree`: the way down from the directory holding the tree, and
    the first failure, reported when the tree is still there at the end."""

    def __init__(self, base: int, top: Path) -> None:
        self.base = base  # the directory holding the tree: the caller's, never loosened
        self.top = top
        self.levels: list[_Level] = []
        self.problem: OSError | None = None

    def note(self, error: OSError, name: str) -> None:
        if self.problem is None:
            parts = [level.name for level in self.levels] + ([name] if name else [])
            where = self.top.parent.joinpath(*parts)
            self.problem = OSError(error.errno, error.strerror, str(where))

    def loosen(self, dir_fd: int, name: str) -> bool:
        """Make *dir_fd* (unless it is the caller's) and its subdirectory *name* 0700."""
        changed = dir_fd != self.base and _loosen(dir_fd)
        try:
            handle = os.open(name, os.O_PATH | _DIRECTORY, dir_fd=dir_fd)
        except OSError:
            return changed
        try:
            return _loosen(handle, by_path=True) or changed
        finally:
            os.close(handle)

    def enter(self, dir_fd: int, name: str) -> int | None:
        """*name* in *dir_fd* opened as a directory, or None: a link or file there now is
        unlinked, never entered."""
        loosened = False
        while True:
            try:
                return os.open(name, _DIRECTORY, dir_fd=dir_fd)
            except FileNotFoundError:
                return None
            except PermissionError as error:
                if loosened or not self.loosen(dir_fd, name):
                    self.note(error, name)
                    return None
                loosened = True
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    self.unlink(dir_fd, name)
                else:
                    self.note(error, name)
                return None

    def unlink(self, dir_fd: int, name: str) -> bool:
        """Unlink *name* in *dir_fd*; whether it turned out to be a directory instead."""
        loosened = False
        while True:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return False
            except IsADirectoryError:
                return True
            except PermissionError as error:  # the agent made its directory read-only
                if loosened or dir_fd == self.base or not _loosen(dir_fd):
                    self.note(error, name)
                    return False
                loosened = True
                continue
            except OSError as error:
                self.note(error, name)
            return False

    def rmdir(self, dir_fd: int, name: str) -> None:
        loosened = False
        while True:
            try:
                os.rmdir(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return
            except NotADirectoryError:
                self.unlink(dir_fd, name)  # a link put there meanwhile
            except PermissionError as error:
                if loosened or dir_fd == self.base or not _loosen(dir_fd):
                    self.note(error, name)
                    return
                loosened = True
                continue
            except OSError as error:
                self.note(error, name)
            return

    def clear(self, fd: int) -> list[str]:
        """Unlink everything in *fd* but its subdirectories; those, last first."""
        try:
            with os.scandir(fd) as entries:
                listed = [(entry.name, _is_directory(entry)) for entry in entries]
        except OSError as error:
            self.note(error, "")
            return []
        subdirectories = []
        for name, directory in listed:
            if directory or self.unlink(fd, name):
                subdirectories.append(name)
        subdirectories.reverse()
        return subdirectories

    def run(self) -> None:
        name = self.top.name
        try:
            info = os.stat(name, dir_fd=self.base, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            self.unlink(self.base, name)
            return
        current = self.enter(self.base, name)
        try:
            if current is not None:
                self.levels.append(_Level(name, _identity(current)))
            while current is not None:
                level = self.levels[-1]
                if level.pending is None:
                    level.pending = self.clear(current)
                if level.pending:
                    child_name = level.pending.pop()
                    child = self.enter(current, child_name)
                    if child is not None:
                        os.close(current)
                        current = child
                        self.levels.append(_Level(child_name, _identity(child)))
                    continue
                done = self.levels.pop()
                if not self.levels:
                    os.close(current)
                    current = None
                    self.rmdir(self.base, done.name)
                    return
                depth = len(self.levels)
                current = _climb(current, self.base, self.levels)
                if current is None or len(self.levels) < depth:
                    # Moved while it was being removed: what is left, if anything, is
                    # reported by the check at the end.
                    self.note(OSError(errno.EBUSY, "moved while it was being removed"), "")
                    continue
                self.rmdir(current, done.name)
        finally:
            if current is not None:
                os.close(current)


def remove_tree(path: Path) -> None:
    """``shutil.rmtree(path)`` that neither recurses nor follows a link, whatever the agent
    built there.

    A link (*path* itself included) is unlinked, never what it points to. Every step is
    relative to a directory opened with ``O_NOFOLLOW``, so a directory swapped for a link
    meanwhile is never entered. A directory of ours the agent made read-only is made 0700
    first. Whatever can be removed is; :class:`OSError` (the first failure) only when
    *path* is still there at the end. A missing *path* is fine.
    """
    top = Path(os.path.abspath(path))  # noqa: PTH100 - resolve() would follow a link at path
    if top.parent == top:
        raise OSError(errno.EINVAL, "not a tree one can remove", str(top))
    try:
        base = os.open(top.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        removal = _Removal(base, top)
        removal.run()
        try:
            os.stat(top.name, dir_fd=base, follow_symlinks=False)
        except FileNotFoundError:
            return
        raise removal.problem or OSError(errno.ENOTEMPTY, "could not be removed", str(top))
    finally:
        os.close(base)
