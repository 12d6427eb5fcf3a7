"""Reading the project as hostile: regular files only, digests, ``.dockerignore``, the
scan of a build context, and the context tar sent to Docker (the same set as hashed)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from docker.utils.build import PatternMatcher

from cloister_cli.images.projectimages.model import DOCKERFILE_NAME, Build, Entry, ProjectImageError
from cloister_core import beneath

_CHUNK = 256 * 1024
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextlib.contextmanager
def _open_regular(path: Path) -> Iterator[IO[bytes]]:
    """*path* opened for reading if it is a regular file (never through a link, never a FIFO)."""
    try:
        descriptor = os.open(path, _OPEN_FILE)
    except OSError as error:
        raise ProjectImageError(f"cannot read {path}: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ProjectImageError(f"{path} is not a regular file")
    os.set_blocking(descriptor, True)
    with os.fdopen(descriptor, "rb") as handle:
        yield handle


def read_file(path: Path) -> bytes:
    with _open_regular(path) as handle:
        return handle.read()


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with _open_regular(path) as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _ignore_patterns(context: Path) -> list[str]:
    """``.dockerignore``'s patterns (as the docker SDK reads them), and ``.git`` last."""
    patterns: list[str] = []
    ignore = context / ".dockerignore"
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(ignore.lstat().st_mode):
            lines = read_file(ignore).decode("utf-8", "replace").splitlines()
            patterns = [line.strip() for line in lines if line.strip() and line[0] != "#"]
    return [*patterns, ".git"]  # last: a `!.git/...` of the file cannot bring it back


def _ignored(matcher: PatternMatcher, name: str) -> bool:
    # docker's code matches strings: the stub's PathLike would fail there.
    return bool(matcher.matches(name))  # type: ignore[arg-type]


def _raise(error: OSError) -> None:
    raise error


def _walk(context: Path, matcher: PatternMatcher) -> list[str]:
    """The names ``PatternMatcher.walk`` gives (what Docker would be sent), walked without
    recursion (:func:`beneath.walk`): the agent can nest the context a thousand deep."""
    names: list[str] = []
    for directory, subdirectories, others in beneath.walk(context, onerror=_raise):
        relative = os.path.relpath(directory, context)
        prefix = "" if relative == "." else f"{relative}/"
        names += [prefix + name for name in others if not _ignored(matcher, prefix + name)]
        entered = []
        for name in subdirectories:
            path = prefix + name
            if not _ignored(matcher, path):
                names.append(path)
                entered.append(name)
            elif any(
                pattern.exclusion and pattern.cleaned_pattern.startswith(path)
                for pattern in matcher.patterns
            ):
                entered.append(name)  # as docker: a `!dir/file` may bring back some of it
        subdirectories[:] = entered
    return names


def scan(context: Path) -> tuple[Entry, ...]:
    """Every path of *context* Docker would be sent, in sorted order, with its digest."""
    matcher = PatternMatcher(_ignore_patterns(context))
    entries: list[Entry] = []
    try:
        names = sorted(_walk(context, matcher))
    except OSError as error:
        raise ProjectImageError(f"cannot read the build context {context}: {error}") from None
    for name in names:
        path = context / name
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue  # gone while we walked
        except OSError as error:  # a path too long for the kernel, nested that deep
            raise ProjectImageError(f"cannot read {path}: {error.strerror}") from None
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            entries.append(Entry(name, "dir", mode, ""))
        elif stat.S_ISLNK(info.st_mode):
            entries.append(Entry(name, "link", mode, str(path.readlink())))
        elif stat.S_ISREG(info.st_mode):
            entries.append(Entry(name, "file", mode, _file_digest(path)))
        # FIFOs, sockets and devices are not sent (the docker SDK skips sockets too).
    return tuple(entries)


def context_tar(build: Build, into: IO[bytes]) -> None:
    """Write *build*'s context to *into*: the scanned entries, generated files, Dockerfile."""
    with tarfile.open(fileobj=into, mode="w") as archive:
        if build.context is not None:
            _add_entries(archive, build.context, "", build.entries)
        for name, folder, entries in build.folders:
            _add_entries(archive, folder, f"{name}/", entries)
        for directory in build.directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for name, content in (*build.generated, (DOCKERFILE_NAME, build.dockerfile)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o755
            archive.addfile(info, io.BytesIO(content))
    into.seek(0)


def _add_entries(
    archive: tarfile.TarFile, context: Path, prefix: str, entries: tuple[Entry, ...]
) -> None:
    for entry in entries:
        if entry.name == DOCKERFILE_NAME and not prefix:
            continue
        path = context / entry.name
        info = tarfile.TarInfo(prefix + entry.name)
        info.mode = entry.mode
        if entry.kind == "dir":
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        elif entry.kind == "link":
            info.type = tarfile.SYMTYPE
            info.linkname = entry.digest
            archive.addfile(info)
        else:
            with _open_regular(path) as handle:
                status = os.fstat(handle.fileno())
                info.size = status.st_size
                info.mtime = int(status.st_mtime)
                archive.addfile(info, handle)
