"""Dialling an upstream: resolve, check every address with the guard, connect."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
from collections.abc import Callable
from typing import Any

from cloister_proxy import gate
from cloister_proxy.addresses import AddressGuard, IPAddress, NetworkSet, parse_address
from cloister_proxy.exchange import Exchange, Upstream


async def dial(
    loop: asyncio.AbstractEventLoop,
    destination: gate.Destination,
    guard: AddressGuard,
    exchange: Exchange,
    *,
    seconds: float,
    is_self: Callable[[list[IPAddress], int], bool],
    own_networks: Callable[..., NetworkSet],
) -> Upstream | gate.Refusal:
    """Resolve, check every answer with *guard*, and connect to the first that accepts.

    *own_networks* (called as ``own_networks(ipv6=…)``) gives the networks of the
    proxy's interfaces as they are at this moment: refused like the guardian's.
    """
    host, port = destination.host, destination.port
    try:
        async with asyncio.timeout(seconds):
            if host.is_ip:
                addresses: list[IPAddress] = [ipaddress.ip_address(host.name)]
            else:
                try:
                    infos = await loop.getaddrinfo(
                        host.name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                    )
                except socket.gaierror as error:
                    return gate.upstream_unreachable(destination, f"cannot resolve: {error}")
                addresses = unique_addresses(infos)
            ipv6 = any(address.version == 6 for address in addresses)
            refused = guard.first_refused(addresses, own_networks(ipv6=ipv6))
            if refused is not None:
                exchange.address = str(refused.address)
                return gate.private_address(destination, refused)
            if is_self(addresses, port):
                return gate.Refusal(
                    403, "cloister: the proxy will not connect to itself", "private-address"
                )
            problem = "no address"
            for address in addresses:
                family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
                # Created non-blocking: no separate ioctl per connection.
                sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                try:
                    await _connect(loop, sock, (str(address), port))
                except OSError as error:
                    sock.close()
                    problem = error.strerror or str(error)
                    continue
                except BaseException:
                    sock.close()
                    raise
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                exchange.address = str(address)
                return Upstream(sock, address)
            return gate.upstream_unreachable(destination, problem)
    except TimeoutError:
        return gate.upstream_timeout(destination, seconds)


async def _connect(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, address: tuple[str, int]
) -> None:
    """Non-blocking connect; skips the wait for writability when it is already done.

    On loopback and fast local networks the handshake has usually completed by the
    time ``connect()`` returns EINPROGRESS; one check saves a trip through the loop.
    """
    error = sock.connect_ex(address)
    if error in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error == 0:
            try:
                sock.getpeername()
            except OSError:  # not connected yet: wait like everyone else
                await loop.sock_connect(sock, address)
            return
    if error not in (0, errno.EISCONN):
        raise OSError(error, os.strerror(error))


def unique_addresses(infos: list[tuple[Any, ...]]) -> list[IPAddress]:
    seen: list[IPAddress] = []
    for info in infos:
        text = str(info[4][0])
        try:
            address = parse_address(text)
        except ValueError:
            # A scoped (link-local) IPv6 answer: classify it without the scope id.
            address = ipaddress.ip_address(text.split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen
