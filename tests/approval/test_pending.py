"""The book of held items on its own: sharing, limits, expiry, and clear 409s."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cloister_approval.errors import BusyError, ConflictError, NotFoundError
from cloister_approval.pending import Pending, PendingBook
from cloister_core.hub import DomainDecision

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def book(max_pending: int = 2, expired: list[str] | None = None) -> PendingBook:
    seen = expired if expired is not None else []
    return PendingBook(
        max_pending=max_pending, clock=lambda: NOW, on_expired=lambda item: seen.append(item.id)
    )


def maker(cloister: str = "api") -> Any:
    def make(item_id: str, now: datetime, expires: datetime) -> Pending[Any]:
        return Pending[DomainDecision](
            id=item_id,
            kind="domain",
            cloister=cloister,
            project="api",
            created_at=now,
            expires_at=expires,
            future=asyncio.get_running_loop().create_future(),
            key=("domain", cloister, "x.test"),
            host="x.test",
        )

    return make


def test_one_item_per_key_a_limit_and_clear_errors() -> None:
    async def scenario() -> None:
        pending = book(max_pending=1)
        first, created = pending.open(("a",), maker(), timedelta(seconds=60))
        again, created_again = pending.open(("a",), maker(), timedelta(seconds=60))
        assert (created, created_again, again) == (True, False, first)
        with pytest.raises(BusyError):
            pending.open(("b",), maker("web"), timedelta(seconds=60))
        assert pending.lookup(first.id, "domain") is first
        with pytest.raises(NotFoundError):
            pending.lookup("nope", "domain")
        pending.close(first, "dropped: its cloister was stopped")
        with pytest.raises(ConflictError, match="was already dropped: its cloister was stopped"):
            pending.lookup(first.id, "domain")
        assert len(pending) == 0

    asyncio.run(scenario())


def test_waiting_past_the_time_expires_the_item() -> None:
    async def scenario() -> None:
        expired: list[str] = []
        pending = book(expired=expired)
        item, _ = pending.open(("a",), maker(), timedelta(seconds=60))
        assert pending.remaining(item, None) == 60
        assert pending.remaining(item, 0.01) == 0.01
        outcome = await pending.wait(item, 0.01, DomainDecision(action="timeout"))
        assert outcome.action == "timeout"
        assert expired == [item.id]
        assert pending.of_cloister("api") == []

    asyncio.run(scenario())


def test_finished_ids_are_remembered_boundedly() -> None:
    async def scenario() -> None:
        pending = book(max_pending=1)
        ids = []
        for index in range(10):
            item, _ = pending.open((str(index),), maker(), timedelta(seconds=60))
            pending.close(item, "decided")
            ids.append(item.id)
        with pytest.raises(NotFoundError):
            pending.lookup(ids[0], "domain")  # forgotten: at most 4 * max_pending kept
        with pytest.raises(ConflictError):
            pending.lookup(ids[-1], "domain")

    asyncio.run(scenario())
