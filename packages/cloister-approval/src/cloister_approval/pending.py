"""Held requests: one item per cloister and subject, the future its waiters share.

Concurrent requests of one cloister for one host (or one command in one directory)
share a single item. An item ends when a human decides it, when it expires, when its
cloister's token goes away, or when every caller waiting for it has gone (withdrawn:
the proxy's client hung up); a finished id is remembered for a while so a late
decision gets a clear 409 rather than a 404.

Fair shares: one cloister holds at most ``per_cloister`` items at once (domains and
commands together); past it :meth:`PendingBook.open` refuses at once
(:class:`TooManyHeldError`, 429) instead of queueing, so one cloister cannot bury the
others' requests. ``max_pending`` bounds the whole book (503).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from cloister_approval.errors import BusyError, ConflictError, NotFoundError, TooManyHeldError
from cloister_approval.models import DecisionKind, PendingCommandOut, PendingDomainOut
from cloister_core.config import load_global_config
from cloister_core.config.models import ProxyConfig
from cloister_core.errors import CloisterError
from cloister_core.hub import CommandDecision, DomainDecision
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable
from cloister_core.watch import Signature, file_signature

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
        on_withdrawn: Callable[[Pending[Any]], None] = lambda item: None,
    ) -> None:
        self._max_pending = max_pending
        self._clock = clock
        self._on_expired = on_expired
        self._on_withdrawn = on_withdrawn
        self._items: dict[str, Pending[Any]] = {}
        self._per_cloister: dict[str, int] = {}
        self._by_key: dict[tuple[str, ...], str] = {}
        self._finished: dict[str, str] = {}  # id → "decided" | "expired" | …, for clear 409s

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[Pending[Any]]:
        """Oldest first."""
        return sorted(self._items.values(), key=lambda item: item.created_at)

    def of_cloister(self, cloister: str) -> list[Pending[Any]]:
        return [item for item in self.items() if item.cloister == cloister]

    def held(self, cloister: str) -> int:
        """How many items *cloister* holds now."""
        return self._per_cloister.get(cloister, 0)

    def lookup(self, item_id: str, kind: DecisionKind) -> Pending[Any]:
        item = self._items.get(item_id)
        if item is not None and item.kind == kind:
            return item
        how = self._finished.get(item_id)
        if how is not None:
            raise ConflictError(f"{kind} request {item_id!r} was already {how}")
        raise NotFoundError(f"no pending {kind} request {item_id!r}")

    def open(
        self,
        key: tuple[str, ...],
        make: Make,
        timeout: timedelta,
        *,
        cloister: str,
        per_cloister: int,
    ) -> tuple[Pending[Any], bool]:
        """The item for *key*: the one already held, or a new one (True).

        Joining an item that is already held is always possible; a new one is refused
        when *cloister* holds *per_cloister* items (429) or the book is full (503).
        """
        existing = self._by_key.get(key)
        if existing is not None:
            return self._items[existing], False
        held = self.held(cloister)
        if held >= per_cloister:
            raise TooManyHeldError(
                f"cloister {cloister!r} already has {held} requests waiting for a human"
                f" (proxy.max_held_per_cloister: {per_cloister}); decide those first",
                {"cloister": cloister, "held": held, "limit": per_cloister},
            )
        if len(self._items) >= self._max_pending:
            raise BusyError(f"{len(self._items)} requests are already waiting for a human")
        now = self._clock()
        item = make(secrets.token_hex(8), now, now + timeout)
        if item.cloister != cloister or item.key != key:
            raise ValueError(f"item {item.key!r} of {item.cloister!r} opened as {key!r}")
        self._items[item.id] = item
        self._by_key[key] = item.id
        self._per_cloister[cloister] = held + 1
        return item, True

    def close(self, item: Pending[Any], how: str) -> None:
        if self._items.pop(item.id, None) is not None:
            remaining = self._per_cloister.pop(item.cloister, 1) - 1
            if remaining > 0:
                self._per_cloister[item.cloister] = remaining
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
        """The item's outcome; *expired* (and the item closed) if none comes in time.

        A waiter that is cancelled (its caller's HTTP request went away) stops waiting;
        when it was the last one, the item is withdrawn: nobody is left to answer.
        """
        item.waiting += 1
        try:
            async with asyncio.timeout(seconds):
                return await asyncio.shield(item.future)
        except asyncio.CancelledError:
            if item.waiting == 1 and item.id in self._items:
                self.close(item, "withdrawn: its requester went away")
                self._on_withdrawn(item)
                item.future.cancel()
            raise
        except TimeoutError:
            if item.id in self._items:
                self.close(item, "expired")
                self._on_expired(item)
                item.settle(expired)
            return item.future.result() if item.future.done() else expired
        finally:
            item.waiting -= 1


class HeldLimit:
    """``proxy.max_held_per_cloister`` of config.yaml, re-read when the file changes.

    A config that does not load keeps the last good value (the default before one).
    """

    def __init__(self, paths: CloisterPaths, report: Callable[[str], None]) -> None:
        self._paths = paths
        self._report = report
        self._signature: Signature | None = None
        self._value = ProxyConfig().max_held_per_cloister

    def __call__(self) -> int:
        signature = file_signature(self._paths.config_file)
        if signature != self._signature:
            self._signature = signature
            try:
                config = load_global_config(self._paths, create=False)
            except CloisterError as error:
                self._report(f"configuration error, keeping max_held_per_cloister: {error}")
            else:
                self._value = config.proxy.max_held_per_cloister
        return self._value
