"""Issue 19 acceptance: from inside real cloisters, the agent cannot choose the
organisation, project or origin of its model calls, and one cloister cannot take the
credential gateway's connections. (The calls outside each vendor's table are attacked
in tests/e2e/test_through_proxy.py.)

A guardian of its own, two cloisters with every agent set up (``api-key``), and a fake
model API in this process on the far side (``agents.<name>.api_base``: the host's
address on Docker's default bridge, let through by ``proxy.allow_private_networks``).
It records every request and counts the connections the gateway holds to it.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import docker
import pytest

from cloister_core.credentials import PROVIDERS
from cloister_core.stack import CREDENTIALS_PORT, credentials_url
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    Result,
    guardian,
    make_repo,
    remove_containers,
    run_command,
    unique,
)
from tests.conftest import SkipOrFail
from tests.proxy.support import read_head
from tests.waiting import free_port, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

KEYS = {agent: f"REAL-{agent}-" + secrets.token_hex(16) for agent in PROVIDERS}
SLOW = 300  # connections the hog opens
CAP = 64  # the gateway's default max_connections_per_cloister


@dataclass
class FakeApi:
    """Answers every request ``200 {}`` once its head is in, then reads its body."""

    listener: socket.socket
    requests: list[tuple[str, str]] = field(default_factory=list)  # request line, key
    heads: list[dict[str, str]] = field(default_factory=list)  # their fields, lower case
    open_now: int = 0
    most_open: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with self.lock:
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        buffer = b""
        try:
            with conn:
                conn.settimeout(120)
                while True:
                    head, buffer = read_head(conn, buffer)
                    lines = head.decode("latin-1").split("\r\n")
                    fields = {
                        name.strip().lower(): value.strip()
                        for name, _, value in (line.partition(":") for line in lines[1:])
                    }
                    key = fields.get("x-api-key") or fields.get("x-goog-api-key") or ""
                    key = key or fields.get("authorization", "").removeprefix("Bearer ")
                    with self.lock:
                        self.requests.append((lines[0], key))
                        self.heads.append(fields)
                    length = int(fields.get("content-length", "0"))
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    while len(buffer) < length:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buffer += data
                    buffer = buffer[length:]
        except (OSError, ConnectionError):
            return
        finally:
            with self.lock:
                self.open_now -= 1


def bridge_gateway(client: docker.DockerClient) -> str:
    """The host's address on Docker's default bridge: where containers reach this process
    (not one of the guardian's own networks, which are never an upstream)."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"]
    address: str = config[0]["Gateway"]
    return address


@pytest.fixture(scope="module")
def fake_api(docker_client: docker.DockerClient) -> Iterator[FakeApi]:
    listener = socket.create_server((bridge_gateway(docker_client), 0), backlog=1024)
    api = FakeApi(listener)
    thread = threading.Thread(target=api.serve, daemon=True)
    thread.start()
    yield api
    listener.close()
    thread.join(5)


@dataclass
class Stack:
    cli: CloisterCli
    api: FakeApi


@pytest.fixture(scope="module")
def stack(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
    fake_api: FakeApi,
) -> Iterator[Stack]:
    host = fake_api.listener.getsockname()[0]
    base = f"http://{host}:{fake_api.port}"
    config = (
        "# Written by tests/proxy/credentials/test_acceptance_gateway.py\n"
        f"defaults:\n  image: {SLIM_IMAGE}\n"
        f"guardian:\n  ui_port: {free_port()}\n"
        f"proxy:\n  allow_private_networks: ['{host}/32']\n"
        "agents:\n" + "".join(f"  {agent}: {{api_base: '{base}'}}\n" for agent in PROVIDERS)
    )
    root = tmp_path_factory.mktemp("gateway-acceptance")
    with guardian(docker_client, root, config, skip_or_fail) as cli:
        for agent, key in KEYS.items():
            stored = run_command(
                [str(cli.executable), "setup", agent, "--method", "api-key", "--secret-stdin"],
                cwd=cli.root,
                env=cli.env,
                timeout=60,
                stdin=key,
            )
            assert stored.returncode == 0, stored.describe()
        yield Stack(cli, fake_api)


@pytest.fixture
def two_cloisters(stack: Stack) -> Iterator[tuple[str, str]]:
    names = [unique("hog"), unique("other")]
    try:
        for name in names:
            repository = make_repo(stack.cli.root / name)
            stack.cli.ok("start", "-d", "--agent", "claude", cwd=repository, timeout=600)
        yield names[0], names[1]
    finally:
        for name in names:
            stack.cli.run("stop", name)
        remove_containers(names)


def audit(cli: CloisterCli) -> list[dict[str, Any]]:
    path = cli.data_dir / "audit.log"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if '"credentials.request"' in line]


KEY_HEADER = {
    "claude": "x-api-key: $CLOISTER_TOKEN",
    "codex": "Authorization: Bearer $CLOISTER_TOKEN",
    "gemini": "x-goog-api-key: $CLOISTER_TOKEN",
}


def in_cloister(cli: CloisterCli, name: str, script: str, timeout: float = 60) -> Result:
    """``cloister exec NAME -- sh -c SCRIPT``: what a process in the cloister can do."""
    return cli.run("exec", name, "--", "sh", "-c", script, timeout=timeout)


def call(cli: CloisterCli, name: str, agent: str, method: str, path: str) -> str:
    """The status of one request made in cloister *name* to *agent*'s gateway URL, with
    the cloister's token as the key (as the agent sends it)."""
    url = credentials_url(PROVIDERS[agent].prefix) + path
    script = (
        f"curl -s -o /dev/null -w '%{{http_code}}' -X {method} -H \"{KEY_HEADER[agent]}\" '{url}'"
    )
    result = in_cloister(cli, name, script)
    assert result.returncode == 0, result.describe()
    return result.stdout.strip()


@pytest.fixture
def one_cloister(stack: Stack) -> Iterator[str]:
    name = unique("orgs")
    try:
        repository = make_repo(stack.cli.root / name)
        stack.cli.ok("start", "-d", "--agent", "claude", cwd=repository, timeout=600)
        yield name
    finally:
        stack.cli.run("stop", name)
        remove_containers([name])


SELECTORS = {
    "claude": ("/v1/messages", ["anthropic-organization: org-b", "anthropic-version: 2023-06-01"]),
    "codex": ("/v1/responses", ["OpenAI-Organization: org-b", "OpenAI-Project: proj_b"]),
    "gemini": ("/v1beta/models/g:generateContent", ["x-goog-user-project: project-b"]),
}
SMUGGLED = ["Cookie: session=b", "X-Forwarded-For: 10.9.9.9", "Forwarded: for=10.9.9.9"]


def test_the_agent_cannot_choose_the_organisation_project_or_origin(
    stack: Stack, one_cloister: str
) -> None:
    before = len(stack.api.heads)
    for agent, (path, selectors) in SELECTORS.items():
        url = credentials_url(PROVIDERS[agent].prefix) + path
        extra = " ".join(f"-H '{line}'" for line in [*selectors, *SMUGGLED])
        script = (
            f"curl -s -o /dev/null -w '%{{http_code}}' -X POST -H \"{KEY_HEADER[agent]}\""
            f" -H 'content-type: application/json' {extra} --data '{{}}' '{url}'"
        )
        result = in_cloister(stack.cli, one_cloister, script)
        assert (result.returncode, result.stdout) == (0, "200"), result.describe()
    heads = stack.api.heads[before:]
    assert len(heads) == 3
    for head in heads:
        assert not {"anthropic-organization", "openai-organization", "openai-project"} & set(head)
        assert not {"x-goog-user-project", "cookie", "x-forwarded-for", "forwarded"} & set(head)
        assert head["content-type"] == "application/json"
        assert head["user-agent"].startswith("curl/")
    assert heads[0]["anthropic-version"] == "2023-06-01"
    assert [key for _, key in stack.api.requests[before:]] == list(KEYS.values())
    lines = [line for line in audit(stack.cli) if line.get("cloister") == one_cloister]
    dropped = {line["agent"]: line["dropped_headers"] for line in lines if line["status"] == 200}
    smuggled = [line.split(":", 1)[0].lower() for line in SMUGGLED]
    assert dropped == {
        "claude": ["anthropic-organization", *smuggled],
        "codex": ["openai-organization", "openai-project", *smuggled],
        "gemini": ["x-goog-user-project", *smuggled],
    }


def test_300_slow_connections_of_one_cloister_are_capped_and_another_is_served(
    stack: Stack, two_cloisters: tuple[str, str]
) -> None:
    hog, other = two_cloisters
    authority = credentials_url("").removeprefix("http://")
    # SLOW raw connections (curl's telnet): a forwarded request's head, one byte of its
    # body, then nothing for longer than the test looks.
    script = (
        f"i=0; while [ $i -lt {SLOW} ]; do i=$((i+1));"
        " ( printf 'POST /claude/v1/messages HTTP/1.1\\r\\nHost: x\\r\\nx-api-key: %s\\r\\n"
        'Content-Length: 1000\\r\\n\\r\\n{\' "$CLOISTER_TOKEN"; exec sleep 50 )'
        f" | curl -s --max-time 55 telnet://{authority} >/dev/null 2>&1 & done; echo started"
    )
    slow = in_cloister(stack.cli, hog, script, timeout=120)
    assert slow.returncode == 0, slow.describe()
    port = f"{CREDENTIALS_PORT:04X}"

    def states() -> dict[str, int]:
        """The hog's connections to the gateway by TCP state (its side): 01 open, 08
        closed by the gateway."""
        table = in_cloister(stack.cli, hog, "cat /proc/net/tcp /proc/net/tcp6").stdout
        counts: dict[str, int] = {}
        for row in (line.split() for line in table.splitlines()):
            if len(row) > 3 and row[2].endswith(f":{port}"):
                counts[row[3]] = counts.get(row[3], 0) + 1
        return counts

    wait_until(lambda: stack.api.open_now >= CAP, 60, "the hog's upstream connections")
    # Every connection past the cap is closed by the gateway: refused at its request, or
    # at once when its cloister is known to be full.
    seen: list[dict[str, int]] = []

    def held_at_most_the_cap() -> bool:
        seen.append(states())
        return seen[-1].get("01", 0) <= CAP

    try:
        wait_until(held_at_most_the_cap, 60, f"the hog to hold at most {CAP} connections")
    except AssertionError:
        raise AssertionError(f"the hog's connections by TCP state: {seen[-3:]}") from None
    # The hog holds at most its cap of upstream connections on the shared key...
    assert stack.api.most_open <= CAP + 4
    # ...and the other cloister is served meanwhile.
    assert call(stack.cli, other, "claude", "POST", "/v1/messages") == "200"
    assert stack.api.requests[-1] == ("POST /v1/messages HTTP/1.1", KEYS["claude"])
    lines = audit(stack.cli)
    capped = [line for line in lines if line.get("reason") == "connections"]
    assert capped
    assert {(line["cloister"], line["status"]) for line in capped} == {(hog, 429)}
    assert any(line["cloister"] == other and line["status"] == 200 for line in lines)
