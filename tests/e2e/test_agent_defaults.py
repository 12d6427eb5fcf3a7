"""Family 1, policy: the agents' own background traffic never waits in the approval queue.

A cloister started with ``--agent codex`` asks, through the real proxy of the harness's
guardian, for the hosts Codex still calls on its own (``ab.chatgpt.com``, its metrics
exporter; ``github.com``, its plugin list). No rule of the guardian's config names
them, so for any other cloister they would be held for a human; for this one they are
refused at once (``curl --max-time`` well below the approval timeout) with
``X-Cloister-Reason: agent-default``, and ``cloister approvals list`` never shows them.

=========================================================  ====================================
attack (from inside the cloister)                          result
=========================================================  ====================================
``test_an_agents_telemetry_host_is_denied_without_a_held   403 ``agent-default`` at once, over
_request``: HTTPS (CONNECT) and plain HTTP to Codex's      HTTPS and HTTP, the message naming
background hosts from a Codex cloister                     the setting; nothing held
``test_a_shell_cloister_is_asked_for_it``: the same host   held for a human (the control),
from a cloister started without an agent                   then denied once
``test_a_rule_of_the_human_wins``: the project's config    github.com reaches the fake internet
allows ``github.com`` and denies ``ab.chatgpt.com``        (200); ab.chatgpt.com is ``denied``
                                                           by the project's file
=========================================================  ====================================
"""

from __future__ import annotations

import json
import secrets
import subprocess
from dataclasses import dataclass

import pytest

from tests.cli.cli_support import docker_executable, squash
from tests.e2e.harness import CA_FILE, Cloister, Stack, shell_quote, wait_for_held
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

TELEMETRY = "ab.chatgpt.com"
PLUGINS = "github.com"
REFUSED_WITHIN = 10.0  # curl's --max-time: a held request would still be waiting


@dataclass
class Reply:
    status: str  # the CONNECT's status when the proxy refused the tunnel
    reason: str  # X-Cloister-Reason, "" if none
    body: str


def fetch(cloister: Cloister, url: str, *, max_time: float = REFUSED_WITHIN) -> Reply:
    """One curl through the cloister's proxy: status, reason header and body."""
    tag = secrets.token_hex(4)
    script = (
        f"curl --silent --max-time {max_time:g} --cacert /work/{CA_FILE}"
        f" --dump-header /tmp/{tag}.head --output /tmp/{tag}.body"
        f" --write-out '%{{http_code}} %{{http_connect}}' {shell_quote(url)}; echo;"
        f" (grep -i '^x-cloister-reason:' /tmp/{tag}.head || true) | tail -n 1 | tr -d '\\r';"
        f" echo; cat /tmp/{tag}.body 2>/dev/null; rm -f /tmp/{tag}.*"
    )
    output = cloister.sh(script, timeout=max_time + 30).stdout
    codes, reason, body = [*output.split("\n", 2), "", ""][:3]
    code, _, connect = codes.strip().partition(" ")
    status = connect if code == "000" and connect not in ("", "000", "200") else code
    return Reply(status or "000", reason.partition(":")[2].strip(), body)


def pending_hosts(stack: Stack) -> set[str]:
    listed = stack.cli.json("approvals", "list", "--json")
    return {str(item["host"]) for item in listed["domains"]}


@pytest.fixture(scope="session")
def codex(stack: Stack) -> Cloister:
    return stack.cloister("agentbg", "--agent", "codex")


def test_an_agents_telemetry_host_is_denied_without_a_held_request(codex: Cloister) -> None:
    stack = codex.stack
    for url in (
        f"https://{TELEMETRY}/otlp/v1/metrics",
        f"http://{TELEMETRY}/otlp/v1/metrics",
        f"https://{PLUGINS}/openai/plugins.git/info/refs",
    ):
        reply = fetch(codex, url)
        assert (reply.status, reply.reason) == ("403", "agent-default"), (url, reply)
        if url.startswith("http:"):  # curl shows no body of a refused CONNECT
            said = squash(reply.body)
            assert f"{TELEMETRY} is one of codex's own background hosts" in said, said
            assert "agents.codex.background_hosts" in said, said
            assert f"`- domain: {TELEMETRY}` under proxy.allow" in said, said
    assert not {TELEMETRY, PLUGINS} & pending_hosts(stack)


def test_a_shell_cloister_is_asked_for_it(stack: Stack) -> None:
    shell = stack.cloister("agentbgshell")
    tag = secrets.token_hex(4)
    script = (
        f"curl --silent --max-time 60 --write-out '%{{http_code}}' -o /dev/null"
        f" http://{TELEMETRY}/{tag}"
    )
    argv = [docker_executable(), "exec", shell.container, "bash", "-c", script]
    client = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        item = wait_for_held(stack, f'"host": "{TELEMETRY}"')
        assert item["cloister"] == shell.name, item
        assert client.poll() is None, "the client did not wait for a human"
        stack.cli.ok("approvals", "deny", item["id"], "--scope", "once")
        stdout, _ = client.communicate(timeout=60)
        assert stdout.strip() == "403", stdout
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    shell.stop()


def test_a_rule_of_the_human_wins(codex: Cloister) -> None:
    stack = codex.stack
    project = stack.cli.listing()[codex.name]["project"]
    stack.resolve(PLUGINS)  # to the fake internet, as a company's DNS would answer
    stack.cli.write_project_config(
        project,
        f"proxy:\n  allow:\n    - domain: {PLUGINS}\n  deny:\n    - domain: {TELEMETRY}\n",
    )
    wait_until(
        lambda: fetch(codex, f"http://{TELEMETRY}/").reason == "denied",
        10,
        "the proxy to read the project's config",
    )
    denied = fetch(codex, f"http://{TELEMETRY}/")
    assert denied.status == "403", denied
    project_file = codex.stack.cli.config_dir / "projects" / f"{project}.yaml"
    assert f"is denied by {TELEMETRY} in {project_file}" in squash(denied.body)
    path = f"/agentbg-{secrets.token_hex(6)}"
    allowed = fetch(codex, f"http://{PLUGINS}{path}")
    assert allowed.status == "200", allowed
    document = json.loads(allowed.body)
    assert (document["upstream"], document["host"], document["path"]) == (
        "fake-internet",
        PLUGINS,
        path,
    )
    assert not {TELEMETRY, PLUGINS} & pending_hosts(stack)
