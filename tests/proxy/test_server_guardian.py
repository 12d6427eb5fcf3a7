"""The guardian's own networks are never a destination, whatever allow_private_networks says.

The real proxy on loopback with an echo upstream beside it: loopback is allowed by the
config, and refused all the same when it is one of the proxy's own networks (read at
dial time) or named in the settings' guardian networks. Nothing is connected.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests.proxy.support import (
    LOCAL_ALLOW,
    ProxyHarness,
    ThreadedServer,
    open_tunnel,
)


def until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def config(port: int) -> str:
    return (
        "proxy:\n"
        f"  allow: [{{domain: localhost, ports: [{port}]}},"
        f" {{domain: 127.0.0.1, ports: [{port}]}}]\n"
        f"  {LOCAL_ALLOW}\n"
    )


@pytest.mark.parametrize(
    "start",
    [
        pytest.param({"refuse_own_networks": True}, id="own-networks"),
        pytest.param({"guardian_networks": ["127.0.0.0/8", "::1/128"]}, id="guardian-networks"),
    ],
)
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_allowed_by_config_is_refused_as_the_guardians(
    harness: ProxyHarness, echo_server: ThreadedServer, start: dict[str, Any], host: str
) -> None:
    harness.write_config(config(echo_server.port))
    record = harness.add_token()
    harness.start(**start)
    sock, response = open_tunnel(harness, f"{host}:{echo_server.port}", record.secret)
    with sock:
        assert response.status == 403
        assert response.headers["x-cloister-reason"] == "guardian-network"
        body = response.leftover + until_closed(sock)
    assert b"one of the guardian's own networks, which no cloister may reach" in body
    assert b"(proxy.allow_private_networks cannot open it)" in body
    (line,) = harness.wait_for_audit(1)
    assert (line["status"], line["verdict"], line["reason"]) == (403, "deny", "guardian-network")
    assert line["address"] in ("127.0.0.1", "::1")
    assert echo_server.connections == 0


def test_without_the_refusal_loopback_is_reached_as_configured(
    harness: ProxyHarness, echo_server: ThreadedServer
) -> None:
    # The same config with the guard's own-network refusal off (as the other tests run).
    harness.write_config(config(echo_server.port))
    record = harness.add_token()
    harness.start()
    sock, response = open_tunnel(harness, f"127.0.0.1:{echo_server.port}", record.secret)
    with sock:
        assert response.status == 200
