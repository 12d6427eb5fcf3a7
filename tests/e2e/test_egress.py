"""Family 2, egress without the proxy: every way out of a cloister but the guardian's
proxy, tried from inside one (root and non-root host user), fails.

A cloister is alone on an internal network whose bridge has no IPv4 address
(``inhibit_ipv4``), with IPv6 off, every capability dropped: nothing it sends reaches
past the guardian's services on that network. The targets are the fake internet's
address (the host's address on a bridge of the harness's, where the upstream listens on
80, 443 and 8080), the default bridge's gateway (docker0), the guardian's egress
network's gateway, every IPv4 address of the host, 1.1.1.1 and 8.8.8.8. Each attack
carries a unique marker, and a capture on every interface of the host (loopback, eth0,
every bridge, the host's end of every veth) shows the marker never crossed one; each
test's control sends another marker the allowed way (through the proxy, or to the
proxy's own address) and the capture sees it, so a blind capture or a broken probe
cannot pass a test.

Attacks (the test of each, then what happens):

=======================================  ===================================================
attack (from inside)                     test: expected result
=======================================  ===================================================
TCP (bash ``/dev/tcp``, ``curl           ``test_tcp_out_fails``: every connect fails; the
--noproxy``) to the fake internet on     upstream saw no request; the marker crossed no
80/443/8080, docker0, the egress         interface. Control: the same name through the proxy
gateway, 1.1.1.1, 8.8.8.8                is answered 200 and reaches the upstream
UDP to every host address (any port)     ``test_udp_out_fails``: a host socket on 0.0.0.0
and to the outside targets on 53         gets nothing, no reply comes, the marker crossed no
                                         interface. Control: a datagram to the proxy's
                                         address is seen on the cloister's veth
ICMP echo (a ping socket: no             ``test_icmp_out_fails``: no reply, the marker
capability needed) to the same           crossed no interface. Control: the proxy's address
addresses                                replies
raw sockets: AF_INET raw (ICMP, TCP,     ``test_raw_sockets_are_refused``: each ``socket()``
UDP, any), AF_INET6 raw, AF_PACKET raw   fails with EPERM (no CAP_NET_RAW). Control: a UDP
and dgram, to the fake internet          socket opens
IPv6 to the host's IPv6 addresses        ``test_ipv6_out_fails``: the cloister has no IPv6
(link-local ones on eth0), a global      address and IPv6 off; every connect fails; a host
one, every host address as               listener on ``[::]`` (dual stack) is never
``::ffff:``                              connected. Control: the host reaches it
DNS for a unique outside name:           ``test_dns_for_outside_names_never_leaves``:
``getent hosts``/``ahosts``, perl's      nothing resolves, the engine's resolver answers
``gethostbyname``, a raw query to        with no address, the outside servers not at all;
8.8.8.8, docker0, the fake internet,     the label crossed no interface of the host.
the egress gateway, 127.0.0.11           Control: the same query sent from the host is seen
                                         by the capture; the guardian's names resolve
=======================================  ===================================================
"""

from __future__ import annotations

import secrets
import shutil
import socket
import struct

import pytest

from tests.cli.cli_support import network_gateway, run_command
from tests.e2e.harness import ALLOWED, API_PORT, Capture, Cloister, Stack, capture, shell_quote
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

CONNECT_TIMEOUT = 4
# Sends ARGV[2] (hex) to ARGV[0]:ARGV[1] over UDP, then waits 2 s for an answer.
SEND_UDP = r"""
use Socket; use IO::Select;
my ($host, $port, $hex) = @ARGV;
socket(my $s, AF_INET, SOCK_DGRAM, 0) or die "socket: $!\n";
defined(send($s, pack("H*", $hex), 0, sockaddr_in($port, inet_aton($host))))
    or do { print "$host:$port refused: $!\n"; exit 0 };
if (IO::Select->new($s)->can_read(2) and defined(recv($s, my $reply, 1500, 0))) {
    print "$host:$port reply ", unpack("H*", $reply), "\n";
} else { print "$host:$port silence\n" }
"""
# An ICMP echo request carrying ARGV[1] (hex) to ARGV[0] on a ping socket (no
# capability needed: Docker lets every group use them); waits 2 s for the reply.
PING = r"""
use Socket; use IO::Select;
my ($host, $hex) = @ARGV;
socket(my $s, AF_INET, SOCK_DGRAM, 1) or do { print "$host socket: $!\n"; exit 0 };
my $echo = pack("CCnnn", 8, 0, 0, 0, 1) . pack("H*", $hex);
defined(send($s, $echo, 0, sockaddr_in(0, inet_aton($host))))
    or do { print "$host refused: $!\n"; exit 0 };
if (IO::Select->new($s)->can_read(2) and defined(recv($s, my $reply, 1500, 0))) {
    print "$host reply\n";
} else { print "$host silence\n" }
"""
# Opens each kind of socket; the raw ones need CAP_NET_RAW.
RAW_SOCKETS = r"""
use Socket;
my @kinds = (
    ["udp", AF_INET, SOCK_DGRAM, 0],
    ["raw-icmp", AF_INET, SOCK_RAW, 1],
    ["raw-tcp", AF_INET, SOCK_RAW, 6],
    ["raw-udp", AF_INET, SOCK_RAW, 17],
    ["raw-any", AF_INET, SOCK_RAW, 255],
    ["raw6-icmp", AF_INET6, SOCK_RAW, 58],
    ["packet-raw", 17, SOCK_RAW, 0x0300],
    ["packet-dgram", 17, SOCK_DGRAM, 0x0300],
);
for my $kind (@kinds) {
    my ($name, $family, $type, $protocol) = @$kind;
    if (socket(my $s, $family, $type, $protocol)) {
        my $sent = send($s, "x", 0, sockaddr_in(80, inet_aton($ARGV[0])));
        print "$name open\n";
    } else { print "$name: $!\n" }
}
"""
RESOLVE = (
    r"""perl -e 'my @a = gethostbyname($ARGV[0]); print @a ? "perl found\n" : "perl none\n"'"""
)


def marker(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(6)}"


def split(text: str) -> str:
    """*text* as bash words that join to it inside: never whole in ``docker exec``'s
    argv (which crosses the loopback when the engine is reached over TCP)."""
    half = len(text) // 2
    return f"'{text[:half]}''{text[half:]}'"


def hexed(text: str) -> str:
    return text.encode().hex()


# --- the cloister and its targets ----------------------------------------------------------


@pytest.fixture(scope="session")
def _probers() -> dict[str, Cloister]:
    return {}


@pytest.fixture
def prober(stack: Stack, _probers: dict[str, Cloister]) -> Cloister:
    """One cloister per stack for the whole module (its attacks change nothing)."""
    key = stack.cli.instance.id
    if key not in _probers:
        _probers[key] = stack.cloister("egress")
    return _probers[key]


def ip_addresses(family: str) -> str:
    """``ip FAMILY -o addr show``: one line per address of the host's interfaces."""
    ip = shutil.which("ip")
    assert ip is not None, "iproute2's ip lists the host's addresses"
    listed = run_command([ip, family, "-o", "addr", "show"], timeout=10)
    assert listed.returncode == 0, listed.describe()
    return listed.stdout


def host_ipv4() -> list[str]:
    """Every IPv4 address of the host's interfaces (``ip -4 -o addr``)."""
    listed = ip_addresses("-4")
    return sorted({line.split()[3].split("/")[0] for line in listed.splitlines()})


def host_ipv6() -> list[str]:
    """Every IPv6 address of the host's interfaces; a link-local one as seen from a
    container (``%eth0``)."""
    listed = ip_addresses("-6")
    addresses = {line.split()[3].split("/")[0] for line in listed.splitlines()}
    return sorted(f"{a}%eth0" if a.startswith("fe80:") else a for a in addresses)


def outside(stack: Stack) -> dict[str, str]:
    """The addresses an agent would try, by what they are."""
    targets = {
        "fake internet": stack.internet.address,
        "docker0": network_gateway("bridge") or "172.17.0.1",
        "egress gateway": network_gateway(stack.cli.instance.egress_net) or "",
        "1.1.1.1": "1.1.1.1",
        "8.8.8.8": "8.8.8.8",
    }
    return {label: address for label, address in targets.items() if address}


def parallel(lines: list[str]) -> str:
    """A bash script running each line at once, and waiting for all."""
    return "".join(f"( {line} ) &\n" for line in lines) + "wait\n"


def seen_on(seen: Capture, control: str) -> set[str]:
    """The interfaces the control crossed (waited for: the capture sees, or fails)."""
    return wait_until(lambda: seen.where(control.encode()), 10, f"{control!r} in the capture")


def assert_never_crossed(seen: Capture, needle: str) -> None:
    """After the capture: *needle* crossed no interface, and no frame was missed."""
    assert seen.where(needle.encode()) == set(), (needle, seen.where(needle.encode()))
    assert seen.dropped == 0, f"the capture missed {seen.dropped} frames: run again"


def exits(output: str) -> dict[str, int]:
    """``WHAT exit=N`` lines: each probe's exit status."""
    found: dict[str, int] = {}
    for line in output.splitlines():
        what, _, status = line.rpartition(" exit=")
        if what and status.isdigit():
            found[what] = int(status)
    return found


def tcp_probe(address: str, port: int) -> str:
    return (
        f"timeout {CONNECT_TIMEOUT} bash -c 'exec 3<>/dev/tcp/{address}/{port}';"
        f' echo "{address}:{port} exit=$?"'
    )


def host_addresses(stack: Stack) -> list[str]:
    """The host's IPv4 addresses (loopback inside is the cloister's own) and the outside
    targets, once each."""
    found = {a for a in host_ipv4() if not a.startswith("127.")} | set(outside(stack).values())
    return sorted(found)


def perl(script: str, *args: str) -> str:
    return f"perl -e {shell_quote(script)} {' '.join(args)}"


def dns_query(name: str) -> bytes:
    """A DNS query (one question: A, IN) for *name*, recursion desired."""
    header = struct.pack("!HHHHHH", secrets.randbelow(65536), 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return header + labels + b"\0" + struct.pack("!HH", 1, 1)


# --- the attacks -----------------------------------------------------------------------------


def test_tcp_out_fails(stack: Stack, prober: Cloister) -> None:
    direct, via = marker("direct"), marker("via-proxy")
    address = stack.internet.address
    probes = [
        tcp_probe(target, port)
        for label, target in outside(stack).items()
        for port in ((80, 443, API_PORT) if label == "fake internet" else (80, 443))
    ]
    curl = f"curl -sS --noproxy '*' --max-time {CONNECT_TIMEOUT}"
    probes += [
        f'{curl} -H "Host: {ALLOWED}" "http://{address}/$m"; echo "curl http exit=$?"',
        f"{curl} --cacert /work/e2e-ca.pem --resolve {ALLOWED}:443:{address}"
        f' "https://{ALLOWED}/$m"; echo "curl https exit=$?"',
        f'{curl} "http://{address}:{API_PORT}/$m"; echo "curl api exit=$?"',
    ]
    with capture(direct.encode(), via.encode()) as seen:
        result = prober.sh(f"m={split(direct)}\n" + parallel(probes), timeout=90)
        status, _body = prober.curl(f"http://{ALLOWED}/{via}")  # the control: the proxy
        assert status == "200", _body
        seen_on(seen, via)
    found = exits(result.stdout)
    assert len(found) == len(probes), result.describe()
    assert all(found.values()), (found, result.describe())
    assert not stack.internet.seen(direct)
    assert stack.internet.seen(via)
    assert_never_crossed(seen, direct)


def test_udp_out_fails(stack: Stack, prober: Cloister) -> None:
    direct, control = marker("udp"), marker("udp-control")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("0.0.0.0", 0))
        port = receiver.getsockname()[1]
        receiver.settimeout(5)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as own:  # the receiver works
            own.sendto(b"from the host", ("127.0.0.1", port))
        assert receiver.recv(100) == b"from the host"
        lines = [perl(SEND_UDP, address, str(port), "$h") for address in host_addresses(stack)]
        lines += [perl(SEND_UDP, address, "53", "$h") for address in outside(stack).values()]
        with capture(direct.encode(), control.encode()) as seen:
            result = prober.sh(f"h={hexed(direct)}\n" + parallel(lines), timeout=60)
            # The control: the same datagram to the proxy's address, on the cloister's network.
            prober.ok(perl(SEND_UDP, "cloister-guardian-proxy", "9", hexed(control)))
            assert any(name.startswith("veth") for name in seen_on(seen, control))
        receiver.setblocking(False)
        with pytest.raises(BlockingIOError):
            receiver.recv(100)
    assert result.stdout.count("\n") == len(lines), result.describe()
    assert " reply " not in result.stdout, result.describe()
    assert_never_crossed(seen, direct)


def test_icmp_out_fails(stack: Stack, prober: Cloister) -> None:
    direct, control = marker("icmp"), marker("icmp-control")
    lines = [perl(PING, address, "$h") for address in host_addresses(stack)]
    with capture(direct.encode(), control.encode()) as seen:
        result = prober.sh(f"h={hexed(direct)}\n" + parallel(lines), timeout=60)
        answered = prober.ok(perl(PING, "cloister-guardian-proxy", hexed(control)))
        assert answered.stdout == "cloister-guardian-proxy reply\n", answered.describe()
        seen_on(seen, control)
    assert result.stdout.count("\n") == len(lines), result.describe()
    assert " reply" not in result.stdout, result.describe()
    assert_never_crossed(seen, direct)


def test_raw_sockets_are_refused(stack: Stack, prober: Cloister) -> None:
    result = prober.ok(perl(RAW_SOCKETS, stack.internet.address))
    lines = dict(line.split(maxsplit=1) for line in result.stdout.replace(":", "").splitlines())
    assert lines.pop("udp") == "open", result.describe()  # the control: socket() works
    assert len(lines) == 7, result.describe()
    assert set(lines.values()) == {"Operation not permitted"}, result.describe()


def test_ipv6_out_fails(stack: Stack, prober: Cloister) -> None:
    state = prober.ok(
        "cat /proc/net/if_inet6; cat /proc/sys/net/ipv6/conf/all/disable_ipv6"
        " /proc/sys/net/ipv6/conf/eth0/disable_ipv6"
    )
    assert state.stdout == "1\n1\n", state.describe()  # no IPv6 address, IPv6 off
    with socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("::1", port), timeout=5):  # the listener works
            server.accept()[0].close()
        mapped = [f"::ffff:{address}" for address in host_addresses(stack)]
        targets = [*host_ipv6(), "2001:4860:4860::8888", *mapped]
        curl = f"curl -g -sS --noproxy '*' --max-time {CONNECT_TIMEOUT}"
        lines = [
            f'{curl} "http://[{target.replace("%", "%25")}]:{port}/"; echo "{target} exit=$?"'
            for target in targets
        ]
        result = prober.sh(parallel(lines), timeout=60)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    found = exits(result.stdout)
    assert len(found) == len(targets), result.describe()
    assert all(found.values()), (found, result.describe())


def test_dns_for_outside_names_never_leaves(stack: Stack, prober: Cloister) -> None:
    label, control = marker("leak"), marker("leak-control")
    name = f"{label}.example.com"
    query = dns_query(name).hex()
    servers = [*outside(stack).values(), "127.0.0.11"]  # the last: the engine's resolver
    lines = [
        f'timeout 40 getent hosts {split(name)}; echo "getent hosts exit=$?"',
        f'timeout 40 getent ahosts {split(name)}; echo "getent ahosts exit=$?"',
        f"timeout 40 {RESOLVE} {split(name)}",
        *(perl(SEND_UDP, server, "53", query) for server in servers),
    ]
    with capture(label.encode(), control.encode()) as seen:
        result = prober.sh(parallel(lines), timeout=90)
        # The control: the same query from the host, out of eth0 and over the loopback.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host:
            for server in ("8.8.8.8", stack.internet.address):
                try:
                    host.sendto(dns_query(f"{control}.example.com"), (server, 53))
                except OSError:  # no route out of this host: the loopback one shows it
                    continue
        seen_on(seen, control)
        resolved = prober.ok("getent hosts cloister-guardian-proxy")  # the resolver works
        assert resolved.stdout.strip(), resolved.describe()
    found = exits(result.stdout)
    assert found == {"getent hosts": 2, "getent ahosts": 2}, result.describe()
    assert "perl none" in result.stdout, result.describe()
    for line in result.stdout.splitlines():
        where, _, reply = line.partition(" reply ")
        if reply:  # only the engine's own resolver answers, and with no address
            assert where == "127.0.0.11:53", result.describe()
            assert bytes.fromhex(reply)[6:8] == b"\0\0", result.describe()
    assert_never_crossed(seen, label)
