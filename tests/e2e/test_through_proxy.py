"""Family 4, through the proxy and the credential gateway: what a cloister sends them
that they must never carry out.

Every attack is sent from inside a cloister of the shared stack (root and non-root host
user): with curl where a real client would, and as raw bytes over a TCP socket (perl)
where the attack is the bytes themselves (an address spelt as the resolver reads it,
smuggled framing, an oversized head), with the cloister's own token in
``Proxy-Authorization``, so nothing fails for want of a token. What arrived upstream is
read from the fake internet's logs (``requests()``: the web servers; ``api_requests()``:
the fake model APIs behind the credential gateway). Names made to resolve to private
addresses (:meth:`~tests.e2e.harness.Stack.resolve_to`) sit under the allowed
``*.wild.example.test``, so the policy lets them through and only the address guard
stands in the way. Each refusal is matched on its status, its ``X-Cloister-Reason`` and
the message naming the address and its class; each test has a control that the same
probe succeeds where it should.

=============================================================  ===================================
attack (from inside the cloister)                              result
=============================================================  ===================================
``test_ip_literals_in_every_notation``: CONNECT and            403 ``not-approved`` ("is an IP
absolute-URI GET to 127.0.0.1, 2130706433, 0x7f000001,         address", the dotted quad named:
0177.0.0.1, 127.1, [::1], [::ffff:127.0.0.1],                  every notation is read as the
169.254.169.254, 10.213.0.1 (the cloister pool), 0.0.0.0 and   resolver reads it); the fake
the fake internet's own address as a literal; curl's own       internet's address gets nothing;
spellings too                                                  control: its name, 200
``test_names_resolving_to_private_addresses``: allowed names   403 ``private-address`` or
resolving to loopback, metadata (169.254.169.254,              ``guardian-network``, the message
169.254.170.2, 100.100.100.200, fd00:ec2::254), RFC 1918,      naming the address and its class;
link-local, CGNAT, 0.0.0.0, ::1, fd00::1, IPv4-mapped          a name with one allowed and one
(also of the allowed address), the cloister pool, and one      loopback address is refused whole;
name with both an allowed and a loopback address               control: the allowed address, 200
``test_the_guardians_own_services``: CONNECT to the services'  by alias: held, approved once by
aliases (``approval``, ``cloister-guardian``,                  the human, still 403
``cloister-guardian-credentials``,                             ``guardian-network``; by address:
``cloister-guardian-proxy``) and to names resolving to their   403 ``guardian-network`` naming
addresses (cloister network, control network, egress) and to   it; nothing is dialled
the cloister's own address
``test_ports_not_allowed``: an allowed name on 8080, 22,       403 ``port-not-allowed``, nothing
3128, 8443; the fake model API (``api.example.test:8080``)     upstream; control: 443 and 80 of
straight through the proxy, not via the gateway                the same name, 200
``test_request_smuggling``: absolute-URI requests to the       400, the connection closed;
allowed name with CL.TE, TE.CL, two Content-Lengths, a         neither the request nor the
Content-Length list, obs-fold, bare LF (line end and inside    smuggled one reaches the fake
a header), a space before the colon, ``xchunked``, ``chunked,  internet; control: a body that
identity``, a vertical tab, TE in HTTP/1.0, a NUL; a second    looks like a request arrives as
request after a bad chunk size; the same CL.TE at the          one POST, and two pipelined GETs
credential gateway                                             both arrive
``test_heads_over_the_limit``: a 17 KiB header, 400 small      431, nothing upstream (proxy) and
headers, a 17 KiB request target, at the proxy and at the      nothing at the fake API (gateway);
credential gateway                                             control: a 15 KiB head, 200
``test_the_key_stays_with_the_gateway``: each agent's real     the fake API gets the real key
call; error answers of the API and of the gateway; a           (never the token) only for the
method-override header; Host, absolute-URI, ``..``, ``//``,    allowed calls; the key is in no
``@`` and ``%2f`` targets at the gateway; the token sent       answer, no header, no env or file
through the proxy to the fake internet                         of the cloister, and never at the
                                                               web servers of the fake internet
``test_calls_outside_each_vendors_table``: per vendor,         405 (method) or 403 (path, query,
DELETE of a model, stored completions or batches, the model    override), audited with the
list where the table lacks it, a query the call does not       reason; none reaches the fake API;
take (Gemini's ``?key=``), a repeated parameter                control: ``POST /v1/responses``
                                                               arrives with the real key
``test_an_api_base_resolving_to_a_private_address``: the       502 naming the address and its
agents' API name made to resolve to loopback, the metadata     class, nothing dialled (the fake
address, an RFC 1918 address and the cloister pool             API sees nothing); control: the
                                                               name mapped back, 200
=============================================================  ===================================
"""

from __future__ import annotations

import base64
import json
import secrets
import shlex
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from cloister_core.credentials import PROVIDERS
from cloister_core.stack import CREDENTIALS_ALIAS, CREDENTIALS_PORT, credentials_url
from tests.cli.cli_support import docker_executable, run_command
from tests.e2e.harness import ALLOWED, API, API_PORT, DENIED, WILD, Cloister, Stack
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

GATEWAY = f"{CREDENTIALS_ALIAS}:{CREDENTIALS_PORT}"
ARGUMENT_BYTES = 40_000  # probes per exec: their hex goes in one argument of at most 128 KiB
# Sends each probe (hex) on a connection of its own to PEER and prints the answer (hex),
# one line per probe, after the peer closed or stayed silent for WAIT seconds.
RAW = r"""
use strict; use IO::Socket::INET;
$SIG{PIPE} = "IGNORE";
my ($peer, $wait, @probes) = @ARGV;
for my $hex (@probes) {
    my $s = IO::Socket::INET->new(PeerAddr => $peer, Timeout => 10);
    if (!$s) { print "\n"; next; }
    binmode $s;
    my $data = pack("H*", $hex);
    while (length $data) {
        my $n = syswrite($s, $data);
        last unless defined $n && $n > 0;
        substr($data, 0, $n) = "";
    }
    my ($out, $rin) = ("", "");
    vec($rin, fileno($s), 1) = 1;
    while (select(my $r = $rin, undef, undef, $wait)) {
        my $n = sysread($s, my $buf, 65536);
        last unless $n;
        $out .= $buf;
    }
    print unpack("H*", $out), "\n";
    close $s;
}
"""


@dataclass(frozen=True)
class Answer:
    """One raw answer: everything the peer sent back on the connection."""

    raw: bytes

    @property
    def status(self) -> int:
        line = self.raw.split(b"\r\n", 1)[0].split(b" ")
        return int(line[1]) if len(line) > 1 and line[0].startswith(b"HTTP/") else 0

    @property
    def head(self) -> dict[str, str]:
        text = self.raw.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        lines = text.split("\r\n")[1:]
        return {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}

    @property
    def after(self) -> bytes:
        """Whatever came after the first message (a second answer: a smuggled request)."""
        rest = self.raw.partition(b"\r\n\r\n")[2]
        return rest[int(self.head.get("content-length", "0")) :]

    @property
    def reason(self) -> str | None:
        return self.head.get("x-cloister-reason")

    @property
    def body(self) -> str:
        return self.raw.split(b"\r\n\r\n", 1)[-1].decode("utf-8", errors="replace")

    def __str__(self) -> str:
        return self.raw[:600].decode("latin-1")


def raw(cloister: Cloister, peer: str, probes: list[bytes], wait: float = 3) -> list[Answer]:
    """Each of *probes* sent from inside *cloister* on a new connection to *peer*."""
    if len(probes) > 1 and sum(len(probe) for probe in probes) > ARGUMENT_BYTES:
        return [answer for probe in probes for answer in raw(cloister, peer, [probe], wait)]
    argv = ["perl", "-e", RAW, peer, f"{wait:g}", *(probe.hex() for probe in probes)]
    script = " ".join(shlex.quote(part) for part in argv)
    result = cloister.sh(script, timeout=30 + len(probes) * (wait + 12))
    assert result.returncode == 0, result.describe()
    lines = result.stdout.split("\n")[: len(probes)]
    assert len(lines) == len(probes), result.describe()
    return [Answer(bytes.fromhex(line.strip())) for line in lines]


def auth(cloister: Cloister) -> str:
    token = cloister.stack.cli.token(cloister.name)
    encoded = base64.b64encode(f"cloister:{token}".encode()).decode()
    return f"Proxy-Authorization: Basic {encoded}\r\n"


def connect(cloister: Cloister, authority: str) -> bytes:
    return f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth(cloister)}\r\n".encode()


def get(cloister: Cloister, url: str, extra: str = "") -> bytes:
    host = url.split("/")[2]
    return (
        f"GET {url} HTTP/1.1\r\nHost: {host}\r\n{auth(cloister)}{extra}Connection: close\r\n\r\n"
    ).encode()


def arrived(stack: Stack, marker: str) -> list[dict[str, Any]]:
    """What reached the fake internet's web servers with *marker* in its path."""
    return [entry for entry in stack.internet.requests() if marker in entry["path"]]


def control_arrives(cloister: Cloister, marker: str) -> None:
    """A plain request through the proxy arrives (after every probe sent before it)."""
    (answer,) = raw(
        cloister, cloister.stack.proxy_alias, [get(cloister, f"http://{ALLOWED}/{marker}")]
    )
    assert answer.status == 200, answer
    wait_until(lambda: arrived(cloister.stack, marker), 10, f"{marker} upstream")


@pytest.fixture(scope="session")
def prober(stack: Stack) -> Cloister:
    """The cloister most of this family's attacks come from (one per stack)."""
    return stack.cloister("through")


# --- the proxy: IP literals ----------------------------------------------------------------

LITERALS = {
    # as sent: the address the proxy must read it as
    "127.0.0.1": "127.0.0.1",
    "2130706433": "127.0.0.1",
    "0x7f000001": "127.0.0.1",
    "0177.0.0.1": "127.0.0.1",
    "127.1": "127.0.0.1",
    "0x7f.1": "127.0.0.1",
    "[::1]": "::1",
    "[::ffff:127.0.0.1]": "::ffff:",
    "169.254.169.254": "169.254.169.254",
    "0251.0376.0251.0376": "169.254.169.254",
    "10.213.0.1": "10.213.0.1",
    "0.0.0.0": "0.0.0.0",
}


def test_ip_literals_in_every_notation(stack: Stack, prober: Cloister) -> None:
    marker = f"literal-{secrets.token_hex(4)}"
    literals = {**LITERALS, stack.internet.address: stack.internet.address}
    probes = []
    for literal in literals:
        probes.append(connect(prober, f"{literal}:443"))
        probes.append(get(prober, f"http://{literal}/{marker}"))
    answers = raw(prober, stack.proxy_alias, probes)
    for index, (literal, address) in enumerate(literals.items()):
        for answer, port in zip(answers[2 * index : 2 * index + 2], (443, 80), strict=True):
            assert (answer.status, answer.reason) == (403, "not-approved"), (literal, str(answer))
            assert "is an IP address" in answer.body, (literal, str(answer))
            assert address in answer.body, (literal, str(answer))
            if ":" not in address:
                assert f"{address}:{port}" in answer.body, (literal, str(answer))
    # curl's own spellings (it normalises some itself): the same refusals.
    # (169.254.169.254: loopback spellings may be in $NO_PROXY, and curl would not ask.)
    for target in ("2852039166:443", "0xa9fea9fe:443", "0251.0376.0251.0376:443"):
        assert prober.connect_status(target) == "403", target
    status, body = prober.curl(f"http://0xa9.0xfe.0xa9.0xfe/{marker}")
    assert status == "403", (status, body)
    assert "is an IP address" in body, (status, body)
    # Control: the same address by its allowed name.
    status, body = prober.curl(f"https://{ALLOWED}/{marker}-control-tls")
    assert status == "200", (status, body)
    control_arrives(prober, f"{marker}-control")
    assert [entry["path"] for entry in arrived(stack, marker)] == [
        f"/{marker}-control-tls",
        f"/{marker}-control",
    ]


# --- the proxy: names resolving to private addresses ------------------------------------------

# name (under *.wild) → the address(es) it resolves to, the class the refusal names
PRIVATE = {
    "loop": ("127.0.0.1", "loopback"),
    "loop2": ("127.9.9.9", "loopback"),
    "meta": ("169.254.169.254", "metadata"),
    "ecs": ("169.254.170.2", "metadata"),
    "alibaba": ("100.100.100.200", "metadata"),
    "imds6": ("fd00:ec2::254", "metadata"),
    "lan": ("10.1.2.3", "private"),
    "lan192": ("192.168.254.77", "private"),
    "linklocal": ("169.254.1.1", "link-local"),
    "cgnat": ("100.64.0.1", "cgnat"),
    "zero": ("0.0.0.0", "unspecified"),
    "v6loop": ("::1", "loopback"),
    "ula": ("fd00::1", "private"),
    "pool": ("10.213.250.250", "guardian-network"),
}


def private_name(label: str) -> str:
    return f"{label}-{secrets.token_hex(3)}.{WILD}"


def assert_guarded(answer: Answer, address: str, address_class: str, what: str) -> None:
    assert answer.status == 403, (what, str(answer))
    assert answer.reason in ("private-address", "guardian-network"), (what, str(answer))
    # An address of a private range the engine gave one of the guardian's networks (any
    # stack on this engine: its pools are shared) is named as that, a class of its own.
    shown = {address_class}
    if answer.reason == "guardian-network":
        shown.add("guardian-network")
    named = [f"resolves to {address} ({each})" in answer.body for each in shown]
    assert any(named), (what, str(answer))


def test_names_resolving_to_private_addresses(stack: Stack, prober: Cloister) -> None:
    marker = f"private-{secrets.token_hex(4)}"
    names = {label: private_name(label) for label in PRIVATE}
    for label, (address, _) in PRIVATE.items():
        stack.resolve_to(address, names[label])
    internet = stack.internet.address
    mapped, mixed, control = private_name("mapped"), private_name("mixed"), private_name("ok")
    stack.resolve_to(f"::ffff:{internet}", mapped)  # the allowed address, IPv4-mapped
    stack.resolve_to((internet, "127.0.0.1"), mixed)
    stack.resolve_to(internet, control)
    probes = []
    for name in (*names.values(), mapped, mixed):
        probes.append(connect(prober, f"{name}:443"))
        probes.append(get(prober, f"http://{name}/{marker}"))
    answers = iter(raw(prober, stack.proxy_alias, probes))
    for label, (address, address_class) in PRIVATE.items():
        for _ in range(2):
            assert_guarded(next(answers), address, address_class, label)
    for _ in range(2):
        answer = next(answers)
        assert (answer.status, answer.reason) == (403, "private-address"), str(answer)
        assert "(ipv4-mapped)" in answer.body, str(answer)
    for _ in range(2):
        assert_guarded(next(answers), "127.0.0.1", "loopback", "mixed")
    # Control: a name of the same kind resolving to the allowed address goes through.
    for url in (f"https://{control}/{marker}-control", f"http://{control}/{marker}-control"):
        status, body = prober.curl(url)
        assert status == "200", (url, status, body)
    assert [entry["host"] for entry in arrived(stack, marker)] == [control, control]


# --- the proxy: the guardian's own services -----------------------------------------------------

ALIASES = (
    "approval",
    "cloister-guardian",
    "cloister-guardian-credentials",
    "cloister-guardian-proxy",
)


def held_and_approved(stack: Stack, cloister: Cloister, hosts: tuple[str, ...]) -> None:
    """The human approves, once each, the CONNECTs to *hosts* the hub holds for *cloister*."""

    def held() -> dict[str, str] | None:
        listed = stack.cli.json("approvals", "list", "--json")
        found = {
            str(item["host"]): str(item["id"])
            for item in listed.get("domains", [])
            if item.get("cloister") == cloister.name
        }
        return found if set(hosts) <= set(found) else None

    for host, item in wait_until(held, 60, f"{hosts} held", interval=0.5).items():
        if host in hosts:
            stack.cli.ok("approvals", "allow", item, "--scope", "once")


def addresses_of(container: str) -> list[str]:
    found = run_command(
        [
            docker_executable(),
            "inspect",
            "--format",
            "{{json .NetworkSettings.Networks}}",
            container,
        ],
        timeout=30,
    )
    assert found.returncode == 0, found.describe()
    networks: dict[str, dict[str, Any]] = json.loads(found.stdout)
    return [network["IPAddress"] for network in networks.values() if network["IPAddress"]]


def test_the_guardians_own_services(stack: Stack, prober: Cloister) -> None:
    # By alias: names no rule mentions, so the hub holds each; the human approves it,
    # and the proxy still refuses to dial where the name leads.
    with ThreadPoolExecutor(len(ALIASES)) as pool:
        futures = {
            alias: pool.submit(
                raw, prober, stack.proxy_alias, [connect(prober, f"{alias}:443")], 90
            )
            for alias in ALIASES
        }
        held_and_approved(stack, prober, ALIASES)
        for alias, future in futures.items():
            (answer,) = future.result(timeout=120)
            assert (answer.status, answer.reason) == (403, "guardian-network"), (alias, str(answer))
            assert "one of the guardian's own networks" in answer.body, (alias, str(answer))
    # By address: every address of every service, and the cloister's own.
    instance = stack.cli.instance
    targets = {
        f"{service}-{index}": address
        for service in ("proxy", "approval", "gateway", "credentials")
        for index, address in enumerate(addresses_of(instance.service(service)))
    }
    targets["self"] = prober.ok("hostname -i").stdout.split()[0]
    names = {label: private_name(label) for label in targets}
    for label, address in targets.items():
        stack.resolve_to(address, names[label])
    marker = f"own-{secrets.token_hex(4)}"
    probes = [
        probe
        for name in names.values()
        for probe in (connect(prober, f"{name}:443"), get(prober, f"http://{name}/{marker}"))
    ]
    answers = iter(raw(prober, stack.proxy_alias, probes))
    for label, address in targets.items():
        for _ in range(2):
            answer = next(answers)
            assert (answer.status, answer.reason) == (403, "guardian-network"), (label, str(answer))
            assert f"resolves to {address} (" in answer.body, (label, str(answer))
    # The same addresses as literals: IP literals need a rule of their own.
    literals = [connect(prober, f"{address}:443") for address in targets.values()]
    for answer in raw(prober, stack.proxy_alias, literals):
        assert (answer.status, answer.reason) == (403, "not-approved"), str(answer)
    control_arrives(prober, f"{marker}-control")
    assert arrived(stack, marker) == arrived(stack, f"{marker}-control")


# --- the proxy: ports ----------------------------------------------------------------------


def test_ports_not_allowed(stack: Stack, prober: Cloister) -> None:
    marker = f"ports-{secrets.token_hex(4)}"
    authorities = [f"{ALLOWED}:8080", f"{ALLOWED}:22", f"{ALLOWED}:3128", f"a.{WILD}:8443"]
    authorities.append(f"{API}:{API_PORT}")  # the model API, past the gateway
    probes = [
        probe
        for authority in authorities
        for probe in (connect(prober, authority), get(prober, f"http://{authority}/{marker}"))
    ]
    for authority, answer in zip(
        [a for a in authorities for _ in range(2)],
        raw(prober, stack.proxy_alias, probes),
        strict=True,
    ):
        assert (answer.status, answer.reason) == (403, "port-not-allowed"), (authority, str(answer))
        port = authority.rpartition(":")[2]
        assert f"port {port}" in answer.body, (authority, str(answer))
    assert prober.connect_status(f"{API}:{API_PORT}") == "403"
    # Control: the same names on their open ports.
    assert prober.connect_status(f"{DENIED}:443") == "403"
    for host in (ALLOWED, f"a.{WILD}"):
        status, body = prober.curl(f"https://{host}/{marker}-control")
        assert status == "200", (host, status, body)
    control_arrives(prober, f"{marker}-control")
    assert len(arrived(stack, marker)) == 3
    assert arrived(stack, marker) == arrived(stack, f"{marker}-control")
    assert not [entry for entry in stack.internet.api_requests() if marker in entry["path"]]


# --- request smuggling and oversized heads ------------------------------------------------------


def opening(method: str, path: str, version: str = "HTTP/1.1") -> str:
    """A request line to the allowed name's *path* (absolute URI) and its Host."""
    return f"{method} http://{ALLOWED}/{path} {version}\r\nHost: {ALLOWED}\r\n"


def smuggling_cases(marker: str, proxy_auth: str) -> dict[str, bytes]:
    """Each case: a request to the allowed name whose framing is ambiguous, carrying a
    second request; both paths carry *marker* and the case's name."""
    cases: dict[str, bytes] = {}

    def first(case: str, method: str = "POST", version: str = "HTTP/1.1") -> str:
        return opening(method, f"{marker}-{case}-first", version) + proxy_auth

    def smuggled(case: str) -> str:
        return opening("GET", f"{marker}-{case}-smuggled") + proxy_auth + "\r\n"

    def add(case: str, fields: str, body: str, **kwargs: str) -> None:
        cases[case] = (first(case, **kwargs) + fields + "\r\n" + body).encode("latin-1")

    add(
        "cl-te",
        "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n",
        "0\r\n\r\n" + smuggled("cl-te"),
    )
    body = smuggled("te-cl")
    add(
        "te-cl",
        "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
        f"{len(body):x}\r\n{body}\r\n0\r\n\r\n",
    )
    body = smuggled("two-lengths")
    add("two-lengths", f"Content-Length: 0\r\nContent-Length: {len(body)}\r\n", body)
    body = smuggled("length-list")
    add("length-list", f"Content-Length: 0, {len(body)}\r\n", body)
    add(
        "obs-fold",
        "Content-Length: 0\r\nX-Folded: a\r\n Transfer-Encoding: chunked\r\n",
        "0\r\n\r\n" + smuggled("obs-fold"),
    )
    add(
        "obs-fold-te",
        "Transfer-Encoding: identity\r\n chunked\r\n",
        "0\r\n\r\n" + smuggled("obs-fold-te"),
    )
    cases["bare-lf"] = (
        (opening("GET", f"{marker}-bare-lf-first") + proxy_auth + "\r\n").replace("\r\n", "\n")
        + smuggled("bare-lf")
    ).encode()
    add(
        "bare-lf-header",
        "X-A: a\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        smuggled("bare-lf-header"),
    )
    add(
        "bare-cr-header",
        "X-A: a\rTransfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        smuggled("bare-cr-header"),
    )
    body = smuggled("space-colon")
    add("space-colon", f"Transfer-Encoding : chunked\r\nContent-Length: {len(body)}\r\n", body)
    add("xchunked", "Transfer-Encoding: xchunked\r\n", "0\r\n\r\n" + smuggled("xchunked"))
    add(
        "chunked-identity",
        "Transfer-Encoding: chunked, identity\r\n",
        "0\r\n\r\n" + smuggled("chunked-identity"),
    )
    add(
        "vertical-tab", "Transfer-Encoding: \x0bchunked\r\n", "0\r\n\r\n" + smuggled("vertical-tab")
    )
    add(
        "te-http10",
        "Transfer-Encoding: chunked\r\n",
        "0\r\n\r\n" + smuggled("te-http10"),
        version="HTTP/1.0",
    )
    add("nul", "X-A: a\x00b\r\nContent-Length: 0\r\n", smuggled("nul"))
    cases["double-space"] = (
        opening("GET", f"{marker}-double-space-first").replace(" ", "  ", 1)
        + proxy_auth
        + "\r\n"
        + smuggled("double-space")
    ).encode()
    return cases


def test_request_smuggling(stack: Stack, prober: Cloister) -> None:
    marker = f"smuggle-{secrets.token_hex(4)}"
    proxy_auth = auth(prober)
    cases = smuggling_cases(marker, proxy_auth)
    answers = raw(prober, stack.proxy_alias, list(cases.values()))
    for case, answer in zip(cases, answers, strict=True):
        assert answer.status == 400, (case, str(answer))
        assert answer.after == b"", (case, str(answer))  # nothing after it
    # A chunk size that is no number, after a good head: the head may go upstream, the
    # request after it never does.
    bad_chunk = (
        opening("POST", f"{marker}-bad-chunk-first")
        + proxy_auth
        + "Transfer-Encoding: chunked\r\n\r\n-1\r\n\r\n"
        + opening("GET", f"{marker}-bad-chunk-smuggled")
        + proxy_auth
        + "\r\n"
    ).encode()
    (chunk_answer,) = raw(prober, stack.proxy_alias, [bad_chunk])
    assert chunk_answer.after == b"", str(chunk_answer)
    # The same CL.TE at the credential gateway: 400, nothing at the fake API.
    before = len(stack.internet.api_requests())
    gateway_cl_te = (
        "POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: $TOKEN\r\n"
        "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        "POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: $TOKEN\r\n"
        "Content-Length: 2\r\n\r\n{}"
    ).replace("$TOKEN", stack.cli.token(prober.name))
    (gateway_answer,) = raw(prober, GATEWAY, [gateway_cl_te.encode()])
    assert gateway_answer.status == 400, str(gateway_answer)
    # Controls: a body that looks like a request arrives as one POST; two pipelined GETs
    # on one connection both arrive (the log would show a second request).
    body = f"GET http://{ALLOWED}/{marker}-inside-body HTTP/1.1\r\nHost: {ALLOWED}\r\n\r\n"
    honest = (
        f"POST http://{ALLOWED}/{marker}-honest HTTP/1.1\r\nHost: {ALLOWED}\r\n{proxy_auth}"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    )
    pipelined = (
        f"GET http://{ALLOWED}/{marker}-pipe-1 HTTP/1.1\r\nHost: {ALLOWED}\r\n{proxy_auth}\r\n"
        f"GET http://{ALLOWED}/{marker}-pipe-2 HTTP/1.1\r\nHost: {ALLOWED}\r\n{proxy_auth}"
        "Connection: close\r\n\r\n"
    )
    honest_answer, pipe_answer = raw(
        prober, stack.proxy_alias, [honest.encode(), pipelined.encode()]
    )
    assert honest_answer.status == 200, str(honest_answer)
    assert pipe_answer.raw.count(b"HTTP/1.1 200") == 2, str(pipe_answer)
    expected = [f"/{marker}-honest", f"/{marker}-pipe-1", f"/{marker}-pipe-2"]
    wait_until(lambda: len(arrived(stack, marker)) >= 3, 10, "the controls upstream")
    seen = [entry["path"] for entry in arrived(stack, marker)]
    assert [path for path in seen if "bad-chunk" not in path] == expected, seen
    assert f"/{marker}-bad-chunk-smuggled" not in seen, seen
    assert len(stack.internet.api_requests()) == before


def test_heads_over_the_limit(stack: Stack, prober: Cloister) -> None:
    marker = f"big-{secrets.token_hex(4)}"
    many = "".join(f"X-Pad-{index}: {'b' * 40}\r\n" for index in range(400))
    over = {
        "one-header": get(prober, f"http://{ALLOWED}/{marker}-one", f"X-Big: {'a' * 17000}\r\n"),
        "many-headers": get(prober, f"http://{ALLOWED}/{marker}-many", many),
        "long-target": get(prober, f"http://{ALLOWED}/{marker}-long?{'c' * 17000}"),
        "connect": connect(prober, f"{ALLOWED}:443").replace(
            b"\r\n\r\n", f"\r\nX-Big: {'a' * 17000}\r\n\r\n".encode()
        ),
    }
    for case, answer in zip(over, raw(prober, stack.proxy_alias, list(over.values())), strict=True):
        assert answer.status == 431, (case, str(answer))
    token = stack.cli.token(prober.name)
    before = len(stack.internet.api_requests())
    gateway = (
        f"POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\n"
        f"X-Big: {'a' * 17000}\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    (gateway_answer,) = raw(prober, GATEWAY, [gateway.encode()])
    assert gateway_answer.status == 431, str(gateway_answer)
    # Control: a head just under the limit goes through.
    (under,) = raw(
        prober,
        stack.proxy_alias,
        [get(prober, f"http://{ALLOWED}/{marker}-under", f"X-Big: {'a' * 15000}\r\n")],
    )
    assert under.status == 200, str(under)
    wait_until(lambda: arrived(stack, marker), 10, "the control upstream")
    assert [entry["path"] for entry in arrived(stack, marker)] == [f"/{marker}-under"]
    assert len(stack.internet.api_requests()) == before


# --- the credential gateway -------------------------------------------------------------------

KEY_HEADER = {
    "claude": "x-api-key: $CLOISTER_TOKEN",
    "codex": "Authorization: Bearer $CLOISTER_TOKEN",
    "gemini": "x-goog-api-key: $CLOISTER_TOKEN",
}
CALLS = {
    "claude": (
        "/v1/messages",
        '{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "codex": ("/v1/responses", '{"model":"m","input":"hi"}'),
    "gemini": ("/v1beta/models/g:generateContent", '{"contents":[{"parts":[{"text":"hi"}]}]}'),
}


def set_up_keys(stack: Stack) -> dict[str, str]:
    """A fake key of each agent's, stored with ``cloister setup`` (read from stdin)."""
    keys = {agent: f"REAL-{agent}-{secrets.token_hex(16)}" for agent in PROVIDERS}
    for agent, key in keys.items():
        stored = run_command(
            stack.cli.command("setup", agent, "--method", "api-key", "--secret-stdin"),
            cwd=stack.cli.root,
            env=stack.cli.env,
            timeout=60,
            stdin=key,
        )
        assert stored.returncode == 0, stored.describe()
    return keys


@pytest.fixture(scope="session")
def keys(stack: Stack) -> dict[str, str]:
    """The stack's keys, set up once (``cloister setup`` takes seconds)."""
    return set_up_keys(stack)


@pytest.fixture(scope="session")
def agent_cloister(stack: Stack, keys: dict[str, str]) -> Cloister:
    """A cloister started for Claude Code with the keys set up (its env has the gateway)."""
    del keys  # set up first: the environment depends on the method
    return stack.cloister("gateway", "--agent", "claude")


def call(cloister: Cloister, agent: str, method: str, path: str, *options: str) -> tuple[str, str]:
    """One request from inside to *agent*'s gateway URL with the cloister's token as the
    key: the status line and everything curl shows (head and body)."""
    url = credentials_url(PROVIDERS[agent].prefix) + path
    parts = ["curl", "--silent", "--include", "--max-time", "15", "-X", method, *options, url]
    quoted = " ".join(shlex.quote(part) for part in parts)
    result = cloister.sh(f'{quoted} -H "{KEY_HEADER[agent]}"', timeout=45)
    assert result.returncode == 0, result.describe()
    status = result.stdout.split("\r\n", 1)[0].split(" ")
    return (status[1] if len(status) > 1 else "000"), result.stdout


def forwarded_call(cloister: Cloister, agent: str) -> tuple[str, str]:
    path, body = CALLS[agent]
    return call(
        cloister, agent, "POST", path, "-H", "content-type: application/json", "--data", body
    )


def test_the_key_stays_with_the_gateway(
    stack: Stack, agent_cloister: Cloister, keys: dict[str, str]
) -> None:
    cloister = agent_cloister
    before = len(stack.internet.api_requests())
    shown: list[str] = []
    # The agent's own call, as Claude Code makes it: the gateway URL and token of its env.
    env = cloister.ok("env").stdout
    assert f"ANTHROPIC_BASE_URL={credentials_url(PROVIDERS['claude'].prefix)}" in env, env
    claude = cloister.ok(
        'curl --silent --include --max-time 15 -X POST "$ANTHROPIC_BASE_URL/v1/messages"'
        ' -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" -H "anthropic-version: 2023-06-01"'
        f" -H 'content-type: application/json' --data {shlex.quote(CALLS['claude'][1])}"
    ).stdout
    assert claude.startswith("HTTP/1.1 200"), claude
    shown += [env, claude]
    for agent in PROVIDERS:
        status, text = forwarded_call(cloister, agent)
        assert status == "200", (agent, text)
        shown.append(text)
    forwarded = stack.internet.api_requests()[before:]
    assert len(forwarded) == 4, forwarded
    for entry, agent in zip(forwarded, ("claude", *PROVIDERS), strict=True):
        headers = json.dumps(entry["headers"])
        assert keys[agent] in headers, (agent, entry)
        assert stack.cli.token(cloister.name) not in headers, (agent, entry)
    # What the cloister tries to get the key back or sent elsewhere.
    attempts = [
        (
            "claude",
            "POST",
            "/v1/messages",
            ("-H", "content-type: application/json", "--data", "{}"),
        ),
        (
            "claude",
            "POST",
            "/v1/messages",
            ("-H", "X-HTTP-Method-Override: DELETE", "--data", "{}"),
        ),
        (
            "claude",
            "POST",
            "/v1/messages",
            ("-H", f"Host: {ALLOWED}", "--data", CALLS["claude"][1]),
        ),
        ("claude", "POST", "/../codex/v1/responses", ("--path-as-is", "--data", "{}")),
        ("claude", "POST", "//allowed.example.test/v1/messages", ("--path-as-is", "--data", "{}")),
        ("claude", "POST", "/v1/messages@allowed.example.test", ("--data", "{}")),
        ("claude", "POST", "/v1%2fmessages", ("--data", "{}")),
        ("codex", "GET", "/v1/files", ()),
        ("gemini", "POST", "/v1beta/models/g:generateContent?key=x", ("--data", "{}")),
    ]
    statuses = []
    for agent, method, path, options in attempts:
        status, text = call(cloister, agent, method, path, *options)
        statuses.append(status)
        shown.append(text)
    assert statuses[0] == "400", shown[-len(attempts)]  # the API's own error, relayed
    # A foreign Host is not where the call goes: forwarded to the API, or refused.
    assert statuses[2] in ("200", "400", "403"), shown[-len(attempts) + 2]
    refused = statuses[1:2] + statuses[3:]
    assert all(status in ("400", "403", "404", "405") for status in refused), statuses
    token = stack.cli.token(cloister.name)
    absolute = (
        f"POST http://{ALLOWED}/claude/v1/messages HTTP/1.1\r\nHost: {ALLOWED}\r\n"
        f"x-api-key: {token}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    )
    connect_line = (
        f"CONNECT {ALLOWED}:443 HTTP/1.1\r\nHost: {ALLOWED}:443\r\nx-api-key: {token}\r\n\r\n"
    )
    for answer in raw(cloister, GATEWAY, [absolute.encode(), connect_line.encode()]):
        assert answer.status in (400, 403, 404, 405), str(answer)
        shown.append(answer.raw.decode("latin-1"))
    # The token sent through the proxy to a web server: only the token arrives.
    marker = f"key-{secrets.token_hex(4)}"
    status, body = cloister.curl(f"https://{ALLOWED}/{marker}", "-H", f"x-api-key: {token}")
    assert status == "200", (status, body)
    shown.append(body)
    (entry,) = arrived(stack, marker)
    assert token in json.dumps(entry["headers"])
    # The key is in nothing the cloister saw or holds, and never at the web servers.
    for key in keys.values():
        assert not [text for text in shown if key in text], key
        assert key not in json.dumps(stack.internet.requests())
        found = cloister.sh(f"grep -rsIlF {shlex.quote(key)} /work /home /tmp /etc /.cloister")
        assert found.stdout == "", found.describe()
    # At the API: the four calls, the API's error and (if forwarded) the foreign Host one,
    # each with a real key and never the token.
    reached = stack.internet.api_requests()[before:]
    assert len(reached) == 5 + (statuses[2] == "200"), reached
    for entry in reached:
        assert any(key in json.dumps(entry["headers"]) for key in keys.values()), entry
        assert token not in json.dumps(entry), entry


TABLE = [
    ("claude", "DELETE", "/v1/models/ft-model", "405", "method"),
    ("claude", "GET", "/v1/messages/batches?limit=100", "403", "path"),
    ("claude", "GET", "/v1/models?limit=1&limit=2", "403", "query"),
    ("claude", "POST", "/v1/messages?beta=true&debug=1", "403", "query"),
    ("claude", "POST", "/v1/messages/batches", "403", "path"),
    ("codex", "DELETE", "/v1/models/ft:gpt-4o-mini:acme::x1", "405", "method"),
    ("codex", "GET", "/v1/chat/completions?limit=100", "403", "path"),
    ("codex", "GET", "/v1/files", "403", "path"),
    ("codex", "POST", "/v1/fine_tuning/jobs", "403", "path"),
    ("codex", "GET", "/v1/models?client_version=1&after=x", "403", "query"),
    ("gemini", "DELETE", "/v1beta/tunedModels/x", "405", "method"),
    ("gemini", "GET", "/v1beta/models", "405", "method"),
    ("gemini", "POST", "/v1beta/models/g:generateContent?key=abc", "403", "query"),
    ("gemini", "POST", "/v1beta/cachedContents", "403", "path"),
]


def audit(stack: Stack) -> list[dict[str, Any]]:
    path = stack.cli.data_dir / "audit.log"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if '"credentials.request"' in line]


def test_calls_outside_each_vendors_table(
    stack: Stack, agent_cloister: Cloister, keys: dict[str, str]
) -> None:
    cloister = agent_cloister
    before = len(stack.internet.api_requests())
    for agent, method, path, status, _ in TABLE:
        got, text = call(
            cloister, agent, method, path, *(("--data", "{}") if method == "POST" else ())
        )
        assert got == status, (agent, method, path, text)
    override, text = call(
        cloister,
        "claude",
        "POST",
        "/v1/messages",
        "-H",
        "X-HTTP-Method-Override: DELETE",
        "--data",
        "{}",
    )
    assert override == "403", text
    assert stack.internet.api_requests()[before:] == []  # none of them reached the API
    # Control: what Codex does call goes through, with the real key for the token.
    assert forwarded_call(cloister, "codex")[0] == "200"
    (entry,) = stack.internet.api_requests()[before:]
    assert (entry["method"], entry["path"]) == ("POST", "/v1/responses")
    assert entry["headers"]["authorization"] == f"Bearer {keys['codex']}"
    lines = [line for line in audit(stack) if line.get("cloister") == cloister.name]
    seen = {(line["method"], line["path"], line["status"], line["reason"]) for line in lines}
    for agent, method, path, status, reason in TABLE:
        target = PROVIDERS[agent].prefix + path.split("?", 1)[0]
        assert (method, target, int(status), reason) in seen, (agent, method, path, seen)
    assert ("POST", "/claude/v1/messages", 403, "method-override") in seen, seen


@pytest.fixture
def api_mapped_back(stack: Stack, keys: dict[str, str]) -> Iterator[None]:
    """The agents' API name mapped back to the fake internet at the end."""
    del keys  # a key to add, so that the request gets as far as dialling
    try:
        yield
    finally:
        stack.resolve(API)


API_BASES = {
    "127.0.0.1": "loopback",
    "169.254.169.254": "metadata",
    "10.1.2.3": "private",
    "10.213.250.250": "guardian-network",
}


def test_an_api_base_resolving_to_a_private_address(
    stack: Stack, prober: Cloister, api_mapped_back: None
) -> None:
    # The prober: the gateway keeps connections per cloister, and it has none to the API
    # (the gateway refused everything it sent), so each call below must dial.
    cloister = prober
    before = len(stack.internet.api_requests())
    for address, address_class in API_BASES.items():
        stack.resolve_to(address, API)
        status, text = forwarded_call(cloister, "claude")
        assert status == "502", (address, text)
        assert f"resolves to {address} ({address_class})" in text, (address, text)
    assert len(stack.internet.api_requests()) == before
    # Control: the name mapped back to the fake internet, the same call goes through.
    stack.resolve(API)
    status, text = forwarded_call(cloister, "claude")
    assert status == "200", text
    assert len(stack.internet.api_requests()) == before + 1
