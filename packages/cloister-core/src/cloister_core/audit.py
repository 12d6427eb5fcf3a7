"""The audit log: one JSON object per line, shared by every service.

Each record has ``time`` (UTC, ISO 8601 with milliseconds) and ``event`` first, then
the caller's fields. A record is written with a single ``write(2)`` on a descriptor
opened with ``O_APPEND``, so lines from several threads or processes appending to the
same file never interleave. Values that JSON cannot hold (paths, datetimes) are
written as strings.

With a per-cloister directory, a record whose ``cloister`` field names a cloister is
also appended to ``<dir>/<cloister>.log`` (what ``cloister logs`` reads). That field
must be the cloister the service authenticated (its token record), never a name a
request claimed. The second line is best effort: a failure to write it is reported
and never fails the caller, nor the main line (written first).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from cloister_core.errors import CloisterNameError
from cloister_core.names import validate_cloister_name

CLOISTER_FIELD = "cloister"
# A link or a FIFO planted at a cloister's log is refused, not followed or blocked on
# (O_NONBLOCK: opening a FIFO nobody reads fails at once instead of hanging).
_TEE_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds")
    return str(value)


def format_record(event: str, fields: dict[str, Any], now: datetime) -> str:
    """One audit line (with its newline)."""
    stamp = now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    record = {"time": stamp, "event": event}
    record.update(fields)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=_default) + "\n"


def cloister_of(fields: dict[str, Any]) -> str | None:
    """The cloister a record belongs to: its ``cloister`` field, if a valid cloister name."""
    name = fields.get(CLOISTER_FIELD)
    if not isinstance(name, str):
        return None
    try:
        return validate_cloister_name(name)
    except CloisterNameError:
        return None


def append_line(path: Path, data: bytes) -> None:
    """Append *data* to the regular file *path* (created 0600) with one ``write(2)``.

    Refuses (OSError) a symbolic link, a FIFO or anything else that is not a regular file.
    """
    fd = os.open(path, _TEE_FLAGS, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"short write to {path} ({written} of {len(data)} bytes)")
    finally:
        os.close(fd)


class AuditLog:
    """Append audit records to a file, a stream, per-cloister files, or any of them.

    Example::

        log = AuditLog(path=Path("audit.log"), cloister_dir=Path("logs"))
        log.write("proxy.tunnel", cloister="my-api", host="docs.python.org", verdict="allow")
        # also appended to logs/my-api.log
    """

    def __init__(
        self,
        path: Path | None = None,
        *,
        stream: IO[str] | None = None,
        cloister_dir: Path | None = None,
        report: Callable[[str], None] | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._path = path
        self._stream = stream
        self._cloister_dir = cloister_dir
        self._report = report
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._failing: set[str] = set()  # cloisters whose last tee failed (reported once)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if cloister_dir is not None:
            try:
                cloister_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as error:  # reported at the first line that cannot be written
                self._say(f"cannot create {cloister_dir}: {error}")

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def cloister_dir(self) -> Path | None:
        return self._cloister_dir

    def write(self, event: str, /, **fields: Any) -> str:
        """Append one record; returns the line written."""
        line = format_record(event, fields, self._clock())
        data = line.encode("utf-8")
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, data)
            if self._stream is not None:
                self._stream.write(line)
                self._stream.flush()
        if self._cloister_dir is not None:
            name = cloister_of(fields)
            if name is not None:
                self._tee(self._cloister_dir / f"{name}.log", name, data)
        return line

    def _tee(self, path: Path, name: str, data: bytes) -> None:
        try:
            append_line(path, data)
        except OSError as error:
            with self._lock:
                first = name not in self._failing
                self._failing.add(name)
            if first:
                self._say(f"cannot append to {path}: {error}")
            return
        if self._failing:
            with self._lock:
                self._failing.discard(name)

    def _say(self, message: str) -> None:
        if self._report is not None:
            with contextlib.suppress(OSError, ValueError):  # a closed stderr: nobody to tell
                self._report(f"audit: {message}")

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
