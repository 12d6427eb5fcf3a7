"""The one wait helper and the one free-port probe every test shares."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    """The first truthy answer of *probe* within *timeout* seconds, else AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on *host* just now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
