"""The proxy's own addresses, read from ``/proc`` (Linux), for the SSRF guard.

A cloister must not use the proxy to reach the proxy's own host through one of its
interface addresses. The parsing is pure (text in, addresses out); :func:`own_addresses`
reads the files and falls back to resolving the host name elsewhere.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from cloister_proxy.addresses import IPAddress


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
