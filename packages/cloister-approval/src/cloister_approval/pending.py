"""Held requests: one item per cloister and subject, the future its waiters share.

Concurrent requests of one cloister for one host (or one command in one directory)
share a single item. An item ends when a human decides it, when it expires, or when
its cloister's token goes away; a finished id is remembered for a while so a late
decision gets a clear 409 rather than a 404.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from cloister_approval.errors import BusyError, ConflictError, NotFoundError
from cloister_approval.models import DecisionKind, PendingCommandOut, PendingDomainOut
from cloister_core.hub import CommandDecision, DomainDecision
from cloister_core.printable import printable

DecisionT = TypeVar("DecisionT", DomainDecision, CommandDecision)


@dataclass(eq=False, slots=True)
class Pending(Generic[DecisionT]):
    """One held item and the future its waiters share."""

    id: str
    kind: DecisionKind
    cloister: str
    project: str
    created_at: datetime
    expires_at: datetime
    future: asyncio.Future[DecisionT]
    key: tuple[str, ...]
    waiting: int = 0
    host: str = ""
    port: int = 0
    wildcard: str | None = None
    argv: tuple[str, ...] = ()
    command: str = ""
    cwd: str = ""

    def to_out(self) -> PendingDomainOut | PendingCommandOut:
        if self.kind == "domain":
            return PendingDomainOut(
                id=self.id,
                cloister=self.cloister,
                project=self.project,
                host=self.host,
                port=self.port,
                created_at=self.created_at,
                expires_at=self.expires_at,
                wildcard=self.wildcard,
                waiting=self.waiting,
            )
        return PendingCommandOut(
            id=self.id,
            cloister=self.cloister,
            project=self.project,
            argv=self.argv,
            # What a human reads: control and invisible characters shown as escapes
            # (argv, next to it, is the exact command).
            command=printable(self.command),
            cwd=printable(self.cwd),
            created_at=self.created_at,
            expires_at=self.expires_at,
        )

    def settle(self, outcome: DecisionT) -> None:
        if not self.future.done():
            self.future.set_result(outcome)


Make = Callable[[str, datetime, datetime], Pending[Any]]


class PendingBook:
    """Every held item of the hub, by id and by what it asks for."""

    def __init__(
        self,
        *,
        max_pending: int,
        clock: Callable[[], datetime],
        on_expired: Callable[[Pending[Any]], None],
    ) -> None:
        self._max_pending = max_pending
        self._clock = clock
        self._on_expired = on_expired
        self._items: dict[str, Pending[Any]] = {}
        self._by_key: dict[tuple[str, ...], str] = {}
        self._finished: dict[str, str] = {}  # id → "decided" | "expired" | …, for clear 409s

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[Pending[Any]]:
        """Oldest first."""
        return sorted(self._items.values(), key=lambda item: item.created_at)

    def of_cloister(self, cloister: str) -> list[Pending[Any]]:
        return [item for item in self.items() if item.cloister == cloister]

    def lookup(self, item_id: str, kind: DecisionKind) -> Pending[Any]:
        item = self._items.get(item_id)
        if item is not None and item.kind == kind:
            return item
        how = self._finished.get(item_id)
        if how is not None:
            raise ConflictError(f"{kind} request {item_id!r} was already {how}")
        raise NotFoundError(f"no pending {kind} request {item_id!r}")

    def open(
        self, key: tuple[str, ...], make: Make, timeout: timedelta
    ) -> tuple[Pending[Any], bool]:
        """The item for *key*: the one already held, or a new one (True)."""
        existing = self._by_key.get(key)
        if existing is not None:
            return self._items[existing], False
        if len(self._items) >= self._max_pending:
            raise BusyError(f"{len(self._items)} requests are already waiting for a human")
        now = self._clock()
        item = make(secrets.token_hex(8), now, now + timeout)
        self._items[item.id] = item
        self._by_key[key] = item.id
        return item, True

    def close(self, item: Pending[Any], how: str) -> None:
        self._items.pop(item.id, None)
        if self._by_key.get(item.key) == item.id:
            del self._by_key[item.key]
        self._finished[item.id] = how
        while len(self._finished) > 4 * self._max_pending:
            self._finished.pop(next(iter(self._finished)))

    def remaining(self, item: Pending[Any], requested: float | None) -> float:
        """Seconds a caller waits: the item's time left, or less if the caller asked."""
        left = (item.expires_at - self._clock()).total_seconds()
        return max(0.0, min(left, requested) if requested else left)

    async def wait(self, item: Pending[DecisionT], seconds: float, expired: DecisionT) -> DecisionT:
        """The item's outcome; *expired* (and the item closed) if none comes in time."""
        item.waiting += 1
        try:
            async with asyncio.timeout(seconds):
                return await asyncio.shield(item.future)
        except TimeoutError:
            if item.id in self._items:
                self.close(item, "expired")
                self._on_expired(item)
                item.settle(expired)
            return item.future.result() if item.future.done() else expired
        finally:
            item.waiting -= 1
