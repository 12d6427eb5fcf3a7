"""What the socket layer keeps per connection and per request (plain data)."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from cloister_core.tokens import TokenRecord
from cloister_proxy.addresses import IPAddress


class ClientGoneError(Exception):
    """The client closed the connection or stopped talking in time."""


@dataclass(slots=True)
class Exchange:
    """What one request did, for its audit line."""

    method: str = ""
    peer: str | None = None  # the client's address
    host: str = ""
    port: int = 0
    record: TokenRecord | None = None
    status: int = 0
    verdict: str = "error"
    reason: str | None = None
    rule: str | None = None
    rule_file: str | None = None
    address: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    started: float = field(default_factory=time.monotonic)

    def audit_fields(self) -> dict[str, Any]:
        return {
            "cloister": self.record.cloister if self.record else None,
            "project": self.record.project if self.record else None,
            "method": self.method,
            "peer": self.peer,
            "host": self.host,
            "port": self.port,
            "status": self.status,
            "verdict": self.verdict,
            "reason": self.reason,
            "rule": self.rule,
            "file": self.rule_file,
            "address": self.address,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "duration_ms": round((time.monotonic() - self.started) * 1000, 3),
        }


@dataclass(slots=True)
class Upstream:
    """A dialled upstream connection, and response bytes read but not yet relayed."""

    sock: socket.socket
    address: IPAddress
    buffer: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class Client:
    """One client connection: its socket, unread bytes, and the cloister it is charged to."""

    sock: socket.socket
    task: asyncio.Task[None] | None
    peer: str  # the address it connects from
    buffer: bytearray = field(default_factory=bytearray)
    token: str | None = None  # set once a request authenticated (it is then charged)
