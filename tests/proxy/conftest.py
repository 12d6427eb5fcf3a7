"""Fixtures for the proxy's real-socket tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy.support import LOCAL_ALLOW, ProxyHarness, ThreadedServer, echo


@pytest.fixture
def echo_server() -> Iterator[ThreadedServer]:
    server = ThreadedServer(echo)
    yield server
    server.close()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[ProxyHarness]:
    """A proxy (not yet started) whose config allows the echo server's port on 127.0.0.1."""
    proxy = ProxyHarness(tmp_path)
    yield proxy
    proxy.stop()


def local_config(*ports: int, extra: str = "") -> str:
    """config.yaml allowing 127.0.0.1 (and localhost) on *ports*, private nets allowed."""
    port_list = ", ".join(str(port) for port in ports)
    return (
        "proxy:\n"
        "  allow:\n"
        f"    - {{domain: 127.0.0.1, ports: [{port_list}]}}\n"
        f"    - {{domain: localhost, ports: [{port_list}]}}\n"
        f"  {LOCAL_ALLOW}\n"
        f"{extra}"
    )
