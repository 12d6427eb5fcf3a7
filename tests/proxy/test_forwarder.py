"""``cloister port``'s forwarder on real loopback sockets: arguments, relaying, limits."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from cloister_proxy.forwarder import (
    Forwarder,
    ForwarderError,
    ForwarderSettings,
    address_toward,
    listen,
    main,
    parse_args,
    parse_target,
)

LOOPBACK = "127.0.0.1"


# --- arguments ------------------------------------------------------------------------------


def test_parse_args() -> None:
    settings = parse_args(["--target", "172.18.0.5:8000", "--via", "172.30.0.1"])
    assert settings.target == ("172.18.0.5", 8000)
    assert settings.via == "172.30.0.1"
    assert settings.listen_port == 9996
    assert parse_args(["--target", "10.0.0.2:1", "--via", "10.0.0.1", "--listen-port", "7000"]) == (
        ForwarderSettings(target=("10.0.0.2", 1), via="10.0.0.1", listen_port=7000)
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("localhost:8000", "IPv4 address, not 'localhost'"),  # never a name it would resolve
        ("cloister-evil:80", "IPv4 address, not 'cloister-evil'"),
        ("[::1]:80", "IPv4 address"),
        ("172.18.0.5", "ADDRESS:PORT, not '172.18.0.5'"),
        ("172.18.0.5:0", "from 1 to 65535, not '0'"),
        ("172.18.0.5:65536", "from 1 to 65535, not '65536'"),
        ("172.18.0.5:-1", "from 1 to 65535, not '-1'"),
        ("172.18.0.5:http", "from 1 to 65535, not 'http'"),
    ],
)
def test_parse_target_refuses(text: str, message: str) -> None:
    with pytest.raises(ForwarderError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_target(text)


def test_main_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--target", "example.com:80", "--via", "10.0.0.1"]) == 2
    assert "IPv4 address, not 'example.com'" in capsys.readouterr().err


def test_listens_on_the_address_toward_the_gateway() -> None:
    assert address_toward(LOOPBACK) == LOOPBACK


# --- relaying -------------------------------------------------------------------------------


@dataclass
class Upstream:
    """The cloister's server: reads to end-of-file, answers with what it got, closes."""

    listener: socket.socket
    accepted: int = 0
    clients: list[socket.socket] = field(default_factory=list)

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as group:
            while True:
                client, _ = await loop.sock_accept(self.listener)
                self.accepted += 1
                self.clients.append(client)
                group.create_task(self._answer(client))

    async def _answer(self, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        with client:
            received = bytearray()
            while data := await loop.sock_recv(client, 65536):
                received += data
            await loop.sock_sendall(client, b"got:" + bytes(received[:8]) + b":%d" % len(received))
            client.shutdown(socket.SHUT_WR)


@dataclass
class Running:
    forwarder: Forwarder
    port: int
    reports: list[str]
    upstream: Upstream


@asynccontextmanager
async def forwarding(
    *, max_connections: int = 16, target_port: int | None = None
) -> AsyncIterator[Running]:
    """An upstream server and a forwarder to it, both on loopback, for one test."""
    upstream = Upstream(listen(LOOPBACK, 0))
    reports: list[str] = []
    settings = ForwarderSettings(
        target=(LOOPBACK, target_port or upstream.port),
        via=LOOPBACK,
        listen_port=0,
        max_connections=max_connections,
    )
    forwarder = Forwarder(settings, reports.append)
    listener = listen(address_toward(settings.via), 0)
    with upstream.listener, listener:
        async with asyncio.timeout(30), asyncio.TaskGroup() as group:
            serving = group.create_task(forwarder.serve(listener))
            upstream_serving = group.create_task(upstream.serve())
            try:
                yield Running(forwarder, listener.getsockname()[1], reports, upstream)
            finally:
                serving.cancel()
                upstream_serving.cancel()


async def turns_until(condition: Callable[[], bool]) -> None:
    """Let the loop turn until *condition* holds (the scenario's timeout bounds it)."""
    for _ in itertools.count():
        if condition():
            return
        await asyncio.sleep(0)


async def connect(port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    await loop.sock_connect(sock, (LOOPBACK, port))
    return sock


async def exchange(sock: socket.socket, payload: bytes) -> bytes:
    """Send *payload*, half-close, read the whole answer."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, payload)
    sock.shutdown(socket.SHUT_WR)
    received = bytearray()
    while data := await loop.sock_recv(sock, 65536):
        received += data
    return bytes(received)


def test_relays_both_ways_with_half_close() -> None:
    payload = os.urandom(3 * 1024 * 1024 + 5)  # past every buffer: back-pressure both ways

    async def scenario() -> tuple[bytes, int]:
        async with forwarding() as running:
            with await connect(running.port) as client:
                answer = await exchange(client, payload)
            return answer, running.upstream.accepted

    answer, accepted = asyncio.run(scenario())
    # The server saw end-of-file (the half-close passed on) and still could answer.
    assert answer == b"got:" + payload[:8] + b":%d" % len(payload)
    assert accepted == 1


def test_many_connections_at_once() -> None:
    async def scenario() -> list[bytes]:
        async with forwarding() as running:
            clients = [await connect(running.port) for _ in range(10)]
            try:
                return list(
                    await asyncio.gather(
                        *(exchange(client, b"n%d" % index) for index, client in enumerate(clients))
                    )
                )
            finally:
                for client in clients:
                    client.close()

    answers = asyncio.run(scenario())
    assert answers == [b"got:n%d:%d" % (index, len(b"n%d" % index)) for index in range(10)]


def test_nothing_listening_closes_the_connection_and_says_why() -> None:
    with socket.socket() as unused:
        unused.bind((LOOPBACK, 0))
        closed_port = unused.getsockname()[1]  # bound, never listening: refused

        async def scenario() -> tuple[bytes, list[str], int]:
            async with forwarding(target_port=closed_port) as running:
                loop = asyncio.get_running_loop()
                with await connect(running.port) as client:
                    answer = await loop.sock_recv(client, 100)  # closed: end-of-file
                await turns_until(lambda: not running.forwarder.active)
                return answer, running.reports, running.forwarder.active

        answer, reports, active = asyncio.run(scenario())
    assert answer == b""
    assert any(f"nothing answers on the cloister's port {closed_port}" in r for r in reports)
    assert active == 0


def test_connections_beyond_the_limit_wait_for_a_free_slot() -> None:
    async def scenario() -> tuple[int, int, int, bytes, bytes]:
        loop = asyncio.get_running_loop()
        async with forwarding(max_connections=1) as running:
            first = await connect(running.port)
            await loop.sock_sendall(first, b"first")
            await turns_until(lambda: running.upstream.accepted == 1)  # it reached the server
            second = await connect(running.port)  # the kernel's backlog takes it
            with first, second:
                await loop.sock_sendall(second, b"second")
                second.shutdown(socket.SHUT_WR)
                for _ in range(200):  # turns of the loop, in which nothing accepts it
                    await asyncio.sleep(0)
                during = running.upstream.accepted
                active = running.forwarder.active
                first_answer = await exchange(first, b"")
                received = bytearray()
                while data := await loop.sock_recv(second, 65536):
                    received += data
                return during, active, running.upstream.accepted, first_answer, bytes(received)

    during, active, after, first_answer, second_answer = asyncio.run(scenario())
    assert (during, active) == (1, 1)
    assert first_answer == b"got:first:5"
    assert after == 2
    assert second_answer == b"got:second:6"


def test_stopping_closes_open_connections() -> None:
    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        async with forwarding() as running:
            client = await connect(running.port)
            await turns_until(lambda: running.forwarder.active == 1)
        # The forwarder is gone (cancelled with its connections): the client sees the end.
        with client:
            return await loop.sock_recv(client, 100)

    assert asyncio.run(scenario()) == b""
