"""Reading the project as hostile: regular files only, digests, ``.dockerignore``, the
scan of a build context, and the context tar sent to Docker (the same set as hashed).

A plan may scan a context as a start will find it once it has written its own files
there (the Features' lock file): :func:`scan`'s *overlay*, each one a regular file of
:data:`OVERLAY_MODE`, as :func:`cloister_core.beneath.replace_file` writes it. A build
scans again what is there then, and what it sends is what it hashed: each file is hashed
again while it goes into the tar, and the build stops when one is not as it was scanned.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from docker.utils.build import PatternMatcher

from cloister_cli.images.projectimages.model import DOCKERFILE_NAME, Build, Entry, ProjectImageError
from cloister_core import beneath

_CHUNK = 256 * 1024
OVERLAY_MODE = 0o644  # the mode of a file a start writes into the project


@contextlib.contextmanager
def _open_regular(path: Path) -> Iterator[IO[bytes]]:
    """*path* opened for reading if it is a regular file (never through a link, never a FIFO)."""
    try:
        descriptor = beneath.open_regular(path)
    except beneath.NotRegularError:
        raise ProjectImageError(f"{path} is not a regular file") from None
    except OSError as error:
        raise ProjectImageError(f"cannot read {path}: {error.strerror}") from None
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


def _walk(context: Path, matcher: PatternMatcher, overlay: Mapping[str, bytes]) -> list[str]:
    """The names ``PatternMatcher.walk`` gives (what Docker would be sent), walked without
    recursion (:func:`beneath.walk`): the agent can nest the context a thousand deep.
    The *overlay*'s names (relative to *context*) are files of the directory holding them."""
    names: list[str] = []
    for directory, subdirectories, others in beneath.walk(context, onerror=_raise):
        relative = os.path.relpath(directory, context)
        prefix = "" if relative == "." else f"{relative}/"
        present = {*others, *subdirectories}
        others += [
            name
            for name in (each.rpartition("/")[2] for each in overlay)
            if prefix + name in overlay and name not in present
        ]
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


def scan(context: Path, overlay: Mapping[Path, bytes] | None = None) -> tuple[Entry, ...]:
    """Every path of *context* Docker would be sent, in sorted order, with its digest;
    with the files of *overlay* (absolute paths: those outside *context* do not count) as
    they will be once written."""
    matcher = PatternMatcher(_ignore_patterns(context))
    written = _relative(overlay or {}, context)
    entries: list[Entry] = []
    try:
        names = sorted(_walk(context, matcher, written))
    except OSError as error:
        raise ProjectImageError(f"cannot read the build context {context}: {error}") from None
    for name in names:
        path = context / name
        try:
            info = path.lstat()
        except FileNotFoundError:
            if name in written:
                entries.append(_written(name, written[name]))
            continue  # gone while we walked
        except OSError as error:  # a path too long for the kernel, nested that deep
            raise ProjectImageError(f"cannot read {path}: {error.strerror}") from None
        mode = stat.S_IMODE(info.st_mode)
        if name in written and not stat.S_ISDIR(info.st_mode):
            entries.append(_written(name, written[name]))
        elif stat.S_ISDIR(info.st_mode):
            entries.append(Entry(name, "dir", mode, ""))
        elif stat.S_ISLNK(info.st_mode):
            entries.append(Entry(name, "link", mode, str(path.readlink())))
        elif stat.S_ISREG(info.st_mode):
            entries.append(Entry(name, "file", mode, _file_digest(path)))
        # FIFOs, sockets and devices are not sent (the docker SDK skips sockets too).
    return tuple(entries)


def _relative(overlay: Mapping[Path, bytes], context: Path) -> dict[str, bytes]:
    """The files of *overlay* inside *context*, by their name relative to it."""
    base = Path(os.path.normpath(context.absolute()))
    found: dict[str, bytes] = {}
    for path, content in overlay.items():
        absolute = Path(os.path.normpath(path.absolute()))
        if absolute != base and absolute.is_relative_to(base):
            found[absolute.relative_to(base).as_posix()] = content
    return found


def _written(name: str, content: bytes) -> Entry:
    return Entry(name, "file", OVERLAY_MODE, hashlib.sha256(content).hexdigest())


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
            _add_file(archive, info, path, entry.digest)


class _Hashing:
    """A file read for the tar, hashed as it is read."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data


def _add_file(archive: tarfile.TarFile, info: tarfile.TarInfo, path: Path, digest: str) -> None:
    """The file at *path* into *archive*, provided its bytes are those the scan hashed
    (*digest*): the agent may write the context between the scan, whose digests make
    the image's key, and the build, which reads it again. Hashed while it is added: what
    is sent is what was checked."""
    changed = ProjectImageError(
        f"the build context's file {str(path)!r} changed since it was read for the image's"
        " key: nothing was built; build again"
    )
    with _open_regular(path) as handle:
        status = os.fstat(handle.fileno())
        info.size = status.st_size
        info.mtime = int(status.st_mtime)
        reader = _Hashing(handle)
        try:
            archive.addfile(info, reader)
        except OSError:
            if reader.size < info.size:  # shortened while it was read
                raise changed from None
            raise
    if reader.digest.hexdigest() != digest:
        raise changed
