"""The human's decisions: writing them to their files, the recent list, and undo.

Persisting is the decision store's job (atomic, locked, comment-preserving): project and
global decisions go to their files, session decisions to the cloister's session file
(which the proxy and the hostexec gateway read, and which goes when the cloister stops).
A decision that cannot be written is not dropped: a project or global one falls back to
the session, a session one to this request only, and the record says why. Undo removes
exactly the entry a decision wrote, and only if it wrote one. File writes go to a worker
thread so a slow disk or a held lock never stalls the event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cloister_approval.errors import ConflictError, HubError, NotFoundError
from cloister_approval.models import DecisionOut
from cloister_core.config.models import RuleEntry
from cloister_core.decisions import DecisionScope, DecisionStore
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.rules import RuleAction

SavedScope = Literal["once", "session", "project", "global"]


@dataclass(frozen=True, slots=True)
class Written:
    """Which file entry a decision wrote: what its undo removes."""

    scope: DecisionScope
    owner: str | None  # the project (project scope) or the cloister (session scope)
    action: RuleAction | None = None  # domains
    entry: RuleEntry | None = None  # domains
    command: str | None = None  # commands (canonical form)


@dataclass(slots=True)
class DecisionRecord:
    """A decision and what it wrote (kept for the UI and for undo)."""

    out: DecisionOut
    written: Written | None = None


@dataclass(frozen=True, slots=True)
class Saved:
    """Where a decision ended up: its scope may have fallen back."""

    scope: SavedScope
    written: Written | None = None
    path: Path | None = None
    warning: str | None = None


def _owner(scope: DecisionScope, project: str, cloister: str) -> str | None:
    return {"global": None, "project": project, "session": cloister}[scope]


class DecisionLog:
    """The decision files through the store, and the recent decisions."""

    def __init__(self, paths: CloisterPaths, *, recent_limit: int) -> None:
        self._store = DecisionStore(paths)
        self._recent: deque[DecisionRecord] = deque(maxlen=recent_limit)

    async def save_domain(
        self,
        scope: SavedScope,
        action: RuleAction,
        entry: RuleEntry,
        *,
        project: str,
        cloister: str,
    ) -> Saved:
        """Write a domain decision to its scope's file ("once" writes nothing)."""
        return await self._save(scope, project, cloister, action=action, entry=entry)

    async def save_command(
        self, scope: SavedScope, command: str, *, project: str, cloister: str
    ) -> Saved:
        """Approve the exact *command* in its scope's file ("once" writes nothing)."""
        return await self._save(scope, project, cloister, command=command)

    async def _save(
        self,
        scope: SavedScope,
        project: str,
        cloister: str,
        *,
        action: RuleAction | None = None,
        entry: RuleEntry | None = None,
        command: str | None = None,
    ) -> Saved:
        warning = None
        while scope != "once":
            owner = _owner(scope, project, cloister)
            written = Written(scope, owner, action, entry, command)
            try:
                path, changed = await asyncio.to_thread(self._write, written, add=True)
            except (OSError, CloisterError) as error:
                fallback: SavedScope = "session" if scope != "session" else "once"
                warning = f"could not save the decision ({error});" + (
                    " applied for this session" if fallback == "session" else " applied once"
                )
                scope = fallback
                continue
            return Saved(scope, written if changed else None, path, warning)
        return Saved("once", warning=warning)

    def _write(self, written: Written, *, add: bool) -> tuple[Path, bool]:
        if written.command is not None:
            change = (self._store.add_command if add else self._store.remove_command)(
                written.scope, written.command, written.owner
            )
            return change.path, change.changed
        if written.action is None or written.entry is None:
            raise ValueError(f"{written!r} names neither a command nor a rule")
        result = (self._store.add if add else self._store.remove)(
            written.scope, written.action, written.entry, written.owner
        )
        return result.path, result.changed

    def remember(self, record: DecisionRecord) -> None:
        self._recent.appendleft(record)

    def recent(self) -> list[DecisionOut]:
        return [record.out for record in self._recent]

    def cloisters_of(self, project: str) -> set[str]:
        return {record.out.cloister for record in self._recent if record.out.project == project}

    async def undo(self, decision_id: str, *, undone_by: str) -> DecisionOut:
        """Remove exactly the entry the decision wrote; the decision as it now reads."""
        record = next((r for r in self._recent if r.out.id == decision_id), None)
        if record is None:
            raise NotFoundError(f"no recent decision {decision_id!r}")
        if record.out.undone:
            raise ConflictError(f"decision {decision_id!r} was already undone")
        if not record.out.undoable or record.written is None:
            raise ConflictError(
                f"decision {decision_id!r} wrote nothing to a file, so there is nothing to undo"
            )
        try:
            await asyncio.to_thread(self._write, record.written, add=False)
        except (OSError, CloisterError) as error:
            raise HubError(f"could not undo: {error}") from None
        record.out = record.out.model_copy(
            update={
                "undone": True,
                "undoable": False,
                "summary": f"Undone: {record.out.summary}",
                "undone_by": undone_by,
            }
        )
        return record.out
