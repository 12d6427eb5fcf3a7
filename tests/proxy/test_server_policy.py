"""Authentication, policy, reloading and the SSRF guard, through the real proxy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.proxy.conftest import local_config
from tests.proxy.support import (
    LOCAL_ALLOW,
    TIMEOUT,
    ProxyHarness,
    ThreadedServer,
    basic,
    connect_request,
    is_closed,
    open_tunnel,
    read_response,
    recv_exactly,
)
from tests.waiting import free_port, wait_until


def status_of(harness: ProxyHarness, target: str, token: str | None) -> tuple[int, str | None]:
    """Status and reason of a CONNECT; (0, None) if the proxy closed without answering
    (a connection of a token being revoked at that very moment is cut)."""
    try:
        sock, response = open_tunnel(harness, target, token)
    except ConnectionError:
        return 0, None
    sock.close()
    return response.status, response.headers.get("x-cloister-reason")


def refusal(
    harness: ProxyHarness, target: str, token: str | None
) -> tuple[int, dict[str, str], str]:
    with harness.connect() as sock:
        sock.sendall(connect_request(target, token))
        response = read_response(sock)
    return response.status, response.headers, response.body.decode()


# --- authentication -----------------------------------------------------------------


def test_missing_or_unknown_token_gets_407(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    harness.add_token()
    harness.start()
    target = f"127.0.0.1:{echo_server.port}"
    for token in (None, "0" * 64, "not-hex"):
        status, headers, body = refusal(harness, target, token)
        assert status == 407
        assert headers["proxy-authenticate"] == 'Basic realm="cloister"'
        assert body.startswith("cloister: proxy authentication required")
    for header in ("Bearer abc", "Basic !!!notbase64", "Basic " + "bm9jb2xvbg=="):
        with harness.connect() as sock:
            sock.sendall(
                f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {header}\r\n\r\n".encode()
            )
            assert read_response(sock).status == 407
    assert echo_server.connections == 0


def test_user_name_is_ignored(harness: ProxyHarness, echo_server: ThreadedServer) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start()
    for user in ("cloister", "token", "", "anything:with:colons"):
        with harness.connect() as sock:
            auth = basic(record.secret, user=user)
            target = f"127.0.0.1:{echo_server.port}"
            sock.sendall(
                f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n".encode()
            )
            assert read_response(sock, head_only=True).status == (200 if ":" not in user else 407)


def test_auth_is_checked_before_policy(harness: ProxyHarness) -> None:
    harness.write_config("proxy:\n  deny: [{domain: evil.test}]\n")
    harness.add_token()
    harness.start()
    # A denied destination with a bad token is a 407, not a 403: nothing leaks to strangers.
    status, _headers, _body = refusal(harness, "evil.test:443", "f" * 64)
    assert status == 407


def test_token_file_takes_effect_and_revocation_closes_tunnels(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    harness.start(reload_interval=0.2)
    target = f"127.0.0.1:{echo_server.port}"
    record = harness.add_token("late")
    # Works within one second of the file appearing.
    wait_until(
        lambda: status_of(harness, target, record.secret)[0] == 200, 1.0, "the allowing config"
    )
    sock, response = open_tunnel(harness, target, record.secret)
    assert response.status == 200
    with sock:
        harness.remove_token("late")
        # Stops working within one second, and the open tunnel is closed too.
        wait_until(
            lambda: status_of(harness, target, record.secret)[0] == 407, 1.0, "the revocation"
        )
        assert is_closed(sock, timeout=1.0)
    assert any("revoked" in message for message in harness.messages)


def test_a_new_token_works_at_once_without_a_reload(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    """`cloister start` writes the file and the agent's first request follows at once."""
    harness.write_config(local_config(echo_server.port))
    harness.start(reload_interval=3600)  # no poll will come to the rescue
    record = harness.add_token()
    assert status_of(harness, f"127.0.0.1:{echo_server.port}", record.secret)[0] == 200


def test_reload_now_closes_the_tunnels_of_a_revoked_token(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    """What `cloister stop` sends SIGHUP for: new requests are refused the moment the
    file is gone, and the reload ends what the token had already opened."""
    harness.write_config(local_config(echo_server.port))
    harness.start(reload_interval=3600)
    target = f"127.0.0.1:{echo_server.port}"
    record = harness.add_token("late")
    sock, response = open_tunnel(harness, target, record.secret)
    assert response.status == 200
    with sock:
        harness.remove_token("late")
        assert status_of(harness, target, record.secret)[0] == 407  # no waiting
        harness.reload()
        assert is_closed(sock, timeout=1.0)


def test_sighup_reloads_a_running_proxy_process(
    tmp_path: Path, echo_server: ThreadedServer
) -> None:
    harness = ProxyHarness(tmp_path)
    harness.write_config(local_config(1))  # the echo server's port is not allowed yet
    port = free_port()
    env = {**os.environ, "CLOISTER_PROXY_RELOAD_INTERVAL": "1h"}
    record = harness.add_token()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloister_proxy.main",
            "--config-dir",
            str(harness.config_dir),
            "--listen",
            f"127.0.0.1:{port}",
            "--no-refuse-own-networks",  # the echo server is on loopback
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert "listening on" in process.stderr.readline()
        harness.address = ("127.0.0.1", port)
        target = f"127.0.0.1:{echo_server.port}"
        assert status_of(harness, target, record.secret)[0] == 403  # not allowed yet
        harness.write_config(local_config(echo_server.port))
        process.send_signal(signal.SIGHUP)
        wait_until(
            lambda: status_of(harness, target, record.secret)[0] == 200, 2.0, "the new token"
        )
    finally:
        process.terminate()
        assert process.wait(10) == 0
        if process.stderr is not None:
            process.stderr.close()


# --- policy ---------------------------------------------------------------------------


def test_scopes_and_deny_beats_allow(harness: ProxyHarness, echo_server: ThreadedServer) -> None:
    port = echo_server.port
    harness.write_config(
        f"proxy:\n  allow: [{{domain: localhost, ports: [{port}]}}]\n  {LOCAL_ALLOW}\n"
    )
    harness.write_config(
        f"proxy:\n  allow: [{{domain: 127.0.0.1, ports: [{port}]}}]\n", "projects/api.yaml"
    )
    api = harness.add_token("api", "api")
    other = harness.add_token("other", "other")
    harness.start()
    # The project file applies to its project only.
    assert status_of(harness, f"127.0.0.1:{port}", api.secret) == (200, None)
    assert status_of(harness, f"127.0.0.1:{port}", other.secret) == (403, "port-not-allowed")
    # A deny in the project's decision file beats the global allow.
    harness.write_config("deny: [{domain: localhost}]\n", "decisions/projects/api.yaml")
    wait_until(
        lambda: status_of(harness, f"localhost:{port}", api.secret) == (403, "denied"),
        TIMEOUT,
        "the denial",
    )
    assert status_of(harness, f"localhost:{port}", other.secret) == (200, None)
    _status, headers, body = refusal(harness, f"localhost:{port}", api.secret)
    assert headers["x-cloister-reason"] == "denied"
    assert "denied by localhost in" in body
    assert "decisions/projects/api.yaml" in body


def test_config_reload_keeps_open_tunnels(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start()
    sock, response = open_tunnel(harness, f"127.0.0.1:{echo_server.port}", record.secret)
    assert response.status == 200
    with sock:
        harness.write_config("proxy:\n  allow: []\n")
        wait_until(
            lambda: status_of(harness, f"127.0.0.1:{echo_server.port}", record.secret)[0] == 403,
            TIMEOUT,
            "the refusal",
        )
        sock.sendall(b"still here")
        assert recv_exactly(sock, 10) == b"still here"


def test_broken_config_keeps_the_last_good_policy(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token()
    harness.start()
    target = f"127.0.0.1:{echo_server.port}"
    assert status_of(harness, target, record.secret)[0] == 200
    harness.write_config("proxy:\n  allow: [\n")
    wait_until(
        lambda: any("configuration error" in m for m in harness.messages),
        TIMEOUT,
        "the configuration error",
    )
    assert status_of(harness, target, record.secret)[0] == 200
    assert any("config.yaml:" in m for m in harness.messages)


def test_ports(harness: ProxyHarness, echo_server: ThreadedServer) -> None:
    harness.write_config(f"proxy:\n  allow: [{{domain: 127.0.0.1}}]\n  {LOCAL_ALLOW}\n")
    record = harness.add_token()
    harness.start()
    status, headers, body = refusal(harness, f"127.0.0.1:{echo_server.port}", record.secret)
    assert (status, headers["x-cloister-reason"]) == (403, "port-not-allowed")
    assert f"port {echo_server.port} is not open for 127.0.0.1" in body
    # An unlisted host on a port no rule opens is refused at once, without asking anyone.
    status, headers, _ = refusal(harness, "unlisted.test:8443", record.secret)
    assert (status, headers["x-cloister-reason"]) == (403, "port-not-allowed")


# --- SSRF guard -------------------------------------------------------------------------


def test_private_addresses_are_refused_unless_allowed(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    port = echo_server.port
    harness.write_config(
        "proxy:\n  allow:\n"
        f"    - {{domain: localhost, ports: [{port}]}}\n"
        f"    - {{domain: 127.0.0.1, ports: [{port}]}}\n"
    )
    record = harness.add_token()
    harness.start()
    for target in (f"localhost:{port}", f"127.0.0.1:{port}"):
        status, headers, body = refusal(harness, target, record.secret)
        assert (status, headers["x-cloister-reason"]) == (403, "private-address")
        assert "127.0.0.1 (loopback)" in body or "::1 (loopback)" in body
        assert "allow_private_networks" in body
    assert echo_server.connections == 0
    lines = harness.wait_for_audit(2)
    assert lines[0]["reason"] == "private-address"


def test_ip_literal_needs_an_explicit_rule(harness: ProxyHarness) -> None:
    harness.write_config("proxy:\n  allow: [{pattern: '**.test'}]\n")
    record = harness.add_token()
    harness.start()
    status, headers, body = refusal(harness, "93.184.216.34:443", record.secret)
    assert (status, headers["x-cloister-reason"]) == (403, "not-approved")
    assert "IP destinations need an explicit rule" in body
    # Numeric spellings of an address are the address, not a domain.
    status, headers, _ = refusal(harness, "2130706433:443", record.secret)
    assert (status, headers["x-cloister-reason"]) == (403, "not-approved")


def test_the_proxy_will_not_connect_to_itself(harness: ProxyHarness) -> None:
    harness.write_config(f"proxy:\n  allow: [{{domain: 127.0.0.1, ports: [1]}}]\n  {LOCAL_ALLOW}\n")
    record = harness.add_token()
    harness.start()
    own_port = harness.address[1]
    harness.write_config(
        f"proxy:\n  allow: [{{domain: 127.0.0.1, ports: [{own_port}]}}]\n  {LOCAL_ALLOW}\n"
    )
    wait_until(
        lambda: refusal(harness, f"127.0.0.1:{own_port}", record.secret)[0] == 403,
        TIMEOUT,
        "the refusal",
    )


@pytest.mark.parametrize("target", ["[::ffff:127.0.0.1]:443", "[64:ff9b::7f00:1]:443", "[::1]:443"])
def test_ipv6_forms_of_loopback_are_refused(harness: ProxyHarness, target: str) -> None:
    host = target.rsplit(":", 1)[0].strip("[]")
    # Loopback is not in allow_private_networks here; 127.0.0.0/8 alone would not cover
    # the IPv6 forms anyway.
    harness.write_config(
        f"proxy:\n  allow: [{{domain: '{host}'}}]\n  allow_private_networks: [127.0.0.0/8]\n"
    )
    record = harness.add_token()
    harness.start()
    status, headers, _ = refusal(harness, target, record.secret)
    assert (status, headers["x-cloister-reason"]) == (403, "private-address")


def test_a_removed_token_file_stops_working_at_once(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    harness.write_config(local_config(echo_server.port))
    record = harness.add_token("gone")
    harness.start(reload_interval=3600)  # no poll will notice: the per-request check must
    target = f"127.0.0.1:{echo_server.port}"
    assert status_of(harness, target, record.secret)[0] == 200
    harness.remove_token("gone")
    assert status_of(harness, target, record.secret)[0] == 407
