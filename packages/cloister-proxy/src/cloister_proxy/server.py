"""The proxy's socket layer: accept, read heads, dial upstream, relay.

This module (with :mod:`relay` for the tunnel pumps, :mod:`dialing` for connecting
upstream and :mod:`forwarding` for plain HTTP) is the only code that touches sockets;
it feeds bytes to the sans-I/O parser (:mod:`http1`) and asks the pure decision layer
(:mod:`gate`) what to do, then does it.

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
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

from cloister_core.audit import AuditLog
from cloister_core.hub import DomainRequest
from cloister_core.policy import ProjectPolicy
from cloister_core.tokens import TokenRecord
from cloister_proxy import gate
from cloister_proxy.addresses import IPAddress
from cloister_proxy.approvals import (
    ApprovalHub,
    HubUnavailableError,
    PendingApprovals,
    TooManyHeldError,
)
from cloister_proxy.dialing import dial
from cloister_proxy.exchange import Client, ClientGoneError, Exchange, Upstream
from cloister_proxy.forwarding import forward
from cloister_proxy.http1 import (
    CONNECT_ESTABLISHED,
    HttpError,
    ProxyTarget,
    RequestHead,
    find_head_end,
    parse_request_head,
    parse_target,
    render_response,
)
from cloister_proxy.relay import COPY_BUFFER, Tunnel
from cloister_proxy.settings import ProxySettings
from cloister_proxy.state import ProxyState

RECV_SIZE = 256 * 1024
LISTEN_BACKLOG = 4096
# What a held client may send before its answer (a TLS hello, a request body) and still
# be watched for hanging up; past it the proxy stops reading until the answer.
HELD_BUFFER = 64 * 1024

T = TypeVar("T")


class _ClientGone:
    """The client closed its connection before the work it waited for was done."""


CLIENT_GONE = _ClientGone()


async def _captured(work: Awaitable[T]) -> T | Exception:
    # In a task group an exception would cancel the sibling and come out as a group.
    try:
        return await work
    except Exception as error:
        return error


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
        self._unauthenticated: dict[str, int] = {}  # per peer address
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
                    conn, peer = listener.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as error:  # EMFILE and friends: report, keep serving
                    self._report(f"accept failed: {error}")
                    return
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                tasks.create_task(self._handle(conn, str(peer[0])))

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

    async def _handle(self, conn: socket.socket, peer: str) -> None:
        client = Client(conn, asyncio.current_task(), peer)
        self._active += 1
        waiting = self._unauthenticated.get(peer, 0) + 1
        self._unauthenticated[peer] = waiting
        try:
            if self._active > self._settings.max_connections:
                with contextlib.suppress(OSError):
                    conn.send(gate.TOO_MANY.render())
                return
            if waiting > self._settings.max_unauthenticated_per_address:
                with contextlib.suppress(OSError):
                    conn.send(gate.TOO_MANY_UNAUTHENTICATED.render())
                return
            first = True
            while True:
                exchange = Exchange(peer=peer)
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
            if client.token is None:
                self._forget_unauthenticated(peer)
            self._release(client)
            conn.close()

    def _forget_unauthenticated(self, peer: str) -> None:
        remaining = self._unauthenticated.pop(peer, 1) - 1
        if remaining > 0:
            self._unauthenticated[peer] = remaining

    def _charge(self, client: Client, record: TokenRecord) -> bool:
        """Count this connection against its cloister's limit (once); False if over it."""
        if client.token is not None:
            return True
        count = self._per_token.get(record.secret, 0)
        if count >= self._settings.max_connections_per_token:
            return False
        self._per_token[record.secret] = count + 1
        client.token = record.secret
        self._forget_unauthenticated(client.peer)  # charged to its cloister from now on
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

        record = await self._authenticate(client, head, exchange)
        if record is None:
            return False

        outcome = await self._admit(client, target, record, exchange)
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
            keep, failure = await forward(
                self.loop,
                client,
                head,
                target,
                upstream=upstream,
                exchange=exchange,
                idle=self._settings.idle_timeout.total_seconds(),
            )
            if failure is not None:
                await self._refuse(conn, exchange, gate.bad_request(failure))
            return keep
        finally:
            upstream.sock.close()
            self._write_audit(exchange)

    async def _authenticate(
        self, client: Client, head: RequestHead, exchange: Exchange
    ) -> TokenRecord | None:
        """The cloister this request is from, charged; None when refused (and answered)."""
        conn = client.sock
        record = gate.authenticate(head, self._state.tokens)
        if record is None:
            exchange.reason = "proxy-auth"
            await self._refuse(conn, exchange, gate.AUTH_REQUIRED)
            return None
        if not record.accepts_from(client.peer):
            self._report(
                f"refused the token of cloister {record.cloister!r} from {client.peer}"
                f" (its cloister is at {record.address})"
            )
            await self._refuse(conn, exchange, gate.TOKEN_ELSEWHERE)
            return None
        exchange.record = record
        if not self._charge(client, record):
            await self._refuse(conn, exchange, gate.TOO_MANY_FOR_TOKEN)
            return None
        return record

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
        self, client: Client, target: ProxyTarget, record: TokenRecord, exchange: Exchange
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
            self._state.session_policy(record),
            hub_configured=self._approvals is not None,
            agent=record.agent,
            host_config_dir=self._settings.host_config_dir,
        )
        if isinstance(decision, gate.NeedsApproval):
            decision = await self._ask_hub(client, decision.destination, record, policy, exchange)
        if isinstance(decision, gate.Refusal):
            return decision
        verdict = decision.verdict
        exchange.verdict = "allow"
        if verdict.rule is not None:
            exchange.rule = verdict.rule.text
            exchange.rule_file = str(verdict.rule.source)
        return destination, policy

    async def _while_connected(self, client: Client, work: Awaitable[T]) -> T | _ClientGone:
        """*work*'s result, or :data:`CLIENT_GONE` (and *work* cancelled) if the client hangs up."""
        async with asyncio.TaskGroup() as group:
            doing = group.create_task(_captured(work))
            watching = group.create_task(self._hang_up(client))
            await asyncio.wait((doing, watching), return_when=asyncio.FIRST_COMPLETED)
            doing.cancel()
            watching.cancel()
        if doing.cancelled():
            return CLIENT_GONE
        result = doing.result()
        if isinstance(result, Exception):
            raise result
        return result

    async def _hang_up(self, client: Client) -> None:
        """Return when the client closes (or resets) its connection.

        What it sends meanwhile is kept in ``client.buffer`` (up to :data:`HELD_BUFFER`)
        for the tunnel or the forwarded request. The socket is read only right after a
        readiness event, never across an await, so a cancellation loses no byte.
        """
        loop = self.loop
        sock = client.sock
        while len(client.buffer) < HELD_BUFFER:
            readable = loop.create_future()
            loop.add_reader(sock.fileno(), _set_done, readable)
            try:
                await readable
            finally:
                loop.remove_reader(sock.fileno())
            try:
                data = sock.recv(HELD_BUFFER - len(client.buffer))
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return
            if not data:
                return
            client.buffer += data
        await loop.create_future()  # cannot tell any more: wait for the answer

    async def _ask_hub(
        self,
        client: Client,
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
        limit = policy.config.proxy.max_held_per_cloister
        try:
            outcome = await self._while_connected(
                client, self._approvals.decide(request, timeout, limit=limit)
            )
        except TooManyHeldError as error:
            return gate.too_many_held(destination, error.held, error.limit, str(error))
        except HubUnavailableError as error:
            return gate.hub_unavailable(destination, str(error))
        if isinstance(outcome, _ClientGone):
            return gate.CLIENT_GONE
        decision = outcome
        if (
            decision is not None
            and decision.action in ("allow", "deny")
            and decision.entry
            and decision.scope in ("project", "global")
        ):
            # The hub has written the decision file; a session decision is in the
            # cloister's session file, which is read per request.
            self.request_reload()
        exchange.rule = decision.entry.target if decision and decision.entry else None
        exchange.rule_file = f"approval ({decision.scope})" if decision and decision.scope else None
        return gate.after_approval(destination, decision, timeout)

    # -- dialling ------------------------------------------------------------------------

    async def _dial(
        self, destination: gate.Destination, policy: ProjectPolicy, exchange: Exchange
    ) -> Upstream | gate.Refusal:
        return await dial(
            self.loop,
            destination,
            self._state.guard_for(policy),
            exchange,
            seconds=self._settings.connect_timeout.total_seconds(),
            is_self=self._is_self,
            own_networks=self._state.own_networks,
        )

    def _is_self(self, addresses: list[IPAddress], port: int) -> bool:
        if self.address is None or port != self.address[1]:
            return False
        return any(self._state.is_own_address(address) for address in addresses)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
