"""``create_app(settings)``: the hub's Starlette application, no module-level state."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware

from cloister_approval import api, login, openapi, service, ui
from cloister_approval.auth import HubAuth, Revocations
from cloister_approval.broadcast import Broadcaster
from cloister_approval.handlers import HANDLERS
from cloister_approval.headers import HubApp
from cloister_approval.hub import ApprovalHub
from cloister_approval.security import GuardMiddleware
from cloister_approval.settings import ApprovalSettings
from cloister_core.audit import AuditLog
from cloister_core.suffixes import PublicSuffixes


def _report(message: str) -> None:
    print(f"cloister-approval: {message}", file=sys.stderr, flush=True)


async def _watch_tokens(hub: ApprovalHub, seconds: float) -> None:
    # Requests refresh the tokens themselves; this catches a stopped cloister while
    # nobody asks, so its held items leave the open pages at once.
    while True:
        await asyncio.sleep(seconds)
        hub.refresh_tokens()


def create_app(settings: ApprovalSettings) -> Starlette:
    """The hub for *settings*: routes, guards, state. Needs a hub secret (value or file)."""
    secret = settings.secret()
    if not secret:
        raise ValueError("no hub secret: set hub_secret or hub_secret_file (not empty)")
    audit = (
        AuditLog(
            settings.audit_log,
            stream=sys.stdout if settings.audit_stdout else None,
            cloister_dir=settings.cloister_logs,
            report=_report,
        )
        if settings.audit_log or settings.audit_stdout or settings.cloister_logs
        else None
    )
    hub = ApprovalHub(
        settings.paths,
        domain_timeout=settings.domain_timeout,
        command_timeout=settings.command_timeout,
        max_pending=settings.max_pending,
        recent_limit=settings.recent_decisions,
        broadcaster=Broadcaster(),
        suffixes=PublicSuffixes(),
        audit=audit,
    )
    sessions = settings.sessions_dir
    auth = HubAuth(
        secret,
        session_lifetime=settings.session_lifetime,
        revocations=Revocations(sessions, _report) if sessions is not None else None,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hub.refresh_tokens()
        watcher = asyncio.create_task(_watch_tokens(hub, settings.reload_interval.total_seconds()))
        try:
            yield
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if audit is not None:
                audit.close()

    app = HubApp(
        routes=[*api.ROUTES, *service.ROUTES, *openapi.ROUTES, *login.ROUTES, *ui.routes()],
        middleware=[
            Middleware(
                GuardMiddleware,
                public_hosts=frozenset(settings.public_hosts),
                allowed_origins=settings.allowed_origins,
                service_credential=settings.credential(),
                auth=auth,
            )
        ],
        exception_handlers=dict(HANDLERS),
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.hub = hub
    app.state.auth = auth
    app.state.audit = audit
    app.state.renderer = ui.Renderer(ui.template_environment())
    app.state.openapi = openapi.openapi_document()
    return app
