"""Requests in flight per address: one cloister cannot hold the gateway for the others."""

from __future__ import annotations

import asyncio

import httpx
from starlette.types import Receive, Scope, Send

from cloister_executor.limits import PerAddressLimit


class Held:
    """An app whose requests wait until released (like a command held for a human)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self._changed = asyncio.Condition()

    async def until_entered(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.entered >= count)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self._changed:
            self.entered += 1
            self._changed.notify_all()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ran"})


def client(app: PerAddressLimit, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://hostexec:9998")


async def scenario() -> None:
    held = Held()
    limited = PerAddressLimit(held, limit=2)
    async with client(limited, "172.30.0.7") as greedy, client(limited, "172.30.0.8") as other:
        async with asyncio.TaskGroup() as group:
            waiting = [group.create_task(greedy.post("/request")) for _ in range(2)]
            await held.until_entered(2)
            refused = await greedy.post("/request")
            assert refused.status_code == 429
            assert refused.json() == {
                "status": "error",
                "reason": "more than 2 requests at once from this address",
            }
            assert held.entered == 2  # the refused one never reached the app
            served = group.create_task(other.post("/request"))  # another cloister is not
            await held.until_entered(3)
            held.release.set()
        assert [task.result().status_code for task in [*waiting, served]] == [200, 200, 200]
        # Finished requests free their places.
        assert (await greedy.post("/request")).status_code == 200


def test_requests_beyond_the_limit_from_one_address_are_refused() -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))
