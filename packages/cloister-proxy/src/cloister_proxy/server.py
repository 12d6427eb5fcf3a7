"""The proxy's socket layer: accept, read heads, dial upstream, relay.

This module (with :mod:`cloister_proxy.relay` for the tunnel pumps) is the only code
that touches sockets; it feeds bytes to the sans-I/O parser (:mod:`http1`) and asks
the pure decision layer (:mod:`gate`) what to do, then does it.

Concurrency is structured: one :class:`asyncio.TaskGroup` owns the accept loop, the
reload loop, every connection handler and every pending approval question;
cancelling :meth:`ProxyServer.serve` ends them all. A handler never raises into the
group (a bug in one connection must not take the proxy down): it reports and closes.
Each connection is independent, so a slow or hostile client only ever holds its own
task: the head must arrive within ``header_timeout``, an idle connection is closed
after ``idle_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cloister_core.audit import AuditLog
from cloister_core.hub import DomainRequest
from cloister_core.policy import ProjectPolicy
from cloister_core.tokens import TokenRecord
from cloister_proxy import gate
from cloister_proxy.addresses import IPAddress, parse_address
from cloister_proxy.approvals import ApprovalHub, HubUnavailableError, PendingApprovals
from cloister_proxy.http1 import (
    CONNECT_ESTABLISHED,
    BodyTracker,
    HttpError,
    ProxyTarget,
    RequestHead,
    find_head_end,
    parse_request_head,
    parse_response_head,
    parse_target,
    render_forward_request,
    render_forward_response,
    render_response,
)
from cloister_proxy.relay import COPY_BUFFER, Tunnel
from cloister_proxy.settings import ProxySettings
from cloister_proxy.state import ProxyState

RECV_SIZE = 256 * 1024
LISTEN_BACKLOG = 4096


class ClientGoneError(Exception):
    """The client closed the connection or stopped talking in time."""


@dataclass(slots=True)
class Exchange:
    """What one request did, for its audit line."""

    method: str = ""
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
    buffer: bytearray = field(default_factory=bytearray)
    token: str | None = None


class ProxyServer:
    """Serves proxy clients on one listening socket until cancelled."""

    def __init__(
        self,
        settings: ProxySettings,
        state: ProxyState,
        audit: AuditLog,
        hub: ApprovalHub | None,
        report: Callable[[str], None],
    ) -> None:
        self._settings = settings
        self._state = state
        self._audit = audit
        self._hub = hub
        self._report = report
        self._active = 0
        self._per_token: dict[str, int] = {}
        self._tasks_by_token: dict[str, set[asyncio.Task[None]]] = {}
        self._reload_now = asyncio.Event()
        self._approvals: PendingApprovals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # One copy buffer for every tunnel of this loop (see relay.Pump).
        self._copy_buffer = bytearray(COPY_BUFFER)
        self.address: tuple[str, int] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def _listen(self) -> socket.socket:
        host, port = self._settings.listen_address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        return sock

    def request_reload(self) -> None:
        """Re-read tokens and config now (SIGHUP)."""
        self._reload_now.set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        # Cached: asyncio.get_running_loop() costs a getpid() system call each time.
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def serve(self, ready: Callable[[tuple[str, int]], None] | None = None) -> None:
        self._loop = loop = asyncio.get_running_loop()
        listener = self._listen()
        self.address = listener.getsockname()[:2]
        self._state.refresh(force=True)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        try:
            async with asyncio.TaskGroup() as tasks:
                if self._hub is not None:
                    self._approvals = PendingApprovals(self._hub, tasks)
                tasks.create_task(self._reload_loop())
                if ready is not None:
                    ready(self.address)
                await self._accept_forever(listener, tasks)
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGHUP)
            listener.close()

    async def _accept_forever(self, listener: socket.socket, tasks: asyncio.TaskGroup) -> None:
        """Accept connections from a reader callback until cancelled.

        Each readiness event drains the backlog (one loop iteration per burst, not per
        client) and every connection becomes a task of *tasks*.
        """
        loop = self.loop

        def accept_all() -> None:
            for _ in range(LISTEN_BACKLOG):
                try:
                    conn, _peer = listener.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as error:  # EMFILE and friends: report, keep serving
                    self._report(f"accept failed: {error}")
                    return
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                tasks.create_task(self._handle(conn))

        loop.add_reader(listener.fileno(), accept_all)
        try:
            await loop.create_future()  # runs until the server is cancelled
        finally:
            loop.remove_reader(listener.fileno())

    async def _reload_loop(self) -> None:
        interval = self._settings.reload_interval.total_seconds()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._reload_now.wait()
            force = self._reload_now.is_set()
            self._reload_now.clear()
            for record in self._state.refresh(force=force):
                self._report(
                    f"token of cloister {record.cloister!r} revoked; closing its connections"
                )
                for task in self._tasks_by_token.get(record.secret, ()):
                    task.cancel()

    # -- per connection ------------------------------------------------------------------

    async def _handle(self, conn: socket.socket) -> None:
        client = Client(conn, asyncio.current_task())
        self._active += 1
        try:
            if self._active > self._settings.max_connections:
                with contextlib.suppress(OSError):
                    conn.send(gate.TOO_MANY.render())
                return
            first = True
            while True:
                exchange = Exchange()
                try:
                    head, client.buffer = await self._read_head(conn, client.buffer, first=first)
                except ClientGoneError:
                    return
                except HttpError as error:
                    await self._refuse(conn, exchange, gate.bad_request(error))
                    return
                first = False
                if not await self._serve_request(client, head, exchange):
                    return
        except asyncio.CancelledError:
            raise
        except Exception as error:  # one connection's bug must not stop the proxy
            self._report(f"internal error on a connection: {type(error).__name__}: {error}")
        finally:
            self._active -= 1
            self._release(client)
            conn.close()

    def _charge(self, client: Client, record: TokenRecord) -> bool:
        """Count this connection against its cloister's limit (once); False if over it."""
        if client.token is not None:
            return True
        count = self._per_token.get(record.secret, 0)
        if count >= self._settings.max_connections_per_token:
            return False
        self._per_token[record.secret] = count + 1
        client.token = record.secret
        if client.task is not None:
            self._tasks_by_token.setdefault(record.secret, set()).add(client.task)
        return True

    def _release(self, client: Client) -> None:
        token = client.token
        if token is None:
            return
        remaining = self._per_token.pop(token, 1) - 1
        if remaining > 0:
            self._per_token[token] = remaining
        tasks = self._tasks_by_token.get(token)
        if tasks is not None and client.task is not None:
            tasks.discard(client.task)
            if not tasks:
                del self._tasks_by_token[token]

    async def _read_head(
        self, conn: socket.socket, buffer: bytearray, *, first: bool
    ) -> tuple[RequestHead, bytearray]:
        """Read one request head; returns it and the bytes after it."""
        loop = self.loop
        header_timeout = self._settings.header_timeout.total_seconds()
        # A fresh connection must send its head promptly; a kept-alive one may wait
        # (idle) for its next request, then has header_timeout for the rest.
        wait = header_timeout if first else self._settings.idle_timeout.total_seconds()
        try:
            async with asyncio.timeout(wait) as deadline:
                scanned = 0
                while True:
                    end = find_head_end(buffer, scanned)
                    if end >= 0:
                        return parse_request_head(bytes(buffer[:end])), buffer[end:]
                    scanned = len(buffer)
                    data = await loop.sock_recv(conn, RECV_SIZE)
                    if not data:
                        raise ClientGoneError
                    if not buffer and not first:
                        deadline.reschedule(loop.time() + header_timeout)
                    buffer += data
        except TimeoutError:
            if buffer:
                with contextlib.suppress(OSError):
                    await loop.sock_sendall(conn, gate.HEAD_TIMEOUT.render())
            raise ClientGoneError from None
        except OSError:
            raise ClientGoneError from None

    async def _refuse(self, conn: socket.socket, exchange: Exchange, refusal: gate.Refusal) -> None:
        exchange.status = refusal.status
        if refusal.status in (403, 407, 429, 503):
            exchange.verdict = "deny"
        exchange.reason = refusal.reason or exchange.reason
        if refusal.rule is not None:
            exchange.rule = refusal.rule.text
            exchange.rule_file = str(refusal.rule.source)
        with contextlib.suppress(OSError):
            await self.loop.sock_sendall(conn, refusal.render())
        self._write_audit(exchange)

    def _write_audit(self, exchange: Exchange) -> None:
        self._audit.write("proxy.request", **exchange.audit_fields())

    async def _serve_request(self, client: Client, head: RequestHead, exchange: Exchange) -> bool:
        """Handle one request; returns whether to read another on this connection."""
        conn = client.sock
        exchange.method = head.method
        try:
            target = parse_target(head)
        except HttpError as error:
            await self._refuse(conn, exchange, gate.bad_request(error))
            return False
        if target.kind == "origin":
            await self._serve_origin(conn, head, target)
            return False
        exchange.host, exchange.port = target.host, target.port

        record = gate.authenticate(head, self._state.tokens)
        if record is None:
            exchange.reason = "proxy-auth"
            await self._refuse(conn, exchange, gate.AUTH_REQUIRED)
            return False
        exchange.record = record
        if not self._charge(client, record):
            await self._refuse(conn, exchange, gate.TOO_MANY_FOR_TOKEN)
            return False

        outcome = await self._admit(target, record, exchange)
        if isinstance(outcome, gate.Refusal):
            await self._refuse(conn, exchange, outcome)
            return False
        destination, policy = outcome
        exchange.host = destination.host.name

        upstream = await self._dial(destination, policy, exchange)
        if isinstance(upstream, gate.Refusal):
            await self._refuse(conn, exchange, upstream)
            return False
        try:
            if target.kind == "connect":
                await self._tunnel(client, upstream, exchange)
                return False
            return await self._forward(client, head, target, upstream, exchange)
        finally:
            upstream.sock.close()
            self._write_audit(exchange)

    async def _tunnel(self, client: Client, upstream: Upstream, exchange: Exchange) -> None:
        """Answer 200 and relay both ways until the tunnel ends."""
        loop = self.loop
        exchange.status = 200
        try:
            await loop.sock_sendall(client.sock, CONNECT_ESTABLISHED)
            if client.buffer:  # the client did not wait for our 200 (TLS false start)
                await loop.sock_sendall(upstream.sock, bytes(client.buffer))
                exchange.bytes_up += len(client.buffer)
                client.buffer.clear()
        except OSError:
            return
        tunnel = Tunnel(
            client.sock,
            upstream.sock,
            idle_timeout=self._settings.idle_timeout.total_seconds(),
            shared=self._copy_buffer,
        )
        try:
            await tunnel.run()
        finally:
            exchange.bytes_up += tunnel.up.bytes
            exchange.bytes_down += tunnel.down.bytes
            if tunnel.idled_out:
                exchange.reason = "idle-timeout"

    async def _serve_origin(
        self, conn: socket.socket, head: RequestHead, target: ProxyTarget
    ) -> None:
        loop = self.loop
        if head.method in ("GET", "HEAD") and target.path == "/healthz":
            response = render_response(200, "ok\n")
        else:
            response = render_response(
                400, "cloister: this is a forward proxy; send absolute-URI or CONNECT requests\n"
            )
        with contextlib.suppress(OSError):
            await loop.sock_sendall(conn, response)

    # -- deciding ------------------------------------------------------------------------

    async def _admit(
        self, target: ProxyTarget, record: TokenRecord, exchange: Exchange
    ) -> tuple[gate.Destination, ProjectPolicy] | gate.Refusal:
        try:
            destination = gate.destination_of(target)
        except HttpError as error:
            return gate.bad_request(error)
        exchange.host = destination.host.name
        policy = self._state.policies.get(record.project)
        if policy is None:
            problem = self._state.policies.error(record.project) or "unknown error"
            return gate.Refusal(503, f"cloister: the proxy's configuration is broken: {problem}")
        decision = gate.decide(
            destination,
            policy,
            self._state.sessions.policy(record),
            hub_configured=self._approvals is not None,
        )
        if isinstance(decision, gate.NeedsApproval):
            decision = await self._ask_hub(decision.destination, record, policy, exchange)
        if isinstance(decision, gate.Refusal):
            return decision
        verdict = decision.verdict
        exchange.verdict = "allow"
        if verdict.rule is not None:
            exchange.rule = verdict.rule.text
            exchange.rule_file = str(verdict.rule.source)
        return destination, policy

    async def _ask_hub(
        self,
        destination: gate.Destination,
        record: TokenRecord,
        policy: ProjectPolicy,
        exchange: Exchange,
    ) -> gate.Allowed | gate.Refusal:
        if self._approvals is None:
            return gate.hub_unavailable(destination, "no approval hub configured")
        timeout = policy.config.proxy.approval_timeout.total_seconds()
        request = DomainRequest(
            cloister=record.cloister,
            project=record.project,
            host=destination.host.name,
            port=destination.port,
            wait_seconds=timeout,
        )
        try:
            decision = await self._approvals.decide(request, timeout)
        except HubUnavailableError as error:
            return gate.hub_unavailable(destination, str(error))
        if decision is not None and decision.action in ("allow", "deny") and decision.entry:
            if decision.scope == "session":
                self._state.sessions.add(record, decision.action, decision.entry)
            elif decision.scope in ("project", "global"):
                self.request_reload()  # the hub has written the decision file
        exchange.rule = decision.entry.target if decision and decision.entry else None
        exchange.rule_file = f"approval ({decision.scope})" if decision and decision.scope else None
        return gate.after_approval(destination, decision, timeout)

    # -- dialling ------------------------------------------------------------------------

    async def _dial(
        self, destination: gate.Destination, policy: ProjectPolicy, exchange: Exchange
    ) -> Upstream | gate.Refusal:
        """Resolve, check every answer, and connect to the first that accepts."""
        loop = self.loop
        seconds = self._settings.connect_timeout.total_seconds()
        host, port = destination.host, destination.port
        guard = self._state.guard_for(policy)
        try:
            async with asyncio.timeout(seconds):
                if host.is_ip:
                    addresses: list[IPAddress] = [ipaddress.ip_address(host.name)]
                else:
                    try:
                        infos = await loop.getaddrinfo(
                            host.name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                        )
                    except socket.gaierror as error:
                        return gate.upstream_unreachable(destination, f"cannot resolve: {error}")
                    addresses = _unique_addresses(infos)
                refused = guard.first_refused(addresses)
                if refused is not None:
                    exchange.address = str(refused.address)
                    return gate.private_address(destination, refused)
                if self._is_self(addresses, port):
                    return gate.Refusal(
                        403, "cloister: the proxy will not connect to itself", "private-address"
                    )
                problem = "no address"
                for address in addresses:
                    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
                    # Created non-blocking: no separate ioctl per connection.
                    sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                    try:
                        await _connect(loop, sock, (str(address), port))
                    except OSError as error:
                        sock.close()
                        problem = error.strerror or str(error)
                        continue
                    except BaseException:
                        sock.close()
                        raise
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    exchange.address = str(address)
                    return Upstream(sock, address)
                return gate.upstream_unreachable(destination, problem)
        except TimeoutError:
            return gate.upstream_timeout(destination, seconds)

    def _is_self(self, addresses: list[IPAddress], port: int) -> bool:
        if self.address is None or port != self.address[1]:
            return False
        return any(self._state.is_own_address(address) for address in addresses)

    # -- plain HTTP ------------------------------------------------------------------------

    async def _forward(
        self,
        client: Client,
        head: RequestHead,
        target: ProxyTarget,
        upstream: Upstream,
        exchange: Exchange,
    ) -> bool:
        """Relay one plain-HTTP exchange; True if the client connection stays open."""
        loop = self.loop
        keep = False
        failure: HttpError | None = None
        try:
            await loop.sock_sendall(upstream.sock, render_forward_request(head, target))
            request_body = BodyTracker(head.framing)
            async with asyncio.TaskGroup() as tasks:
                sender = tasks.create_task(
                    self._send_body(client, upstream.sock, request_body, exchange)
                )
                keep = await self._relay_response(client.sock, head, upstream, exchange)
                if not request_body.done:
                    sender.cancel()  # the response came first; this connection must end
                    keep = False
        except* (OSError, ClientGoneError, TimeoutError):
            keep = False
        except* HttpError as group:
            keep = False
            first = group.exceptions[0]
            failure = first if isinstance(first, HttpError) else HttpError(502, str(first))
        if failure is not None and exchange.status == 0:
            await self._refuse(client.sock, exchange, gate.bad_request(failure))
            return False
        return keep and head.keep_alive

    async def _send_body(
        self, client: Client, upstream: socket.socket, tracker: BodyTracker, exchange: Exchange
    ) -> None:
        """Relay the request body; what follows it stays in the client's buffer."""
        loop = self.loop
        idle = self._settings.idle_timeout.total_seconds()
        conn, buffer = client.sock, client.buffer
        data = bytes(buffer)
        buffer.clear()
        while True:
            taken = tracker.feed(data)
            if taken:
                await loop.sock_sendall(upstream, data[:taken])
                exchange.bytes_up += taken
            if tracker.done:
                buffer += data[taken:]
                return
            async with asyncio.timeout(idle):
                data = await loop.sock_recv(conn, RECV_SIZE)
            if not data:
                raise ClientGoneError

    async def _relay_response(
        self, conn: socket.socket, head: RequestHead, upstream: Upstream, exchange: Exchange
    ) -> bool:
        """Relay interim responses and the final one; True if both sides may keep alive."""
        loop = self.loop
        idle = self._settings.idle_timeout.total_seconds()
        pending = upstream.buffer
        while True:
            scanned = 0
            while (end := _response_head_end(pending, scanned)) < 0:
                scanned = len(pending)
                async with asyncio.timeout(idle):
                    data = await loop.sock_recv(upstream.sock, RECV_SIZE)
                if not data:
                    raise HttpError(502, "upstream closed the connection without a response")
                pending += data
            response = parse_response_head(bytes(pending[:end]), head.method)
            del pending[:end]
            close = response.status >= 200 and not (response.keep_alive and head.keep_alive)
            await loop.sock_sendall(conn, render_forward_response(response, close=close))
            if response.status >= 200:
                break
        exchange.status = response.status
        tracker = BodyTracker(response.framing)
        data = bytes(pending)
        pending.clear()
        while True:
            taken = tracker.feed(data)
            if taken:
                await loop.sock_sendall(conn, data[:taken])
                exchange.bytes_down += taken
            if tracker.done:
                return not close
            async with asyncio.timeout(idle):
                data = await loop.sock_recv(upstream.sock, RECV_SIZE)
            if not data:
                if tracker.kind == "close":
                    return False
                raise HttpError(502, "upstream closed the connection mid-body")


async def _connect(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, address: tuple[str, int]
) -> None:
    """Non-blocking connect; skips the wait for writability when it is already done.

    On loopback and fast local networks the handshake has usually completed by the
    time ``connect()`` returns EINPROGRESS; one check saves a trip through the loop.
    """
    error = sock.connect_ex(address)
    if error in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error == 0:
            try:
                sock.getpeername()
            except OSError:  # not connected yet: wait like everyone else
                await loop.sock_connect(sock, address)
            return
    if error not in (0, errno.EISCONN):
        raise OSError(error, os.strerror(error))


def _response_head_end(buffer: bytearray, start: int) -> int:
    try:
        return find_head_end(buffer, start)
    except HttpError:  # 431 is for clients; an oversized response is the upstream's fault
        raise HttpError(502, "the upstream's response head is too large") from None


def _unique_addresses(infos: list[tuple[Any, ...]]) -> list[IPAddress]:
    seen: list[IPAddress] = []
    for info in infos:
        text = str(info[4][0])
        try:
            address = parse_address(text)
        except ValueError:
            # A scoped (link-local) IPv6 answer: classify it without the scope id.
            address = ipaddress.ip_address(text.split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen
