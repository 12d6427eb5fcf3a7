"""The audit log: one JSON object per line, shared by every service.

Each record has ``time`` (UTC, ISO 8601 with milliseconds) and ``event`` first, then
the caller's fields. A record is written with a single ``write(2)`` on a descriptor
opened with ``O_APPEND``, so lines from several threads or processes appending to the
same file never interleave. Values that JSON cannot hold (paths, datetimes) are
written as strings.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self


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


class AuditLog:
    """Append audit records to a file, a stream, or both.

    Example::

        log = AuditLog(path=Path("audit.log"))
        log.write("proxy.tunnel", cloister="my-api", host="docs.python.org", verdict="allow")
    """

    def __init__(
        self,
        path: Path | None = None,
        *,
        stream: IO[str] | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._path = path
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    @property
    def path(self) -> Path | None:
        return self._path

    def write(self, event: str, /, **fields: Any) -> str:
        """Append one record; returns the line written."""
        line = format_record(event, fields, self._clock())
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, line.encode("utf-8"))
            if self._stream is not None:
                self._stream.write(line)
                self._stream.flush()
        return line

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
