"""The credential gateway's socket layer: accept, read heads, relay to the vendor.

Agents in cloisters call it over plain HTTP on their own network (their base URL); it
answers a request :func:`plan` refuses, or forwards it: to the upstream over a kept
connection of its own (TLS for https, the address guard of the proxy applied to every
address it dials), request body and response relayed as they come, so a streamed
(SSE) answer reaches the agent event by event; a chunked request body is re-chunked
on the way (:mod:`~cloister_proxy.credentials.body`). Keep-alive both ways; an audit line
per request (never the key).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cloister_core.audit import AuditLog
from cloister_core.credentials import provider_of
from cloister_proxy.addresses import parse_address
from cloister_proxy.credentials.body import LAST_CHUNK, UpstreamBody, frame_chunk
from cloister_proxy.credentials.dialing import guard_refusal
from cloister_proxy.credentials.limits import ConnectionBook, Ticket
from cloister_proxy.credentials.plan import Forward, Refusal, Upstream, plan
from cloister_proxy.credentials.scrub import Scrubber
from cloister_proxy.credentials.settings import CredentialSettings
from cloister_proxy.credentials.state import CredentialState
from cloister_proxy.http1 import (
    BodyTracker,
    HttpError,
    RequestHead,
    find_head_end,
    parse_request_head,
    parse_response_head,
    render_forward_response,
    render_head,
    render_response,
)

READ_SIZE = 256 * 1024
LINGER_SECONDS = 1.0
LISTEN_BACKLOG = 1024  # a flood from one cloister must not fill the queue for the others
POOL_PER_UPSTREAM = 16
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class ClientGoneError(Exception):
    """The client closed the connection or stopped talking in time."""


@dataclass(slots=True)
class Connection:
    """A kept connection to an upstream, and bytes read from it but not yet used."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    buffer: bytearray = field(default_factory=bytearray)
    idle_since: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        self.writer.close()


class UpstreamRefusedError(Exception):
    """The upstream may not or cannot be reached; the message says why."""


class CredentialGateway:
    def __init__(
        self,
        settings: CredentialSettings,
        state: CredentialState,
        audit: AuditLog,
        report: Callable[[str], None],
    ) -> None:
        self._settings = settings
        self._state = state
        self._audit = audit
        self._report = report
        # Kept upstream connections, per upstream *and cloister*: a response that an
        # upstream bug leaves on a connection can only ever reach the same cloister.
        self._pool: dict[tuple[str, tuple[str, str, int]], list[Connection]] = {}
        self._book = ConnectionBook(
            unauthenticated_per_address=settings.max_unauthenticated_per_address,
            per_cloister=settings.max_connections_per_cloister,
        )
        self._full: set[str] = set()  # cloisters at their limit (reported once per spell)
        self._tls = ssl.create_default_context()
        self.address: tuple[str, int] | None = None

    async def serve(self, ready: Callable[[tuple[str, int]], None] | None = None) -> None:
        host, port = self._settings.listen_address
        server = await asyncio.start_server(
            self._handle, host, port, reuse_address=True, backlog=LISTEN_BACKLOG
        )
        self.address = server.sockets[0].getsockname()[:2]
        try:
            async with server:
                if ready is not None:
                    ready(self.address)
                await server.serve_forever()
        finally:
            for connections in self._pool.values():
                for connection in connections:
                    connection.close()

    def held(self, cloister: str) -> int:
        """The connections *cloister* holds now (counted against its limit)."""
        return self._book.held(cloister)

    def waiting(self, peer: str) -> int:
        """The connections from *peer* admitted and not yet charged to a cloister."""
        return self._book.waiting(peer)

    # -- per client connection -----------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = bytearray()
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if peername else "?"
        ticket = self._book.admit(peer)
        gone = False  # the client closed (or failed): nothing left to read
        try:
            if not isinstance(ticket, Ticket):
                # refused at once, before it costs a head: over its address's or its
                # cloister's limit
                reason = "connections" if ticket == "cloister" else "address"
                writer.write(
                    render_response(
                        429,
                        "cloister: too many connections from here\n",
                        headers=[("X-Cloister-Reason", reason)],
                    )
                )
                await writer.drain()
                return
            first = True
            while True:
                try:
                    head, buffer = await self._read_head(reader, buffer, first=first)
                except ClientGoneError:
                    gone = True
                    return
                except HttpError as error:
                    writer.write(render_response(error.status, f"cloister: {error.message}\n"))
                    await writer.drain()
                    return
                first = False
                keep = await self._serve(reader, writer, head, buffer, ticket)
                if not (keep and head.keep_alive):
                    return
        except (OSError, ClientGoneError, TimeoutError):
            gone = True
            return
        except Exception as error:  # one connection's bug must not stop the gateway
            self._report(f"internal error on a connection: {type(error).__name__}: {error}")
        finally:
            if not gone:
                await self._linger(reader, writer)
            if isinstance(ticket, Ticket):
                self._book.release(ticket)
                cloister = ticket.cloister
                if cloister is not None and self._book.held(cloister) < self._book.per_cloister:
                    self._full.discard(cloister)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Say we are done, and read what the client still sends for a moment: closing
        with unread bytes resets the connection, and the client may lose our answer (a
        refusal sent before its request was read)."""
        with contextlib.suppress(OSError, TimeoutError):
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(LINGER_SECONDS):
                while await reader.read(READ_SIZE):
                    pass

    async def _read_head(
        self, reader: asyncio.StreamReader, buffer: bytearray, *, first: bool
    ) -> tuple[RequestHead, bytearray]:
        header_timeout = self._settings.header_timeout.total_seconds()
        # A fresh connection must send its head promptly; a kept-alive one may wait
        # (idle) for its next request, then has header_timeout for the rest of it.
        wait = header_timeout if first else self._settings.idle_timeout.total_seconds()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(wait) as deadline:
                scanned = 0
                while (end := find_head_end(buffer, scanned)) < 0:
                    scanned = len(buffer)
                    data = await reader.read(READ_SIZE)
                    if not data:
                        raise ClientGoneError
                    if not buffer and not first:
                        deadline.reschedule(loop.time() + header_timeout)
                    buffer += data
        except TimeoutError:
            raise ClientGoneError from None
        return parse_request_head(bytes(buffer[:end])), buffer[end:]

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        head: RequestHead,
        buffer: bytearray,
        ticket: Ticket,
    ) -> bool:
        """One request: whether the connection may stay open."""
        started = time.monotonic()
        peer = ticket.peer
        if head.method in ("GET", "HEAD") and head.target == "/healthz":
            writer.write(render_response(200, "ok\n", close=False))
            await writer.drain()
            return True
        decision = plan(
            head,
            tokens=self._state.token,
            credentials=self._state.credential,
            api_bases=self._state.api_bases(),
            peer=peer,
        )
        if isinstance(decision, Refusal):
            await self._refuse(writer, head, decision, started, peer=peer)
            return False
        cloister = decision.record.cloister
        if not self._book.charge(ticket, cloister):
            limit = self._book.per_cloister
            if cloister not in self._full:
                self._full.add(cloister)
                self._report(f"cloister {cloister!r} holds {limit} connections, its limit")
            refusal = Refusal(
                429,
                f"cloister: this cloister holds {limit} connections to the credential"
                " gateway, its limit (max_connections_per_cloister); retry when some close",
                "connections",
                decision.record,
            )
            await self._refuse(writer, head, refusal, started, peer=peer)
            return False
        status, sent, received, keep = 0, 0, 0, False
        reason: str | None = None
        try:
            status, sent, received, keep = await self._forward(
                reader, writer, head, decision, buffer
            )
        except UpstreamRefusedError as error:
            reason = str(error)
            refusal = Refusal(502, f"cloister: {error}", "upstream", decision.record)
            await self._refuse(writer, head, refusal, started, peer=peer, audit=False)
            status = 502
        except HttpError as error:
            reason = error.message
            status = status or error.status
        finally:
            self._audit.write(
                "credentials.request",
                cloister=decision.record.cloister,
                project=decision.record.project,
                agent=decision.provider.agent,
                method=head.method,
                path=decision.path,
                credential=decision.method,
                upstream=decision.upstream.authority,
                status=status,
                reason=reason,
                bytes_up=sent,
                bytes_down=received,
                duration_ms=round((time.monotonic() - started) * 1000, 3),
                **({"dropped_headers": list(decision.dropped)} if decision.dropped else {}),
            )
        return keep

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        head: RequestHead,
        refusal: Refusal,
        started: float,
        *,
        peer: str,
        audit: bool = True,
    ) -> None:
        found = provider_of(head.target.split("?", 1)[0])
        body = refusal.body(found[0] if found else None)
        fields = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("X-Cloister-Reason", refusal.reason),
            ("Connection", "close"),
        ]
        with contextlib.suppress(OSError):
            writer.write(render_head(f"HTTP/1.1 {refusal.status} Error", fields) + body)
            await writer.drain()
        if audit:
            record = refusal.record
            self._audit.write(
                "credentials.request",
                cloister=record.cloister if record else None,
                project=record.project if record else None,
                peer=peer,
                method=head.method,
                path=head.target.split("?", 1)[0],
                status=refusal.status,
                reason=refusal.reason,
                duration_ms=round((time.monotonic() - started) * 1000, 3),
            )

    # -- upstream ---------------------------------------------------------------------------

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        head: RequestHead,
        forward: Forward,
        buffer: bytearray,
    ) -> tuple[int, int, int, bool]:
        """Relay one exchange; (status, bytes up, bytes down, client may keep alive)."""
        pool_key = (forward.record.cloister, forward.upstream.key)
        connection = await self._connection(pool_key, forward.upstream)
        reusable = False
        try:
            connection.writer.write(forward.head)
            if forward.expects_continue:
                writer.write(CONTINUE)
                await writer.drain()
            body = UpstreamBody(head.framing)
            sent = await self._send_body(reader, connection, body, buffer)
            scrubber = Scrubber(forward.secret)
            status, received, reusable = await self._relay_response(
                writer, head, connection, scrubber
            )
        except BaseException:
            connection.close()
            raise
        if reusable:
            self._give_back(pool_key, connection)
        else:
            connection.close()
        return status, sent, received, reusable

    async def _send_body(
        self,
        reader: asyncio.StreamReader,
        connection: Connection,
        body: UpstreamBody,
        buffer: bytearray,
    ) -> int:
        """The request body, as it comes (what follows it stays in *buffer*); the bytes
        sent upstream."""
        sent = 0
        data = bytes(buffer)
        buffer.clear()
        # In all, not per read: a body sent a byte at a time must not hold the
        # connection (and its upstream one) for long. Waiting on the upstream is free.
        allowed = self._settings.body_timeout.total_seconds()
        loop = asyncio.get_running_loop()
        while True:
            taken, out = body.feed(data)
            if out:
                connection.writer.write(out)
                sent += len(out)
            if body.done:
                buffer += data[taken:]
                await connection.writer.drain()
                return sent
            await connection.writer.drain()
            waited = loop.time()
            try:
                async with asyncio.timeout(allowed):
                    data = await reader.read(READ_SIZE)
            except TimeoutError:
                raise HttpError(408, "the request body did not arrive in time") from None
            allowed -= loop.time() - waited
            if not data:
                raise ClientGoneError

    async def _relay_response(
        self,
        writer: asyncio.StreamWriter,
        head: RequestHead,
        connection: Connection,
        scrubber: Scrubber,
    ) -> tuple[int, int, bool]:
        idle = self._settings.idle_timeout.total_seconds()
        pending = connection.buffer
        while True:
            scanned = 0
            while (end := find_head_end(pending, scanned)) < 0:
                scanned = len(pending)
                async with asyncio.timeout(idle):
                    data = await connection.reader.read(READ_SIZE)
                if not data:
                    raise UpstreamRefusedError("the upstream closed the connection")
                pending += data
            response = parse_response_head(bytes(pending[:end]), head.method)
            del pending[:end]
            encoding = (response.headers.get("content-encoding") or "identity").strip().lower()
            if encoding != "identity":
                # Asked for identity: a compressed answer could carry the key unmasked.
                raise UpstreamRefusedError(
                    f"the upstream answered {encoding!r}-encoded, though asked for identity"
                    " (the gateway masks the key in answers, which it cannot in a compressed one)"
                )
            close = response.status >= 200 and not (response.keep_alive and head.keep_alive)
            writer.write(scrubber.scrub(render_forward_response(response, close=close)))
            if response.status >= 200:
                break
        # A chunked answer is decoded and chunked anew, so that the key is found in its
        # data even where the vendor's chunks split it.
        chunked = response.framing.kind == "chunked"
        tracker = BodyTracker(response.framing)
        decoder = UpstreamBody(response.framing) if chunked else None
        received = 0
        data = bytes(pending)
        pending.clear()
        while True:
            if decoder is not None:
                taken, payload = decoder.feed_payload(data)
                done = decoder.done
            else:
                taken = tracker.feed(data)
                payload, done = data[:taken], tracker.done
            received += taken
            out = scrubber.feed(payload) + (scrubber.flush() if done else b"")
            writer.write(frame_chunk(out) + (LAST_CHUNK if done else b"") if chunked else out)
            await writer.drain()  # each event on its way at once (SSE)
            if done:
                connection.buffer += data[taken:]
                return response.status, received, not close and response.keep_alive
            async with asyncio.timeout(idle):
                data = await connection.reader.read(READ_SIZE)
            if not data:
                if tracker.kind == "close":
                    writer.write(scrubber.flush())
                    return response.status, received, False
                raise HttpError(502, "the upstream closed the connection mid-body")

    async def _connection(
        self, pool_key: tuple[str, tuple[str, str, int]], upstream: Upstream
    ) -> Connection:
        """A kept connection to *upstream* that is still open, or a new one."""
        pool = self._pool.get(pool_key, [])
        idle = self._settings.idle_timeout.total_seconds()
        while pool:
            connection = pool.pop()
            fresh = time.monotonic() - connection.idle_since < idle
            if fresh and not connection.reader.at_eof() and not connection.buffer:
                return connection
            connection.close()
        return await self._dial(upstream)

    def _give_back(
        self, pool_key: tuple[str, tuple[str, str, int]], connection: Connection
    ) -> None:
        pool = self._pool.setdefault(pool_key, [])
        if len(pool) >= POOL_PER_UPSTREAM:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        pool.append(connection)

    async def _dial(self, upstream: Upstream) -> Connection:
        """Resolve, check every answer with the proxy's guard, connect (TLS for https)."""
        loop = asyncio.get_running_loop()
        seconds = self._settings.connect_timeout.total_seconds()
        try:
            async with asyncio.timeout(seconds):
                try:
                    infos = await loop.getaddrinfo(
                        upstream.host, upstream.port, type=socket.SOCK_STREAM
                    )
                except socket.gaierror as error:
                    raise UpstreamRefusedError(f"cannot resolve {upstream.host}: {error}") from None
                addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
                guard = self._state.guard()
                checked = [parse_address(address.split("%", 1)[0]) for address in addresses]
                own = self._state.own_networks(ipv6=any(a.version == 6 for a in checked))
                refused = guard.first_refused(checked, own)
                if refused is not None:
                    raise UpstreamRefusedError(guard_refusal(upstream.host, refused))
                problem = "no address"
                for address in checked:
                    try:
                        reader, writer = await asyncio.open_connection(
                            str(address),
                            upstream.port,
                            ssl=self._tls if upstream.scheme == "https" else None,
                            server_hostname=upstream.host if upstream.scheme == "https" else None,
                        )
                    except OSError as error:
                        problem = error.strerror or str(error)
                        continue
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    return Connection(reader, writer)
                raise UpstreamRefusedError(f"cannot connect to {upstream.authority}: {problem}")
        except TimeoutError:
            raise UpstreamRefusedError(
                f"no connection to {upstream.authority} within {seconds:g}s"
            ) from None
