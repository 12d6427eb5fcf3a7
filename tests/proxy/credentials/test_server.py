"""The credential gateway on real sockets: the key swapped, SSE streamed, the guard applied."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from cloister_core.tokens import TokenRecord
from tests.proxy.credentials.conftest import REAL_KEY, GatewayHarness
from tests.proxy.support import (
    TIMEOUT,
    HttpExchange,
    HttpUpstream,
    ThreadedServer,
    read_head,
    read_response,
)

SSE_EVENTS = [
    b'event: message_start\ndata: {"type": "message_start"}\n\n',
    b'event: content_block_delta\ndata: {"delta": "hi"}\n\n',
    b'event: message_stop\ndata: {"type": "message_stop"}\n\n',
]


def ok(exchange: HttpExchange) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    body = json.dumps({"path": exchange.target}).encode()
    return 200, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))], [body]


@pytest.fixture
def upstream() -> Iterator[HttpUpstream]:
    server = HttpUpstream(ok)
    yield server
    server.close()


@pytest.fixture
def token(gateway: GatewayHarness, upstream: HttpUpstream) -> TokenRecord:
    gateway.configure(f"http://127.0.0.1:{upstream.port}")
    gateway.store()
    record = gateway.add_token()
    gateway.start()
    return record


def messages(gateway: GatewayHarness, key: str, **extra: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/claude/v1/messages",
        headers={"x-api-key": key, "anthropic-version": "2023-06-01", **extra},
        json={"model": "m", "messages": []},
        timeout=TIMEOUT,
    )


def test_the_real_key_goes_upstream_and_never_into_the_audit(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    response = messages(gateway, token.secret)
    assert response.status_code == 200
    assert response.json() == {"path": "/v1/messages"}
    (exchange,) = upstream.received
    headers = {name.lower(): value for name, value in exchange.headers}
    assert headers["x-api-key"] == REAL_KEY
    assert json.loads(exchange.body) == {"model": "m", "messages": []}
    assert token.secret not in b"".join(upstream.raw).decode()
    (line,) = gateway.wait_for_audit(1)
    assert line["event"] == "credentials.request"
    assert line | {"ts": None, "duration_ms": None} == line | {
        "cloister": "api",
        "project": "api",
        "agent": "claude",
        "method": "POST",
        "path": "/v1/messages",
        "credential": "api-key",
        "status": 200,
        "ts": None,
        "duration_ms": None,
    }
    audit_text = gateway.audit_path.read_text()
    assert REAL_KEY not in audit_text
    assert token.secret not in audit_text


def test_a_wrong_key_is_refused_without_reaching_upstream(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    response = messages(gateway, "sk-ant-guessed")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert response.headers["x-cloister-reason"] == "token"
    assert upstream.received == []
    (line,) = gateway.wait_for_audit(1)
    assert (line["status"], line["reason"], line["cloister"]) == (401, "token", None)


def test_a_removed_credential_is_noticed_at_once(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    assert messages(gateway, token.secret).status_code == 200
    (gateway.paths.data_dir / "credentials" / "claude.json").unlink()
    response = messages(gateway, token.secret)
    assert response.status_code == 503
    assert "cloister setup claude" in response.json()["error"]["message"]
    gateway.store(key="sk-ant-second-key")
    assert messages(gateway, token.secret).status_code == 200
    keys = [dict(e.headers).get("x-api-key") for e in upstream.received]
    assert keys == [REAL_KEY, "sk-ant-second-key"]


def test_keep_alive_on_both_sides(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=TIMEOUT) as client:
        for _ in range(5):
            response = client.post(
                "/claude/v1/messages", headers={"x-api-key": token.secret}, content=b"{}"
            )
            assert response.status_code == 200
    assert upstream.server is not None
    assert upstream.server.connections == 1
    assert len(upstream.received) == 5


def test_a_chunked_request_body_is_relayed(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"a": '
        yield b"1}"

    response = httpx.post(
        f"{gateway.url}/claude/v1/messages",
        headers={"x-api-key": token.secret},
        content=chunks(),
        timeout=TIMEOUT,
    )
    assert response.status_code == 200
    assert upstream.received[-1].body == b'{"a": 1}'


class SseUpstream:
    """Sends one SSE event, then waits until the test has seen it before the next."""

    def __init__(self) -> None:
        self.seen = threading.Event()
        self.waits: list[bool] = []
        self.server = ThreadedServer(self._handle)

    def _handle(self, conn: socket.socket) -> None:
        head, rest = read_head(conn)
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        while len(rest) < length:
            rest += conn.recv(65536)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for event in SSE_EVENTS:
            self.seen.clear()
            conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
            self.waits.append(self.seen.wait(TIMEOUT))
        conn.sendall(b"0\r\n\r\n")


def test_sse_is_streamed_event_by_event(gateway: GatewayHarness) -> None:
    sse = SseUpstream()
    try:
        gateway.configure(f"http://127.0.0.1:{sse.server.port}")
        gateway.store()
        record = gateway.add_token()
        gateway.start()
        received = b""
        with (
            httpx.Client(timeout=TIMEOUT) as client,
            client.stream(
                "POST",
                f"{gateway.url}/claude/v1/messages",
                headers={"x-api-key": record.secret},
                content=b'{"stream": true}',
            ) as response,
        ):
            assert response.headers["content-type"] == "text/event-stream"
            for chunk in response.iter_raw():
                received += chunk
                # the upstream holds the next event back until this one has arrived
                if received.endswith(b"\n\n"):
                    sse.seen.set()
        assert received == b"".join(SSE_EVENTS)
        assert sse.waits == [True, True, True]
    finally:
        sse.server.close()


def test_the_address_guard_applies_to_the_upstream(
    gateway: GatewayHarness, upstream: HttpUpstream
) -> None:
    gateway.configure(f"http://127.0.0.1:{upstream.port}", private=False)
    gateway.store()
    record = gateway.add_token()
    gateway.start()
    response = messages(gateway, record.secret)
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "127.0.0.1" in message
    assert "allow_private_networks" in message
    assert upstream.received == []
    (line,) = gateway.wait_for_audit(1)
    assert (line["status"], line["agent"]) == (502, "claude")


def test_an_upstream_that_is_down_is_a_502_that_says_so(gateway: GatewayHarness) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    gateway.configure(f"http://127.0.0.1:{port}")
    gateway.store()
    record = gateway.add_token()
    gateway.start()
    response = messages(gateway, record.secret)
    assert response.status_code == 502
    assert f"127.0.0.1:{port}" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\nbroken line\r\n\r\n",
        b"POST /claude/v1/messages HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS to a plain port
    ],
)
def test_malformed_http_is_a_400(gateway: GatewayHarness, token: TokenRecord, raw: bytes) -> None:
    with socket.create_connection(gateway.address, timeout=TIMEOUT) as sock:
        sock.sendall(raw)
        response = read_response(sock)
    assert response.status == 400
    assert response.body.startswith(b"cloister: ")


def test_healthz(gateway: GatewayHarness, token: TokenRecord) -> None:
    assert httpx.get(f"{gateway.url}/healthz", timeout=TIMEOUT).text == "ok\n"


def test_a_silent_client_is_dropped_after_the_header_timeout(
    gateway: GatewayHarness, upstream: HttpUpstream
) -> None:
    gateway.configure(f"http://127.0.0.1:{upstream.port}")
    gateway.start(header_timeout=0.2)
    with socket.create_connection(gateway.address, timeout=TIMEOUT) as sock:
        sock.sendall(b"POST /claude/v1/mess")
        assert sock.recv(1) == b""


def test_upstream_connections_are_never_shared_between_cloisters(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    other = gateway.add_token("web", address="127.0.0.2")  # one address per cloister
    web = httpx.HTTPTransport(local_address="127.0.0.2")
    with (
        httpx.Client(base_url=gateway.url, timeout=TIMEOUT) as api_client,
        httpx.Client(base_url=gateway.url, timeout=TIMEOUT, transport=web) as web_client,
    ):
        for client, key in [(api_client, token.secret), (web_client, other.secret)] * 2:
            response = client.post("/claude/v1/messages", headers={"x-api-key": key}, content=b"{}")
            assert response.status_code == 200
    assert upstream.server is not None
    assert upstream.server.connections == 2  # one kept connection per cloister


def test_trace_never_reaches_the_upstream(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    response = httpx.request(
        "TRACE", f"{gateway.url}/claude/v1/messages", headers={"x-api-key": token.secret}
    )
    assert response.status_code == 405
    assert REAL_KEY not in response.text
    assert upstream.received == []


def test_another_cloisters_token_is_refused_and_audited_by_address(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    transport = httpx.HTTPTransport(local_address="127.0.0.9")
    with httpx.Client(transport=transport, timeout=TIMEOUT) as elsewhere:
        response = elsewhere.post(
            f"{gateway.url}/claude/v1/messages", headers={"x-api-key": token.secret}, json={}
        )
    assert response.status_code == 401
    assert response.headers["x-cloister-reason"] == "token-address"
    assert upstream.received == []
    (line,) = gateway.wait_for_audit(1)
    assert (line["cloister"], line["peer"], line["reason"]) == (None, "127.0.0.9", "token-address")


def test_unauthenticated_connections_are_limited_per_address(
    gateway: GatewayHarness, upstream: HttpUpstream
) -> None:
    gateway.configure(f"http://127.0.0.1:{upstream.port}")
    gateway.start(max_unauthenticated_per_address=2)
    idle = [
        socket.create_connection(gateway.address, timeout=TIMEOUT, source_address=("127.0.0.7", 0))
        for _ in range(2)
    ]
    try:
        with socket.create_connection(
            gateway.address, timeout=TIMEOUT, source_address=("127.0.0.7", 0)
        ) as third:
            assert read_response(third).status == 429
        assert httpx.get(f"{gateway.url}/healthz", timeout=TIMEOUT).status_code == 200
    finally:
        for sock in idle:
            sock.close()
