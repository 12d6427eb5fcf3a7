"""The service's own addresses and networks, read from ``/proc`` (Linux), for the guard.

A cloister must not use the proxy (or the credential gateway) to reach the service's
own host through one of its interface addresses, nor anything on a network the service
is attached to: those are the guardian's networks (its hub, its gateway, the other
cloisters' networks, which the proxy joins while they run). The parsing is pure (text
in, addresses or networks out); :func:`own_addresses` and :func:`read_own_networks`
read the files. The networks are read again for every dial, since networks are
connected to the proxy at runtime: two small files, a few microseconds.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Final, Literal

from cloister_proxy.addresses import IPAddress, IPNetwork, NetworkSet

LOOPBACK_NETWORKS: Final[tuple[IPNetwork, ...]] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
    # Dialled, these are the local host too (see addresses.py).
    ipaddress.ip_network("0.0.0.0/8"),
    ipaddress.ip_network("::/128"),
)
_RTF_UP = 0x0001
_RTF_GATEWAY = 0x0002
_RTF_REJECT = 0x0200
_MAX_PROC_READ = 4 * 1024 * 1024


def parse_fib_trie(text: str) -> set[ipaddress.IPv4Address]:
    """Local IPv4 addresses: the ``|-- A.B.C.D`` entries followed by ``/32 host LOCAL``."""
    found: set[ipaddress.IPv4Address] = set()
    previous = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("/32 host LOCAL") and previous.startswith("|-- "):
            found.add(ipaddress.IPv4Address(previous[4:].strip()))
        previous = stripped
    return found


def parse_if_inet6(text: str) -> set[ipaddress.IPv6Address]:
    """Every IPv6 interface address (first column: 32 hex digits)."""
    found: set[ipaddress.IPv6Address] = set()
    for line in text.splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32:
            found.add(ipaddress.IPv6Address(int(fields[0], 16)))
    return found


def own_addresses(proc: Path = Path("/proc/net")) -> set[IPAddress]:
    """Addresses of this host's (or container's) interfaces."""
    found: set[IPAddress] = set()
    try:
        found |= parse_fib_trie((proc / "fib_trie").read_text(encoding="ascii"))
        found |= parse_if_inet6((proc / "if_inet6").read_text(encoding="ascii"))
    except OSError:
        pass
    if not found:
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
        except OSError:
            infos = []
        for info in infos:
            found.add(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
    return found


def parse_route(
    text: str, byteorder: Literal["little", "big"] = sys.byteorder
) -> list[ipaddress.IPv4Network]:
    """The IPv4 networks directly on an interface, from ``/proc/net/route``.

    A route that is up, has no gateway and is no reject route is a network one of the
    interfaces is on. The default route (``/0``) is never one, even without a gateway
    (a device route of a tunnel): it would make every address "own". Addresses are
    printed as the kernel holds them, in host byte order.
    """
    found: list[ipaddress.IPv4Network] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            destination = int.from_bytes(bytes.fromhex(fields[1]), byteorder)
            gateway = int.from_bytes(bytes.fromhex(fields[2]), byteorder)
            flags = int(fields[3], 16)
            mask = int.from_bytes(bytes.fromhex(fields[7]), byteorder)
        except ValueError:
            continue
        if not flags & _RTF_UP or flags & (_RTF_GATEWAY | _RTF_REJECT) or gateway or not mask:
            continue
        try:
            network = ipaddress.IPv4Network((destination, bin(mask).count("1")), strict=False)
        except ValueError:
            continue
        if network not in found:
            found.append(network)
    return found


def parse_if_inet6_networks(text: str) -> list[ipaddress.IPv6Network]:
    """The IPv6 network of every interface address (address and prefix length columns)."""
    found: list[ipaddress.IPv6Network] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or len(fields[0]) != 32:
            continue
        try:
            prefix = int(fields[2], 16)
            network = ipaddress.IPv6Network((int(fields[0], 16), prefix), strict=False)
        except ValueError:
            continue
        if prefix and network not in found:
            found.append(network)
    return found


def _read(path: Path) -> bytes:
    # os-level calls: this runs for every dial, and file objects cost more.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        size = 0
        while size < _MAX_PROC_READ:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_or_empty(path: Path) -> bytes:
    try:
        return _read(path)
    except OSError:
        return b""


def own_networks(route: str, if_inet6: str, own: tuple[IPAddress, ...] = ()) -> NetworkSet:
    """Loopback, the *own* addresses and the networks in the two ``/proc`` texts."""
    networks: list[IPNetwork] = list(LOOPBACK_NETWORKS)
    networks += (ipaddress.ip_network(address) for address in own)
    networks += parse_route(route)
    networks += parse_if_inet6_networks(if_inet6)
    return NetworkSet(networks)


class OwnNetworks:
    """Reads the service's own networks at every call (dial time), parsing only on change.

    The files are read each time (a network connected a moment ago counts at once);
    when their bytes are what they were last time, the last parsed set is returned.
    ``/proc/net/if_inet6`` is read only when an IPv6 address is to be dialled (an IPv4
    dial cannot end on an IPv6 network). A file that cannot be read adds nothing: the
    guardian networks of the settings and the address classes still refuse what matters.
    """

    def __init__(self, proc: Path = Path("/proc/net"), own: tuple[IPAddress, ...] = ()) -> None:
        self._route = proc / "route"
        self._if_inet6 = proc / "if_inet6"
        self._own = own
        self._last: dict[bool, tuple[bytes, bytes, NetworkSet]] = {}

    def __call__(self, *, ipv6: bool = True) -> NetworkSet:
        route = _read_or_empty(self._route)
        if_inet6 = _read_or_empty(self._if_inet6) if ipv6 else b""
        last = self._last.get(ipv6)
        if last is not None and last[0] == route and last[1] == if_inet6:
            return last[2]
        networks = own_networks(
            route.decode("ascii", "replace"), if_inet6.decode("ascii", "replace"), self._own
        )
        self._last[ipv6] = (route, if_inet6, networks)
        return networks
