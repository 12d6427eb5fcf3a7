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
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

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


def read_regular(root: Path, relative: str, limit: int = 64 * 1024) -> str | None:
    """The text of *relative* when it is a regular file (no link followed), else None."""
    data = read_regular_bytes(root, relative, limit)
    return data.decode("utf-8", "replace") if data is not None else None


def read_regular_bytes(root: Path, relative: str, limit: int) -> bytes | None:
    """At most *limit* bytes of *relative* when it is a regular file (no link followed)."""
    try:
        with parent_of(root, relative) as (fd, name):
            file = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd
            )
            try:
                if not stat.S_ISREG(os.fstat(file).st_mode):
                    return None
                chunks = []
                remaining = limit
                while remaining > 0 and (chunk := os.read(file, min(remaining, 1 << 20))):
                    chunks.append(chunk)
                    remaining -= len(chunk)
                return b"".join(chunks)
            finally:
                os.close(file)
    except OSError:
        return None


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
