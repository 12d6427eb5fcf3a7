"""The book of held items on its own: sharing, limits, fair shares, expiry, withdrawal,
and clear 409s."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cloister_approval.errors import BusyError, ConflictError, NotFoundError, TooManyHeldError
from cloister_approval.pending import HeldLimit, Pending, PendingBook
from cloister_core.hub import DomainDecision
from cloister_core.paths import CloisterPaths

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def book(
    max_pending: int = 2,
    expired: list[str] | None = None,
    withdrawn: list[str] | None = None,
) -> PendingBook:
    seen = expired if expired is not None else []
    gone = withdrawn if withdrawn is not None else []
    return PendingBook(
        max_pending=max_pending,
        clock=lambda: NOW,
        on_expired=lambda item: seen.append(item.id),
        on_withdrawn=lambda item: gone.append(item.id),
    )


def opened(
    pending: PendingBook, key: tuple[str, ...], cloister: str = "api", per_cloister: int = 16
) -> tuple[Pending[Any], bool]:
    return pending.open(
        key,
        maker(cloister, key),
        timedelta(seconds=60),
        cloister=cloister,
        per_cloister=per_cloister,
    )


def maker(cloister: str = "api", key: tuple[str, ...] = ("a",)) -> Any:
    def make(item_id: str, now: datetime, expires: datetime) -> Pending[Any]:
        return Pending[DomainDecision](
            id=item_id,
            kind="domain",
            cloister=cloister,
            project="api",
            created_at=now,
            expires_at=expires,
            future=asyncio.get_running_loop().create_future(),
            key=key,
            host="x.test",
        )

    return make


def test_one_item_per_key_a_limit_and_clear_errors() -> None:
    async def scenario() -> None:
        pending = book(max_pending=1)
        first, created = opened(pending, ("a",))
        again, created_again = opened(pending, ("a",))
        assert (created, created_again, again) == (True, False, first)
        with pytest.raises(BusyError):
            opened(pending, ("b",), "web")
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
        item, _ = opened(pending, ("a",))
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
            item, _ = opened(pending, (str(index),))
            pending.close(item, "decided")
            ids.append(item.id)
        with pytest.raises(NotFoundError):
            pending.lookup(ids[0], "domain")  # forgotten: at most 4 * max_pending kept
        with pytest.raises(ConflictError):
            pending.lookup(ids[-1], "domain")

    asyncio.run(scenario())


def test_one_cloister_holds_at_most_its_share_and_others_still_get_in() -> None:
    async def scenario() -> None:
        pending = book(max_pending=100)
        items = [opened(pending, ("busy", str(n)), "busy", per_cloister=3)[0] for n in range(3)]
        assert pending.held("busy") == 3
        with pytest.raises(TooManyHeldError) as refused:
            opened(pending, ("busy", "4"), "busy", per_cloister=3)
        error = refused.value
        assert error.status == 429
        assert "'busy' already has 3 requests waiting for a human" in error.message
        assert "max_held_per_cloister: 3" in error.message
        assert error.detail == {"cloister": "busy", "held": 3, "limit": 3}
        # Joining an item already held costs nothing: the same question.
        assert opened(pending, ("busy", "0"), "busy", per_cloister=3) == (items[0], False)
        # Another cloister is not affected by the busy one's share.
        _other, created = opened(pending, ("quiet", "x"), "quiet", per_cloister=3)
        assert created
        assert pending.held("quiet") == 1
        # A decided item frees its place, once, however often it is closed.
        pending.close(items[0], "decided")
        pending.close(items[0], "decided")
        assert pending.held("busy") == 2
        opened(pending, ("busy", "4"), "busy", per_cloister=3)
        assert pending.held("busy") == 3
        assert len(pending) == 4

    asyncio.run(scenario())


def test_an_item_whose_last_waiter_goes_is_withdrawn() -> None:
    async def scenario() -> None:
        withdrawn: list[str] = []
        pending = book(withdrawn=withdrawn)
        item, _ = opened(pending, ("a",))
        first = asyncio.create_task(pending.wait(item, 60, DomainDecision(action="timeout")))
        second = asyncio.create_task(pending.wait(item, 60, DomainDecision(action="timeout")))
        await asyncio.sleep(0)
        assert item.waiting == 2
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        # One waiter left: the item stays for it.
        assert (withdrawn, len(pending), item.waiting) == ([], 1, 1)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert withdrawn == [item.id]
        assert (len(pending), pending.held("api"), item.waiting) == (0, 0, 0)
        with pytest.raises(ConflictError, match="withdrawn: its requester went away"):
            pending.lookup(item.id, "domain")
        # The same question again is a new item.
        again, created = opened(pending, ("a",))
        assert created
        assert again.id != item.id

    asyncio.run(scenario())


def test_a_decided_item_is_not_withdrawn_when_its_waiter_goes_later() -> None:
    async def scenario() -> None:
        withdrawn: list[str] = []
        pending = book(withdrawn=withdrawn)
        item, _ = opened(pending, ("a",))
        waiter = asyncio.create_task(pending.wait(item, 60, DomainDecision(action="timeout")))
        await asyncio.sleep(0)
        pending.close(item, "decided")
        item.settle(DomainDecision(action="allow", scope="once"))
        assert (await waiter).action == "allow"
        assert withdrawn == []

    asyncio.run(scenario())


def test_the_share_is_read_from_config_yaml_and_kept_when_it_breaks(tmp_path: Any) -> None:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    messages: list[str] = []
    limit = HeldLimit(paths, messages.append)
    assert limit() == 16  # no file: the default
    paths.config_dir.mkdir()
    paths.config_file.write_text("proxy:\n  max_held_per_cloister: 3\n", encoding="utf-8")
    assert limit() == 3
    paths.config_file.write_text("proxy:\n  max_held_per_cloister: [\n", encoding="utf-8")
    assert limit() == 3
    assert messages
    assert "keeping max_held_per_cloister" in messages[0]
    paths.config_file.write_text("proxy:\n  max_held_per_cloister: 5\n", encoding="utf-8")
    assert limit() == 5
