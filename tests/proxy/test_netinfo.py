"""Reading the proxy's own addresses from /proc text."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cloister_proxy.netinfo import (
    LOOPBACK_NETWORKS,
    OwnNetworks,
    own_addresses,
    own_networks,
    parse_fib_trie,
    parse_if_inet6,
    parse_if_inet6_networks,
    parse_route,
)

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


# /proc/net/route of a proxy on three networks: the default route via a gateway, a
# static route via a gateway, a reject route and a device default route (a tunnel).
ROUTE = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100D50A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000D50A\t00000000\t0001\t0\t0\t0\tE0FFFFFF\t0\t0\t0
eth1\t000013AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
eth2\t2000D50A\t00000000\t0001\t0\t0\t0\tE0FFFFFF\t0\t0\t0
eth1\t0000000A\t010013AC\t0003\t0\t0\t0\t000000FF\t0\t0\t0
eth1\t0000A8C0\t00000000\t0201\t0\t0\t0\t0000FFFF\t0\t0\t0
eth1\t0000A9C0\t00000000\t0000\t0\t0\t0\t0000FFFF\t0\t0\t0
wg0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0
garbage line
eth9\tZZZZZZZZ\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
"""
IF_INET6_PREFIXES = """fd00c1000000000000000000000000020 04 40 00 82     eth0
fd0000c1000000000000000000000002 04 40 00 82     eth0
fe80000000000000004262fffed21e82 12 40 20 80 eth0
00000000000000000000000000000001 01 80 10 80       lo
20010db8000000000000000000000001 05 00 00 80   odd
"""


def test_parse_route_keeps_the_networks_on_an_interface() -> None:
    assert [str(network) for network in parse_route(ROUTE, "little")] == [
        "10.213.0.0/27",
        "172.19.0.0/16",
        "10.213.0.32/27",
    ]


def test_parse_route_reads_host_byte_order() -> None:
    big = (
        "Iface Destination Gateway Flags RefCnt Use Metric Mask\n"
        "eth0 0AD50000 00000000 0001 0 0 0 FFFFFFE0\n"
    )
    assert [str(network) for network in parse_route(big, "big")] == ["10.213.0.0/27"]


def test_parse_if_inet6_networks() -> None:
    assert [str(network) for network in parse_if_inet6_networks(IF_INET6_PREFIXES)] == [
        "fd00:c1::/64",
        "fe80::/64",
        "::1/128",
    ]


def test_own_networks_are_loopback_the_interfaces_and_the_own_addresses() -> None:
    networks = own_networks(
        "Iface\n" + ROUTE.split("\n", 1)[1], IF_INET6_PREFIXES, (ipaddress.ip_address("8.8.8.8"),)
    )
    assert set(LOOPBACK_NETWORKS) <= set(networks.networks)
    for text in ("127.0.0.1", "0.0.0.0", "::1", "8.8.8.8", "10.213.0.7", "fd00:c1::9"):
        assert ipaddress.ip_address(text) in networks
    for text in ("10.213.0.64", "10.0.0.1", "192.168.0.1", "8.8.4.4", "2001:db8::1"):
        assert ipaddress.ip_address(text) not in networks


def test_own_networks_are_read_at_every_call(tmp_path: Path) -> None:
    header = ROUTE.split("\n", 1)[0]
    (tmp_path / "route").write_text(header + "\n", encoding="ascii")
    reader = OwnNetworks(tmp_path)  # no if_inet6: nothing from it
    first = reader(ipv6=True)
    assert ipaddress.ip_address("10.213.0.7") not in first
    assert ipaddress.ip_address("127.0.0.1") in first
    assert reader(ipv6=True) is first  # the same bytes: not parsed again
    # A cloister's network connected to the proxy a moment ago counts at once.
    (tmp_path / "route").write_text(ROUTE, encoding="ascii")
    assert ipaddress.ip_address("10.213.0.7") in reader(ipv6=False)
    (tmp_path / "if_inet6").write_text(IF_INET6_PREFIXES, encoding="ascii")
    assert ipaddress.ip_address("fd00:c1::9") not in reader(ipv6=False)  # not read for IPv4
    assert ipaddress.ip_address("fd00:c1::9") in reader(ipv6=True)


def test_own_networks_of_this_machine() -> None:
    networks = OwnNetworks()()
    assert ipaddress.ip_address("127.0.0.1") in networks
    assert ipaddress.ip_address("::1") in networks
