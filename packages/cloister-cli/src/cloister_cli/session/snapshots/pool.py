"""Object files between a repository and a snapshot pool, cheaply and without links.

A file is *placed* by the cheapest way that leaves the copy independent of the
original's name: a copy-on-write clone (``FICLONE``: btrfs, XFS; the copy is
independent even of writes to the original), else a hard link (the same inode: a
deleted or rewritten original leaves the link intact, but a write *into* the file
changes both), else a byte copy (another filesystem). Git never writes into an object
file once it is complete.

Both sides are walked with ``O_NOFOLLOW`` from a directory descriptor: the repository's
object directory is the agent's to rearrange (a link planted at ``objects/pack`` must
not make Cloister copy a file of the human's, nor write one at restore), and only
regular files are taken, by the descriptor that was checked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cloister_core import beneath
from cloister_core.snapshots import POOL_FILE

Method = Literal["reflink", "hardlink", "copy"]
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
# A pack is usable once its index is there: git writes the .pack first, the .idx last.
_PACK_NEEDS_INDEX = (".pack", ".rev", ".bitmap", ".mtimes", ".promisor")
DISPLACE_LIMIT = 1 << 30
"""A file moved aside to another filesystem is copied: no more than this."""


def _is_hex(name: str) -> bool:
    return all(char in "0123456789abcdef" for char in name)


@contextlib.contextmanager
def _directory_at(fd: int, name: str) -> Iterator[int | None]:
    try:
        child = beneath.open_dir(name, dir_fd=fd)
    except OSError:
        yield None
        return
    try:
        yield child
    finally:
        os.close(child)


def _regular_names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]


def object_files(objects: Path) -> list[str]:
    """The complete object files under *objects* (git's object directory), as pool names
    (``pack/pack-….pack``, ``ab/cdef…``); links and anything git would not write are
    left out."""
    found: list[str] = []
    try:
        top = beneath.open_dir(objects)
    except OSError:
        return found
    try:
        with os.scandir(top) as entries:
            subdirectories = [
                entry.name
                for entry in entries
                if len(entry.name) == 2
                and _is_hex(entry.name)
                and entry.is_dir(follow_symlinks=False)
            ]
        for name in sorted(subdirectories):
            with _directory_at(top, name) as fd:
                if fd is not None:
                    found += [f"{name}/{item}" for item in sorted(_regular_names(fd))]
        with _directory_at(top, "pack") as fd:
            if fd is not None:
                names = set(_regular_names(fd))
                for item in sorted(names):
                    stem, dot, suffix = item.rpartition(".")
                    if dot and f".{suffix}" in _PACK_NEEDS_INDEX and f"{stem}.idx" not in names:
                        continue
                    found.append(f"pack/{item}")
    finally:
        os.close(top)
    return [name for name in found if POOL_FILE.fullmatch(name)]


@contextlib.contextmanager
def _open_parent(root_fd: int, relative: str, *, create: bool) -> Iterator[tuple[int, str]]:
    """The directory holding *relative* below *root_fd* (made when *create*; a link on
    the way is replaced by a directory), and the file's name."""
    *parts, name = relative.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parts:
            try:
                child = beneath.open_dir(part, dir_fd=fd)
            except OSError as error:
                if not create:
                    raise
                if error.errno == errno.ELOOP or (
                    error.errno == errno.ENOTDIR and _is_link(fd, part)
                ):
                    os.unlink(part, dir_fd=fd)  # a link git never made
                os.mkdir(part, 0o755, dir_fd=fd)
                child = beneath.open_dir(part, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd, name
    finally:
        os.close(fd)


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


@dataclass
class Placer:
    """Places files by the first method that works here, remembering what did not."""

    unsupported: set[Method] = field(default_factory=set)
    used: dict[Method, int] = field(default_factory=dict)

    def place(self, source_fd: int, target_dir: int, name: str) -> Method:
        """*source_fd* (a regular file) as *name* in *target_dir*; an existing regular
        file of that name is kept (names are contents), a link there replaced."""
        for method in ("reflink", "hardlink", "copy"):
            if method in self.unsupported:
                continue
            try:
                self._by(method, source_fd, target_dir, name)
            except OSError as error:
                if error.errno in (errno.EEXIST,):
                    return method
                if method == "copy":
                    raise
                # Not on this filesystem (or between two): the next method, from now on.
                self.unsupported.add(method)
                continue
            self.used[method] = self.used.get(method, 0) + 1
            return method
        raise OSError(errno.ENOTSUP, f"cannot place {name}")

    @staticmethod
    def _by(method: Method, source_fd: int, target_dir: int, name: str) -> None:
        if method == "hardlink":
            # The inode that was opened and checked, not whatever the name is now.
            os.link(f"/proc/self/fd/{source_fd}", name, dst_dir_fd=target_dir)
            return
        temporary = f".{name}.{secrets.token_hex(8)}.tmp"  # unguessable: O_EXCL never fails
        fd = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=target_dir
        )
        try:
            if method == "reflink":
                fcntl.ioctl(fd, FICLONE, source_fd)
            else:
                os.lseek(source_fd, 0, os.SEEK_SET)
                with (
                    open(source_fd, "rb", closefd=False) as reader,
                    open(fd, "wb", closefd=False) as writer,
                ):
                    shutil.copyfileobj(reader, writer, 1024 * 1024)
                os.fsync(fd)
            os.link(temporary, name, src_dir_fd=target_dir, dst_dir_fd=target_dir)
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=target_dir)


def _open_regular(directory_fd: int, relative: str) -> int | None:
    """A descriptor of the regular file *relative* below *directory_fd*, no link followed;
    None for anything else, and for a sparse file (git never writes one; copied, a 2 GB
    hole would cost 2 GB)."""
    try:
        with _open_parent(directory_fd, relative, create=False) as (fd, name):
            source = beneath.open_regular(name, dir_fd=fd)
    except OSError:
        return None
    if beneath.is_sparse(os.fstat(source)):
        os.close(source)
        return None
    return source


def _same_contents(first: int, second: int) -> bool:
    one, other = os.fstat(first), os.fstat(second)
    if (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino):
        return True
    if one.st_size != other.st_size:
        return False
    os.lseek(first, 0, os.SEEK_SET)
    os.lseek(second, 0, os.SEEK_SET)
    while True:
        left, right = os.read(first, 1024 * 1024), os.read(second, 1024 * 1024)
        if left != right:
            return False
        if not left:
            return True


def _present(fd: int, name: str) -> bool | None:
    """True: a regular file is there; False: nothing; None: something else (removed)."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(info.st_mode):
        return True
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=fd)  # a link or a FIFO where an object belongs
    return None


def transfer(
    source: Path,
    target: Path,
    names: Iterable[str],
    placer: Placer,
    *,
    displace: Path | None = None,
    notes: list[str] | None = None,
) -> list[str]:
    """Place the object files *names* of the object directory *source* into *target*
    (created if missing); the names that were placed or already there.

    A name *target* has already is trusted (names are contents), unless *displace* is
    given (a restore, into the agent's repository): then a file of that name with other
    contents is moved there, and the source's placed instead; one that cannot be moved
    there (another filesystem: sparse, or over :data:`DISPLACE_LIMIT`) is removed and
    said in *notes*.
    """
    done: list[str] = []
    target.mkdir(parents=True, exist_ok=True)
    source_fd = beneath.open_dir(source)
    target_fd = beneath.open_dir(target)
    try:
        existing = _existing(target_fd) if displace is None else set()
        for name in names:
            if name in existing:
                done.append(name)
                continue
            file = _open_regular(source_fd, name)
            if file is None:
                continue
            try:
                with _open_parent(target_fd, name, create=True) as (fd, leaf):
                    if _present(fd, leaf) and not _differs(
                        file, fd, leaf, name, displace=displace, notes=notes
                    ):
                        done.append(name)
                        continue
                    placer.place(file, fd, leaf)
            finally:
                os.close(file)
            done.append(name)
    finally:
        os.close(source_fd)
        os.close(target_fd)
    return done


def _differs(
    source: int,
    directory: int,
    leaf: str,
    name: str,
    *,
    displace: Path | None,
    notes: list[str] | None,
) -> bool:
    """Whether the file *leaf* in *directory* is not *source* (then moved into *displace*,
    out of git's way, or removed when it cannot be); never, without *displace*."""
    if displace is None:
        return False
    present = beneath.open_regular(leaf, dir_fd=directory)
    try:
        if _same_contents(source, present):
            return False
        compared = os.fstat(present)
    finally:
        os.close(present)
    try:
        beneath.move_out(directory, leaf, displace / name, expect=compared, limit=DISPLACE_LIMIT)
    except (beneath.TooLargeError, beneath.ChangedError) as error:
        # Object files hold what their names say: one that does not is of no use to git.
        os.unlink(leaf, dir_fd=directory)
        if notes is not None:
            notes.append(f"object file {name} had other contents and was removed ({error})")
    return True


def _existing(fd: int) -> set[str]:
    """The regular files an object directory holds, in pool names (one listing per
    subdirectory, so that an incremental snapshot stats nothing it already has)."""
    found: set[str] = set()
    with os.scandir(fd) as entries:
        directories = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    for directory in directories:
        with _directory_at(fd, directory) as child:
            if child is not None:
                found.update(f"{directory}/{name}" for name in _regular_names(child))
    return found


def prune(pool: Path, needed: set[str]) -> int:
    """Remove the pool files no kept snapshot needs; how many were removed."""
    removed = 0
    try:
        top = beneath.open_dir(pool)
    except OSError:
        return 0
    try:
        for name in sorted(_existing(top) - needed):
            directory, _, leaf = name.partition("/")
            with _directory_at(top, directory) as fd:
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(leaf, dir_fd=fd)
                        removed += 1
    finally:
        os.close(top)
    return removed
