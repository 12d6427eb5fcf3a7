"""CONNECT tunnels through the real proxy on 127.0.0.1."""

from __future__ import annotations

import os
import socket

from tests.proxy.conftest import local_config
from tests.proxy.support import (
    ProxyHarness,
    ThreadedServer,
    connect_request,
    is_closed,
    open_tunnel,
    read_response,
    recv_exactly,
)


def test_tunnel_relays_both_ways_and_audits(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token("my-api", "my-api")
    harness.start()

    sock, response = open_tunnel(harness, f"127.0.0.1:{echo_server.port}", record.secret)
    assert response.status == 200
    assert response.raw_head == b"HTTP/1.1 200 Connection established\r\n\r\n"
    payload = os.urandom(3 * 1024 * 1024)
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    sock.shutdown(socket.SHUT_WR)  # half-close: the echo server still answers
    assert read_response_tail(sock) == f"EOF after {len(payload)}\n".encode()
    sock.close()

    (line,) = harness.wait_for_audit(1)
    assert line["event"] == "proxy.request"
    assert {key: line[key] for key in ("cloister", "project", "method", "host", "port")} == {
        "cloister": "my-api",
        "project": "my-api",
        "method": "CONNECT",
        "host": "127.0.0.1",
        "port": echo_server.port,
    }
    assert (line["status"], line["verdict"], line["reason"]) == (200, "allow", None)
    assert line["rule"] == "127.0.0.1"
    assert line["file"] == str(harness.config_dir / "config.yaml")
    assert line["address"] == "127.0.0.1"
    assert line["bytes_up"] == len(payload)
    assert line["bytes_down"] == len(payload) + len(f"EOF after {len(payload)}\n")
    assert line["duration_ms"] > 0


def read_response_tail(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_bytes_sent_before_the_200_are_forwarded(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start()
    sock = harness.connect()
    # A client that does not wait for the 200 (TLS false start): head + data at once.
    sock.sendall(connect_request(f"127.0.0.1:{echo_server.port}", record.secret) + b"early")
    response = read_response(sock, head_only=True)
    assert response.status == 200
    assert response.leftover + recv_exactly(sock, 5 - len(response.leftover)) == b"early"
    sock.close()


def test_upstream_closing_ends_the_tunnel(harness: ProxyHarness) -> None:
    def greet_and_close(conn: socket.socket) -> None:
        conn.sendall(b"bye\n")

    upstream = ThreadedServer(greet_and_close)
    harness.write_config(local_config(upstream.port))
    record = harness.add_token()
    harness.start()
    sock, response = open_tunnel(harness, f"127.0.0.1:{upstream.port}", record.secret)
    assert response.status == 200
    # "bye" may have arrived together with the 200.
    greeting = response.leftover + recv_exactly(sock, 4 - len(response.leftover))
    assert greeting == b"bye\n"
    assert is_closed(sock)
    sock.close()
    upstream.close()


def test_idle_tunnel_is_closed(harness: ProxyHarness, echo_server: ThreadedServer) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start(idle_timeout=0.3)
    sock, response = open_tunnel(harness, f"127.0.0.1:{echo_server.port}", record.secret)
    assert response.status == 200
    with sock:
        sock.sendall(b"x")
        assert recv_exactly(sock, 1) == b"x"
        assert is_closed(sock, timeout=5)
    (line,) = harness.wait_for_audit(1)
    assert line["reason"] == "idle-timeout"


def test_many_tunnels_at_once(harness: ProxyHarness, echo_server: ThreadedServer) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start()
    tunnels = [
        open_tunnel(harness, f"127.0.0.1:{echo_server.port}", record.secret) for _ in range(50)
    ]
    for index, (sock, response) in enumerate(tunnels):
        assert response.status == 200
        sock.sendall(f"{index:04d}".encode())
    for index, (sock, _response) in enumerate(tunnels):
        assert recv_exactly(sock, 4) == f"{index:04d}".encode()
        sock.close()
