"""The SSRF guard: every table range at its boundaries, the guard, and a reference property.

The test keeps its own literal copy of the classification table (``RANGES``) with the
expected class just outside each range written by hand, checks that the module's
table is exactly that list, and checks ``classify`` against a naive reference scan of
it for random addresses.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import NamedTuple

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cloister_proxy.addresses import (
    ADDRESS_TABLE,
    AddressCheck,
    AddressClass,
    AddressGuard,
    IPAddress,
    NetworkSet,
    classify,
    parse_address,
)


class Range(NamedTuple):
    cidr: str
    address_class: AddressClass
    before: AddressClass | None  # class of the address just below; None: start of the space
    after: AddressClass | None  # class of the address just above; None: end of the space
    first: AddressClass | None = None  # when a more specific entry owns the first address
    last: AddressClass | None = None  # when a more specific entry owns the last address


# In priority order: the first range containing an address gives its class.
RANGES: tuple[Range, ...] = (
    # IPv4
    Range("0.0.0.0/32", "unspecified", None, "reserved"),
    Range("0.0.0.0/8", "reserved", None, "public", first="unspecified"),
    Range("10.0.0.0/8", "private", "public", "public"),
    Range("100.100.100.200/32", "metadata", "cgnat", "cgnat"),
    Range("100.64.0.0/10", "cgnat", "public", "public"),
    Range("127.0.0.0/8", "loopback", "public", "public"),
    Range("168.63.129.16/32", "metadata", "public", "public"),
    Range("169.254.169.254/32", "metadata", "link-local", "link-local"),
    Range("169.254.170.2/32", "metadata", "link-local", "link-local"),
    Range("169.254.170.23/32", "metadata", "link-local", "link-local"),
    Range("169.254.0.0/16", "link-local", "public", "public"),
    Range("172.16.0.0/12", "private", "public", "public"),
    Range("192.0.0.0/24", "reserved", "public", "public"),
    Range("192.0.2.0/24", "documentation", "public", "public"),
    Range("192.88.99.0/24", "reserved", "public", "public"),
    Range("192.168.0.0/16", "private", "public", "public"),
    Range("198.18.0.0/15", "benchmarking", "public", "public"),
    Range("198.51.100.0/24", "documentation", "public", "public"),
    Range("203.0.113.0/24", "documentation", "public", "public"),
    Range("224.0.0.0/4", "multicast", "public", "reserved"),
    Range("255.255.255.255/32", "reserved", "reserved", None),
    Range("240.0.0.0/4", "reserved", "multicast", None),
    # IPv6
    Range("::/128", "unspecified", None, "loopback"),
    Range("::1/128", "loopback", "unspecified", "ipv4-compatible"),
    Range("::ffff:0:0/96", "ipv4-mapped", "reserved", "reserved"),
    Range("::ffff:0:0:0/96", "ipv4-mapped", "reserved", "reserved"),
    Range("::/96", "ipv4-compatible", None, "reserved", first="unspecified"),
    Range("64:ff9b::/96", "nat64", "reserved", "reserved"),
    Range("64:ff9b:1::/48", "nat64", "reserved", "reserved"),
    Range("100::/64", "reserved", "reserved", "reserved"),
    Range("2001::/32", "teredo", "public", "reserved"),
    Range("2001:2::/48", "benchmarking", "reserved", "reserved"),
    Range("2001:10::/28", "reserved", "reserved", "reserved"),
    Range("2001:20::/28", "reserved", "reserved", "reserved"),
    Range("2001::/23", "reserved", "public", "public", first="teredo"),
    Range("2001:db8::/32", "documentation", "public", "public"),
    Range("2002::/16", "6to4", "public", "public"),
    Range("3fff::/20", "documentation", "public", "public"),
    Range("5f00::/16", "reserved", "reserved", "reserved"),
    Range("fd00:ec2::254/128", "metadata", "private", "private"),
    Range("fd00:ec2::23/128", "metadata", "private", "private"),
    Range("fc00::/7", "private", "reserved", "reserved"),
    Range("fe80::a9fe:a9fe/128", "metadata", "link-local", "link-local"),
    Range("fe80::/10", "link-local", "reserved", "reserved"),
    Range("fec0::/10", "reserved", "link-local", "multicast"),
    Range("ff00::/8", "multicast", "reserved", None),
    Range("::/3", "reserved", None, "public", first="unspecified"),
    Range("4000::/2", "reserved", "public", "reserved"),
    Range("8000::/1", "reserved", "reserved", None, last="multicast"),
)

REFERENCE: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, AddressClass], ...] = tuple(
    (ipaddress.ip_network(entry.cidr), entry.address_class) for entry in RANGES
)


def reference_classify(address: IPAddress) -> AddressClass:
    """The naive definition: the first network in RANGES that contains the address."""
    for network, address_class in REFERENCE:
        if address in network:
            return address_class
    return "public"


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


# --- the table ---------------------------------------------------------------------


def test_module_table_is_exactly_the_documented_list() -> None:
    assert [(str(network), cls) for network, cls in ADDRESS_TABLE] == [
        (str(network), cls) for network, cls in REFERENCE
    ]


def test_no_entry_is_shadowed_by_an_earlier_one() -> None:
    for index, (network, _) in enumerate(ADDRESS_TABLE):
        for earlier, _ in ADDRESS_TABLE[:index]:
            if earlier.version == network.version:
                assert not network.subnet_of(earlier), f"{network} is inside {earlier}"  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", RANGES, ids=[entry.cidr for entry in RANGES])
def test_range_boundaries(entry: Range) -> None:
    network = ipaddress.ip_network(entry.cidr)
    first, last = network.network_address, network.broadcast_address
    assert classify(first) == (entry.first or entry.address_class)
    assert classify(last) == (entry.last or entry.address_class)
    lowest = 0
    highest = 2**network.max_prefixlen - 1
    if entry.before is None:
        assert int(first) == lowest
    else:
        assert int(first) > lowest
        assert classify(first - 1) == entry.before
    if entry.after is None:
        assert int(last) == highest
    else:
        assert int(last) < highest
        assert classify(last + 1) == entry.after


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("1.1.1.1", "public"),
        ("8.8.8.8", "public"),
        ("93.184.215.14", "public"),
        ("172.17.0.1", "private"),
        ("100.64.0.1", "cgnat"),
        ("169.254.169.253", "link-local"),
        ("192.0.0.170", "reserved"),
        ("239.255.255.250", "multicast"),
        ("2606:4700:4700::1111", "public"),
        ("2a00:1450:4001:80b::200e", "public"),
        ("2001:4860:4860::8888", "public"),
        ("fd12:3456:789a::1", "private"),
        ("fe80::1", "link-local"),
        ("ff02::1", "multicast"),
        ("2001:1::1", "reserved"),
        ("100:0:0:1::1", "reserved"),
        ("fe80::1%eth0", "link-local"),
    ],
)
def test_classify_examples(address: str, expected: AddressClass) -> None:
    assert classify(ip(address)) == expected


def test_classify_refuses_what_is_not_an_address() -> None:
    with pytest.raises(TypeError, match=re.escape("'127.0.0.1'")):
        classify("127.0.0.1")  # type: ignore[arg-type]


# --- transition forms of dangerous IPv4 targets ------------------------------------


def _embedded_forms(target: str) -> list[tuple[IPAddress, AddressClass]]:
    v4 = int(ipaddress.IPv4Address(target))
    teredo = ipaddress.IPv6Address(
        (0x2001 << 112) | (int(ipaddress.IPv4Address("192.0.2.1")) << 64) | (v4 ^ 0xFFFFFFFF)
    )
    assert teredo.teredo is not None
    assert teredo.teredo[1] == ipaddress.IPv4Address(target)
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80) | 1)
    assert sixtofour.sixtofour == ipaddress.IPv4Address(target)
    mapped = ipaddress.IPv6Address(f"::ffff:{target}")
    assert mapped.ipv4_mapped == ipaddress.IPv4Address(target)
    return [
        (mapped, "ipv4-mapped"),
        (ipaddress.IPv6Address((0xFFFF << 48) | v4), "ipv4-mapped"),  # ::ffff:0:a.b.c.d
        (ipaddress.IPv6Address(v4), "ipv4-compatible"),
        (ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | v4), "nat64"),
        (ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b:1::")) | v4), "nat64"),
        (sixtofour, "6to4"),
        (teredo, "teredo"),
    ]


@pytest.mark.parametrize("target", ["127.0.0.1", "169.254.169.254", "10.0.0.1", "8.8.8.8"])
def test_ipv4_embedded_in_ipv6_is_refused_whatever_it_embeds(target: str) -> None:
    guard = AddressGuard()
    for address, expected in _embedded_forms(target):
        result = guard.check(address)
        assert result == AddressCheck(address, expected, allowed=False), str(address)


def test_allowing_an_ipv4_network_does_not_allow_its_ipv6_forms() -> None:
    guard = AddressGuard(allow_private_networks=[ipaddress.ip_network("127.0.0.0/8")])
    assert guard.check(ip("127.0.0.1")).allowed
    for address, _ in _embedded_forms("127.0.0.1"):
        assert not guard.check(address).allowed, str(address)


# --- AddressGuard ------------------------------------------------------------------


def test_guard_allows_public_and_refuses_the_rest_by_default() -> None:
    guard = AddressGuard()
    assert guard.check(ip("1.1.1.1")) == AddressCheck(ip("1.1.1.1"), "public", allowed=True)
    assert guard.check(ip("2606:4700:4700::1111")).allowed
    for entry in RANGES:
        network = ipaddress.ip_network(entry.cidr)
        result = guard.check(network.network_address)
        assert not result.allowed, entry.cidr
    assert guard.check(ip("169.254.169.254")) == AddressCheck(
        ip("169.254.169.254"), "metadata", allowed=False
    )


def test_allow_private_networks_overrides_the_class_inside_it_only() -> None:
    guard = AddressGuard(
        allow_private_networks=[
            ipaddress.ip_network("10.1.0.0/16"),
            ipaddress.ip_network("127.0.0.0/8"),
            ipaddress.ip_network("fd00::/8"),
        ]
    )
    assert guard.check(ip("10.1.2.3")) == AddressCheck(ip("10.1.2.3"), "private", allowed=True)
    assert guard.check(ip("10.2.0.1")) == AddressCheck(ip("10.2.0.1"), "private", allowed=False)
    assert guard.check(ip("127.0.0.1")) == AddressCheck(ip("127.0.0.1"), "loopback", allowed=True)
    assert guard.check(ip("fd12::1")) == AddressCheck(ip("fd12::1"), "private", allowed=True)
    assert guard.check(ip("fd00:ec2::254")) == AddressCheck(
        ip("fd00:ec2::254"), "metadata", allowed=True
    )
    assert guard.check(ip("fc00::1")) == AddressCheck(ip("fc00::1"), "private", allowed=False)
    assert not guard.check(ip("::1")).allowed
    assert not guard.check(ip("169.254.169.254")).allowed


def test_allow_private_networks_overrides_every_class() -> None:
    everything = AddressGuard(
        allow_private_networks=[ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
    )
    for entry in RANGES:
        network = ipaddress.ip_network(entry.cidr)
        for address in (network.network_address, network.broadcast_address):
            result = everything.check(address)
            assert result.allowed, entry.cidr
            assert result.address_class == classify(address)


def test_own_addresses_are_refused_unless_allowed() -> None:
    own = [ip("172.20.0.2"), ip("93.184.216.7"), ip("2a01:4f8::2")]
    guard = AddressGuard(own_addresses=own)
    # An own address that is otherwise public is refused as "own-address"; one that is
    # already refused keeps its more telling class.
    assert guard.check(ip("172.20.0.2")) == AddressCheck(ip("172.20.0.2"), "private", allowed=False)
    for address in own[1:]:
        assert guard.check(address) == AddressCheck(address, "own-address", allowed=False)
    assert guard.check(ip("2a01:4f8::3")) == AddressCheck(ip("2a01:4f8::3"), "public", allowed=True)

    allowing = AddressGuard(
        allow_private_networks=[ipaddress.ip_network("172.20.0.0/16")], own_addresses=own
    )
    assert allowing.check(ip("172.20.0.2")).allowed
    assert not allowing.check(ip("2a01:4f8::2")).allowed
    everything = AddressGuard(
        allow_private_networks=[ipaddress.ip_network("93.184.216.0/24")], own_addresses=own
    )
    assert everything.check(ip("93.184.216.7")) == AddressCheck(
        ip("93.184.216.7"), "own-address", allowed=True
    )


def test_own_address_with_a_public_address_and_a_scope_id() -> None:
    guard = AddressGuard(own_addresses=[ip("2a01:4f8::1%eth0"), ip("8.8.8.8")])
    assert guard.check(ip("2a01:4f8::1")).address_class == "own-address"
    assert guard.check(ip("2a01:4f8::1%eth1")).address_class == "own-address"
    assert guard.check(ip("8.8.8.8")) == AddressCheck(ip("8.8.8.8"), "own-address", allowed=False)


def test_own_address_loopback_allowed_by_a_benchmark_network() -> None:
    guard = AddressGuard(
        allow_private_networks=[ipaddress.ip_network("127.0.0.0/8")],
        own_addresses=[ip("127.0.0.1")],
    )
    assert guard.check(ip("127.0.0.1")) == AddressCheck(ip("127.0.0.1"), "loopback", allowed=True)


def test_first_refused() -> None:
    guard = AddressGuard()
    assert guard.first_refused([]) is None
    assert guard.first_refused([ip("1.1.1.1"), ip("2606:4700:4700::1111")]) is None
    assert guard.first_refused(
        [ip("1.1.1.1"), ip("10.0.0.1"), ip("8.8.8.8"), ip("127.0.0.1")]
    ) == AddressCheck(ip("10.0.0.1"), "private", allowed=False)
    assert guard.first_refused([ip("127.0.0.1"), ip("10.0.0.1")]) == AddressCheck(
        ip("127.0.0.1"), "loopback", allowed=False
    )


def test_first_refused_finds_one_bad_answer_among_good_ones() -> None:
    good = [ip(f"93.184.{n}.1") for n in range(10)] + [ip("2606:4700::1"), ip("2a00:1450::1")]
    guard = AddressGuard()
    assert guard.first_refused(good) is None
    for bad in ("169.254.169.254", "::ffff:127.0.0.1", "fd00:ec2::254", "0.0.0.0"):
        answer = [*good[:5], ip(bad), *good[5:]]
        refused = guard.first_refused(answer)
        assert refused is not None
        assert refused.address == ip(bad)
        assert not refused.allowed


def test_first_refused_consumes_an_iterator_lazily() -> None:
    seen: list[str] = []

    def answers() -> Iterator[IPAddress]:
        for text in ("1.1.1.1", "10.0.0.1", "8.8.8.8"):
            seen.append(text)
            yield ip(text)

    refused = AddressGuard().first_refused(answers())
    assert refused is not None
    assert refused.address == ip("10.0.0.1")
    assert seen == ["1.1.1.1", "10.0.0.1"]


def test_guard_refuses_values_that_are_not_addresses() -> None:
    with pytest.raises(TypeError, match=re.escape("'10.0.0.0/8'")):
        AddressGuard(allow_private_networks=["10.0.0.0/8"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=re.escape("'127.0.0.1'")):
        AddressGuard(own_addresses=["127.0.0.1"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=re.escape("'127.0.0.1'")):
        AddressGuard().check("127.0.0.1")  # type: ignore[arg-type]


def test_address_check_is_frozen() -> None:
    result = AddressGuard().check(ip("127.0.0.1"))
    with pytest.raises(AttributeError):
        result.allowed = True  # type: ignore[misc]


# --- parse_address -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1", ipaddress.IPv4Address("127.0.0.1")),
        ("::1", ipaddress.IPv6Address("::1")),
        ("::ffff:127.0.0.1", ipaddress.IPv6Address("::ffff:7f00:1")),
        ("2001:DB8::1", ipaddress.IPv6Address("2001:db8::1")),
    ],
)
def test_parse_address(text: str, expected: IPAddress) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text", ["fe80::1%eth0", "fe80::1%1", "::1%lo", "fe80::1%", "127.0.0.1%eth0"]
)
def test_parse_address_refuses_scope_ids(text: str) -> None:
    with pytest.raises(ValueError, match="scope") as raised:
        parse_address(text)
    assert repr(text) in str(raised.value)


@pytest.mark.parametrize("text", ["", "localhost", "127.1", "0177.0.0.1", "[::1]", " 1.2.3.4"])
def test_parse_address_refuses_what_is_not_an_address(text: str) -> None:
    with pytest.raises(ValueError, match="does not appear to be"):
        parse_address(text)


@pytest.mark.parametrize("value", [2130706433, b"\x7f\x00\x00\x01"])
def test_parse_address_wants_text(value: object) -> None:
    with pytest.raises(TypeError):
        parse_address(value)  # type: ignore[arg-type]


# --- properties --------------------------------------------------------------------

# Addresses at and around every table boundary, besides hypothesis's own bias toward
# special-purpose networks.
_boundaries = [
    address + offset
    for network, _ in REFERENCE
    for address in (network.network_address, network.broadcast_address)
    for offset in (-1, 0, 1)
    if 0 <= int(address) + offset < 2**network.max_prefixlen
]
addresses = st.one_of(
    st.ip_addresses(),
    st.ip_addresses(v=6),
    st.sampled_from(_boundaries),
    st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address),
    st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address),
)


@given(addresses)
@example(ipaddress.IPv4Address("169.254.169.254"))
@example(ipaddress.IPv6Address("::ffff:169.254.169.254"))
def test_classify_agrees_with_the_naive_reference(address: IPAddress) -> None:
    assert classify(address) == reference_classify(address)
    result = AddressGuard().check(address)
    assert result.address_class == classify(address)
    assert result.allowed is (result.address_class == "public")


@given(addresses)
def test_public_addresses_are_public_by_python_too(address: IPAddress) -> None:
    if classify(address) != "public":
        return
    assert not address.is_private
    assert not address.is_loopback
    assert not address.is_link_local
    assert not address.is_multicast
    assert not address.is_unspecified
    assert not address.is_reserved
    assert address.is_global
    if isinstance(address, ipaddress.IPv6Address):
        assert not address.is_site_local
        assert address.ipv4_mapped is None
        assert address.sixtofour is None
        assert address.teredo is None


# --- never a destination: the guardian's networks and the service's own ------------------

GUARDIAN = [ipaddress.ip_network("10.213.0.0/16"), ipaddress.ip_network("172.30.1.0/24")]
EVERY_PRIVATE = [
    ipaddress.ip_network(cidr)
    for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "::/0")
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.213.0.5", "guardian-network"),
        ("10.213.255.255", "guardian-network"),
        ("172.30.1.9", "guardian-network"),
        ("::ffff:10.213.0.5", "guardian-network"),  # the mapped form is the same host
        ("::ffff:172.30.1.9", "guardian-network"),
    ],
)
def test_guardian_networks_are_refused_whatever_allow_private_networks_says(
    text: str, expected: AddressClass
) -> None:
    guard = AddressGuard(EVERY_PRIVATE, guardian_networks=GUARDIAN)
    result = guard.check(ip(text))
    assert (result.address_class, result.allowed, result.guardian) == (expected, False, True)


@pytest.mark.parametrize("text", ["10.214.0.1", "172.30.2.1", "172.17.0.2", "192.168.1.1"])
def test_next_to_the_guardian_networks_allow_private_networks_still_counts(text: str) -> None:
    guard = AddressGuard(EVERY_PRIVATE, guardian_networks=GUARDIAN)
    result = guard.check(ip(text))
    assert (result.allowed, result.guardian) == (True, False)
    assert AddressGuard(guardian_networks=GUARDIAN).check(ip(text)).allowed is False


def test_own_networks_are_refused_and_loopback_keeps_its_class() -> None:
    own = NetworkSet(
        [
            ipaddress.ip_network("127.0.0.0/8"),
            ipaddress.ip_network("::1/128"),
            ipaddress.ip_network("0.0.0.0/8"),
            ipaddress.ip_network("172.20.0.0/16"),
            ipaddress.ip_network("93.184.216.0/24"),  # a network in public space
            ipaddress.ip_network("fd00:1::/64"),
        ]
    )
    guard = AddressGuard([*EVERY_PRIVATE, ipaddress.ip_network("93.184.216.0/24")])
    cases = {
        "127.0.0.1": "loopback",
        "::1": "loopback",
        "0.0.0.0": "unspecified",
        "172.20.5.5": "own-network",
        "93.184.216.34": "own-network",
        "fd00:1::7": "own-network",
        "::ffff:172.20.5.5": "own-network",
    }
    for text, expected in cases.items():
        result = guard.check(ip(text), own)
        assert (text, result.address_class, result.allowed, result.guardian) == (
            text,
            expected,
            False,
            True,
        )
    # Without the set (read at dial time), the allow list decides as before.
    assert guard.check(ip("172.20.5.5")).allowed is True
    assert guard.check(ip("172.21.0.1"), own).allowed is True
    assert guard.first_refused([ip("172.21.0.1"), ip("172.20.0.9")], own) == AddressCheck(
        ip("172.20.0.9"), "own-network", allowed=False, guardian=True
    )
    assert guard.first_refused([ip("172.21.0.1")], own) is None


def test_network_set_membership_and_errors() -> None:
    networks = NetworkSet([ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("fd00::/8")])
    assert ip("10.1.2.3") in networks
    assert ip("::ffff:10.1.2.3") in networks
    assert ip("10.2.0.0") not in networks
    assert ip("::ffff:10.2.0.0") not in networks
    assert ip("fd12::1") in networks
    assert ip("::10.1.2.3") not in networks  # only the mapped form stands for the IPv4 host
    assert "10.1.2.3" not in networks  # text is not an address
    assert bool(NetworkSet()) is False
    assert repr(networks) == "NetworkSet(['10.1.0.0/16', 'fd00::/8'])"
    with pytest.raises(TypeError, match=r"needs IP networks, not '10\.0\.0\.0/8'"):
        NetworkSet(["10.0.0.0/8"])  # type: ignore[list-item]


@given(st.ip_addresses(v=4), st.integers(min_value=8, max_value=32))
def test_an_ipv4_network_holds_exactly_its_mapped_addresses(
    address: ipaddress.IPv4Address, prefix: int
) -> None:
    network = ipaddress.IPv4Network((int(address), prefix), strict=False)
    networks = NetworkSet([network])
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert (address in networks) is True
    assert (mapped in networks) is True
    outside = ipaddress.IPv4Address((int(network.broadcast_address) + 1) % 2**32)
    if outside not in network:
        assert outside not in networks
        assert ipaddress.IPv6Address(f"::ffff:{outside}") not in networks
