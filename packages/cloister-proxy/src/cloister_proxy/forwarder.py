"""``cloister port``'s forwarder: one port of one cloister on the host's loopback.

    python3 -m cloister_proxy.forwarder --target ADDRESS:PORT --via GATEWAY [--listen-port N]

It runs in a container of its own (the proxy's image), attached to its cloister's own
network and to the ports network, whose port Docker publishes on the host's 127.0.0.1
only. It listens on its address on the ports network alone (the one it routes to
*GATEWAY* through), so nothing on the cloister's network can connect to it, and it joins
each connection to *TARGET*: the cloister's address on its network, which the CLI took
from the engine. It never resolves a name, never connects anywhere else, and does not
read what it relays.

Each connection is a task of one task group (none is left unowned), bounded in number
(accepting waits while the limit is reached, and the kernel's backlog holds the rest);
a connection that fails ends alone. The bytes move through :class:`relay.Tunnel` in
copy mode: at most one 64 KiB remainder per direction is held, and end-of-file one way
is passed on as a half-close.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cloister_proxy.relay import COPY_BUFFER, Tunnel

DEFAULT_LISTEN_PORT = 9996
MAX_CONNECTIONS = 256
CONNECT_TIMEOUT = 10.0
# A dev server's live-reload socket may stay quiet for hours; only a day's silence ends it.
IDLE_TIMEOUT = 24 * 3600.0

Report = Callable[[str], None]


class ForwarderError(Exception):
    """The forwarder cannot run as asked."""


@dataclass(frozen=True, slots=True)
class ForwarderSettings:
    target: tuple[str, int]  # an IPv4 address (never a name) and a port
    via: str  # the ports network's gateway: the listener takes the address toward it
    listen_port: int = DEFAULT_LISTEN_PORT
    max_connections: int = MAX_CONNECTIONS
    connect_timeout: float = CONNECT_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT


def _ipv4(text: str, what: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise ForwarderError(f"{what} must be an IPv4 address, not {text!r}") from None


def _port(text: str, what: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ForwarderError(f"{what} must be a port from 1 to 65535, not {text!r}")
    return int(text)


def parse_target(text: str) -> tuple[str, int]:
    """``ADDRESS:PORT`` with an IPv4 address: ``172.18.0.5:8000`` → ``("172.18.0.5", 8000)``."""
    address, separator, port = text.rpartition(":")
    if not separator:
        raise ForwarderError(f"the target must be ADDRESS:PORT, not {text!r}")
    return _ipv4(address, "the target's address"), _port(port, "the target's port")


def parse_args(argv: Sequence[str]) -> ForwarderSettings:
    parser = argparse.ArgumentParser(
        prog="cloister_proxy.forwarder", description="Forward one TCP port to a cloister."
    )
    parser.add_argument("--target", required=True, help="ADDRESS:PORT to connect to")
    parser.add_argument("--via", required=True, help="listen on the address toward this gateway")
    parser.add_argument("--listen-port", default=str(DEFAULT_LISTEN_PORT))
    parsed = parser.parse_args(list(argv))
    return ForwarderSettings(
        target=parse_target(parsed.target),
        via=_ipv4(parsed.via, "--via"),
        listen_port=_port(parsed.listen_port, "--listen-port"),
    )


def address_toward(gateway: str) -> str:
    """This container's own address on the network of *gateway*.

    ``connect`` on a UDP socket only picks the route and the source address; nothing is
    sent.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((gateway, 9))
        address: str = probe.getsockname()[0]
    return address


def listen(address: str, port: int) -> socket.socket:
    listener = socket.create_server((address, port), backlog=128)
    listener.setblocking(False)
    return listener


class Forwarder:
    """Accepts on *listener* and joins each connection to the target."""

    def __init__(self, settings: ForwarderSettings, report: Report) -> None:
        self.settings = settings
        self._report = report
        self._slots = asyncio.Semaphore(settings.max_connections)
        self._shared = bytearray(COPY_BUFFER)  # copy mode reads through it, one pump at a time
        self.active = 0

    async def serve(self, listener: socket.socket) -> None:
        """Until cancelled; the open connections are cancelled with it."""
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as connections:
            while True:
                await self._slots.acquire()
                try:
                    client, _peer = await loop.sock_accept(listener)
                except ConnectionAbortedError:  # gone before it was accepted
                    self._slots.release()
                    continue
                except BaseException:
                    self._slots.release()
                    raise
                connections.create_task(self._join(client))

    async def _join(self, client: socket.socket) -> None:
        self.active += 1
        try:
            with client, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as upstream:
                upstream.setblocking(False)
                for each in (client, upstream):
                    # Relayed writes are already whole messages; Nagle would only delay them.
                    each.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if not await self._connect(upstream):
                    return
                tunnel = Tunnel(
                    client,
                    upstream,
                    idle_timeout=self.settings.idle_timeout,
                    shared=self._shared,
                    use_splice=False,  # bounded memory: no pipe per direction
                )
                await tunnel.run()
        except OSError as error:  # one connection's trouble never ends the others
            self._report(f"connection failed: {error}")
        finally:
            self.active -= 1
            self._slots.release()

    async def _connect(self, upstream: socket.socket) -> bool:
        address, port = self.settings.target
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                await asyncio.get_running_loop().sock_connect(upstream, (address, port))
        except (OSError, TimeoutError) as error:
            reason = "timed out" if isinstance(error, TimeoutError) else str(error)
            self._report(f"nothing answers on the cloister's port {port} ({reason})")
            return False
        return True


def _report(message: str) -> None:
    print(f"cloister-forwarder: {message}", file=sys.stderr, flush=True)


async def run(settings: ForwarderSettings, report: Report = _report) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    address = address_toward(settings.via)
    with listen(address, settings.listen_port) as listener:
        target = f"{settings.target[0]}:{settings.target[1]}"
        report(f"listening on {address}:{settings.listen_port}, forwarding to {target}")
        forwarder = Forwarder(settings, report)
        async with asyncio.TaskGroup() as tasks:
            serving = tasks.create_task(forwarder.serve(listener))
            await stop.wait()
            serving.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_args(sys.argv[1:] if argv is None else argv)
    except ForwarderError as error:
        _report(str(error))
        return 2
    asyncio.run(run(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
