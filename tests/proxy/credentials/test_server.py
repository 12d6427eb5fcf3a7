"""The credential gateway on real sockets: the key swapped, SSE streamed, the guard applied."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from cloister_core.tokens import TokenRecord
from tests.proxy.credentials.conftest import REAL_KEY, GatewayHarness
from tests.proxy.support import (
    TIMEOUT,
    HttpExchange,
    HttpUpstream,
    ThreadedServer,
    is_closed,
    parse_head,
    read_head,
    read_response,
)
from tests.waiting import free_port, wait_until

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


def test_chunk_extensions_and_trailers_never_reach_the_upstream(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    head = (
        "POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\n"
        f"x-api-key: {token.secret}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    with socket.create_connection(gateway.address, timeout=TIMEOUT) as sock:
        sock.sendall(head + b'6;ext=one\r\n{"a": \r\n')
        # the first chunk goes on before the rest of the body is sent: still streamed
        wait_until(lambda: b'{"a": ' in b"".join(upstream.raw), TIMEOUT, "the first chunk")
        sock.sendall(b'2 ; x="y;z"\r\n1}\r\n0;end\r\nX-Trailer: t\r\nCookie: c=1\r\n\r\n')
        response = read_response(sock)
    assert response.status == 200
    assert upstream.received[-1].body == b'{"a": 1}'
    raw = b"".join(upstream.raw)
    assert raw.endswith(b'\r\n\r\n6\r\n{"a": \r\n2\r\n1}\r\n0\r\n\r\n')
    for client_framing in (b"ext", b"x=", b"end", b"X-Trailer", b"Cookie"):
        assert client_framing not in raw


def test_a_client_that_waits_for_100_continue_gets_it_from_the_gateway(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    head = (
        "POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\n"
        f"x-api-key: {token.secret}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    ).encode()
    with socket.create_connection(gateway.address, timeout=TIMEOUT) as sock:
        sock.sendall(head)
        interim, rest = read_head(sock)
        assert interim.startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"{}")
        response = read_response(sock, rest)
    assert response.status == 200
    assert upstream.received[-1].body == b"{}"
    assert b"expect" not in b"".join(upstream.raw).lower()


def test_selectors_of_who_the_key_acts_for_never_reach_the_upstream_and_are_audited(
    gateway: GatewayHarness, upstream: HttpUpstream, token: TokenRecord
) -> None:
    response = messages(
        gateway,
        token.secret,
        **{
            "anthropic-organization": "org-other",
            "anthropic-beta": "claude-code-20250219",
            "Cookie": "session=1",
            "X-Forwarded-For": "10.0.0.1",
        },
    )
    assert response.status_code == 200
    (exchange,) = upstream.received
    names = {name.lower() for name, _ in exchange.headers}
    assert {"anthropic-version", "anthropic-beta", "x-api-key"} <= names
    assert not names & {"anthropic-organization", "cookie", "x-forwarded-for"}
    (line,) = gateway.wait_for_audit(1)
    assert line["status"] == 200
    assert line["dropped_headers"] == ["anthropic-organization", "cookie", "x-forwarded-for"]


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
    port = free_port()  # nothing listens there
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


def answer_at_once(conn: socket.socket) -> None:
    """An upstream that answers each request after its head and reads its body after
    (quietly until EOF): what the gateway does with a slow body is up to the gateway."""
    buffer = b""
    while True:
        try:
            head, buffer = read_head(conn, buffer)
        except ConnectionError:
            return
        length = int(
            parse_head(b"HTTP/1.1 0 x\r\n" + head.partition(b"\r\n")[2])[1].get(
                "content-length", "0"
            )
        )
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        while len(buffer) < length:
            data = conn.recv(65536)
            if not data:
                return
            buffer += data
        buffer = buffer[length:]


@pytest.fixture
def patient() -> Iterator[ThreadedServer]:
    server = ThreadedServer(answer_at_once)
    yield server
    server.close()


def slow_head(key: str) -> bytes:
    """A forwarded request's head, and the first byte of a body it holds back."""
    return (
        b"POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\n"
        + f"x-api-key: {key}\r\n".encode()
        + b"Content-Length: 100\r\n\r\n{"
    )


def slow_body(gateway: GatewayHarness, key: str) -> socket.socket:
    sock = socket.create_connection(gateway.address, timeout=TIMEOUT)
    sock.sendall(slow_head(key))
    return sock


@pytest.mark.parametrize(
    ("agent", "header", "raw"),
    [
        ("codex", "Authorization: Bearer {}", "DELETE /codex/v1/models/ft:gpt-4o:acme:x"),
        ("codex", "Authorization: Bearer {}", "GET /codex/v1/chat/completions?limit=100"),
        ("claude", "x-api-key: {}", "DELETE /claude/v1/models/x"),
        ("gemini", "x-goog-api-key: {}", "DELETE /gemini/v1beta/models/x"),
    ],
)
def test_calls_the_agents_never_make_are_refused_and_audited(
    gateway: GatewayHarness, upstream: HttpUpstream, agent: str, header: str, raw: str
) -> None:
    gateway.configure(f"http://127.0.0.1:{upstream.port}")
    gateway.store(agent)
    record = gateway.add_token()
    gateway.start()
    method, target = raw.split()
    response = httpx.request(
        method,
        f"{gateway.url}{target}",
        headers=dict([header.format(record.secret).split(": ", 1)]),
        timeout=TIMEOUT,
    )
    assert response.status_code in (403, 405)
    assert "cloister:" in json.dumps(response.json())
    assert upstream.received == []
    (line,) = gateway.wait_for_audit(1)
    path = target.split("?", 1)[0]
    assert (line["cloister"], line["method"], line["path"]) == ("api", method, path)
    assert line["reason"] in ("method", "path")


def test_a_cloister_is_capped_for_the_life_of_its_connections_and_another_is_served(
    gateway: GatewayHarness, patient: ThreadedServer
) -> None:
    gateway.configure(f"http://127.0.0.1:{patient.port}")
    gateway.store()
    record = gateway.add_token()
    other = gateway.add_token("web", address="127.0.0.2")
    gateway.start(max_connections_per_cloister=3)
    opened = [socket.create_connection(gateway.address, timeout=TIMEOUT) for _ in range(4)]
    try:
        # All four admitted (the kernel accepts before the gateway sees them) before any
        # is charged to the cloister.
        wait_until(
            lambda: gateway.gateway is not None and gateway.gateway.waiting("127.0.0.1") == 4,
            TIMEOUT,
            "four admitted connections",
        )
        for sock in opened[:3]:
            sock.sendall(slow_head(record.secret))
        wait_until(lambda: patient.connections == 3, TIMEOUT, "three upstream connections")
        # The fourth, opened before the cloister was full: refused at its request.
        opened[3].sendall(slow_head(record.secret))
        response = read_response(opened[3])
        assert response.status == 429
        assert response.headers["x-cloister-reason"] == "connections"
        assert json.loads(response.body)["error"]["type"] == "rate_limit_error"
        # Now the cloister's address is known to be full: a fifth is refused at once.
        with socket.create_connection(gateway.address, timeout=TIMEOUT) as fifth:
            refused_at_once = read_response(fifth)
            assert refused_at_once.status == 429
            assert refused_at_once.headers["x-cloister-reason"] == "connections"
        web = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=gateway.url, timeout=TIMEOUT, transport=web) as client:
            served = client.post(
                "/claude/v1/messages", headers={"x-api-key": other.secret}, content=b"{}"
            )
        assert served.status_code == 200
        assert patient.connections == 4  # the three held, and the other cloister's
        opened.pop(0).close()  # one held connection closes: room for one more
        wait_until(
            lambda: gateway.gateway is not None and gateway.gateway.held("api") == 2,
            TIMEOUT,
            "two held connections",
        )
        assert messages(gateway, record.secret).status_code == 200
    finally:
        for sock in opened:
            sock.close()
    refused = [line for line in gateway.audit() if line.get("reason") == "connections"]
    assert [(line["cloister"], line["status"]) for line in refused] == [("api", 429)]
    assert any("holds 3 connections" in message for message in gateway.messages)


def test_a_slow_body_is_cut_off_after_the_body_timeout(
    gateway: GatewayHarness, patient: ThreadedServer
) -> None:
    gateway.configure(f"http://127.0.0.1:{patient.port}")
    gateway.store()
    record = gateway.add_token()
    gateway.start(body_timeout=0.5)
    with slow_body(gateway, record.secret) as sock:
        for _ in range(4):  # a byte now and then does not extend it
            time.sleep(0.2)
            with contextlib.suppress(OSError):
                sock.sendall(b" ")
        assert is_closed(sock)
    (line,) = gateway.wait_for_audit(1)
    assert (line["cloister"], line["status"]) == ("api", 408)
    wait_until(
        lambda: gateway.gateway is not None and gateway.gateway.held("api") == 0,
        TIMEOUT,
        "no held connection",
    )


def test_a_kept_alive_connection_sends_its_next_head_within_the_header_timeout(
    gateway: GatewayHarness, upstream: HttpUpstream
) -> None:
    gateway.configure(f"http://127.0.0.1:{upstream.port}")
    gateway.store()
    token = gateway.add_token()
    gateway.start(header_timeout=0.3, idle_timeout=60)
    with socket.create_connection(gateway.address, timeout=TIMEOUT) as sock:
        request = (
            b"POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\n"
            + f"x-api-key: {token.secret}\r\n".encode()
            + b"Content-Length: 2\r\n\r\n{}"
        )
        sock.sendall(request)
        assert read_response(sock).status == 200
        time.sleep(0.5)  # idle between requests: allowed
        sock.sendall(b"POST /claude/v1/mess")  # then the head comes too slowly
        assert is_closed(sock)


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"refuse_own_networks": True}, id="own-networks"),
        pytest.param({"guardian_networks": ["127.0.0.0/8"]}, id="guardian-networks"),
    ],
)
def test_the_guardians_networks_are_never_an_upstream(
    gateway: GatewayHarness, upstream: HttpUpstream, overrides: dict[str, object]
) -> None:
    # allow_private_networks opens loopback, but the guardian's networks stay closed.
    gateway.configure(f"http://localhost:{upstream.port}", private=True)
    gateway.store()
    record = gateway.add_token()
    gateway.start(**overrides)
    response = messages(gateway, record.secret)
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "one of the guardian's own networks, which is never an upstream" in message
    assert "(loopback)" in message
    assert upstream.received == []
    (line,) = gateway.wait_for_audit(1)
    assert line["status"] == 502
    assert "guardian's own networks" in line["reason"]


def echo_the_key(exchange: HttpExchange) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    """A vendor that names the key it refused, in a header and in a body split mid-key."""
    key = dict(exchange.headers)["x-api-key"].encode()
    body = b'{"error": {"message": "invalid x-api-key: ' + key + b'"}}'
    split = body.index(key) + 10
    return 401, [("X-Debug-Key", key.decode())], [body[:split], body[split:]]


def test_the_key_a_vendor_echoes_never_reaches_the_agent(gateway: GatewayHarness) -> None:
    upstream = HttpUpstream(echo_the_key)
    try:
        gateway.configure(f"http://127.0.0.1:{upstream.port}")
        gateway.store()
        record = gateway.add_token()
        gateway.start()
        response = messages(gateway, record.secret)
        assert response.status_code == 401
        assert REAL_KEY not in response.text
        assert REAL_KEY not in str(response.headers)
        masked = "*" * len(REAL_KEY)
        assert response.json()["error"]["message"] == f"invalid x-api-key: {masked}"
        assert response.headers["x-debug-key"] == masked
        (exchange,) = upstream.received
        assert dict(exchange.headers)["x-api-key"] == REAL_KEY  # it was sent, and only there
    finally:
        upstream.close()


def gzip_if_asked(exchange: HttpExchange) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    """A vendor that echoes the key, compressed when the request accepts gzip."""
    headers = {name.lower(): value for name, value in exchange.headers}
    body = b'{"error": {"message": "invalid x-api-key: ' + headers["x-api-key"].encode() + b'"}}'
    if "gzip" in headers.get("accept-encoding", ""):
        return 401, [("Content-Encoding", "gzip")], [gzip.compress(body)]
    return 401, [], [body]


def always_gzip(exchange: HttpExchange) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    """A vendor that compresses whatever it was asked."""
    key = dict(exchange.headers)["x-api-key"].encode()
    return 401, [("Content-Encoding", "gzip")], [gzip.compress(b"invalid key " + key)]


@pytest.mark.parametrize("respond", [gzip_if_asked, always_gzip])
def test_an_answer_in_gzip_cannot_carry_the_key_past_the_mask(
    gateway: GatewayHarness, respond: Callable[[HttpExchange], Any]
) -> None:
    upstream = HttpUpstream(respond)
    try:
        gateway.configure(f"http://127.0.0.1:{upstream.port}")
        gateway.store()
        record = gateway.add_token()
        gateway.start()
        response = messages(gateway, record.secret, **{"accept-encoding": "gzip, br"})
        assert REAL_KEY not in response.text  # httpx decodes gzip as the agent's SDK would
        (exchange,) = upstream.received
        sent = [value for name, value in exchange.headers if name.lower() == "accept-encoding"]
        assert sent == ["identity"]  # the gateway's own, never the agent's
        if respond is always_gzip:
            assert response.status_code == 502
            assert "identity" in response.text
        else:
            assert response.status_code == 401
            assert "*" * len(REAL_KEY) in response.text
    finally:
        upstream.close()
