"""Plain-HTTP forwarding: one request to the upstream, its response back, as they come."""

from __future__ import annotations

import asyncio
import socket

from cloister_proxy.exchange import Client, ClientGoneError, Exchange, Upstream
from cloister_proxy.http1 import (
    BodyTracker,
    HttpError,
    ProxyTarget,
    RequestHead,
    find_head_end,
    parse_response_head,
    render_forward_request,
    render_forward_response,
)

RECV_SIZE = 256 * 1024


async def forward(
    loop: asyncio.AbstractEventLoop,
    client: Client,
    head: RequestHead,
    target: ProxyTarget,
    *,
    upstream: Upstream,
    exchange: Exchange,
    idle: float,
) -> tuple[bool, HttpError | None]:
    """Relay one exchange: whether the client connection stays open, and the failure
    the client must still be told about (nothing was answered yet)."""
    keep = False
    failure: HttpError | None = None
    try:
        await loop.sock_sendall(upstream.sock, render_forward_request(head, target))
        request_body = BodyTracker(head.framing)
        async with asyncio.TaskGroup() as tasks:
            sender = tasks.create_task(
                _send_body(loop, client, upstream.sock, request_body, exchange=exchange, idle=idle)
            )
            keep = await _relay_response(
                loop, client.sock, head, upstream, exchange=exchange, idle=idle
            )
            if not request_body.done:
                sender.cancel()  # the response came first; this connection must end
                keep = False
    except* (OSError, ClientGoneError, TimeoutError):
        keep = False
    except* HttpError as group:
        keep = False
        first = group.exceptions[0]
        failure = first if isinstance(first, HttpError) else HttpError(502, str(first))
    if failure is not None and exchange.status == 0:
        return False, failure
    return keep and head.keep_alive, None


async def _send_body(
    loop: asyncio.AbstractEventLoop,
    client: Client,
    upstream: socket.socket,
    tracker: BodyTracker,
    *,
    exchange: Exchange,
    idle: float,
) -> None:
    """Relay the request body; what follows it stays in the client's buffer."""
    conn, buffer = client.sock, client.buffer
    data = bytes(buffer)
    buffer.clear()
    while True:
        taken = tracker.feed(data)
        if taken:
            await loop.sock_sendall(upstream, data[:taken])
            exchange.bytes_up += taken
        if tracker.done:
            buffer += data[taken:]
            return
        async with asyncio.timeout(idle):
            data = await loop.sock_recv(conn, RECV_SIZE)
        if not data:
            raise ClientGoneError


async def _relay_response(
    loop: asyncio.AbstractEventLoop,
    conn: socket.socket,
    head: RequestHead,
    upstream: Upstream,
    *,
    exchange: Exchange,
    idle: float,
) -> bool:
    """Relay interim responses and the final one; True if both sides may keep alive."""
    pending = upstream.buffer
    while True:
        scanned = 0
        while (end := _response_head_end(pending, scanned)) < 0:
            scanned = len(pending)
            async with asyncio.timeout(idle):
                data = await loop.sock_recv(upstream.sock, RECV_SIZE)
            if not data:
                raise HttpError(502, "upstream closed the connection without a response")
            pending += data
        response = parse_response_head(bytes(pending[:end]), head.method)
        del pending[:end]
        close = response.status >= 200 and not (response.keep_alive and head.keep_alive)
        await loop.sock_sendall(conn, render_forward_response(response, close=close))
        if response.status >= 200:
            break
    exchange.status = response.status
    tracker = BodyTracker(response.framing)
    data = bytes(pending)
    pending.clear()
    while True:
        taken = tracker.feed(data)
        if taken:
            await loop.sock_sendall(conn, data[:taken])
            exchange.bytes_down += taken
        if tracker.done:
            return not close
        async with asyncio.timeout(idle):
            data = await loop.sock_recv(upstream.sock, RECV_SIZE)
        if not data:
            if tracker.kind == "close":
                return False
            raise HttpError(502, "upstream closed the connection mid-body")


def _response_head_end(buffer: bytearray, start: int) -> int:
    try:
        return find_head_end(buffer, start)
    except HttpError:  # 431 is for clients; an oversized response is the upstream's fault
        raise HttpError(502, "the upstream's response head is too large") from None
