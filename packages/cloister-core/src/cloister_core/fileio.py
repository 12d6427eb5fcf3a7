"""Crash-safe file writes and an inter-process lock.

A reader (the proxy reloading a decision file, a human's editor) must only ever see
the old or the new content, never half a file: write a temporary file in the same
directory, flush and fsync it, then rename it over the target and fsync the
directory. Writers that read-modify-write (the decision store) hold an exclusive
``flock`` on a sidecar ``.<name>.lock`` file; the target itself cannot be locked
because the rename replaces it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pydantic import SecretStr


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path,
    data: str | bytes,
    *,
    mode: int = 0o644,
    exclusive: bool = False,
    dir_mode: int = 0o755,
) -> None:
    """Replace *path* with *data* atomically, with permissions *mode*.

    With *exclusive*, raise :class:`FileExistsError` instead of replacing an existing
    file (the check and the creation are one atomic ``link``).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            os.link(temp, path)
            temp.unlink()
        else:
            temp.replace(path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def lock_path(path: Path) -> Path:
    """The sidecar lock file that guards *path*."""
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock for read-modify-write of *path*.

    Works between processes and between threads of one process (each call opens its
    own file description, and ``flock`` locks belong to the description).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_secret(value: SecretStr | None, file: Path | None) -> str | None:
    """A secret given directly or in a file (preferred: it stays out of ``ps`` and
    ``docker inspect``); None when neither is set. Surrounding whitespace is dropped."""
    if value is not None:
        return value.get_secret_value()
    if file is not None:
        return file.read_text(encoding="utf-8").strip()
    return None
