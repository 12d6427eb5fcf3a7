"""At most N requests at once from one address: one cloister cannot starve the others.

Requests to the gateway may wait minutes (a command held for a human), so a cloister
that opened thousands would hold the gateway's sockets and tasks for every other
cloister. This ASGI middleware counts the requests in flight per client address and
answers ``429`` beyond the limit, before the request reaches the app.
"""

from __future__ import annotations

import json
from collections import Counter

from starlette.types import ASGIApp, Receive, Scope, Send


class PerAddressLimit:
    """Refuse a client's request while it has *limit* others in flight."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self._app = app
        self._limit = limit
        self._in_flight: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        client = scope.get("client")
        address = client[0] if client else "?"
        if self._in_flight[address] >= self._limit:
            await _too_many(send, self._limit)
            return
        self._in_flight[address] += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self._in_flight[address] -= 1
            if not self._in_flight[address]:
                del self._in_flight[address]


async def _too_many(send: Send, limit: int) -> None:
    body = json.dumps(
        {"status": "error", "reason": f"more than {limit} requests at once from this address"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
