"""``create_app(settings)``: the hub's Starlette application, no module-level state."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware

from cloister_approval import api, openapi, service, ui
from cloister_approval.broadcast import Broadcaster
from cloister_approval.hub import ApprovalHub
from cloister_approval.security import GuardMiddleware
from cloister_approval.settings import ApprovalSettings
from cloister_core.audit import AuditLog
from cloister_core.suffixes import PublicSuffixes


def create_app(settings: ApprovalSettings) -> Starlette:
    """The hub for *settings*: routes, the Host/Origin/credential guard, state."""
    audit = (
        AuditLog(settings.audit_log, stream=sys.stdout if settings.audit_stdout else None)
        if settings.audit_log or settings.audit_stdout
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

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for problem in hub.load_tokens():
            print(f"cloister-approval: ignoring token file: {problem}", file=sys.stderr)
        try:
            yield
        finally:
            if audit is not None:
                audit.close()

    app = Starlette(
        routes=[*api.ROUTES, *service.ROUTES, *openapi.ROUTES, *ui.routes()],
        middleware=[
            Middleware(
                GuardMiddleware,
                public_hosts=frozenset(settings.public_hosts),
                allowed_origins=settings.allowed_origins,
                service_credential=settings.credential(),
            )
        ],
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.hub = hub
    app.state.renderer = ui.Renderer(ui.template_environment())
    app.state.openapi = openapi.openapi_document()
    return app
