"""Family 1, policy: what the proxy lets a cloister reach, and what a human decides.

Every request is made from inside a cloister with curl (or perl, for the WebSocket),
through the proxy in its ``$HTTPS_PROXY``, to the fake internet of the harness; what
arrived there is read from the upstream's log. The guardian's config allows
``allowed.example.test`` and ``*.wild.example.test`` and denies ``denied.example.test``;
every other name is made up per test (``<what>-<hex>.example.test``) and so is unknown
to every rule: the proxy holds it and asks the approval hub, and the test decides with
the real CLI (``cloister approvals list --json``, ``approvals allow|deny ID --scope …``)
while the client inside still waits (a ``docker exec`` running in the background).

Most tests share one cloister per host user; a test that stops its cloister starts its
own; the restart test has a guardian of its own (the shared one is never restarted).

=========================================================  ====================================
attack (from inside the cloister)                          result
=========================================================  ====================================
``test_allowed_https_and_plain_http``: HTTPS and plain     200 from the fake internet, which
HTTP to the allowed name                                   logs both requests
``test_denied_is_refused_with_its_reason``: HTTPS          403, ``X-Cloister-Reason: denied``
(CONNECT) and plain HTTP to the denied name                and a message naming the rule and
                                                           its file; nothing arrives upstream
``test_unknown_is_held_then_approved``: HTTPS and plain    held (listed by the hub, the client
HTTP to names no rule mentions                             waiting); ``allow --scope project``
                                                           releases it (200), the decision file
                                                           holds the name, the next request
                                                           goes straight through
``test_once_asks_again``: an unknown name allowed          the held request gets 200; the next
``--scope once``, then asked for again                     is held again; denied: 403
                                                           ``denied``, nothing upstream
``test_session_scope_ends_at_stop``: an unknown name       works for the rest of the session
allowed ``--scope session``, the cloister stopped and      without asking; after the restart it
started again                                              is held again
``test_wildcard``: a name under the configured             ``*.wild`` allows one label below,
``*.wild.example.test``, one two labels below; a held      not two (held); ``--wildcard`` allows
name allowed ``--wildcard``, then its sibling and a name   the sibling without asking, not the
outside the pattern                                        name outside (held)
``test_deny_beats_allow``: a name under ``*.wild``         403 ``denied`` for the denied names
denied in the project's config; a name denied for the      (the allow rules stay in force for
session, then its parent allowed ``--wildcard``            their other names: 200)
``test_websocket_through_connect``: perl opens a CONNECT   101 and the frame echoed back; to
tunnel to ``allowed.example.test:80``, upgrades ``/ws``    the denied name the CONNECT is 403
and sends a text frame
``test_project_and_global_scope_survive_a_restart``:       after the guardian's stop and start,
unknown names allowed ``--scope project`` and ``--scope    both work without asking; another
global``, then the guardian restarted                      project gets the global one, and is
                                                           asked for the project one
=========================================================  ====================================
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.cli.cli_support import docker_executable, squash
from tests.conftest import SkipOrFail
from tests.e2e.conftest import user_of
from tests.e2e.harness import (
    ALLOWED,
    CA_FILE,
    DENIED,
    DOMAIN,
    HOST_KINDS,
    WILD,
    Cloister,
    FakeInternet,
    Stack,
    running_stack,
    shell_quote,
    wait_for_held,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

HELD_MAX_TIME = 60.0  # curl's --max-time while held: the hub's own approval timeout
REASON_HEADER = "x-cloister-reason"


# --- helpers ------------------------------------------------------------------------------


def fresh(what: str) -> str:
    """A name of the fake internet no rule mentions."""
    return f"{what}-{secrets.token_hex(4)}.{DOMAIN}"


def marker() -> str:
    """A path nobody else asks for: proof in the upstream's log of one request."""
    return f"/policy-{secrets.token_hex(6)}"


@dataclass
class Reply:
    """What curl got: the status (CONNECT's, when the proxy refused the tunnel), the
    headers (lower-cased names; a refused CONNECT's are its own) and the body."""

    status: str
    headers: dict[str, str]
    body: str
    error: str = ""  # curl's own complaint, if any


CURL = (
    "curl --silent --show-error --max-time {max_time:g} --cacert /work/{ca}"
    " --dump-header /tmp/{tag}.head --output /tmp/{tag}.body"
    " --write-out '%{{http_code}} %{{http_connect}}'"
    " {url}; echo; cat /tmp/{tag}.head /tmp/{tag}.body 2>/dev/null; rm -f /tmp/{tag}.*"
)


def curl_script(url: str, max_time: float) -> str:
    tag = secrets.token_hex(4)
    return CURL.format(max_time=max_time, ca=CA_FILE, tag=tag, url=shell_quote(url))


def parse_reply(output: str, error: str = "") -> Reply:
    """The output of :data:`CURL`: the status line, then the headers, then the body."""
    first, _, rest = output.partition("\n")
    code, _, connect = first.strip().partition(" ")
    status = connect if code == "000" and connect not in ("", "000", "200") else code
    headers: dict[str, str] = {}
    lines = rest.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index].rstrip("\r")
        index += 1
        if line.startswith("HTTP/"):
            continue
        if not line:
            # Past CONNECT's head another head may follow; the body starts after the last.
            if index < len(lines) and lines[index].startswith("HTTP/"):
                continue
            break
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Reply(status or "000", headers, "\n".join(lines[index:]), error.strip())


def request(cloister: Cloister, url: str, *, max_time: float = 15) -> Reply:
    """One curl through the cloister's proxy, to its end."""
    result = cloister.sh(curl_script(url, max_time), timeout=max_time + 30)
    return parse_reply(result.stdout, result.stderr)


class Waiting:
    """A curl inside the cloister that the proxy holds: ``docker exec`` in the background."""

    def __init__(self, cloister: Cloister, url: str) -> None:
        argv = [
            docker_executable(),
            "exec",
            cloister.container,
            "bash",
            "-c",
            curl_script(url, HELD_MAX_TIME),
        ]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def still_waiting(self) -> bool:
        return self.process.poll() is None

    def reply(self) -> Reply:
        stdout, stderr = self.process.communicate(timeout=HELD_MAX_TIME + 30)
        assert self.process.returncode == 0, stderr
        return parse_reply(stdout, stderr)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def waiting() -> Iterator[list[Waiting]]:
    """Background clients of a test, ended at its end whatever happened."""
    started: list[Waiting] = []
    yield started
    for each in started:
        each.close()


def hold(stack: Stack, cloister: Cloister, url: str, started: list[Waiting]) -> dict[str, Any]:
    """Ask for *url* from inside and wait until the hub holds it: the pending item."""
    client = Waiting(cloister, url)
    started.append(client)
    host = url.split("/")[2].split(":", maxsplit=1)[0]
    item = wait_for_held(stack, f'"host": "{host}"')
    assert client.still_waiting(), "the client did not wait for the decision"
    return item


def decide(stack: Stack, action: str, item: dict[str, Any], *options: str) -> str:
    """``cloister approvals allow|deny ID OPTIONS``: its output."""
    return squash(stack.cli.ok("approvals", action, item["id"], *options).output)


def pending_hosts(stack: Stack) -> set[str]:
    listed = stack.cli.json("approvals", "list", "--json")
    return {str(item["host"]) for item in listed["domains"]}


def from_upstream(reply: Reply) -> dict[str, Any]:
    """The fake internet's answer: it names the scheme, host and path it saw."""
    assert reply.status == "200", reply
    document: dict[str, Any] = json.loads(reply.body)
    assert document["upstream"] == "fake-internet", document
    return document


def arrived(internet: FakeInternet, path: str) -> list[dict[str, Any]]:
    return [entry for entry in internet.requests() if entry["path"] == path]


# --- the shared cloister ----------------------------------------------------------------


@pytest.fixture(scope="session")
def cloister(stack: Stack) -> Cloister:
    """One cloister per stack for the tests that do not stop it (each asks for names of
    its own; test_deny_beats_allow adds a deny of one to its project's config)."""
    return stack.cloister("policy")


# --- allowed and denied -------------------------------------------------------------------


def test_allowed_https_and_plain_http(cloister: Cloister) -> None:
    internet = cloister.stack.internet
    for scheme in ("https", "http"):
        path = marker()
        document = from_upstream(request(cloister, f"{scheme}://{ALLOWED}{path}"))
        assert (document["scheme"], document["host"], document["path"]) == (scheme, ALLOWED, path)
        (entry,) = arrived(internet, path)
        assert entry["scheme"] == scheme


def test_denied_is_refused_with_its_reason(cloister: Cloister) -> None:
    stack = cloister.stack
    config = stack.cli.config_dir / "config.yaml"  # named as the human sees it
    for scheme in ("https", "http"):
        path = marker()
        reply = request(cloister, f"{scheme}://{DENIED}{path}")
        assert reply.status == "403", reply
        assert reply.headers.get(REASON_HEADER) == "denied", reply
        if scheme == "http":  # curl shows no body of a refused CONNECT
            assert f"{DENIED}:80 is denied by {DENIED} in {config}" in squash(reply.body)
        assert not arrived(stack.internet, path), "a denied request reached the fake internet"
    from_upstream(request(cloister, f"https://{ALLOWED}{marker()}"))  # the control


# --- held, then decided -----------------------------------------------------------------


def test_unknown_is_held_then_approved(cloister: Cloister, waiting: list[Waiting]) -> None:
    stack = cloister.stack
    for scheme in ("https", "http"):
        host = fresh("held")
        stack.resolve(host)
        path = marker()
        item = hold(stack, cloister, f"{scheme}://{host}{path}", waiting)
        assert (item["cloister"], item["host"]) == (cloister.name, host), item
        assert item["port"] == (443 if scheme == "https" else 80), item
        assert not arrived(stack.internet, path), "a held request went on before its decision"
        said = decide(stack, "allow", item, "--scope", "project")
        assert host in said, said
        document = from_upstream(waiting[-1].reply())
        assert (document["host"], document["path"]) == (host, path)
        decisions = stack.cli.config_dir / "decisions" / "projects" / f"{item['project']}.yaml"
        assert host in decisions.read_text(encoding="utf-8")
        # Decided for the project: the next request is not held.
        again = marker()
        from_upstream(request(cloister, f"{scheme}://{host}{again}", max_time=10))
        assert host not in pending_hosts(stack)


def test_once_asks_again(cloister: Cloister, waiting: list[Waiting]) -> None:
    stack = cloister.stack
    host = fresh("once")
    stack.resolve(host)
    first = hold(stack, cloister, f"https://{host}/first", waiting)
    decide(stack, "allow", first, "--scope", "once")
    from_upstream(waiting[-1].reply())
    path = marker()
    second = hold(stack, cloister, f"https://{host}{path}", waiting)
    assert second["id"] != first["id"]
    decide(stack, "deny", second, "--scope", "once")
    reply = waiting[-1].reply()
    assert reply.headers.get(REASON_HEADER) == "denied", reply
    assert not arrived(stack.internet, path)
    # Denied once: the name is asked for again, not refused for good.
    third = hold(stack, cloister, f"http://{host}/third", waiting)
    decide(stack, "deny", third)
    refused = waiting[-1].reply()
    assert refused.status == "403", refused
    assert f"{host} was denied in the approval UI (once)" in refused.body, refused


def test_session_scope_ends_at_stop(stack: Stack, waiting: list[Waiting]) -> None:
    own = stack.cloister("session")
    host = fresh("session")
    stack.resolve(host)
    item = hold(stack, own, f"https://{host}/asked", waiting)
    decide(stack, "allow", item, "--scope", "session")
    from_upstream(waiting[-1].reply())
    from_upstream(request(own, f"https://{host}/again", max_time=10))
    assert host not in pending_hosts(stack)

    own.stop()
    started = stack.cli.ok("start", "-d", cwd=own.repo)
    assert f"cloister {own.name} " in squash(started.stderr), started.describe()
    path = marker()
    again = hold(stack, own, f"https://{host}{path}", waiting)
    decide(stack, "deny", again)
    assert waiting[-1].reply().headers.get(REASON_HEADER) == "denied"
    assert not arrived(stack.internet, path)


def test_wildcard(cloister: Cloister, waiting: list[Waiting]) -> None:
    stack = cloister.stack
    # The config's *.wild.example.test: one label below, not two.
    below = f"w{secrets.token_hex(4)}.{WILD}"
    deeper = f"x.{below}"
    stack.resolve(below, deeper)
    assert from_upstream(request(cloister, f"https://{below}/"))["host"] == below
    item = hold(stack, cloister, f"https://{deeper}/", waiting)
    decide(stack, "deny", item)
    assert waiting[-1].reply().headers.get(REASON_HEADER) == "denied"

    # A decision with --wildcard: *.parent, for this session (other tests' names are
    # under example.test too). Plain HTTP: the test certificate has no name two below.
    parent = fresh("wc")
    first, sibling, outside = f"a.{parent}", f"b.{parent}", f"c.{fresh('elsewhere')}"
    stack.resolve(first, sibling, outside)
    item = hold(stack, cloister, f"http://{first}/", waiting)
    assert item["wildcard"] == f"*.{parent}", item
    decide(stack, "allow", item, "--scope", "session", "--wildcard")
    from_upstream(waiting[-1].reply())
    assert from_upstream(request(cloister, f"http://{sibling}/", max_time=10))["host"] == sibling
    item = hold(stack, cloister, f"http://{outside}/", waiting)
    decide(stack, "deny", item)
    assert waiting[-1].reply().headers.get(REASON_HEADER) == "denied"


def test_deny_beats_allow(cloister: Cloister, waiting: list[Waiting]) -> None:
    # In config: *.wild allowed globally, one name under it denied by the project.
    stack, own = cloister.stack, cloister
    project = stack.cli.listing()[own.name]["project"]
    evil, good = f"evil{secrets.token_hex(4)}.{WILD}", f"good{secrets.token_hex(4)}.{WILD}"
    stack.resolve(evil, good)
    stack.cli.write_project_config(project, f"proxy:\n  deny:\n    - domain: {evil}\n")
    project_file = stack.cli.config_dir / "projects" / f"{project}.yaml"
    path = marker()
    wait_until(
        lambda: request(own, f"http://{evil}/").status == "403",
        10,
        "the proxy to read the project's config",
    )
    plain = request(own, f"http://{evil}{path}")
    assert plain.headers.get(REASON_HEADER) == "denied", plain
    assert f"is denied by {evil} in {project_file}" in squash(plain.body), plain
    refused = request(own, f"https://{evil}{path}")
    assert refused.headers.get(REASON_HEADER) == "denied", refused
    assert not arrived(stack.internet, path)
    from_upstream(request(own, f"https://{good}/"))  # the allow rule still works

    # By decisions: a name denied for the session, then its parent allowed --wildcard
    # (plain HTTP: the test certificate has no name two below example.test).
    parent = fresh("dw")
    denied, sibling = f"x.{parent}", f"y.{parent}"
    stack.resolve(denied, sibling)
    item = hold(stack, own, f"http://{denied}/", waiting)
    decide(stack, "deny", item, "--scope", "session")
    assert waiting[-1].reply().headers.get(REASON_HEADER) == "denied"
    item = hold(stack, own, f"http://{sibling}/", waiting)
    decide(stack, "allow", item, "--scope", "session", "--wildcard")
    from_upstream(waiting[-1].reply())
    path = marker()
    refused = request(own, f"http://{denied}{path}", max_time=10)
    assert refused.status == "403", refused
    assert refused.headers.get(REASON_HEADER) == "denied", refused
    assert not arrived(stack.internet, path)


# --- WebSocket through a CONNECT tunnel -------------------------------------------------------


# A CONNECT with the cloister's token from $HTTPS_PROXY, then a WebSocket handshake and
# one text frame on the tunnel; prints "connect STATUS", "upgrade STATUS ACCEPT-OK",
# "frame OPCODE PAYLOAD".
WEBSOCKET = r"""
use strict; use warnings;
use IO::Socket::INET; use MIME::Base64; use Digest::SHA qw(sha1_base64);
my ($target, $path, $message) = @ARGV;
my ($user, $token, $host, $port) =
    $ENV{HTTPS_PROXY} =~ m{^http://([^:]*):([^@]*)@([^:/]+):(\d+)} or die "HTTPS_PROXY?\n";
my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port, Timeout => 10)
    or die "connect: $!\n";
local $SIG{ALRM} = sub { die "timeout\n" }; alarm 20;
sub head { my $h = ""; while ($h !~ /\r\n\r\n\z/) { sysread($s, my $c, 1) or last; $h .= $c } $h }
sub exactly { my $n = shift; my $b = ""; while (length $b < $n) {
    sysread($s, my $c, $n - length $b) or die "short read\n"; $b .= $c } $b }
my $auth = encode_base64("$user:$token", "");
syswrite $s, "CONNECT $target HTTP/1.1\r\nHost: $target\r\n"
    . "Proxy-Authorization: Basic $auth\r\n\r\n";
my ($status) = head() =~ m{^HTTP/1\.[01] (\d{3})};
print "connect $status\n";
exit 0 unless $status == 200;
my ($name) = split /:/, $target;
my $key = encode_base64(join("", map { chr int rand 256 } 1 .. 16), "");
syswrite $s, "GET $path HTTP/1.1\r\nHost: $name\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    . "Sec-WebSocket-Key: $key\r\nSec-WebSocket-Version: 13\r\n\r\n";
my $answer = head();
($status) = $answer =~ m{^HTTP/1\.[01] (\d{3})};
my ($accept) = $answer =~ m{Sec-WebSocket-Accept: *(\S+)}i;
my $expected = sha1_base64($key . "258EAFA5-E914-47DA-95CA-C5AB0DC85B11") . "=";
my $verdict = defined $accept && $accept eq $expected ? "accept-ok" : "accept-bad";
print "upgrade $status $verdict\n";
my @mask = map { int rand 256 } 1 .. 4;
my $masked = join "",
    map { chr(ord(substr $message, $_, 1) ^ $mask[$_ % 4]) } 0 .. length($message) - 1;
syswrite $s, pack("CC", 0x81, 0x80 | length $message) . pack("C4", @mask) . $masked;
my ($first, $length) = unpack "CC", exactly(2);
print "frame ", $first & 0x0F, " ", exactly($length & 0x7F), "\n";
syswrite $s, pack("CC", 0x88, 0x80) . pack("C4", @mask);
"""


def websocket(cloister: Cloister, target: str, path: str, message: str) -> list[str]:
    args = " ".join(shell_quote(part) for part in (target, path, message))
    script = f"perl -e {shell_quote(WEBSOCKET)} {args}"
    return cloister.ok(script, timeout=60).stdout.splitlines()


def test_websocket_through_connect(cloister: Cloister) -> None:
    stack = cloister.stack
    path = f"/ws?{secrets.token_hex(6)}"
    lines = websocket(cloister, f"{ALLOWED}:80", path, "hello through the tunnel")
    assert lines == [
        "connect 200",
        "upgrade 101 accept-ok",
        "frame 1 echo: hello through the tunnel",
    ], lines
    (entry,) = arrived(stack.internet, path)
    headers = {name.lower(): value for name, value in entry["headers"]}
    assert (entry["host"], headers["upgrade"]) == (ALLOWED, "websocket"), entry
    assert websocket(cloister, f"{DENIED}:80", path, "refused") == ["connect 403"]


# --- decisions that outlive the guardian --------------------------------------------------


@pytest.fixture(params=HOST_KINDS)
def own_stack(
    request: pytest.FixtureRequest,
    docker_client: docker.DockerClient,
    internet: FakeInternet,
    tmp_path: Path,
    skip_or_fail: SkipOrFail,
) -> Iterator[Stack]:
    """A guardian of this test's own: it restarts it."""
    user = user_of(request, request.param)
    with running_stack(user, docker_client, internet, tmp_path, skip_or_fail) as made:
        yield made


def test_project_and_global_scope_survive_a_restart(
    own_stack: Stack, waiting: list[Waiting]
) -> None:
    stack = own_stack
    mine, other = stack.cloister("kept"), stack.cloister("other")
    for_project, for_all = fresh("project"), fresh("global")
    stack.resolve(for_project, for_all)
    for host, scope in ((for_project, "project"), (for_all, "global")):
        item = hold(stack, mine, f"https://{host}/", waiting)
        decide(stack, "allow", item, "--scope", scope)
        from_upstream(waiting[-1].reply())

    stack.cli.ok("guardian", "stop")
    stack.guardian_start()

    for host in (for_project, for_all):
        assert from_upstream(request(mine, f"https://{host}/", max_time=10))["host"] == host
    assert from_upstream(request(other, f"https://{for_all}/", max_time=10))["host"] == for_all
    item = hold(stack, other, f"https://{for_project}/", waiting)
    assert item["cloister"] == other.name
    decide(stack, "deny", item)
    assert waiting[-1].reply().headers.get(REASON_HEADER) == "denied"
    # Nothing is left waiting for a human.
    assert stack.cli.json("approvals", "list", "--json") == {"domains": [], "commands": []}
