"""``cloister-executor gateway``: the hostexec request server cloisters call (port 9998).

It sits on every cloister's own network (cloisters reach it) and the control network (it reaches the
approval hub), and it has the executor's socket directory mounted. For each
``POST /request`` (header ``X-Cloister-Token``, body ``{"args": [...]}``):

1. the token identifies the cloister (a ``cmd`` field, if sent, is never used);
2. argv is checked (not empty, no NUL, a bounded body) and rendered canonically;
3. ``auto_approve`` runs it, ``manual_approve`` asks the hub and waits (unless a human
   approved the exact command for the cloister's session), anything else is ``denied``
   with the reason;
4. the executor runs it in the cloister's own host directory and the answer is
   ``{status, exit_code, stdout, stderr, reason, stdout_truncated, stderr_truncated}``.

While a command waits for a human the gateway watches its client: when the client
closes its connection, the question to the hub is cancelled (its HTTP request closed,
so the hub withdraws the item from the UI) and the command never runs (audit decision
``client-gone``).

Audit lines: request, decision, completion (exit code, duration).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import SettingsConfigDict
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from cloister_core.audit import AuditLog
from cloister_core.commands import CommandVerdict
from cloister_core.config.models import Duration
from cloister_core.errors import InvalidCommandError
from cloister_core.gitargv import UnsafeGitCommandError, check_git_argv, is_git_program
from cloister_core.hub import (
    SERVICE_AUTH_SCHEME,
    SERVICE_COMMANDS_PATH,
    CommandDecision,
    CommandRequest,
)
from cloister_core.settings import AuditSettings, HubClientSettings, Port
from cloister_core.stack import HOSTEXEC_PORT
from cloister_core.tokens import TokenRecord
from cloister_core.watch import PolicyBook, SessionBook, TokenDirectory
from cloister_executor.client import ExecutorClient, ExecutorUnavailableError
from cloister_executor.limits import PerAddressLimit
from cloister_executor.protocol import ExecRefusal

Status = Literal["auto_approved", "approved", "denied", "timeout", "error"]
REFRESH_SECONDS = 0.5
T = TypeVar("T")
# Returns when the client has closed its connection (ASGI ``http.disconnect``).
Gone = Callable[[], Coroutine[Any, Any, None]]
CLIENT_GONE = "client-gone"  # the audit status of a command whose client went away


class GatewaySettings(AuditSettings, HubClientSettings):
    """Settings of ``cloister-executor gateway``."""

    model_config = SettingsConfigDict(
        env_prefix="CLOISTER_GATEWAY_", cli_prog_name="cloister-executor gateway"
    )

    host: str = Field(default="0.0.0.0", description="address to listen on")  # noqa: S104
    port: Port = Field(default=HOSTEXEC_PORT, description="port to listen on")
    executor: str = Field(
        default="unix:/run/cloister/executor.sock", description="unix:PATH or tcp:HOST:PORT"
    )
    executor_secret_file: Path = Field(
        default=Path("/run/cloister/executor.secret"), description="the executor's secret"
    )
    approval_timeout: Duration = Field(
        default=timedelta(minutes=5), description="how long a manual command waits for a human"
    )
    max_body: int = Field(default=64 * 1024, ge=1024, description="largest request body accepted")
    max_requests_per_address: int = Field(
        default=16, ge=1, description="requests in flight at once from one address (429 beyond)"
    )


class HostexecIn(BaseModel):
    """The body ``hostexec`` sends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    args: list[str]
    cmd: str | None = None  # informational only; the decision is made on args


class HostexecOut(BaseModel):
    """The answer. Output is kept as bytes and rendered per the client's ``Accept``."""

    status: Status
    exit_code: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        """JSON for scripts: output as text (invalid UTF-8 replaced)."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "stdout": self.stdout.decode("utf-8", "replace"),
            "stderr": self.stderr.decode("utf-8", "replace"),
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "reason": self.reason,
        }

    def as_lines(self) -> str:
        """``text/x-hostexec`` for the bash client: ``key value`` lines, bytes exact.

        Values that may hold anything (output, reason) are base64, so a shell reads
        every field with ``read`` and decodes output with ``base64 -d``: no JSON parser
        in the cloister, and NUL bytes and binary output arrive unchanged.
        """
        b64 = base64.b64encode
        return (
            f"status {self.status}\n"
            f"exit_code {1 if self.exit_code is None else self.exit_code}\n"
            f"stdout_truncated {str(self.stdout_truncated).lower()}\n"
            f"stderr_truncated {str(self.stderr_truncated).lower()}\n"
            f"reason {b64((self.reason or '').encode()).decode()}\n"
            f"stdout {b64(self.stdout).decode()}\n"
            f"stderr {b64(self.stderr).decode()}\n"
        )


LINES_TYPE = "text/x-hostexec"


def _refused_by_hub(response: httpx.Response) -> str:
    """The hub's reason for refusing to hold a command (its JSON ``error``)."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    problem = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(problem, str):
        problem = response.text[:200]
    return f"not asked: the approval hub refused to hold it ({problem})"


class ClientGoneError(Exception):
    """The client closed its connection while its command waited for a human."""


async def _captured(work: Awaitable[T]) -> T | Exception:
    # In a task group an exception would cancel the sibling and come out as a group.
    try:
        return await work
    except Exception as error:
        return error


async def _while_connected(gone: Gone, work: Awaitable[T]) -> T:
    """*work*'s result; :class:`ClientGoneError` (and *work* cancelled) if the client goes.

    A client that went as the answer came counts as gone: nothing runs for nobody.
    """
    async with asyncio.TaskGroup() as group:
        doing = group.create_task(_captured(work))
        watching = group.create_task(gone())
        await asyncio.wait((doing, watching), return_when=asyncio.FIRST_COMPLETED)
        doing.cancel()
        watching.cancel()
    if not watching.cancelled() or doing.cancelled():
        raise ClientGoneError
    result = doing.result()
    if isinstance(result, Exception):
        raise result
    return result


def answer(out: HostexecOut, status_code: int = 200, *, lines: bool = False) -> Response:
    if lines:
        return PlainTextResponse(out.as_lines(), status_code=status_code, media_type=LINES_TYPE)
    return JSONResponse(out.as_json(), status_code=status_code)


class Gateway:
    """Tokens, policies, the hub and the executor, as one request handler."""

    def __init__(
        self,
        settings: GatewaySettings,
        executor: ExecutorClient,
        hub: httpx.AsyncClient | None,
        audit: AuditLog,
    ) -> None:
        self._settings = settings
        self._executor = executor
        self._hub = hub
        self._audit = audit
        self._tokens = TokenDirectory(settings.paths.tokens_dir, self._report)
        self._policies = PolicyBook(settings.paths, self._report)
        self._sessions = SessionBook(settings.paths, self._report)
        self._refreshed = 0.0
        self._credential = settings.credential()

    def _log(self, event: str, who: dict[str, Any], **fields: Any) -> None:
        ids = {key: value for key, value in who.items() if key != "started"}
        if event == "hostexec.complete":
            fields["duration_ms"] = round((time.monotonic() - who["started"]) * 1000, 3)
        self._audit.write(event, **ids, **fields)

    @staticmethod
    def _report(message: str) -> None:
        print(f"cloister-gateway: {message}", file=sys.stderr, flush=True)

    def _refresh(self) -> None:
        # Lazily, at most twice a second: a request never waits for a poll loop.
        now = time.monotonic()
        if now - self._refreshed >= REFRESH_SECONDS:
            self._refreshed = now
            self._tokens.refresh()
            self._policies.refresh()

    def authenticate(self, token: str | None) -> TokenRecord | None:
        self._refresh()
        return self._tokens.lookup(token) if token else None

    def refuse_elsewhere(self, record: TokenRecord, peer: str | None) -> None:
        """Say (report and audit) that *record*'s token came from another address."""
        self._report(
            f"refused the token of cloister {record.cloister!r} from {peer}"
            f" (its cloister is at {record.address})"
        )
        self._audit.write("hostexec.refused", peer=peer, reason="token-address")

    async def handle(self, record: TokenRecord, request: HostexecIn, gone: Gone) -> HostexecOut:
        """Decide and run *request*; :class:`ClientGoneError` if *gone* returns first
        while a human is asked (then nothing runs)."""
        policy = self._policies.get(record.project)
        # One id ties a request's audit lines together when requests overlap.
        who: dict[str, Any] = {
            "id": secrets.token_hex(6),
            "cloister": record.cloister,
            "project": record.project,
            "started": time.monotonic(),
        }
        if policy is None:
            problem = self._policies.error(record.project) or "unknown"
            return HostexecOut(status="error", reason=f"configuration error: {problem}")
        verdict = policy.commands.decide(request.args)  # InvalidCommandError: the caller's 400
        if verdict.action == "manual_approve":
            # A human approved this exact command for the session (the session file).
            in_session = self._sessions.get(record.cloister).commands.decide(request.args)
            if in_session.action == "auto_approve":
                verdict = in_session
        self._log("hostexec.request", who, argv=request.args, command=verdict.command)
        refused = _unsafe_git(request.args)
        if refused is not None:  # before a human is asked: the executor refuses it anyway
            self._log(
                "hostexec.decision", who, command=verdict.command, status="denied", reason=refused
            )
            return HostexecOut(status="denied", reason=refused)
        status: Status
        if verdict.action == "auto_approve":
            status = "auto_approved"
        elif verdict.action == "manual_approve":
            try:
                decided = await self._ask_human(record, request.args, verdict, gone)
            except ClientGoneError:
                self._log(
                    "hostexec.decision",
                    who,
                    command=verdict.command,
                    status=CLIENT_GONE,
                    reason="the client closed the connection while waiting for approval",
                )
                raise
            if decided.action != "approve":
                status = "timeout" if decided.action == "timeout" else "denied"
                reason = decided.reason or (
                    "nobody approved it in time" if status == "timeout" else "denied by a human"
                )
                self._log(
                    "hostexec.decision", who, command=verdict.command, status=status, reason=reason
                )
                return HostexecOut(status=status, reason=reason)
            status = "approved"
        else:
            self._log(
                "hostexec.decision",
                who,
                command=verdict.command,
                status="denied",
                reason=verdict.reason,
            )
            where = policy.where_to_write("hostexec.auto_approve", self._settings.host_config_dir)
            return HostexecOut(
                status="denied",
                reason=f"`{verdict.command}` {verdict.reason}; to allow it, add a pattern"
                f" (a regular expression of the whole command) to {where}, or to"
                " hostexec.manual_approve there to be asked each time",
            )
        pattern = verdict.rule.pattern.pattern if verdict.rule else None
        self._log("hostexec.decision", who, command=verdict.command, status=status, pattern=pattern)
        return await self._execute(
            record, request.args, policy.config.hostexec.timeout, who, status
        )

    async def _ask_human(
        self, record: TokenRecord, argv: list[str], verdict: CommandVerdict, gone: Gone
    ) -> CommandDecision:
        if self._hub is None or not self._settings.approval_url:
            return CommandDecision(action="deny", reason="no approval hub is configured")
        wait = self._settings.approval_timeout.total_seconds()
        request = CommandRequest(
            cloister=record.cloister,
            project=record.project,
            argv=tuple(argv),
            command=verdict.command,
            cwd=record.path,
            wait_seconds=wait,
        )
        headers = {"Authorization": f"{SERVICE_AUTH_SCHEME} {self._credential}"}
        try:
            # Cancelled when the client goes: httpx closes the connection, and the hub
            # withdraws the item when its request goes away.
            response = await _while_connected(
                gone,
                self._hub.post(
                    self._settings.approval_url.rstrip("/") + SERVICE_COMMANDS_PATH,
                    json=request.model_dump(mode="json"),
                    headers=headers,
                    timeout=httpx.Timeout(wait + 5.0, connect=5.0),
                ),
            )
            if response.status_code == 429:
                # This cloister's fair share of the approval UI is used up: say so.
                return CommandDecision(action="deny", reason=_refused_by_hub(response))
            response.raise_for_status()
            return CommandDecision.model_validate_json(response.content)
        except (httpx.HTTPError, ValidationError) as error:
            return CommandDecision(
                action="deny", reason=f"the approval hub could not be asked: {error}"
            )

    async def _execute(
        self,
        record: TokenRecord,
        argv: list[str],
        limit: timedelta,
        who: dict[str, Any],
        status: Status,
    ) -> HostexecOut:
        started = time.monotonic()
        try:
            result = await self._executor.run(record.secret, argv, limit.total_seconds())
        except ExecutorUnavailableError as error:
            self._log("hostexec.complete", who, status="error", reason=str(error))
            return HostexecOut(
                status="error",
                reason=f"host executor unavailable: {error}; on the host,"
                " `cloister guardian start` starts it again",
            )
        if isinstance(result, ExecRefusal):
            self._log("hostexec.complete", who, status="error", reason=result.reason)
            return HostexecOut(status="error", reason=f"host executor refused: {result.reason}")
        self._log(
            "hostexec.complete",
            who,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            stdout_truncated=result.stdout_truncated,
            stderr_truncated=result.stderr_truncated,
            executor_ms=round((time.monotonic() - started) * 1000, 3),
        )
        return HostexecOut(
            status=status,
            exit_code=result.exit_code,
            stdout=result.stdout,
            stderr=result.stderr,
            stdout_truncated=result.stdout_truncated,
            stderr_truncated=result.stderr_truncated,
            reason="timed out and killed" if result.timed_out else None,
        )


def _unsafe_git(argv: list[str]) -> str | None:
    """Why a git argv is refused whatever the patterns say (:mod:`cloister_core.gitargv`)."""
    if not is_git_program(argv[0]):
        return None
    try:
        check_git_argv(argv)
    except UnsafeGitCommandError as error:
        return str(error)
    return None


# Never sent (the client has gone): the status a log of the exchange would show.
GONE = Response(status_code=499)


async def _disconnected(request: Request) -> None:
    """Return when the client's connection closes (ASGI ``http.disconnect``).

    Called once the body is read, so the next message is the disconnect.
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def request_endpoint(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    settings: GatewaySettings = request.app.state.settings
    lines = LINES_TYPE in request.headers.get("accept", "")
    record = gateway.authenticate(request.headers.get("x-cloister-token"))
    if record is None:
        return answer(
            HostexecOut(status="error", reason="missing or unknown X-Cloister-Token"),
            401,
            lines=lines,
        )
    peer = request.client.host if request.client else None
    if not record.accepts_from(peer):
        gateway.refuse_elsewhere(record, peer)
        return answer(
            HostexecOut(
                status="error",
                reason="this token belongs to another cloister; use your own ($CLOISTER_TOKEN)",
            ),
            401,
            lines=lines,
        )
    body = await request.body()
    if len(body) > settings.max_body:
        return answer(
            HostexecOut(status="error", reason=f"request body over {settings.max_body} bytes"),
            413,
            lines=lines,
        )
    try:
        parsed = HostexecIn.model_validate_json(body)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, item['loc'])) or 'body'}: {item['msg']}" for item in error.errors()
        )
        return answer(
            HostexecOut(status="error", reason=f"invalid request: {problems}"), 400, lines=lines
        )
    try:
        out = await gateway.handle(record, parsed, lambda: _disconnected(request))
    except InvalidCommandError as error:
        return answer(HostexecOut(status="error", reason=str(error)), 400, lines=lines)
    except ClientGoneError:
        return GONE
    return answer(out, lines=lines)


async def health(request: Request) -> Response:
    del request
    return JSONResponse({"status": "ok"})


def create_app(settings: GatewaySettings) -> Starlette:
    audit = AuditLog(
        settings.audit_log,
        stream=sys.stdout if settings.audit_stdout else None,
        cloister_dir=settings.cloister_logs,
        report=Gateway._report,
    )
    executor = ExecutorClient(settings.executor, settings.executor_secret_file)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # No pool limit: every held command keeps its own connection to the hub, and
        # the hub caps each cloister's share (proxy.max_held_per_cloister).
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=16)
        async with httpx.AsyncClient(limits=limits) as hub:
            app.state.gateway = Gateway(settings, executor, hub, audit)
            # The CLI waits for this line before it calls the stack ready.
            Gateway._report(f"listening on {settings.host}:{settings.port}")
            try:
                yield
            finally:
                audit.close()

    app = Starlette(
        routes=[
            Route("/request", request_endpoint, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ],
        lifespan=lifespan,
        middleware=[Middleware(PerAddressLimit, limit=settings.max_requests_per_address)],
    )
    app.state.settings = settings
    return app


def main(argv: list[str]) -> int:
    settings = GatewaySettings(_cli_parse_args=argv)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        timeout_graceful_shutdown=2,
        proxy_headers=False,  # cloisters talk to it directly: no proxy's headers to trust
        server_header=False,
    )
    return 0
