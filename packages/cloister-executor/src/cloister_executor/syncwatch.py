"""The watch that brings a running cloister's commits back within seconds.

Every half second the host daemon looks at a few files of each running cloister's git
directory and of the human's repository (``lstat`` only: no file the agent wrote is
opened, no link followed): ``HEAD``, ``packed-refs``, ``refs/heads`` and the ``HEAD``
reflog, which git touches on every commit of the checked-out branch and every branch
made or removed. When they changed, it syncs that cloister (:mod:`.gitsync`), at most
once a second. A branch deep in ``refs/heads/a/b`` that is not checked out may wait for
the next sync of another cause, ``cloister sync`` or ``cloister stop``: the watch is a
convenience, not what the human's safety rests on.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cloister_core.audit import AuditLog
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, list_sessions
from cloister_executor.gitsync import Syncer, SyncError

INTERVAL_SECONDS = 0.5
MIN_GAP_SECONDS = 1.0
WATCHED = ("HEAD", "packed-refs", "refs/heads", "logs/HEAD")

Signature = tuple[tuple[int, int, int] | None, ...]


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def signature(paths: CloisterPaths, session: SessionRecord) -> Signature:
    """What changes when either side commits, makes or removes a branch."""
    own = paths.cloister_git_dir(session.cloister)
    places = [own / name for name in WATCHED]
    if session.common_dir is not None:
        common = Path(session.common_dir)
        places += [common / name for name in WATCHED]
    return tuple(_stat(place) for place in places)


def _displayable(value: object) -> object:
    """*value* with every undecodable byte of a name (surrogate escapes) as ``\\xNN``: a
    branch name is bytes, and the agent chooses it."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {_displayable(key): _displayable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_displayable(item) for item in value]
    return value


@dataclass
class SyncWatch:
    """Syncs running cloisters whose refs (or the human's) changed, each on its own: a
    cloister whose export is slow holds up no other."""

    paths: CloisterPaths
    syncer: Syncer
    report: Callable[[str], None]
    audit: AuditLog | None = None
    _seen: dict[str, Signature] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    _busy: set[str] = field(default_factory=set)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            while True:
                await asyncio.sleep(INTERVAL_SECONDS)
                await self.tick(tasks)

    async def tick(self, tasks: asyncio.TaskGroup | None = None) -> None:
        """One look at every running cloister; a sync of each that changed (in *tasks*,
        or awaited here without)."""
        sessions = await asyncio.to_thread(list_sessions, self.paths)
        running = {
            record.cloister: record for record in sessions if record.running and record.is_git
        }
        for gone in self._seen.keys() - running.keys():
            self._seen.pop(gone, None)
            self._last.pop(gone, None)
        due: list[str] = []
        for name, session in running.items():
            if name in self._busy:
                continue  # its last sync is still running
            now = signature(self.paths, session)
            if self._seen.get(name) == now:
                continue
            if time.monotonic() - self._last.get(name, 0.0) < MIN_GAP_SECONDS:
                continue  # the next tick
            self._seen[name] = now
            self._last[name] = time.monotonic()
            self._busy.add(name)
            due.append(name)
        if tasks is not None:
            for name in due:
                tasks.create_task(self._sync(name))
            return
        async with asyncio.TaskGroup() as group:
            for name in due:
                group.create_task(self._sync(name))

    async def _sync(self, name: str) -> None:
        try:
            outcome = await asyncio.to_thread(self.syncer.sync, name, running=True)
        except SyncError as error:
            self._write(name, "git.sync.failed", error=str(error))
            return
        except Exception as error:  # the watch runs in the daemon's task group: an
            # exception out of it would stop the daemon, and hostexec with it
            self._write(name, "git.sync.failed", error=f"{type(error).__name__}: {error}")
            return
        finally:
            self._busy.discard(name)
        if outcome.changed or outcome.notes:
            self._write(
                name,
                "git.sync",
                imported=outcome.imported,
                removed=outcome.removed,
                fast_forwarded=list(outcome.fast_forwarded) if outcome.fast_forwarded else None,
                to_cloister=outcome.to_cloister,
                notes=outcome.notes,
                seconds=round(outcome.seconds, 3),
            )

    def _write(self, name: str, event: str, **fields: object) -> None:
        shown = {key: _displayable(value) for key, value in fields.items()}
        try:
            if self.audit is not None:
                self.audit.write(event, cloister=name, **shown)
            else:
                self.report(f"{event} {name}: {shown}")
        except Exception as error:  # a line lost must not stop the daemon
            self.report(f"cannot write the {event} line of {name}: {error}")
