"""A cloister's session record: what its repository looked like when it started.

``cloister start`` writes ``<data>/sessions/<cloister>.json`` before the container
runs; the host executor reads it to check the git directory before running a command
and to guard it while the cloister runs; ``cloister review`` and ``cloister stop``
compare the repository with it, so the human's own setup is never reported as the
agent's. It outlives the container (``stopped_at`` set) until the next start of the
same cloister replaces it.

Next to it, ``<cloister>.events`` collects, one JSON object per line, what the
executor's guard undid while the cloister ran.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError, field_validator

from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.gitdir import GitDirBaseline
from cloister_core.names import validate_cloister_name
from cloister_core.paths import CloisterPaths

GuardAction = Literal["removed", "quarantined", "restored", "rebuilt", "refused", "paused"]


class SessionError(CloisterError):
    """A session record that cannot be read."""


def _absolute(value: str | None) -> str | None:
    if value is not None and not Path(value).is_absolute():
        raise ValueError(f"path must be absolute, got {value!r}")
    return value


class SessionRecord(BaseModel):
    """``<data>/sessions/<cloister>.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cloister: str
    project: str
    worktree: str  # the host directory mounted at /work
    git_dir: str | None = None  # the work tree's own git directory
    common_dir: str | None = None  # the repository's shared one
    started_at: AwareDatetime
    stopped_at: AwareDatetime | None = None
    git_baseline: GitDirBaseline = GitDirBaseline()
    gitlinks: tuple[str, ...] = ()  # gitlink paths in the index at start
    nested: tuple[str, ...] = ()  # repositories nested in the work tree at start (relative)
    findings_at_start: tuple[str, ...] = ()  # fingerprints of what review found at start
    placeholders: tuple[str, ...] = ()  # made by Cloister to be kept read-only; removed at the end
    pins: tuple[str, ...] = ()  # commondir pins made in nested repositories; removed at the end
    guard_held: bool = False  # stop found a planted repository: the git guard stays on
    # (st_dev, st_ino) of the work tree and git directories at start: none can be
    # replaced from inside (mount points), so a change means something went wrong.
    identities: dict[str, tuple[int, int]] = {}

    @field_validator("cloister")
    @classmethod
    def _cloister(cls, value: str) -> str:
        return validate_cloister_name(value)

    @field_validator("worktree", "git_dir", "common_dir")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return _absolute(value)

    @property
    def running(self) -> bool:
        return self.stopped_at is None


class GuardEvent(BaseModel):
    """One thing the guard did, as a line of ``<cloister>.events``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    time: AwareDatetime
    action: GuardAction
    path: str
    detail: str
    moved_to: str | None = None  # where a quarantined thing is now


def identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of *path* itself (no link followed); None when it is gone."""
    try:
        info = path.lstat()
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def replaced(record: SessionRecord) -> list[str]:
    """The paths of *record*'s identities that are now something else (or gone)."""
    return [
        path for path, known in record.identities.items() if identity(Path(path)) != tuple(known)
    ]


def displayable(text: str) -> str:
    """*text* with undecodable file-name bytes (surrogate escapes) as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def write_session(paths: CloisterPaths, record: SessionRecord) -> Path:
    path = paths.session_file(record.cloister)
    atomic_write(path, record.model_dump_json(indent=2) + "\n", mode=0o600, dir_mode=0o700)
    return path


def read_session(paths: CloisterPaths, cloister: str) -> SessionRecord | None:
    """The record of *cloister*, None if there is none; :class:`SessionError` if broken."""
    path = paths.session_file(cloister)
    try:
        return SessionRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as error:
        raise SessionError(f"{path}: cannot read the session record: {error}") from None


def list_sessions(paths: CloisterPaths) -> list[SessionRecord]:
    """Every readable session record (broken ones are skipped), by cloister name."""
    records = []
    try:
        names = sorted(paths.sessions_dir.glob("*.json"))
    except OSError:
        return []
    for file in names:
        try:
            records.append(SessionRecord.model_validate_json(file.read_bytes()))
        except (OSError, ValidationError):
            continue
    return records


def append_event(
    paths: CloisterPaths,
    cloister: str,
    action: GuardAction,
    path: str,
    detail: str,
    *,
    moved_to: str | None = None,
) -> GuardEvent:
    """Append one event; a single O_APPEND write, so concurrent writers never interleave.

    Paths are the agent's choice: bytes that are no UTF-8 are kept as escapes.
    """
    event = GuardEvent(
        time=datetime.now(UTC),
        action=action,
        path=displayable(path),
        detail=displayable(detail),
        moved_to=displayable(moved_to) if moved_to is not None else None,
    )
    file = paths.session_events(cloister)
    file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, (event.model_dump_json() + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    return event


def read_events(paths: CloisterPaths, cloister: str) -> list[GuardEvent]:
    """The events of *cloister*'s latest session (unreadable lines are skipped)."""
    try:
        lines = paths.session_events(cloister).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    events = []
    for line in lines:
        try:
            events.append(GuardEvent.model_validate(json.loads(line)))
        except (ValueError, ValidationError):
            continue
    return events


def clear_events(paths: CloisterPaths, cloister: str) -> None:
    paths.session_events(cloister).unlink(missing_ok=True)
