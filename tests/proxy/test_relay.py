"""The tunnel pumps on socket pairs, with splice and with the copying fallback."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from cloister_proxy.relay import SPLICE_AVAILABLE, Tunnel

MODES = [False, *([True] if SPLICE_AVAILABLE else [])]


async def relay_through(use_splice: bool, payload: bytes) -> tuple[bytes, bytes, int, int]:
    """client ⇄ [tunnel] ⇄ upstream over socket pairs; returns what each end got."""
    loop = asyncio.get_running_loop()
    client_outer, client_inner = socket.socketpair()
    upstream_inner, upstream_outer = socket.socketpair()
    for sock in (client_outer, client_inner, upstream_inner, upstream_outer):
        sock.setblocking(False)
    tunnel = Tunnel(client_inner, upstream_inner, idle_timeout=5, use_splice=use_splice)
    running = asyncio.create_task(tunnel.run())

    async def upstream_side() -> bytes:
        received = bytearray()
        while data := await loop.sock_recv(upstream_outer, 65536):
            received += data
        await loop.sock_sendall(upstream_outer, b"reply:" + str(len(received)).encode())
        upstream_outer.shutdown(socket.SHUT_WR)
        return bytes(received)

    async def client_side() -> bytes:
        await loop.sock_sendall(client_outer, payload)
        client_outer.shutdown(socket.SHUT_WR)
        received = bytearray()
        while data := await loop.sock_recv(client_outer, 65536):
            received += data
        return bytes(received)

    try:
        async with asyncio.timeout(20):
            upstream_got, client_got = await asyncio.gather(upstream_side(), client_side())
            await running
    finally:
        for sock in (client_outer, client_inner, upstream_inner, upstream_outer):
            sock.close()
    return upstream_got, client_got, tunnel.up.bytes, tunnel.down.bytes


@pytest.mark.parametrize("use_splice", MODES, ids=lambda splice: "splice" if splice else "copy")
def test_tunnel_moves_everything_and_half_closes(use_splice: bool) -> None:
    payload = os.urandom(5 * 1024 * 1024 + 17)
    upstream_got, client_got, up, down = asyncio.run(relay_through(use_splice, payload))
    assert upstream_got == payload
    assert client_got == f"reply:{len(payload)}".encode()
    assert (up, down) == (len(payload), len(client_got))


@pytest.mark.parametrize("use_splice", MODES, ids=lambda splice: "splice" if splice else "copy")
def test_idle_tunnel_times_out(use_splice: bool) -> None:
    async def idle() -> bool:
        a, b = socket.socketpair()
        c, d = socket.socketpair()
        for sock in (a, b, c, d):
            sock.setblocking(False)
        tunnel = Tunnel(b, c, idle_timeout=0.2, use_splice=use_splice)
        try:
            async with asyncio.timeout(5):
                await tunnel.run()
        finally:
            for sock in (a, b, c, d):
                sock.close()
        return tunnel.idled_out

    assert asyncio.run(idle()) is True


def test_a_dead_peer_ends_the_tunnel_with_an_error() -> None:
    async def write_to_closed_peer() -> tuple[OSError | None, OSError | None]:
        client_outer, client_inner = socket.socketpair()
        upstream_inner, upstream_outer = socket.socketpair()
        for sock in (client_outer, client_inner, upstream_inner, upstream_outer):
            sock.setblocking(False)
        tunnel = Tunnel(client_inner, upstream_inner, idle_timeout=30)
        running = asyncio.create_task(tunnel.run())
        upstream_outer.close()  # the upstream is gone
        client_outer.send(b"x" * 1024)  # ...and the client still talks
        try:
            async with asyncio.timeout(5):  # ends long before the idle timeout
                await running
        finally:
            for sock in (client_outer, client_inner, upstream_inner):
                sock.close()
        return tunnel.up.error, tunnel.down.error

    up_error, down_error = asyncio.run(write_to_closed_peer())
    # Either direction may notice first; at least one saw the broken connection.
    errors = [error for error in (up_error, down_error) if error is not None]
    assert errors
    assert all(isinstance(error, BrokenPipeError | ConnectionResetError) for error in errors)
