"""Plain-HTTP forwarding of absolute-URI requests, checked by an independent parser (h11)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.proxy.conftest import local_config
from tests.proxy.support import (
    HttpExchange,
    HttpUpstream,
    ProxyHarness,
    ThreadedServer,
    basic,
    is_closed,
    read_response,
)


def reply(exchange: HttpExchange) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    """200 with a body describing the request; chunked when the path asks for it."""
    body = f"{exchange.method} {exchange.target} {len(exchange.body)}".encode()
    if exchange.target.startswith("/chunked"):
        return 200, [("Transfer-Encoding", "chunked")], [body[:5], body[5:]]
    if exchange.method == "HEAD":
        return 200, [("Content-Length", str(len(body)))], []
    return 200, [("Content-Length", str(len(body))), ("X-Upstream", "yes")], [body]


@pytest.fixture
def upstream() -> Iterator[HttpUpstream]:
    server = HttpUpstream(reply)
    yield server
    server.close()


TOKENS: dict[int, str] = {}


@pytest.fixture
def proxy(harness: ProxyHarness, upstream: HttpUpstream) -> ProxyHarness:
    harness.write_config(local_config(upstream.port))
    TOKENS[id(harness)] = harness.add_token().secret
    harness.start()
    return harness


def token_of(harness: ProxyHarness) -> str:
    return TOKENS[id(harness)]


def test_request_is_rewritten_to_origin_form_and_nothing_is_added(
    proxy: ProxyHarness, upstream: HttpUpstream
) -> None:
    token = token_of(proxy)
    with proxy.connect() as sock:
        sock.sendall(
            f"GET http://127.0.0.1:{upstream.port}/path?q=1 HTTP/1.1\r\n"
            "Host: wrong.example\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n"
            "Proxy-Connection: keep-alive\r\n"
            "Connection: keep-alive, X-Private\r\n"
            "X-Private: drop me\r\n"
            "Keep-Alive: timeout=5\r\n"
            "TE: trailers\r\n"
            "User-Agent: agent/1.0\r\n"
            "Accept: */*\r\n"
            "\r\n".encode()
        )
        response = read_response(sock)
    assert response.status == 200
    assert response.body == b"GET /path?q=1 0"
    assert response.headers["x-upstream"] == "yes"
    (exchange,) = upstream.received
    assert exchange.target == "/path?q=1"
    # Exactly the end-to-end fields, the URL's Host first; no Via, no X-Forwarded-For.
    assert exchange.headers == [
        ("Host", f"127.0.0.1:{upstream.port}"),
        ("User-Agent", "agent/1.0"),
        ("Accept", "*/*"),
    ]


def test_keep_alive_serves_several_requests_on_one_connection(
    proxy: ProxyHarness, upstream: HttpUpstream
) -> None:
    token = token_of(proxy)
    base = f"http://127.0.0.1:{upstream.port}"
    with proxy.connect() as sock:
        leftover = b""
        for path in ("/one", "/two", "/three"):
            sock.sendall(
                f"GET {base}{path} HTTP/1.1\r\nProxy-Authorization: {basic(token)}\r\n\r\n".encode()
            )
            response = read_response(sock, leftover)
            leftover = response.leftover
            assert response.status == 200
            assert response.body == f"GET {path} 0".encode()
            assert "connection" not in response.headers
    assert [exchange.target for exchange in upstream.received] == ["/one", "/two", "/three"]
    lines = proxy.wait_for_audit(3)
    assert [line["method"] for line in lines] == ["GET", "GET", "GET"]
    assert all(line["verdict"] == "allow" and line["status"] == 200 for line in lines)


def test_pipelined_requests(proxy: ProxyHarness, upstream: HttpUpstream) -> None:
    token = token_of(proxy)
    base = f"http://127.0.0.1:{upstream.port}"
    request = "GET {base}{path} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n"
    with proxy.connect() as sock:
        sock.sendall(
            "".join(
                request.format(base=base, path=path, auth=basic(token)) for path in ("/a", "/b")
            ).encode()
        )
        first = read_response(sock)
        second = read_response(sock, first.leftover)
    assert (first.body, second.body) == (b"GET /a 0", b"GET /b 0")


def test_chunked_request_and_response_bodies(proxy: ProxyHarness, upstream: HttpUpstream) -> None:
    token = token_of(proxy)
    with proxy.connect() as sock:
        sock.sendall(
            f"POST http://127.0.0.1:{upstream.port}/chunked HTTP/1.1\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
            "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n0\r\n\r\n" not in head:
            data = sock.recv(65536)
            assert data, head
            head += data
    assert upstream.received[0].body == b"hello world"
    assert b"Transfer-Encoding: chunked" in head
    # Relayed with its framing unchanged: the upstream's two chunks, then the last one.
    assert head.endswith(b"\r\n\r\n5\r\nPOST \r\nb\r\n/chunked 11\r\n0\r\n\r\n")


def test_content_length_body_and_expect_continue(
    proxy: ProxyHarness, upstream: HttpUpstream
) -> None:
    token = token_of(proxy)
    with proxy.connect() as sock:
        sock.sendall(
            f"PUT http://127.0.0.1:{upstream.port}/upload HTTP/1.1\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n"
            "Expect: 100-continue\r\nContent-Length: 4\r\n\r\n".encode()
        )
        interim = read_response(sock, head_only=True)
        assert interim.status == 100
        sock.sendall(b"data")
        final = read_response(sock, interim.leftover)
    assert final.status == 200
    assert final.body == b"PUT /upload 4"


def test_close_delimited_response_closes_the_client(harness: ProxyHarness) -> None:
    def until_close(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")

    server = ThreadedServer(until_close)
    harness.write_config(local_config(server.port))
    token = harness.add_token().secret
    harness.start()
    with harness.connect() as sock:
        sock.sendall(
            f"GET http://127.0.0.1:{server.port}/close HTTP/1.1\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n\r\n".encode()
        )
        response = read_response(sock)  # no length: reads to EOF, so the proxy closed
    server.close()
    assert response.body == b"all of it"
    assert response.headers["connection"] == "close"


def test_http10_client_gets_its_answer_then_close(
    proxy: ProxyHarness, upstream: HttpUpstream
) -> None:
    token = token_of(proxy)
    with proxy.connect() as sock:
        sock.sendall(
            f"GET http://127.0.0.1:{upstream.port}/old HTTP/1.0\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n\r\n".encode()
        )
        response = read_response(sock)
        assert response.body == b"GET /old 0"
        assert is_closed(sock)


def test_head_request_has_no_body(proxy: ProxyHarness, upstream: HttpUpstream) -> None:
    token = token_of(proxy)
    with proxy.connect() as sock:
        sock.sendall(
            f"HEAD http://127.0.0.1:{upstream.port}/h HTTP/1.1\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n\r\n"
            f"GET http://127.0.0.1:{upstream.port}/after HTTP/1.1\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n\r\n".encode()
        )
        head = read_response(sock, head_only=True)
        assert head.status == 200
        after = read_response(sock, head.leftover)
    assert after.body == b"GET /after 0"


def test_upstream_that_dies_mid_response_gives_502_or_close(harness: ProxyHarness) -> None:
    def broken(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"not http at all\r\n\r\n")

    server = ThreadedServer(broken)
    harness.write_config(local_config(server.port))
    token = harness.add_token().secret
    harness.start()
    with harness.connect() as sock:
        sock.sendall(
            f"GET http://127.0.0.1:{server.port}/ HTTP/1.1\r\n"
            f"Proxy-Authorization: {basic(token)}\r\n\r\n".encode()
        )
        response = read_response(sock)
    server.close()
    assert response.status == 502
    assert b"malformed status line" in response.body
