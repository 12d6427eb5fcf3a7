"""Family 5, identity: a cloister is who its token and its address say, and nobody else.

A cloister's token is bound to the cloister's address: every guardian service a cloister
reaches (the proxy, the hostexec gateway, the credential gateway) refuses a token that is
random, one of a stopped cloister, or another running cloister's (read on the host, as a
leak would give it), and charges nothing to that other cloister. What a request says of
itself (a hostexec body naming another cloister, project or directory) never changes who
it is. And the hub's credential (the CLI's hub secret) never reaches a port a cloister
publishes with ``cloister port``, nor can a cloister publish the hub's own port.

Each attack runs from inside a cloister (``attacker``) of the shared stack, for the root
and the non-root host user; ``victim`` is another cloister of the same stack.

=================================================  ========================================
attack (from inside the cloister)                  result
=================================================  ========================================
``test_foreign_tokens_are_refused_everywhere``:    proxy CONNECT and plain HTTP: 407;
a random token, the victim's (running), a stopped  hostexec gateway: 401; credential
cloister's, each at the proxy (CONNECT and plain   gateway: 401; nothing reaches the fake
HTTP), the hostexec gateway and the credential     internet, nothing is charged to the
gateway; the cloister's own token as control       victim (its log); own token: 200 each
                                                   (credential gateway: past the token
                                                   check); ``stop`` removes the token and
                                                   session decisions at once
``test_a_body_claiming_another_cloister``:         extra fields (``cloister``, ``project``,
a hostexec request whose body names the victim's   ``cwd``): 400, nothing runs; ``cmd``
cloister, project and directory; one whose         ignored: the command runs as the token's
``cmd`` claims another command and directory       cloister, in the attacker's directory
``test_the_hub_secret_never_reaches_a_published``  the CLI refuses the fake hub (it cannot
``_port``: the attacker serves a fake hub on a     prove the secret); the fake hub's log
port published by ``cloister port``; the human's   holds the proof request and no secret,
CLI is pointed at it (``--hub``,                   no ``Authorization``; ``cloister port``
``$CLOISTER_HUB_URL``); the attacker asks for the  refuses the UI's port; the real hub still
approval UI's own port                             answers the CLI
=================================================  ========================================
"""

from __future__ import annotations

import json
import secrets
import shlex
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cloister_core import stack as core_stack
from cloister_core.decisions import DecisionStore
from cloister_core.paths import CloisterPaths
from tests.cli.cli_support import docker_executable, run_command
from tests.e2e.harness import ALLOWED, CA_FILE, WILD, Cloister, Stack
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

GATEWAY_URL = "http://$CLOISTER_GUARDIAN_HOST:$CLOISTER_REQUEST_PORT/request"
CREDENTIALS_URL = (
    f"http://{core_stack.CREDENTIALS_ALIAS}:{core_stack.CREDENTIALS_PORT}/claude/v1/messages"
)
# The credential gateway's answers to a token it refuses (unknown; another cloister's).
TOKEN_REFUSALS = ("the key is not a cloister's token", "this token belongs to another cloister")
PORT = 8000  # the attacker's fake hub, inside its cloister
FAKE_HUB_LOG = "/tmp/fake-hub.log"
# HTTP/1.0, one client at a time: logs each request (head and body), answers every one
# with a forged proof and an empty pending list.
FAKE_HUB = (
    "use IO::Socket::INET; $| = 1;"
    f" my $s = IO::Socket::INET->new(LocalPort => {PORT}, Listen => 16, ReuseAddr => 1)"
    " or die $!;"
    " while (my $c = $s->accept) {"
    " my ($head, $length) = ('', 0);"
    r" while (<$c>) { $head .= $_; $length = $1 if /^Content-Length:\s*(\d+)/i;"
    r" last if /^\r?\n$/ }"
    " my $body = ''; read($c, $body, $length) if $length;"
    f" open(my $log, '>>', '{FAKE_HUB_LOG}'); print $log \"----\\n$head$body\\n\"; close $log;"
    ' my $answer = \'{"proof": "forged", "domains": [], "commands": []}\';'
    r' print $c "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: "'
    r' . length($answer) . "\r\n\r\n$answer";'
    " close $c }"
)


@dataclass(frozen=True)
class Pair:
    attacker: Cloister
    victim: Cloister


@pytest.fixture(scope="session")
def pair(stack: Stack) -> Iterator[Pair]:
    """Two cloisters of the stack, for the module's tests; ``pwd`` is auto-approved for
    the attacker's project (it shows where a hostexec command ran)."""
    attacker = stack.cloister("id-attacker")
    victim = stack.cloister("id-victim")
    stack.cli.write_project_config(
        attacker.name, "hostexec:\n  auto_approve:\n    - pattern: '^pwd$'\n"
    )
    yield Pair(attacker, victim)
    for cloister in (attacker, victim):
        stack.cli.run("stop", cloister.name)


def every_service(cloister: Cloister, token: str, host: str, marker: str) -> dict[str, str]:
    """*token* tried at every service from inside *cloister*, in one ``docker exec``: the
    proxy's answer to CONNECT, to an HTTPS GET of *host* (CONNECT's status, then the
    GET's) and to a plain HTTP GET of it; the hostexec gateway's to ``echo MARKER`` and
    the credential gateway's to a model call (each: the status, then the answer)."""
    proxy = f"http://cloister:{token}@{cloister.stack.proxy_alias}"
    model_call = json.dumps(
        {"model": "claude-e2e", "max_tokens": 8, "messages": [{"role": "user", "content": marker}]}
    )
    quoted = {
        "token": shlex.quote(token),
        "proxy": shlex.quote(proxy),
        "hostexec": shlex.quote(json.dumps({"args": ["echo", marker]})),
        "model_call": shlex.quote(model_call),
    }
    script = f"""
        t={quoted["token"]}; p={quoted["proxy"]}
        c() {{ curl --silent --max-time 10 --cacert /work/{CA_FILE} "$@"; }}
        echo "connect $(c --output /dev/null --write-out '%{{http_connect}}' \\
          --proxytunnel --proxy "$p" telnet://{ALLOWED}:443 </dev/null)"
        echo "https $(c --output /dev/null --write-out '%{{http_connect}} %{{http_code}}' \\
          --proxy "$p" https://{host}/https)"
        echo "http $(c --output /dev/null --write-out '%{{http_code}}' \\
          --proxy "$p" http://{host}/plain)"
        a=$(c --noproxy '*' --write-out ' %{{http_code}}' -H "X-Cloister-Token: $t" \\
          -H 'Content-Type: application/json' -H 'Accept: application/json' \\
          --data-binary {quoted["hostexec"]} "{GATEWAY_URL}")
        echo "hostexec ${{a##* }} ${{a% *}}"
        a=$(c --noproxy '*' --write-out ' %{{http_code}}' -H "x-api-key: $t" \\
          -H 'anthropic-version: 2023-06-01' -H 'Content-Type: application/json' \\
          --data-binary {quoted["model_call"]} {CREDENTIALS_URL})
        echo "credentials ${{a##* }} ${{a% *}}"
    """
    result = cloister.sh(textwrap.dedent(script), timeout=120)
    answers = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert set(answers) == {"connect", "https", "http", "hostexec", "credentials"}, (
        result.describe()
    )
    return answers


def gateway(cloister: Cloister, token: str, body: str) -> tuple[str, str]:
    """POST *body* to the hostexec gateway, as the ``hostexec`` wrapper does, with
    *token*: the HTTP status and the JSON answer."""
    script = (
        "curl --silent --max-time 20 --noproxy '*' --write-out '\\n%{http_code}'"
        f" -H {shlex.quote(f'X-Cloister-Token: {token}')}"
        " -H 'Content-Type: application/json' -H 'Accept: application/json'"
        f' --data-binary {shlex.quote(body)} "{GATEWAY_URL}"'
    )
    answer, _, status = cloister.sh(script, timeout=60).stdout.rpartition("\n")
    return status.strip() or "000", answer


def logged(stack: Stack, name: str) -> str:
    """The cloister's log (what ``cloister logs NAME`` shows), or nothing yet."""
    path = CloisterPaths(stack.cli.config_dir, stack.cli.data_dir).cloister_log(name)
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_foreign_tokens_are_refused_everywhere(stack: Stack, pair: Pair) -> None:
    attacker, victim = pair.attacker, pair.victim
    gone = stack.cloister("id-gone")
    paths = CloisterPaths(stack.cli.config_dir, stack.cli.data_dir)
    DecisionStore(paths).add_command("session", "git push", gone.name)
    if stack.user is not None:
        stack.user.adopt(paths.session_decisions_dir)
    gone_token = stack.cli.token(gone.name)
    gone.stop()
    # Right after `cloister stop` returned: no waiting (the services read the token
    # directory on every request).
    assert not stack.cli.token_file(gone.name).exists()
    assert not paths.session_decisions(gone.name).exists()

    own = stack.cli.token(attacker.name)
    foreign = {
        "random": secrets.token_hex(32),
        "the victim's": stack.cli.token(victim.name),
        "a stopped cloister's": gone_token,
    }
    assert own not in foreign.values()
    # Names of their own (allowed by the wildcard rule), so the fake internet's log and
    # the cloisters' logs tell each attempt apart.
    hosts = {label: f"{secrets.token_hex(4)}.{WILD}" for label in ("own", *foreign)}
    stack.resolve(*hosts.values())

    # The control: the attacker's own token passes every service.
    answers = every_service(attacker, own, hosts["own"], "own-marker")
    assert answers["connect"] == "200", answers
    assert answers["https"] == "200 200", answers
    assert answers["http"] == "200", answers
    status, _, answer = answers["hostexec"].partition(" ")
    assert status == "200", answers
    assert json.loads(answer)["stdout"] == "own-marker\n"
    status, _, answer = answers["credentials"].partition(" ")
    # 200 once `cloister setup claude` stored a key, else 503 naming it: past the token.
    assert status in ("200", "503"), answers
    assert not any(refusal in answer for refusal in TOKEN_REFUSALS), answers
    assert stack.internet.seen(hosts["own"])

    for label, token in foreign.items():
        host, marker = hosts[label], f"marker-{secrets.token_hex(4)}"
        answers = every_service(attacker, token, host, marker)
        assert answers["connect"] == "407", (label, answers)
        assert answers["https"] == "407 000", (label, answers)
        assert answers["http"] == "407", (label, answers)
        status, _, answer = answers["hostexec"].partition(" ")
        assert status == "401", (label, answers)
        assert marker not in answer, (label, answers)
        status, _, answer = answers["credentials"].partition(" ")
        assert status == "401", (label, answers)
        assert any(refusal in answer for refusal in TOKEN_REFUSALS), (label, answers)
        assert not stack.internet.seen(host), label
        assert not stack.internet.seen(marker), label
        assert host not in logged(stack, victim.name), label
        assert marker not in logged(stack, victim.name), label
    # What the attacker did with its own token is in its own log: the check is real.
    assert hosts["own"] in logged(stack, attacker.name)
    # The other cloister is unaffected by all of it.
    assert victim.connect_status(f"{ALLOWED}:443") == "200"


def test_a_body_claiming_another_cloister(stack: Stack, pair: Pair) -> None:
    attacker, victim = pair.attacker, pair.victim
    own = stack.cli.token(attacker.name)
    marker = f"claimed-{secrets.token_hex(4)}"
    # Fields naming the victim are no part of the request: refused as a whole.
    claims = {"cloister": victim.name, "project": victim.name, "cwd": str(victim.repo)}
    for field, value in claims.items():
        body = json.dumps({"args": ["echo", marker], field: value})
        status, answer = gateway(attacker, own, body)
        assert status == "400", (field, answer)
        assert f"{field}: Extra inputs are not permitted" in json.loads(answer)["reason"]
    assert marker not in logged(stack, victim.name)
    # `cmd` is informational: the command is argv, run as the token's cloister, where
    # that cloister works on the host.
    claim = f"cd {shlex.quote(str(victim.repo))} && pwd"
    status, answer = gateway(attacker, own, json.dumps({"args": ["pwd"], "cmd": claim}))
    assert status == "200", answer
    ran = json.loads(answer)
    assert ran["status"] == "auto_approved", ran
    assert ran["stdout"].strip() in (str(attacker.repo), str(attacker.repo.resolve())), ran
    # The same with the wrapper, for comparison: the same directory.
    assert attacker.ok("hostexec pwd").stdout == ran["stdout"]


def test_the_hub_secret_never_reaches_a_published_port(stack: Stack, pair: Pair) -> None:
    attacker = pair.attacker
    cli = stack.cli
    secret = (cli.data_dir / "guardian" / "hub.secret").read_text(encoding="utf-8").strip()
    started = run_command(
        [docker_executable(), "exec", "-d", attacker.container, "perl", "-e", FAKE_HUB],
        timeout=30,
    )
    assert started.returncode == 0, started.describe()
    wait_until(
        lambda: attacker.sh(f"exec 3<>/dev/tcp/127.0.0.1/{PORT}").returncode == 0,
        30,
        "the fake hub in the cloister",
    )
    host_port = cli.json("port", attacker.name, f"{PORT}:0", "--json")["host_port"]
    assert isinstance(host_port, int)
    fake = f"http://127.0.0.1:{host_port}"
    try:
        # The human's CLI, pointed at the agent's port (a URL the agent suggested).
        for args in (
            ("approvals", "list", "--json", "--hub", fake),
            ("approvals", "allow", "3f2a9c1d", "--hub", fake),
        ):
            refused = cli.fails(*args)
            assert "cannot prove it holds this machine's hub secret" in refused.stderr, args
        env = {**cli.env, "CLOISTER_HUB_URL": fake}
        listed = run_command(cli.command("approvals", "list"), cwd=cli.root, env=env)
        assert listed.returncode == 1, listed.describe()
        assert "nothing was sent to it" in listed.stderr, listed.describe()

        heads = attacker.ok(f"cat {FAKE_HUB_LOG}").stdout
        assert "/api/v1/proof" in heads, heads  # the CLI did reach the fake hub
        assert secret not in heads
        assert "authorization" not in heads.lower(), heads
        assert "cookie" not in heads.lower(), heads

        # The hub's own port is never the agent's: refused.
        ui_port = int(cli.json("guardian", "status", "--json")["ui"].rsplit(":", 1)[1].strip("/"))
        refusal = f"port {ui_port} on 127.0.0.1 is the approval UI's"
        assert refusal in cli.fails("port", attacker.name, f"3000:{ui_port}").stderr
        # The real hub still answers the CLI.
        assert "domains" in cli.json("approvals", "list", "--json")
    finally:
        cli.run("port", attacker.name, str(PORT), "--remove")
