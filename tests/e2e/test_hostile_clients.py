"""Family 7, hostile clients: one cloister abusing the guardian's services does not take
them from another.

``hog`` attacks, from inside its cloister; ``quiet`` is another cloister of the same
stack, whose ordinary requests must still be served and decided meanwhile. Both are
cloisters of the shared stack, for the root and the non-root host user.

=================================================  ========================================
attack (from inside the cloister)                  result
=================================================  ========================================
``test_slow_clients``: 50 connections to the       ``quiet``'s HTTPS request through the
proxy, each sending its request head a line at a   proxy is answered (200) while all 50
time, never finishing it (slowloris)               are open; each slow client gets 408
                                                   (the head did not arrive in time)
``test_a_one_mebibyte_header``: a request head     431 from the proxy (CONNECT and a plain
with a 1 MiB header, at the proxy, the hostexec    HTTP request), 431 from the credential
gateway and the credential gateway                 gateway, 400 from the hostexec gateway;
                                                   nothing reaches the fake internet; the
                                                   proxy still serves the same cloister
``test_an_approval_flood``: 110 CONNECTs to        16 held (``proxy.max_held_per_cloister``
names no rule mentions, at once                    ), the other 94 refused at once: 429,
                                                   ``too-many-held``, with the reason;
                                                   ``quiet``'s request reaches the hub
                                                   meanwhile, the human allows it, and it
                                                   works (200); a held client that hangs up
                                                   withdraws its item
=================================================  ========================================
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from cloister_core import stack as core_stack
from tests.cli.cli_support import docker_executable, run_command
from tests.e2e.harness import ALLOWED, DOMAIN, Cloister, Stack, shell_quote
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SLOW_CLIENTS = 50
SHARE = 16  # proxy.max_held_per_cloister, by default
HELD = 110
MEBIBYTE = 1 << 20


@dataclass(frozen=True)
class Pair:
    hog: Cloister
    quiet: Cloister


@pytest.fixture(scope="session")
def pair(stack: Stack) -> Iterator[Pair]:
    hog = stack.cloister("hostile-hog")
    quiet = stack.cloister("hostile-quiet")
    yield Pair(hog, quiet)
    for cloister in (hog, quiet):
        stack.cli.run("stop", cloister.name)


def background(cloister: Cloister, script: str) -> None:
    """*script* (bash) started inside *cloister*, detached."""
    started = run_command(
        [docker_executable(), "exec", "-d", cloister.container, "bash", "-c", script], timeout=30
    )
    assert started.returncode == 0, started.describe()


def exists(cloister: Cloister, path: str) -> bool:
    return cloister.sh(f"test -e {path}").returncode == 0


# Opens N connections to the proxy, sends each the start of a CONNECT, then one more
# header line to each every half second; records when each was answered or closed (and
# the answer's first line) in /tmp/slow/result, the open count in /tmp/slow/open.
SLOWLORIS = r"""
use strict; use IO::Socket::INET; use IO::Select; use Time::HiRes qw(time sleep);
$SIG{PIPE} = 'IGNORE';
my ($host, $port, $count, $target) = @ARGV;
mkdir '/tmp/slow';
sub note { my ($name, $text) = @_; open(my $f, '>', "/tmp/slow/$name.part") or die;
  print $f $text; close $f; rename "/tmp/slow/$name.part", "/tmp/slow/$name" }
my (@open, %result);
for my $i (1 .. $count) {
  my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port) or die "connect: $!";
  syswrite($s, "CONNECT $target HTTP/1.1\r\nHost: $target\r\n");
  push @open, $s;
}
my %index = map { ($open[$_] => $_ + 1) } 0 .. $#open;
my $started = time;
note('open', scalar(@open) . "\n");
while (@open && time - $started < 60) {
  my $select = IO::Select->new(@open);
  for my $s ($select->can_read(0.5)) {
    my $line = <$s>; $line = 'closed' unless defined $line; $line =~ s/\r?\n$//;
    $result{$index{$s}} = sprintf("%.3f %s", time, $line);
    close $s; @open = grep { $_ != $s } @open;
  }
  syswrite($_, "X-Slow: a\r\n") for @open;
  note('open', scalar(@open) . "\n");
}
note('result', join('', map { "$_ $result{$_}\n" } sort { $a <=> $b } keys %result));
"""


def test_slow_clients(stack: Stack, pair: Pair) -> None:
    hog, quiet = pair.hog, pair.quiet
    host, port = core_stack.PROXY_ALIAS, core_stack.PROXY_PORT
    hog.sh("rm -rf /tmp/slow")
    command = f"perl -e {shell_quote(SLOWLORIS)} {host} {port} {SLOW_CLIENTS} {ALLOWED}:443"
    background(hog, command)
    wait_until(lambda: exists(hog, "/tmp/slow/open"), 30, "the slow clients connected")
    assert hog.ok("cat /tmp/slow/open").stdout.strip() == str(SLOW_CLIENTS)

    # Another cloister is served meanwhile, and so is the hog's own ordinary request.
    answered = quiet.ok(
        "curl --silent --output /dev/null --max-time 10 --cacert /work/e2e-ca.pem"
        f" --write-out '%{{http_code}}' https://{ALLOWED}/past-the-slow-clients;"
        ' echo " $(date +%s.%N)"',
        timeout=60,
    ).stdout.split()
    assert answered[0] == "200", answered
    served_at = float(answered[1])

    wait_until(lambda: exists(hog, "/tmp/slow/result"), 90, "every slow client answered")
    lines = hog.ok("cat /tmp/slow/result").stdout.splitlines()
    assert len(lines) == SLOW_CLIENTS, lines
    closed_at = []
    for line in lines:
        _, at, answer = line.split(" ", 2)
        assert answer.startswith("HTTP/1.1 408"), lines  # the head did not arrive in time
        closed_at.append(float(at))
    # The quiet cloister was served while every slow client still held its connection.
    assert served_at < min(closed_at), (served_at, sorted(closed_at)[:3])
    assert stack.internet.seen("past-the-slow-clients")


# Sends one request head with a 1 MiB header to HOST:PORT and prints the answer's first
# line ("none" when the connection closed without one).
BIG_HEADER = r"""
use strict; use IO::Socket::INET; $SIG{PIPE} = 'IGNORE';
my ($host, $port, $line, $name, $size) = @ARGV;
my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port) or die "connect: $!";
my $head = "$line\r\nHost: $host\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
  . "$name: " . ('a' x $size) . "\r\n\r\n{}";
my $sent = 0;
while ($sent < length $head) {
  my $n = syswrite($s, $head, 65536, $sent); last unless defined $n && $n > 0; $sent += $n;
}
shutdown($s, 1);
my $answer = <$s>; $answer = 'none' unless defined $answer; $answer =~ s/\r?\n$//;
print "$answer\n";
"""


def test_a_one_mebibyte_header(stack: Stack, pair: Pair) -> None:
    hog = pair.hog
    name = f"X-E2e-Big-{secrets.token_hex(4)}"
    proxy_host, proxy_port = core_stack.PROXY_ALIAS, core_stack.PROXY_PORT
    targets = {
        "proxy CONNECT": (proxy_host, proxy_port, f"CONNECT {ALLOWED}:443 HTTP/1.1", "431"),
        "proxy HTTP": (proxy_host, proxy_port, f"GET http://{ALLOWED}/big HTTP/1.1", "431"),
        "hostexec gateway": (
            core_stack.HOSTEXEC_ALIAS,
            core_stack.HOSTEXEC_PORT,
            "POST /request HTTP/1.1",
            "400",
        ),
        "credential gateway": (
            core_stack.CREDENTIALS_ALIAS,
            core_stack.CREDENTIALS_PORT,
            "POST /claude/v1/messages HTTP/1.1",
            "431",
        ),
    }
    for what, (host, port, line, expected) in targets.items():
        script = f"perl -e {shell_quote(BIG_HEADER)} {host} {port} {shell_quote(line)}"
        result = hog.ok(f"{script} {name} {MEBIBYTE}", timeout=120)
        answer = result.stdout.strip()
        assert answer.startswith(f"HTTP/1.1 {expected} ") or answer.startswith(
            f"HTTP/1.0 {expected} "
        ), (what, answer)
    assert not stack.internet.seen(name)
    # The proxy still serves the cloister that sent them.
    status, body = hog.curl(f"https://{ALLOWED}/after-the-big-header")
    assert status == "200", body


# Opens the connections, keeps the answers of the refused ones, then closes the first
# held one when told to (/tmp/fair/close) and waits for the end (/tmp/fair/done).
FLOOD = r"""
set -u
rm -rf /tmp/fair; mkdir -p /tmp/fair
p=${HTTPS_PROXY#*@}; p=${p%/}; host=${p%:*}; port=${p##*:}
auth=$(printf 'cloister:%s' "$CLOISTER_TOKEN" | base64 -w0)
fds=()
for i in $(seq 1 COUNT); do
  exec {fd}<>"/dev/tcp/$host/$port"
  name="held-$i-TAG.unknown.example:443"
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n' \
    "$name" "$name" "$auth" >&"$fd"
  fds+=("$fd")
done
touch /tmp/fair/sent
while [ ! -e /tmp/fair/read ]; do sleep 0.1; done
held=()
for i in "${!fds[@]}"; do
  fd=${fds[$i]}
  if read -r -t 0.3 line <&"$fd"; then
    { echo "$line"; while read -r -t 2 rest <&"$fd"; do echo "$rest"; done; } \
      > "/tmp/fair/answer-$((i + 1))"
  else
    held+=("$((i + 1)):$fd")
  fi
done
printf '%s\n' "${held[@]}" > /tmp/fair/held
while [ ! -e /tmp/fair/close ]; do sleep 0.1; done
first=${held[0]}
fd=${first#*:}
exec {fd}>&-
echo "${first%%:*}" > /tmp/fair/closed
while [ ! -e /tmp/fair/done ]; do sleep 0.1; done
"""


def hub(stack: Stack) -> httpx.Client:
    """The stack's hub, with the hub secret (as the CLI calls it)."""
    secret = (stack.cli.data_dir / "guardian" / "hub.secret").read_text(encoding="utf-8").strip()
    base = stack.cli.json("guardian", "status", "--json")["ui"].rstrip("/")
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=10)


def pending(client: httpx.Client, cloister: Cloister) -> list[dict[str, Any]]:
    """The held domains of *cloister*."""
    response = client.get("/api/v1/pending")
    response.raise_for_status()
    return [item for item in response.json()["domains"] if item["cloister"] == cloister.name]


def test_an_approval_flood(stack: Stack, pair: Pair) -> None:
    hog, quiet = pair.hog, pair.quiet
    tag = secrets.token_hex(3)
    wanted = f"quiet-{tag}.{DOMAIN}"
    stack.resolve(wanted)
    client = hub(stack)
    flood = FLOOD.replace("COUNT", str(HELD)).replace("TAG", tag)
    holder = subprocess.Popen(
        [docker_executable(), "exec", hog.container, "bash", "-c", flood],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    asking: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: exists(hog, "/tmp/fair/sent"), 60, "the flood sent")
        wait_until(lambda: len(pending(client, hog)) >= SHARE, 30, "the hog's share held")
        time.sleep(1)  # every CONNECT has been judged by now; no more may be held
        mine = pending(client, hog)
        assert len(mine) == SHARE, mine

        # The other cloister's request reaches the hub past the hog's 110...
        asking = subprocess.Popen(
            [
                docker_executable(), "exec", quiet.container, "curl", "--silent",
                "--max-time", "120", "--cacert", "/work/e2e-ca.pem",
                "--write-out", "\n%{http_code}", f"https://{wanted}/decided",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        wait_until(lambda: pending(client, quiet), 30, "the quiet cloister's request at the hub")
        (theirs,) = pending(client, quiet)
        assert theirs["host"] == wanted, theirs

        # ...while the hog's surplus was refused at once, with the reason.
        hog.ok("touch /tmp/fair/read")
        wait_until(lambda: exists(hog, "/tmp/fair/held"), 120, "the hog's answers read")
        held = hog.ok("cat /tmp/fair/held").stdout.split()
        assert len(held) == SHARE, held
        answers = hog.ok("cat /tmp/fair/answer-*").stdout
        assert answers.count("HTTP/1.1 429 Too Many Requests") == HELD - SHARE, answers[:2000]
        assert answers.count("X-Cloister-Reason: too-many-held") == HELD - SHARE
        assert (
            f"requests of this cloister already wait for a human in the approval UI"
            f" (proxy.max_held_per_cloister: {SHARE})"
        ) in answers

        # A held client hangs up: its item leaves the pending list.
        hog.ok("touch /tmp/fair/close")
        wait_until(lambda: exists(hog, "/tmp/fair/closed"), 30, "a held client closed")
        closed = hog.ok("cat /tmp/fair/closed").stdout.strip()
        host = f"held-{closed}-{tag}.unknown.example"
        assert host in {item["host"] for item in mine}
        wait_until(
            lambda: host not in {item["host"] for item in pending(client, hog)},
            10,
            "the withdrawal",
        )
        assert len(pending(client, hog)) == SHARE - 1

        # The human allows the quiet cloister's request (the CLI, as a person would): it
        # goes through.
        stack.cli.ok("approvals", "allow", theirs["id"])
        out, _ = asking.communicate(timeout=60)
        assert out.decode().rpartition("\n")[2] == "200", out
        assert stack.internet.seen(f"{wanted}")
    finally:
        hog.sh("touch /tmp/fair/read /tmp/fair/close /tmp/fair/done")
        for process in (holder, asking):
            if process is not None:
                try:
                    process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
        client.close()
