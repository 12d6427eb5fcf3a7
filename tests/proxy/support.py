"""Test harness for the proxy: the real server on 127.0.0.1, real upstreams, a fake hub.

The proxy runs in a thread with its own event loop (as in production, the standard
one), so tests drive it with ordinary blocking sockets. Upstreams are small
threaded servers; the HTTP one uses h11 (an independent HTTP/1.1 implementation) so
what the proxy forwards is checked by a parser that is not its own. Waiting is done
on events and socket reads with timeouts, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import h11
import httpx

from cloister_core.audit import AuditLog
from cloister_core.hub import DomainDecision, DomainRequest
from cloister_core.tokens import TokenRecord, remove_token_file, write_token_file
from cloister_proxy.approvals import HUB_LIMITS, HttpApprovalHub
from cloister_proxy.netinfo import OwnNetworks, own_addresses
from cloister_proxy.server import ProxyServer
from cloister_proxy.settings import ProxySettings
from cloister_proxy.state import ProxyState
from tests.waiting import wait_until

TIMEOUT = 10.0
LOCAL_ALLOW = 'allow_private_networks: ["127.0.0.0/8", "::1/128"]'


def basic(token: str, user: str = "cloister") -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


# --- the proxy --------------------------------------------------------------------------


class ProxyHarness:
    """A config directory, tokens, and a running proxy."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_dir = root / "config"
        self.tokens_dir = self.config_dir / "tokens"
        self.audit_path = root / "audit.log"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.messages: list[str] = []
        self.tokens: dict[str, TokenRecord] = {}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.server: ProxyServer | None = None
        self.address: tuple[str, int] = ("127.0.0.1", 0)

    # files
    def write_config(self, text: str, path: str = "config.yaml") -> Path:
        target = self.config_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(target.name + ".tmp")
        temp.write_text(text, encoding="utf-8")
        temp.replace(target)
        return target

    def add_token(
        self, cloister: str = "demo", project: str = "demo", address: str = "127.0.0.1"
    ) -> TokenRecord:
        """A token bound to *address* (the tests connect from 127.0.0.1)."""
        record = TokenRecord.create(
            cloister=cloister, project=project, path=self.root, address=address
        )
        write_token_file(self.tokens_dir, record)
        self.tokens[cloister] = record
        return record

    def remove_token(self, cloister: str) -> None:
        remove_token_file(self.tokens_dir, cloister)

    def audit(self) -> list[dict[str, Any]]:
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text("utf-8").splitlines()]

    def wait_for_audit(self, count: int) -> list[dict[str, Any]]:
        wait_until(lambda: len(self.audit()) >= count, TIMEOUT, f"{count} audit lines")
        return self.audit()

    # lifecycle
    def start(self, *, hub_url: str | None = None, **overrides: Any) -> None:
        values: dict[str, Any] = {
            "config_dir": self.config_dir,
            "data_dir": self.root / "data",
            "listen": "127.0.0.1:0",
            "audit_log": self.audit_path,
            "reload_interval": 0.1,
            "approval_url": hub_url,
            "approval_credential": "service-secret" if hub_url else None,
            # The upstreams of these tests run on loopback, beside the proxy; the tests
            # of the guardian's networks turn this on.
            "refuse_own_networks": False,
        }
        settings = ProxySettings(**(values | overrides))
        ready = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            own = tuple(own_addresses())
            state = ProxyState(
                settings.paths,
                own_addresses=own,
                report=self.messages.append,
                guardian_networks=settings.guardian_networks,
                own_networks=OwnNetworks(own=own) if settings.refuse_own_networks else None,
            )
            with AuditLog(
                settings.audit_log,
                cloister_dir=settings.cloister_logs,
                report=self.messages.append,
            ) as audit:
                async with httpx.AsyncClient(limits=HUB_LIMITS) as client:
                    hub = (
                        HttpApprovalHub(hub_url, settings.credential(), client) if hub_url else None
                    )
                    self.server = ProxyServer(settings, state, audit, hub, self.messages.append)

                    def on_ready(address: tuple[str, int]) -> None:
                        self.address = address
                        ready.set()

                    self._task = asyncio.create_task(self.server.serve(ready=on_ready))
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._task

        def run() -> None:
            asyncio.run(main())

        self._thread = threading.Thread(target=run, name="proxy", daemon=True)
        self._thread.start()
        if not ready.wait(TIMEOUT):
            raise AssertionError(f"proxy did not start: {self.messages}")

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(TIMEOUT)
            assert not self._thread.is_alive(), "proxy thread did not stop"

    def reload(self) -> None:
        """What SIGHUP does, from another thread."""
        assert self._loop is not None
        assert self.server is not None
        self._loop.call_soon_threadsafe(self.server.request_reload)

    # clients
    def connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=TIMEOUT)


# --- clients --------------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    raw_head: bytes = b""
    leftover: bytes = b""


def read_head(sock: socket.socket, buffer: bytes = b"") -> tuple[bytes, bytes]:
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed before a full head; got {buffer!r}")
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return status, headers


def read_response(sock: socket.socket, buffer: bytes = b"", *, head_only: bool = False) -> Response:
    """One response: by Content-Length, or to EOF when there is none."""
    head, rest = read_head(sock, buffer)
    status, headers = parse_head(head)
    if head_only:
        return Response(status, headers, b"", head, rest)
    if "content-length" in headers:
        length = int(headers["content-length"])
        while len(rest) < length:
            data = sock.recv(65536)
            if not data:
                break
            rest += data
        return Response(status, headers, rest[:length], head, rest[length:])
    while data := sock.recv(65536):
        rest += data
    return Response(status, headers, rest, head)


def connect_request(target: str, token: str | None, extra: str = "") -> bytes:
    auth = f"Proxy-Authorization: {basic(token)}\r\n" if token is not None else ""
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}{extra}\r\n".encode()


def open_tunnel(
    harness: ProxyHarness, target: str, token: str | None
) -> tuple[socket.socket, Response]:
    sock = harness.connect()
    try:
        sock.sendall(connect_request(target, token))
        response = read_response(sock, head_only=True)
    except BaseException:
        sock.close()
        raise
    return sock, response


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {count} bytes")
        data += chunk
    return data


def is_closed(sock: socket.socket, timeout: float = TIMEOUT) -> bool:
    """True once the peer closed (EOF or reset) within *timeout*."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# --- upstreams ------------------------------------------------------------------------


class ThreadedServer:
    """Accept loop in a thread, one thread per connection."""

    def __init__(self, handler: Callable[[socket.socket], None], backlog: int = 128) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self.port: int = self._listener.getsockname()[1]
        self._handler = handler
        self.connections = 0
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(TIMEOUT)
            self._handler(conn)

    def close(self) -> None:
        # shutdown() wakes the thread blocked in accept(); close() alone would not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(TIMEOUT)


def echo(conn: socket.socket) -> None:
    """Echo until EOF, then say how many bytes came in and close."""
    total = 0
    while data := conn.recv(65536):
        total += len(data)
        conn.sendall(data)
    conn.sendall(f"EOF after {total}\n".encode())


@dataclass
class HttpExchange:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class HttpUpstream:
    """An HTTP/1.1 origin built on h11; records what it received."""

    respond: Callable[[HttpExchange], tuple[int, list[tuple[str, str]], list[bytes]]]
    received: list[HttpExchange] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    server: ThreadedServer | None = None

    def __post_init__(self) -> None:
        self.server = ThreadedServer(self._handle)

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def _handle(self, conn: socket.socket) -> None:
        protocol = h11.Connection(h11.SERVER)
        while True:
            request: h11.Request | None = None
            body = b""
            while True:
                event = protocol.next_event()
                if event is h11.NEED_DATA:
                    data = conn.recv(65536)
                    self.raw.append(data)
                    protocol.receive_data(data)
                    continue
                if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    return
                if isinstance(event, h11.Request):
                    request = event
                    if any(
                        n.lower() == b"expect" and v.lower() == b"100-continue"
                        for n, v in event.headers
                    ):
                        conn.sendall(
                            protocol.send(h11.InformationalResponse(status_code=100, headers=[]))
                            or b""
                        )
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
            assert request is not None
            exchange = HttpExchange(
                request.method.decode(),
                request.target.decode(),
                [(n.decode(), v.decode()) for n, v in request.headers.raw_items()],
                body,
            )
            self.received.append(exchange)
            status, headers, chunks = self.respond(exchange)
            conn.sendall(protocol.send(h11.Response(status_code=status, headers=headers)) or b"")
            for chunk in chunks:
                conn.sendall(protocol.send(h11.Data(data=chunk)) or b"")
            conn.sendall(protocol.send(h11.EndOfMessage()) or b"")
            if protocol.our_state is h11.MUST_CLOSE:
                return
            protocol.start_next_cycle()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


# --- the approval hub ---------------------------------------------------------------


class FakeHub:
    """The hub's service API: records requests, answers with ``decide(request)``."""

    def __init__(self, decide: Callable[[DomainRequest], DomainDecision | None]) -> None:
        self.decide = decide
        self.requests: list[DomainRequest] = []
        self.authorizations: list[str | None] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = DomainRequest.model_validate_json(self.rfile.read(length))
                hub.requests.append(request)
                hub.authorizations.append(self.headers.get("Authorization"))
                decision = hub.decide(request)
                if decision is None:  # act as if the hub were broken
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = decision.model_dump_json().encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def running(harness: ProxyHarness, **start: Any) -> Iterator[ProxyHarness]:
    harness.start(**start)
    try:
        yield harness
    finally:
        harness.stop()


PYTHON = sys.executable
