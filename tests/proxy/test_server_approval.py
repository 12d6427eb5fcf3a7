"""Unknown domains: held for the approval hub, single-flight, and every outcome."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from cloister_core.config.models import RuleEntry
from cloister_core.decisions import DecisionStore
from cloister_core.hub import DomainDecision, DomainRequest
from cloister_core.paths import CloisterPaths
from tests.proxy.support import (
    LOCAL_ALLOW,
    TIMEOUT,
    FakeHub,
    ProxyHarness,
    ThreadedServer,
    connect_request,
    open_tunnel,
    read_response,
)
from tests.waiting import wait_until

# "localhost" resolves to 127.0.0.1 (allowed as a private network here) but is on no
# allowlist, so a CONNECT to it is the "unknown domain" case, end to end.
UNLISTED_CONFIG = (
    "proxy:\n"
    "  allow: []\n"
    f"  allowed_ports: [{{port}}]\n"
    "  approval_timeout: {timeout}\n"
    f"  {LOCAL_ALLOW}\n"
)


def config(port: int, timeout: str = "5s", behavior: str | None = None) -> str:
    text = UNLISTED_CONFIG.format(port=port, timeout=timeout)
    if behavior:
        text += f"  unlisted_domain_behavior: {behavior}\n"
    return text


class Decider:
    """Answers hub requests; can hold them until the test releases them."""

    def __init__(self, decision: DomainDecision | None) -> None:
        self.decision = decision
        self.release = threading.Event()
        self.release.set()
        self.on_decide: Callable[[DomainRequest], object] | None = None

    def __call__(self, request: DomainRequest) -> DomainDecision | None:
        self.release.wait(30)
        if self.on_decide is not None:
            self.on_decide(request)
        return self.decision


@pytest.fixture
def decider() -> Decider:
    return Decider(DomainDecision(action="allow", scope="once"))


@pytest.fixture
def hub(decider: Decider) -> Iterator[FakeHub]:
    server = FakeHub(decider)
    yield server
    server.close()


def test_allow_once_releases_the_held_request(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub
) -> None:
    harness.write_config(config(echo_server.port))
    record = harness.add_token("api-main", "api")
    harness.start(hub_url=hub.url)
    sock, response = open_tunnel(harness, f"localhost:{echo_server.port}", record.secret)
    with sock:
        assert response.status == 200
    (request,) = hub.requests
    # The proxy says how long it will wait (approval_timeout), so the hub waits no longer.
    assert request == DomainRequest(
        cloister="api-main", project="api", host="localhost", port=echo_server.port, wait_seconds=5
    )
    assert hub.authorizations == ["Bearer service-secret"]
    # "once": the next request asks again.
    sock, response = open_tunnel(harness, f"localhost:{echo_server.port}", record.secret)
    sock.close()
    assert len(hub.requests) == 2
    line = harness.wait_for_audit(2)[0]
    assert (line["verdict"], line["file"]) == ("allow", "approval (once)")


def test_session_scope_is_remembered_for_that_cloister_only(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub, decider: Decider
) -> None:
    entry = RuleEntry(domain="localhost")
    decider.decision = DomainDecision(action="allow", scope="session", entry=entry)
    # As the real hub does: a session decision is written to the cloister's session file.
    store = DecisionStore(CloisterPaths(harness.config_dir, harness.root / "data"))
    decider.on_decide = lambda request: store.add("session", "allow", entry, request.cloister)
    harness.write_config(config(echo_server.port))
    first = harness.add_token("one", "api")
    second = harness.add_token("two", "api")
    harness.start(hub_url=hub.url)
    target = f"localhost:{echo_server.port}"
    for _ in range(3):
        sock, response = open_tunnel(harness, target, first.secret)
        sock.close()
        assert response.status == 200
    assert len(hub.requests) == 1
    sock, response = open_tunnel(harness, target, second.secret)
    sock.close()
    assert len(hub.requests) == 2
    # Undone in the hub (the entry removed from the file): asked again.
    store.remove("session", "allow", entry, "one")
    sock, response = open_tunnel(harness, target, first.secret)
    sock.close()
    assert len(hub.requests) == 3


def test_deny_gives_403_denied(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub, decider: Decider
) -> None:
    decider.decision = DomainDecision(action="deny", scope="once")
    harness.write_config(config(echo_server.port))
    record = harness.add_token()
    harness.start(hub_url=hub.url)
    with harness.connect() as sock:
        sock.sendall(connect_request(f"localhost:{echo_server.port}", record.secret))
        response = read_response(sock)
    assert (response.status, response.headers["x-cloister-reason"]) == (403, "denied")
    assert response.body == b"cloister: localhost was denied in the approval UI (once)\n"
    assert echo_server.connections == 0


def test_nobody_answering_gives_approval_timeout(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub, decider: Decider
) -> None:
    decider.release.clear()  # the hub holds the request and never answers in time
    harness.write_config(config(echo_server.port, timeout="0.3s"))
    record = harness.add_token()
    harness.start(hub_url=hub.url)
    try:
        with harness.connect() as sock:
            sock.sendall(connect_request(f"localhost:{echo_server.port}", record.secret))
            response = read_response(sock)
    finally:
        decider.release.set()
    assert (response.status, response.headers["x-cloister-reason"]) == (403, "approval-timeout")
    assert b"nobody approved localhost within 0.3s" in response.body


def test_hub_timeout_answer_gives_approval_timeout(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub, decider: Decider
) -> None:
    decider.decision = DomainDecision(action="timeout")
    harness.write_config(config(echo_server.port))
    record = harness.add_token()
    harness.start(hub_url=hub.url)
    with harness.connect() as sock:
        sock.sendall(connect_request(f"localhost:{echo_server.port}", record.secret))
        response = read_response(sock)
    assert response.headers["x-cloister-reason"] == "approval-timeout"


def test_concurrent_requests_share_one_pending_item(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub, decider: Decider
) -> None:
    decider.release.clear()
    harness.write_config(config(echo_server.port))
    record = harness.add_token()
    harness.start(hub_url=hub.url)
    clients = [harness.connect() for _ in range(8)]
    for sock in clients:
        sock.sendall(connect_request(f"localhost:{echo_server.port}", record.secret))
    wait_until(lambda: len(hub.requests) == 1, TIMEOUT, "the request at the hub")
    server = harness.server
    assert server is not None
    wait_until(
        lambda: server._approvals is not None and server._approvals.pending == 1,
        TIMEOUT,
        "one pending approval",
    )
    decider.release.set()
    for sock in clients:
        with sock:
            assert read_response(sock, head_only=True).status == 200
    assert len(hub.requests) == 1


@pytest.mark.parametrize(
    ("behavior", "hub_url", "message"),
    [
        ("reject", True, "unlisted domains are refused (unlisted_domain_behavior: reject)"),
        (None, False, "no approval hub is configured"),
    ],
)
def test_refused_at_once_without_asking(
    harness: ProxyHarness,
    echo_server: ThreadedServer,
    hub: FakeHub,
    behavior: str | None,
    hub_url: bool,
    message: str,
) -> None:
    harness.write_config(config(echo_server.port, behavior=behavior))
    record = harness.add_token()
    harness.start(hub_url=hub.url if hub_url else None)
    with harness.connect() as sock:
        sock.sendall(connect_request(f"localhost:{echo_server.port}", record.secret))
        response = read_response(sock)
    assert (response.status, response.headers["x-cloister-reason"]) == (403, "not-approved")
    assert message in response.body.decode()
    assert hub.requests == []


def test_broken_or_absent_hub_is_not_approved(
    harness: ProxyHarness, echo_server: ThreadedServer, hub: FakeHub, decider: Decider
) -> None:
    decider.decision = None  # the fake hub answers 500
    harness.write_config(config(echo_server.port))
    record = harness.add_token()
    harness.start(hub_url=hub.url)
    with harness.connect() as sock:
        sock.sendall(connect_request(f"localhost:{echo_server.port}", record.secret))
        response = read_response(sock)
    assert (response.status, response.headers["x-cloister-reason"]) == (403, "not-approved")
    assert b"the approval hub could not be asked (hub answered 500" in response.body


def test_unreachable_hub_is_not_approved(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(config(echo_server.port))
    record = harness.add_token()
    harness.start(hub_url="http://127.0.0.1:9")  # nothing listens on the discard port
    with harness.connect() as sock:
        sock.sendall(connect_request(f"localhost:{echo_server.port}", record.secret))
        response = read_response(sock)
    assert (response.status, response.headers["x-cloister-reason"]) == (403, "not-approved")
    assert b"ConnectError" in response.body
