"""The SSRF guard: which resolved addresses the proxy may dial.

The proxy resolves a destination name itself, checks *every* address in the answer
with an :class:`AddressGuard`, refuses the connection if any one of them is refused,
and then dials exactly the addresses it checked (never resolving again, so a DNS
answer cannot change between the check and the connection). This module is the
check: pure classification of :mod:`ipaddress` values, no I/O, no DNS. Numeric host
spellings (``2130706433``, ``0x7f.1``) are normalised to addresses before they get
here, by :func:`cloister_core.hosts.normalize_host`.

:func:`classify` walks one explicit, ordered table, :data:`ADDRESS_TABLE`, of
``(network, class)`` entries; the first entry containing the address wins, so a more
specific entry always comes before the range that contains it (``169.254.169.254/32``
"metadata" before ``169.254.0.0/16`` "link-local"). An address no entry contains is
``"public"``. Everything that is not public is refused unless it lies inside one of
the operator's ``allow_private_networks`` CIDRs. Why each group is refused:

* **loopback, unspecified, own-address** — SSRF to the proxy's own host: ``127.0.0.0/8``
  and ``::1`` are the proxy container itself (its health endpoint, anything bound to
  localhost); ``0.0.0.0`` and ``::`` reach the local host too when dialled on Linux,
  and so does the rest of ``0.0.0.0/8`` ("this network") on kernels that accept it.
  The proxy's own addresses (given to the guard, they depend on the deployment) are
  refused for the same reason: a hairpin back into the proxy or its networks.
* **metadata** — the cloud instance metadata and credential services, the most
  valuable SSRF target there is (instance credentials): ``169.254.169.254`` (AWS, GCP,
  Azure, OpenStack, …), ``169.254.170.2`` (ECS task credentials), ``100.100.100.200``
  (Alibaba), ``fd00:ec2::254`` (AWS IMDS over IPv6). They would be refused anyway as
  link-local, CGNAT or unique local; the separate class makes the refusal say what
  was at stake, and they are listed first so that no broader entry can shadow them.
* **private, cgnat, link-local** — internal networks: RFC 1918, IPv6 unique local
  ``fc00::/7``, carrier-grade NAT ``100.64.0.0/10`` (used inside clouds and by
  Tailscale-style overlays) and link-local ``169.254.0.0/16`` / ``fe80::/10``. A
  sandboxed agent must not reach the LAN, the Docker networks or the host's bridges
  through the proxy.
* **multicast, reserved, documentation, benchmarking** — not unicast destinations on
  the internet (multicast, class E ``240.0.0.0/4``, broadcast, discard-only
  ``100::/64``, deprecated site-local ``fec0::/10``, ORCHID, SRv6 SIDs) or reserved for
  examples and test labs. No real service is there, so an answer pointing there is a
  mistake or an attempt to reach something local that happens to use the space.
  ``192.0.0.0/24`` and ``2001::/23`` (IETF protocol assignments) are refused whole,
  including the few anycast services in them that are globally reachable: nothing a
  coding agent needs, and an operator can allow them explicitly.
* **ipv4-mapped, ipv4-compatible, nat64, 6to4, teredo** — transition forms that embed
  an IPv4 address in an IPv6 one. Dialled, they can end at the embedded IPv4 target
  (``::ffff:127.0.0.1`` *is* ``127.0.0.1`` on a dual-stack socket; a NAT64 gateway or
  a 6to4 / Teredo relay forwards to the embedded address), which would smuggle an IPv4
  target past a check that only looks at IPv4. Rather than decode and re-check the
  embedded address, the whole prefixes are refused whatever they embed: a public
  IPv4 destination is reachable directly, so nothing legitimate is lost. ISATAP-style
  interface identifiers in an ordinary global prefix are not refused: such an address
  routes to that prefix's owner, not into our networks.

Additions beyond the obvious lists (each a deliberate choice):

* ``169.254.170.23`` and ``fd00:ec2::23`` (the EKS Pod Identity credential agent) and
  ``fe80::a9fe:a9fe`` (OpenStack metadata over IPv6) are "metadata". They sit inside
  ranges that are refused anyway; the class only names the target.
* ``168.63.129.16`` (Azure's WireServer / host agent endpoint) is "metadata". It is in
  ordinary-looking public space, so without this entry it would be *allowed*; on
  Azure it is a platform service reachable from every VM.
* The IPv6 space outside global unicast ``2000::/3`` (``::/3``, ``4000::/2``,
  ``8000::/1``) is "reserved" after all the specific entries: IANA reserves it for the
  IETF and no internet host lives there, so an address there can only be something
  local (``100:0:0:1::/64``, unassigned space a site routes internally, …). This also
  makes the guard refuse everything Python's ``ipaddress`` calls ``is_reserved``.
* ``0.0.0.0/32`` "unspecified" comes before ``0.0.0.0/8`` "reserved", ``::`` and
  ``::1`` before ``::/96`` "ipv4-compatible", and ``255.255.255.255/32`` "reserved"
  (broadcast) before ``240.0.0.0/4``: the specific class reads better in a refusal.

**Never a destination.** Two sets of networks are refused before
``allow_private_networks`` is even looked at, so no config value can open them:

* the guardian's own networks, given to the guard by the service's settings
  (``guardian_networks``: the cloister network pool and the subnets of the guardian's
  egress, control and ports networks), class "guardian-network";
* the networks of the service's own interfaces and loopback, read at dial time (a
  cloister's network is connected to the proxy while it runs) and passed to
  :meth:`AddressGuard.check` as a :class:`NetworkSet`, class "own-network" (loopback
  and unspecified addresses keep their class, which says more).

An allowed ``172.16.0.0/12`` therefore still opens a LAN host in that range, but never
the approval hub on the guardian's control network. Each IPv4 network of these sets
is also refused in its IPv4-mapped IPv6 form (``::ffff:10.213.0.5``).

An ``allow_private_networks`` entry overrides every other class, own-address included: the
operator asked for exactly that range (a benchmark upstream on ``127.0.0.1`` with
``127.0.0.0/8`` allowed). It matches the address family it is written in: allowing
``127.0.0.0/8`` does not allow ``::ffff:127.0.0.1``; list the mapped form too if it is
really wanted. Note that allowing ``169.254.0.0/16`` allows the metadata service.

:meth:`AddressGuard.check` is on the per-connection path, so the table is compiled
once into per-version ``(network, mask, class)`` integer triples and scanned with one
``&`` and one ``==`` per entry; own addresses are a set of integers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

AddressClass = Literal[
    "public",
    "loopback",
    "private",
    "link-local",
    "metadata",
    "cgnat",
    "multicast",
    "unspecified",
    "reserved",
    "ipv4-mapped",
    "ipv4-compatible",
    "nat64",
    "6to4",
    "teredo",
    "documentation",
    "benchmarking",
    "own-address",
    "guardian-network",
    "own-network",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Most specific first: the first entry that contains an address gives its class.
# tests/proxy/test_addresses.py keeps its own copy to check classify() against.
_TABLE_TEXT: Final[tuple[tuple[str, AddressClass], ...]] = (
    # --- IPv4 ---------------------------------------------------------------------
    ("0.0.0.0/32", "unspecified"),  # RFC 1122; dialled, it is the local host
    ("0.0.0.0/8", "reserved"),  # RFC 791 "this network"
    ("10.0.0.0/8", "private"),  # RFC 1918
    ("100.100.100.200/32", "metadata"),  # Alibaba Cloud metadata
    ("100.64.0.0/10", "cgnat"),  # RFC 6598 shared address space
    ("127.0.0.0/8", "loopback"),  # RFC 1122
    ("168.63.129.16/32", "metadata"),  # Azure WireServer (public space!)
    ("169.254.169.254/32", "metadata"),  # AWS/GCP/Azure/OpenStack/... instance metadata
    ("169.254.170.2/32", "metadata"),  # AWS ECS task metadata and credentials
    ("169.254.170.23/32", "metadata"),  # AWS EKS Pod Identity credentials
    ("169.254.0.0/16", "link-local"),  # RFC 3927
    ("172.16.0.0/12", "private"),  # RFC 1918
    ("192.0.0.0/24", "reserved"),  # RFC 6890 IETF protocol assignments
    ("192.0.2.0/24", "documentation"),  # RFC 5737 TEST-NET-1
    ("192.88.99.0/24", "reserved"),  # RFC 7526 deprecated 6to4 relay anycast
    ("192.168.0.0/16", "private"),  # RFC 1918
    ("198.18.0.0/15", "benchmarking"),  # RFC 2544
    ("198.51.100.0/24", "documentation"),  # RFC 5737 TEST-NET-2
    ("203.0.113.0/24", "documentation"),  # RFC 5737 TEST-NET-3
    ("224.0.0.0/4", "multicast"),  # RFC 5771
    ("255.255.255.255/32", "reserved"),  # RFC 919 limited broadcast
    ("240.0.0.0/4", "reserved"),  # RFC 1112 class E
    # --- IPv6 ---------------------------------------------------------------------
    ("::/128", "unspecified"),  # RFC 4291
    ("::1/128", "loopback"),  # RFC 4291
    ("::ffff:0:0/96", "ipv4-mapped"),  # RFC 4291
    ("::ffff:0:0:0/96", "ipv4-mapped"),  # RFC 2765 SIIT "IPv4-translated"
    ("::/96", "ipv4-compatible"),  # RFC 4291, deprecated
    ("64:ff9b::/96", "nat64"),  # RFC 6052 well-known prefix
    ("64:ff9b:1::/48", "nat64"),  # RFC 8215 local-use prefix
    ("100::/64", "reserved"),  # RFC 6666 discard-only
    ("2001::/32", "teredo"),  # RFC 4380
    ("2001:2::/48", "benchmarking"),  # RFC 5180
    ("2001:10::/28", "reserved"),  # RFC 4843 ORCHID, deprecated
    ("2001:20::/28", "reserved"),  # RFC 7343 ORCHIDv2
    ("2001::/23", "reserved"),  # RFC 2928 rest of the IETF protocol assignments
    ("2001:db8::/32", "documentation"),  # RFC 3849
    ("2002::/16", "6to4"),  # RFC 3056
    ("3fff::/20", "documentation"),  # RFC 9637
    ("5f00::/16", "reserved"),  # RFC 9602 SRv6 SIDs
    ("fd00:ec2::254/128", "metadata"),  # AWS IMDS over IPv6
    ("fd00:ec2::23/128", "metadata"),  # AWS EKS Pod Identity over IPv6
    ("fc00::/7", "private"),  # RFC 4193 unique local
    ("fe80::a9fe:a9fe/128", "metadata"),  # OpenStack metadata over IPv6
    ("fe80::/10", "link-local"),  # RFC 4291
    ("fec0::/10", "reserved"),  # RFC 3879 deprecated site-local
    ("ff00::/8", "multicast"),  # RFC 4291
    # Everything outside global unicast 2000::/3 not matched above: IETF reserved.
    ("::/3", "reserved"),
    ("4000::/2", "reserved"),
    ("8000::/1", "reserved"),
)

ADDRESS_TABLE: Final[tuple[tuple[IPNetwork, AddressClass], ...]] = tuple(
    (ipaddress.ip_network(cidr), address_class) for cidr, address_class in _TABLE_TEXT
)
"""The classification table, in order: the first network containing an address wins."""

# (network as int, netmask as int, class), per IP version, in table order.
_Compiled = tuple[tuple[int, int, AddressClass], ...]


def _compile(version: int) -> _Compiled:
    return tuple(
        (int(network.network_address), int(network.netmask), address_class)
        for network, address_class in ADDRESS_TABLE
        if network.version == version
    )


_TABLE_V4: Final = _compile(4)
_TABLE_V6: Final = _compile(6)


def _lookup(value: int, table: _Compiled) -> AddressClass:
    for network, mask, address_class in table:
        if value & mask == network:
            return address_class
    return "public"


def classify(address: IPAddress) -> AddressClass:
    """The class of *address* by :data:`ADDRESS_TABLE`; never ``"own-address"``.

    An IPv6 scope id (``fe80::1%eth0``) plays no part: only the address bits count.
    """
    if isinstance(address, ipaddress.IPv4Address):
        return _lookup(int(address), _TABLE_V4)
    if isinstance(address, ipaddress.IPv6Address):
        return _lookup(int(address), _TABLE_V6)
    raise TypeError(f"not an IP address: {address!r}")


_MAPPED_V4 = int(ipaddress.IPv6Address("::ffff:0:0"))
_ALL_V6 = (1 << 128) - 1


class NetworkSet:
    """A set of networks compiled for membership tests: ``(network, mask)`` integers.

    Each IPv4 network is also held in its IPv4-mapped IPv6 form, so ``::ffff:a.b.c.d``
    is in the set exactly when ``a.b.c.d`` is.
    """

    __slots__ = ("_v4", "_v6", "networks")

    def __init__(self, networks: Iterable[IPNetwork] = ()) -> None:
        v4: list[tuple[int, int]] = []
        v6: list[tuple[int, int]] = []
        kept: list[IPNetwork] = []
        for network in networks:
            if not isinstance(network, ipaddress.IPv4Network | ipaddress.IPv6Network):
                raise TypeError(f"a network set needs IP networks, not {network!r}")
            kept.append(network)
            value, mask = int(network.network_address), int(network.netmask)
            if network.version == 4:
                v4.append((value, mask))
                v6.append((_MAPPED_V4 | value, (_ALL_V6 << 32 | mask) & _ALL_V6))
            else:
                v6.append((value, mask))
        self._v4: tuple[tuple[int, int], ...] = tuple(dict.fromkeys(v4))
        self._v6: tuple[tuple[int, int], ...] = tuple(dict.fromkeys(v6))
        self.networks: tuple[IPNetwork, ...] = tuple(dict.fromkeys(kept))

    def __repr__(self) -> str:
        return f"NetworkSet({[str(network) for network in self.networks]!r})"

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, address: object) -> bool:
        if isinstance(address, ipaddress.IPv4Address):
            return self.holds(int(address), 4)
        if isinstance(address, ipaddress.IPv6Address):
            return self.holds(int(address), 6)
        return False

    def holds(self, value: int, version: int) -> bool:
        """Whether the address *value* (an int of IP *version*) is in one of the networks."""
        for network, mask in self._v4 if version == 4 else self._v6:
            if value & mask == network:
                return True
        return False


NO_NETWORKS: Final = NetworkSet()


@dataclass(frozen=True, slots=True)
class AddressCheck:
    """The verdict on one address: its class and whether the proxy may dial it."""

    address: IPAddress
    address_class: AddressClass
    allowed: bool  # True if public, or inside allow_private_networks
    # One of the guardian's own networks (or the service's own, or loopback): refused
    # whatever allow_private_networks says.
    guardian: bool = False


class AddressGuard:
    """Built once per config: the allow_private_networks list, the proxy's own addresses
    and the guardian's networks (never a destination).

    Immutable after construction; :meth:`check` is cheap enough for every connection.
    """

    __slots__ = ("_allow_v4", "_allow_v6", "_guardian", "_own_v4", "_own_v6")

    def __init__(
        self,
        allow_private_networks: Iterable[IPNetwork] = (),
        own_addresses: Iterable[IPAddress] = (),
        guardian_networks: Iterable[IPNetwork] | NetworkSet = (),
    ) -> None:
        allow_v4: list[tuple[int, int]] = []
        allow_v6: list[tuple[int, int]] = []
        for network in allow_private_networks:
            if not isinstance(network, ipaddress.IPv4Network | ipaddress.IPv6Network):
                raise TypeError(f"allow_private_networks needs IP networks, not {network!r}")
            entry = (int(network.network_address), int(network.netmask))
            (allow_v4 if network.version == 4 else allow_v6).append(entry)
        own_v4: set[int] = set()
        own_v6: set[int] = set()
        for address in own_addresses:
            if not isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
                raise TypeError(f"own_addresses needs IP addresses, not {address!r}")
            (own_v4 if address.version == 4 else own_v6).add(int(address))
        self._allow_v4: tuple[tuple[int, int], ...] = tuple(allow_v4)
        self._allow_v6: tuple[tuple[int, int], ...] = tuple(allow_v6)
        self._own_v4: frozenset[int] = frozenset(own_v4)
        self._own_v6: frozenset[int] = frozenset(own_v6)
        self._guardian = (
            guardian_networks
            if isinstance(guardian_networks, NetworkSet)
            else NetworkSet(guardian_networks)
        )

    def __repr__(self) -> str:
        allowed = len(self._allow_v4) + len(self._allow_v6)
        own = len(self._own_v4) + len(self._own_v6)
        guardian = len(self._guardian.networks)
        return (
            f"AddressGuard({allowed} allowed networks, {own} own addresses,"
            f" {guardian} guardian networks)"
        )

    def check(self, address: IPAddress, own_networks: NetworkSet = NO_NETWORKS) -> AddressCheck:
        """Classify *address* and say whether it may be dialled.

        The guardian's networks and *own_networks* (the service's interfaces and
        loopback, read at dial time) are refused before allow_private_networks is
        consulted. An own address is reported as "own-address" only when the table
        would call it public: for 127.0.0.1 "loopback" says more, and both refuse.
        """
        if isinstance(address, ipaddress.IPv4Address):
            table, own, allow = _TABLE_V4, self._own_v4, self._allow_v4
        elif isinstance(address, ipaddress.IPv6Address):
            table, own, allow = _TABLE_V6, self._own_v6, self._allow_v6
        else:
            raise TypeError(f"not an IP address: {address!r}")
        value = int(address)
        address_class = _lookup(value, table)
        if self._guardian.holds(value, address.version):
            never = _never_class(address_class, "guardian-network")
            return AddressCheck(address, never, allowed=False, guardian=True)
        if own_networks.holds(value, address.version):
            never = _never_class(address_class, "own-network")
            return AddressCheck(address, never, allowed=False, guardian=True)
        if address_class == "public" and value in own:
            address_class = "own-address"
        allowed = address_class == "public"
        if not allowed:
            for network, mask in allow:
                if value & mask == network:
                    allowed = True
                    break
        return AddressCheck(address, address_class, allowed)

    def first_refused(
        self, addresses: Iterable[IPAddress], own_networks: NetworkSet = NO_NETWORKS
    ) -> AddressCheck | None:
        """The first of *addresses* that may not be dialled, or None if all may be."""
        for address in addresses:
            result = self.check(address, own_networks)
            if not result.allowed:
                return result
        return None


def _never_class(address_class: AddressClass, set_class: AddressClass) -> AddressClass:
    # "loopback" names 127.0.0.1 better than "own-network" does.
    return address_class if address_class in ("loopback", "unspecified") else set_class


def parse_address(text: str) -> IPAddress:
    """:func:`ipaddress.ip_address` for text only, refusing IPv6 scope ids.

    A scope id (``fe80::1%eth0``) names an interface on the proxy's host: a
    destination must not choose one. Raises ValueError quoting *text*.
    """
    if not isinstance(text, str):
        raise TypeError(f"an IP address must be given as text, not {text!r}")
    if "%" in text:
        raise ValueError(f"IPv6 scope ids are not allowed: {text!r}")
    return ipaddress.ip_address(text)
