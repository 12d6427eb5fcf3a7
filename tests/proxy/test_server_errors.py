"""Every error answer of the proxy, with its exact status and reason."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.proxy.conftest import local_config
from tests.proxy.support import (
    TIMEOUT,
    ProxyHarness,
    ThreadedServer,
    basic,
    connect_request,
    is_closed,
    open_tunnel,
    read_response,
)
from tests.waiting import free_port, wait_until


def exchange(harness: ProxyHarness, raw: bytes) -> tuple[int, bytes]:
    with harness.connect() as sock:
        sock.sendall(raw)
        response = read_response(sock)
    return response.status, response.body


@pytest.fixture
def proxy(harness: ProxyHarness, echo_server: ThreadedServer) -> ProxyHarness:
    harness.write_config(local_config(echo_server.port))
    harness.add_token()
    harness.start()
    return harness


def test_health_endpoint(proxy: ProxyHarness) -> None:
    assert exchange(proxy, b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n") == (200, b"ok\n")
    status, body = exchange(proxy, b"GET /other HTTP/1.1\r\n\r\n")
    assert status == 400
    assert b"this is a forward proxy" in body


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"GARBAGE\r\n\r\n", 400, b"malformed request line"),
        (b"GET http://x.test/ HTTP/1.1\nHost: x\n\n\r\n\r\n", 400, b"CRLF"),
        (b"CONNECT x.test HTTP/1.1\r\n\r\n", 400, b"needs a port"),
        (b"CONNECT user@x.test:443 HTTP/1.1\r\n\r\n", 400, b"credentials"),
        (b"GET https://x.test/ HTTP/1.1\r\n\r\n", 400, b"CONNECT"),
        (b"GET ftp://x.test/ HTTP/1.1\r\n\r\n", 400, b"scheme"),
        (b"GET http://x.test/ HTTP/2.0\r\n\r\n", 505, b"unsupported HTTP version"),
        (
            b"POST http://x.test/ HTTP/1.1\r\nContent-Length: 1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            400,
            b"both Content-Length and Transfer-Encoding",
        ),
        (b"GET http://x.test/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400, b"folding"),
    ],
)
def test_malformed_requests_get_400(
    proxy: ProxyHarness, raw: bytes, status: int, message: bytes
) -> None:
    got_status, body = exchange(proxy, raw)
    assert got_status == status
    assert body.startswith(b"cloister: ")
    assert message in body


def test_bad_host_gets_400_after_auth(proxy: ProxyHarness) -> None:
    token = proxy.tokens["demo"].secret
    status, body = exchange(proxy, connect_request("bad..host:443", token))
    assert status == 400
    assert b"invalid label" in body
    # Without a valid token the same request is a 407: authentication comes first.
    assert exchange(proxy, connect_request("bad..host:443", None))[0] == 407


def test_oversized_head_gets_431(proxy: ProxyHarness) -> None:
    big = b"CONNECT x.test:443 HTTP/1.1\r\nX-Big: " + b"a" * 17000 + b"\r\n\r\n"
    assert exchange(proxy, big)[0] == 431
    # Never terminated at all: refused as soon as 16 KiB have arrived.
    assert exchange(proxy, b"CONNECT x.test:443 HTTP/1.1\r\nX: " + b"a" * 20000)[0] == 431


def test_slow_head_gets_408_and_is_closed(harness: ProxyHarness) -> None:
    harness.start(header_timeout=0.3)
    with harness.connect() as sock:
        sock.sendall(b"CONNECT x.test:443 HTTP/1.1\r\n")
        response = read_response(sock)
    assert response.status == 408
    with harness.connect() as silent:  # a client that sends nothing is just closed
        assert is_closed(silent, timeout=5)


def test_unreachable_upstream_gets_502(harness: ProxyHarness) -> None:
    port = free_port()  # nothing listens there
    harness.write_config(local_config(port))
    token = harness.add_token().secret
    harness.start()
    status, body = exchange(harness, connect_request(f"127.0.0.1:{port}", token))
    assert status == 502
    assert f"cannot reach 127.0.0.1:{port}".encode() in body
    harness.write_config(local_config(port).replace("localhost", "no-such-host.invalid"))
    harness.reload()
    request = connect_request(f"no-such-host.invalid:{port}", token)
    # The reload is asynchronous: wait until the new rule is in force.
    wait_until(lambda: exchange(harness, request)[0] != 403, TIMEOUT, "the reloaded config")
    status, body = exchange(harness, request)
    assert status == 502
    assert b"cannot resolve" in body


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A listener whose accept queue is full: new SYNs are dropped, connects hang."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    try:
        yield listener.getsockname()[1]
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_upstream_connect_timeout_gets_504(harness: ProxyHarness, full_backlog: int) -> None:
    harness.write_config(local_config(full_backlog))
    token = harness.add_token().secret
    harness.start(connect_timeout=0.3)
    status, body = exchange(harness, connect_request(f"127.0.0.1:{full_backlog}", token))
    assert status == 504
    assert b"did not answer within 0.3s" in body


def test_per_token_limit_gets_429(harness: ProxyHarness, echo_server: ThreadedServer) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    other = harness.add_token("other")
    harness.start(max_connections_per_token=2)
    target = f"127.0.0.1:{echo_server.port}"
    open_ones = [open_tunnel(harness, target, record.secret)[0] for _ in range(2)]
    status, body = exchange(harness, connect_request(target, record.secret))
    assert status == 429
    assert b"too many connections" in body
    # Other cloisters are not affected, and closing one frees a slot.
    other_sock, response = open_tunnel(harness, target, other.secret)
    assert response.status == 200
    other_sock.close()
    open_ones.pop().close()
    for _ in range(100):
        sock, response = open_tunnel(harness, target, record.secret)
        sock.close()
        if response.status == 200:
            break
    assert response.status == 200
    for sock in open_ones:
        sock.close()


def test_global_limit_gets_503(harness: ProxyHarness, echo_server: ThreadedServer) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start(max_connections=2)
    target = f"127.0.0.1:{echo_server.port}"
    open_ones = [open_tunnel(harness, target, record.secret)[0] for _ in range(2)]
    with harness.connect() as sock:
        response = read_response(sock)
    assert response.status == 503
    for sock in open_ones:
        sock.close()


def test_plain_http_needs_auth_too(proxy: ProxyHarness) -> None:
    status, _ = exchange(proxy, b"GET http://x.test/ HTTP/1.1\r\n\r\n")
    assert status == 407
    status, body = exchange(
        proxy,
        f"GET http://x.test/ HTTP/1.1\r\nProxy-Authorization: {basic('0' * 64)}\r\n\r\n".encode(),
    )
    assert status == 407
    assert body.startswith(b"cloister: proxy authentication required")
