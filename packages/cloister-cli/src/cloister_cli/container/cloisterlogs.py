"""A cloister's own log, ``<data>/logs/<cloister>.log``, read for ``cloister logs``.

The guardian's services append there every line of the audit log that is charged to
the cloister (its token, never a name a request claimed; see
:mod:`cloister_core.audit`): proxy requests, credential gateway calls, hostexec
requests, decisions and outcomes, the approval hub's decisions, the git guard's
actions. The file outlives the cloister, so a stopped one's log still reads.

Everything in it is hostile input: a line holds the host names, commands and reasons
the agent chose, and a service the agent broke could write anything. So the file is
opened without following a link (nor blocking on a FIFO), a line longer than
:data:`MAX_LINE` or not a JSON record is skipped, and what is shown is escaped
(:func:`cloister_core.printable.printable`; JSON with every non-ASCII character
escaped).
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import IO, Any

from cloister_core import beneath
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable
from cloister_core.sessions import deepest_worktree, list_sessions

MAX_LINE = 1024 * 1024  # bytes; an audit line is a few hundred
BLOCK = 64 * 1024
POLL_SECONDS = 0.25

Record = dict[str, Any]


class LogsError(CloisterError):
    """A log that cannot be shown as asked."""


# -- which cloister ------------------------------------------------------------------------


def is_known(paths: CloisterPaths, name: str) -> bool:
    """Whether *name* is a cloister this machine knows: a log, a session record or a token."""
    return any(
        os.path.lexists(path)
        for path in (paths.cloister_log(name), paths.session_file(name), paths.token_file(name))
    )


def cloister_for_directory(paths: CloisterPaths, directory: Path) -> str | None:
    """The cloister (running or stopped) whose work tree is the deepest one holding
    *directory*, from the session records (no Docker engine needed)."""
    return deepest_worktree(
        directory, ((session.worktree, session.cloister) for session in list_sessions(paths))
    )


# -- --since -------------------------------------------------------------------------------

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str, now: datetime) -> datetime:
    """``10m``, ``2h30m``, ``1d`` (that long before *now*) or an ISO time (a time without
    a zone is local time; a date alone is its midnight) → an aware datetime."""
    value = text.strip()
    position, seconds = 0, 0.0
    for match in _PART.finditer(value):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if value and position == len(value):
        return now - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise LogsError(
            f"--since {text!r} is neither a duration (30s, 10m, 2h, 1d) nor a time"
            " (2026-05-01, 2026-05-01T14:00, 2026-05-01T14:00+02:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.astimezone()


# -- reading -------------------------------------------------------------------------------


def open_log(path: Path) -> IO[bytes] | None:
    """*path* opened for reading, or None if there is none; never through a link."""
    try:
        fd = beneath.open_regular(path)
    except FileNotFoundError:
        return None
    except beneath.NotRegularError:
        raise LogsError(f"{path} is not a regular file; not read") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LogsError(f"{path} is a symbolic link; not followed") from None
        raise LogsError(f"cannot read {path}: {error.strerror}") from None
    return os.fdopen(fd, "rb")


def parse_line(raw: bytes) -> Record | None:
    """One audit record, or None for a line that is not one."""
    if len(raw) > MAX_LINE:
        return None
    try:
        record = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("event"), str)
        or record_time(record) is None
    ):
        return None
    return record


def record_time(record: Record) -> datetime | None:
    value = record.get("time")
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _lines(file: IO[bytes]) -> Iterator[bytes]:
    """Complete lines from the file's position (an unfinished last one is left unread);
    a line past MAX_LINE is returned cut, so that it is skipped without being held."""
    while True:
        line = file.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE:
            while line and not line.endswith(b"\n"):  # drop the rest of it
                line = file.readline(BLOCK)
            yield b"\xff" * (MAX_LINE + 1)
            continue
        if not line.endswith(b"\n"):
            file.seek(-len(line), os.SEEK_CUR)
            return
        yield line


def _start_of_last(file: IO[bytes], count: int) -> int:
    """The offset where the last *count* lines of *file* begin (reading backwards)."""
    end = file.seek(0, os.SEEK_END)
    position, newlines = end, 0
    # The file's last byte is normally a newline: it ends the last line, it does not
    # start another.
    if end:
        file.seek(end - 1)
        if file.read(1) == b"\n":
            position = end - 1
    while position > 0:
        size = min(BLOCK, position)
        file.seek(position - size)
        block = file.read(size)
        for index in range(len(block) - 1, -1, -1):
            if block[index] == 0x0A:
                newlines += 1
                if newlines == count:
                    return position - size + index + 1
        position -= size
    return 0


@dataclass(frozen=True, slots=True)
class Shown:
    """The records read, and where the next new line will start (for ``--follow``)."""

    records: list[Record]
    offset: int
    identity: tuple[int, int] | None  # (st_dev, st_ino) of the file read


def read_log(path: Path, *, since: datetime | None = None, tail: int | None = None) -> Shown:
    """The records of *path*: the last *tail* ones, and none before *since*."""
    file = open_log(path)
    if file is None:
        return Shown([], 0, None)
    with file:
        info = os.fstat(file.fileno())
        if tail == 0:
            file.seek(0, os.SEEK_END)
        elif tail is not None:
            file.seek(_start_of_last(file, tail))
        kept: deque[Record] = deque(maxlen=tail)
        for raw in _lines(file):
            record = parse_line(raw)
            if record is None:
                continue
            if since is not None and (record_time(record) or since) < since:
                continue
            kept.append(record)
        return Shown(list(kept), file.tell(), (info.st_dev, info.st_ino))


def follow(
    path: Path,
    shown: Shown,
    *,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = POLL_SECONDS,
) -> Iterator[Record]:
    """The records appended to *path* after *shown*, as they come; never ends.

    Polls (the file is written from inside containers, where the host's inotify would
    also see it, but polling works the same on every platform). A file that was
    replaced or cut shorter is read again from its start; one that does not exist yet
    is waited for.
    """
    offset, identity = shown.offset, shown.identity
    file: IO[bytes] | None = None
    try:
        while True:
            if file is None:
                file = open_log(path)
                if file is not None:
                    info = os.fstat(file.fileno())
                    if (info.st_dev, info.st_ino) != identity:
                        identity, offset = (info.st_dev, info.st_ino), 0
                    file.seek(offset)
            if file is not None:
                for raw in _lines(file):
                    record = parse_line(raw)
                    if record is not None:
                        yield record
                offset = file.tell()
                if _replaced(path, file, offset):
                    file.close()
                    file, offset = None, 0
                    identity = None
                    continue
            sleep(interval)
    finally:
        if file is not None:
            file.close()


def _replaced(path: Path, file: IO[bytes], offset: int) -> bool:
    """Whether *path* is no longer the open *file*, or was cut below *offset*."""
    opened = os.fstat(file.fileno())
    if opened.st_size < offset:
        return True
    try:
        current = os.lstat(path)
    except FileNotFoundError:
        return False  # removed: keep the open one until another appears
    return (current.st_dev, current.st_ino) != (opened.st_dev, opened.st_ino)


# -- showing -------------------------------------------------------------------------------


def as_json(record: Record) -> str:
    """One line of JSON, every non-ASCII character escaped (safe for a terminal)."""
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"))


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return " ".join(value)
    return json.dumps(value, ensure_ascii=False)


def _get(record: Record, *keys: str) -> list[str]:
    return [_text(record[key]) for key in keys if record.get(key) not in (None, "")]


def _ms(value: object) -> str:
    return f" in {value:g} ms" if isinstance(value, int | float) else ""


def _proxy(record: Record) -> str:
    target = f"{_text(record.get('host'))}:{_text(record.get('port'))}"
    parts = [*_get(record, "method"), target, *_get(record, "verdict", "status")]
    text = " ".join(parts)
    if record.get("reason"):
        text += f" ({_text(record['reason'])})"
    if record.get("rule"):
        where = f" in {_text(record['file'])}" if record.get("file") else ""
        text += f" rule {_text(record['rule'])}{where}"
    return text


def _credentials(record: Record) -> str:
    text = " ".join(_get(record, "agent", "method", "path"))
    if record.get("upstream"):
        text += f" -> {_text(record['upstream'])}"
    text += f" {_text(record.get('status'))}"
    if record.get("reason"):
        text += f" ({_text(record['reason'])})"
    return text


def _hostexec(record: Record) -> str:
    event = record["event"]
    tag = f"[{_text(record['id'])}] " if record.get("id") else ""
    if event == "hostexec.request":
        command = record.get("command") or record.get("argv")
        return tag + _text(command)
    if event == "hostexec.decision":
        text = f"{tag}{_text(record.get('status'))}: {_text(record.get('command'))}"
        if record.get("pattern"):
            text += f" (pattern {_text(record['pattern'])})"
        if record.get("reason"):
            text += f" ({_text(record['reason'])})"
        return text
    if event == "hostexec.complete":
        if record.get("status") == "error":
            return f"{tag}error: {_text(record.get('reason'))}"
        timed_out = " (timed out, killed)" if record.get("timed_out") else ""
        return f"{tag}exit {_text(record.get('exit_code'))}{timed_out}" + _ms(
            record.get("duration_ms")
        )
    return tag + _fields(record)


def _approval(record: Record) -> str:
    kind, _, step = record["event"].removeprefix("approval.").partition(".")
    subject = (
        f"{_text(record.get('host'))}:{_text(record.get('port'))}"
        if record.get("host") and record.get("port")
        else _text(record.get("command") or record.get("argv") or record.get("host") or "")
    )
    if step == "requested":
        where = f" in {_text(record['cwd'])}" if record.get("cwd") else ""
        return f"{subject}{where} waits for a human"
    if step == "decided":
        rule = record.get("rule") if kind == "domain" else None
        text = f"{_text(record.get('action'))} {_text(rule) if rule else subject}"
        text += f" ({_text(record.get('scope'))})"
        if record.get("reason"):
            text += f": {_text(record['reason'])}"
        return text
    if step == "expired":
        return f"{_text(record.get('id'))}: nobody decided in time"
    if step == "dropped":
        return f"{_text(record.get('id'))}: dropped, its cloister stopped"
    if kind == "decision" and step == "undone":
        text = f"{_text(record.get('action'))} {_text(record.get('subject'))}"
        text += f" ({_text(record.get('scope'))}) undone"
        if record.get("file"):
            text += f", removed from {_text(record['file'])}"
        return text
    return _fields(record)


def _guard(record: Record) -> str:
    text = f"{_text(record.get('path'))}: {_text(record.get('detail'))}"
    if record.get("moved_to"):
        text += f" (now {_text(record['moved_to'])})"
    return text


def _fields(record: Record) -> str:
    skip = {"time", "event", "cloister", "project"}
    return " ".join(
        f"{key}={_text(value)}"
        for key, value in record.items()
        if key not in skip and value is not None
    )


def summary(record: Record) -> str:
    """The essential fields of *record*, for a person (not yet escaped)."""
    event: str = record["event"]
    try:
        if event == "proxy.request":
            return _proxy(record)
        if event == "credentials.request":
            return _credentials(record)
        if event.startswith("hostexec."):
            return _hostexec(record)
        if event.startswith("approval."):
            return _approval(record)
        if event.startswith("guard."):
            return _guard(record)
    except (TypeError, ValueError, ArithmeticError):  # an unexpected field: show them all
        pass
    return _fields(record)


def render(record: Record, tz: tzinfo | None = None) -> str:
    """One line for a person: local time, event, what happened; agent text escaped."""
    moment = record_time(record)
    try:
        stamp = moment.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S") if moment else "?"
    except OverflowError:  # a time at the edge of the calendar, in no local zone
        stamp = "?"
    return printable(f"{stamp}  {record['event']:<26} {summary(record)}".rstrip())
