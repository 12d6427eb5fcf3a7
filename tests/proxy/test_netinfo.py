"""Reading the proxy's own addresses from /proc text."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cloister_proxy.netinfo import own_addresses, parse_fib_trie, parse_if_inet6

FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 4
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 172.16.0.0/15 2 0 2
           |-- 172.17.0.0
              /16 link UNICAST
           |-- 172.17.0.1
              /32 host LOCAL
"""
IF_INET6 = """fd000000000000000000000000000002 04 40 00 82     eth0
00000000000000000000000000000001 01 80 10 80       lo
"""


def test_parse_fib_trie() -> None:
    assert parse_fib_trie(FIB_TRIE) == {
        ipaddress.IPv4Address("127.0.0.1"),
        ipaddress.IPv4Address("172.17.0.1"),
    }


def test_parse_if_inet6() -> None:
    assert parse_if_inet6(IF_INET6) == {
        ipaddress.IPv6Address("fd00::2"),
        ipaddress.IPv6Address("::1"),
    }


def test_own_addresses_reads_proc(tmp_path: Path) -> None:
    (tmp_path / "fib_trie").write_text(FIB_TRIE, encoding="ascii")
    (tmp_path / "if_inet6").write_text(IF_INET6, encoding="ascii")
    assert ipaddress.ip_address("172.17.0.1") in own_addresses(tmp_path)
    assert ipaddress.ip_address("::1") in own_addresses(tmp_path)
    # This machine's real view includes loopback.
    assert ipaddress.ip_address("127.0.0.1") in own_addresses()
