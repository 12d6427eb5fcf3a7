"""A token works only from its own cloister's address; unauthenticated connections are
limited per address."""

from __future__ import annotations

import json
import socket

from cloister_core.tokens import write_token_file
from tests.proxy.conftest import local_config
from tests.proxy.support import (
    TIMEOUT,
    ProxyHarness,
    ThreadedServer,
    connect_request,
    read_response,
)
from tests.waiting import wait_until


def connect_from(harness: ProxyHarness, source: str) -> socket.socket:
    return socket.create_connection(harness.address, timeout=TIMEOUT, source_address=(source, 0))


def tunnel_status(harness: ProxyHarness, target: str, token: str, source: str) -> tuple[int, str]:
    with connect_from(harness, source) as sock:
        sock.sendall(connect_request(target, token))
        response = read_response(sock, head_only=True)
    return response.status, response.headers.get("x-cloister-reason", "")


def test_another_cloisters_token_is_refused(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    victim = harness.add_token("victim", address="127.0.0.2")
    harness.start(cloister_logs=harness.root / "logs")
    target = f"127.0.0.1:{echo_server.port}"
    # From the victim's own address, its token works; from anywhere else it does not.
    assert tunnel_status(harness, target, victim.secret, "127.0.0.2")[0] == 200
    assert tunnel_status(harness, target, victim.secret, "127.0.0.3") == (407, "token-address")
    (line,) = [line for line in harness.wait_for_audit(2) if line["peer"] == "127.0.0.3"]
    assert line["reason"] == "token-address"
    assert line["cloister"] is None  # never audited as the victim
    assert line["peer"] == "127.0.0.3"
    assert any("victim" in message and "127.0.0.3" in message for message in harness.messages)
    # The victim's own log has its own tunnel, not the refusal of its token elsewhere.
    log = harness.root / "logs" / "victim.log"
    # Written just after audit.log, by the proxy's thread.
    wait_until(lambda: log.exists() and log.read_bytes().endswith(b"\n"), TIMEOUT, "its log")
    own = log.read_text(encoding="utf-8").splitlines()
    assert [json.loads(text)["peer"] for text in own] == ["127.0.0.2"]
    assert json.loads(own[0])["cloister"] == "victim"


def test_a_token_not_yet_bound_to_an_address_is_refused(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token("fresh", address="127.0.0.1")
    unbound = record.model_copy(update={"address": None})
    write_token_file(harness.tokens_dir, unbound)
    harness.start()
    status = tunnel_status(harness, f"127.0.0.1:{echo_server.port}", record.secret, "127.0.0.1")
    assert status == (407, "token-address")


def test_unauthenticated_connections_are_limited_per_address(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token("demo", address="127.0.0.1")
    harness.start(max_unauthenticated_per_address=3, header_timeout=5)
    idle = [connect_from(harness, "127.0.0.4") for _ in range(3)]
    try:
        with connect_from(harness, "127.0.0.4") as fourth:
            response = read_response(fourth)
        assert response.status == 429
        assert response.headers["x-cloister-reason"] == "connection-limit"
        # Another address is not affected.
        target = f"127.0.0.1:{echo_server.port}"
        assert tunnel_status(harness, target, record.secret, "127.0.0.1")[0] == 200
    finally:
        for sock in idle:
            sock.close()
