"""Hostile and slow clients: the proxy survives them and keeps serving everyone else."""

from __future__ import annotations

import contextlib
import socket
import statistics
import threading
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.proxy.conftest import local_config
from tests.proxy.support import ProxyHarness, ThreadedServer, open_tunnel, recv_exactly

VALID = b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic eDp5\r\n\r\n"


def tunnel_round_trip(harness: ProxyHarness, port: int, token: str) -> float:
    """Seconds for CONNECT + 200 + one echoed byte."""
    started = time.perf_counter()
    sock, response = open_tunnel(harness, f"127.0.0.1:{port}", token)
    with sock:
        assert response.status == 200
        sock.sendall(b"!")
        assert recv_exactly(sock, 1) == b"!"
    return time.perf_counter() - started


def garbage_inputs() -> st.SearchStrategy[bytes]:
    mutated = st.builds(
        lambda cut, junk: VALID[:cut] + junk,
        st.integers(min_value=0, max_value=len(VALID)),
        st.binary(max_size=64),
    )
    return st.one_of(st.binary(max_size=512), mutated)


def test_random_and_truncated_input_never_breaks_the_proxy(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start(header_timeout=0.5)

    @settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
    @given(garbage_inputs(), st.booleans())
    def one_client(data: bytes, close_early: bool) -> None:
        with socket.create_connection(harness.address, timeout=5) as sock:
            try:
                sock.sendall(data)
                if close_early:
                    return
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):  # an answer, then close; or just close
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass

    one_client()
    # Whatever happened above, a normal client is still served.
    assert tunnel_round_trip(harness, echo_server.port, record.secret) < 5
    assert not [m for m in harness.messages if "internal error" in m], harness.messages


def test_slow_clients_do_not_delay_a_normal_request(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start()
    port, token = echo_server.port, record.secret
    baseline = statistics.median(tunnel_round_trip(harness, port, token) for _ in range(9))

    # 50 clients sending their request head one byte a second.
    stop = threading.Event()
    slow = [socket.create_connection(harness.address, timeout=5) for _ in range(50)]

    def trickle() -> None:
        for byte in VALID:
            for sock in slow:
                with contextlib.suppress(OSError):
                    sock.send(bytes([byte]))
            if stop.wait(1.0):
                return

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        # Measure for a few seconds, while every slow client has a head in progress.
        samples: list[float] = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            samples.append(tunnel_round_trip(harness, port, token))
        with_slow = statistics.median(samples)
        assert harness.server is not None
        assert harness.server._active >= 50  # the slow clients are all still held
    finally:
        stop.set()
        sender.join(5)
        for sock in slow:
            sock.close()
    # Acceptance: 50 one-byte-a-second clients add less than 100 ms to a normal request.
    assert with_slow - baseline < 0.1, (baseline, with_slow)
