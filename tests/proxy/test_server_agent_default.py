"""An agent's own background host: refused at once by the running proxy, never held."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cloister_core.hub import DomainDecision
from cloister_core.tokens import TokenRecord, write_token_file
from tests.proxy.support import (
    LOCAL_ALLOW,
    FakeHub,
    ProxyHarness,
    ThreadedServer,
    connect_request,
    read_response,
)

# "localhost" resolves to 127.0.0.1 (allowed as a private network here) and is on no
# allowlist: held for the hub, unless it is the cloister's agent's background host.
CONFIG = (
    "proxy:\n"
    "  allow: []\n"
    "  allowed_ports: [{port}]\n"
    "  approval_timeout: 5s\n"
    f"  {LOCAL_ALLOW}\n"
    "agents:\n"
    "  codex: {{background_hosts: [localhost]}}\n"
)


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    server = FakeHub(lambda _request: DomainDecision(action="allow", scope="once"))
    yield server
    server.close()


def token(harness: ProxyHarness, cloister: str, agent: str | None) -> TokenRecord:
    record = TokenRecord.create(
        cloister=cloister, project="api", path=harness.root, address="127.0.0.1"
    ).for_agent(agent)
    write_token_file(harness.tokens_dir, record)
    return record


def test_the_agents_host_is_refused_without_asking_the_hub(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub
) -> None:
    harness.write_config(CONFIG.format(port=echo_server.port))
    codex = token(harness, "api-codex", "codex")
    claude = token(harness, "api-claude", "claude")
    harness.start(hub_url=hub.url)
    target = f"localhost:{echo_server.port}"
    with harness.connect() as sock:
        sock.sendall(connect_request(target, codex.secret))
        response = read_response(sock)
    assert (response.status, response.headers["x-cloister-reason"]) == (403, "agent-default")
    assert response.body.startswith(b"cloister: localhost is one of codex's own background hosts")
    assert hub.requests == []  # nothing held for a human
    assert echo_server.connections == 0
    (line,) = harness.wait_for_audit(1)
    assert (line["cloister"], line["status"], line["reason"]) == ("api-codex", 403, "agent-default")
    # Another agent's cloister is asked for it as before (and the hub allows it once).
    with harness.connect() as sock:
        sock.sendall(connect_request(target, claude.secret))
        assert read_response(sock, head_only=True).status == 200
    assert [request.cloister for request in hub.requests] == ["api-claude"]
