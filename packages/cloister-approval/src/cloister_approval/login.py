"""The browser's login: a one-time link's ticket becomes a browser session token.

``cloister guardian open`` makes the link, ``/login?ticket=…``
(:mod:`cloister_core.hubauth`). ``GET /login`` is the page's shell (no data, open to
anyone); its script takes the ticket out of the address bar and the history, trades it
with ``POST /api/v1/login`` (same-origin, JSON) for a session token
(:class:`~cloister_approval.auth.HubAuth`), keeps the token in the hub origin's
``localStorage`` (bound to scheme, host and port: a page on another port of the same
host can neither read nor replace it) and goes on to ``/``. A bad, expired or used
ticket is a 401 whose message the page shows with the login instructions; so is a
page without a valid token.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cloister_approval.auth import HubAuth
from cloister_approval.http import error_response, json_response, read_model
from cloister_approval.models import LoginIn, SessionOut
from cloister_core.audit import AuditLog
from cloister_core.hubauth import TicketError

LOGIN_API_PATH = "/api/v1/login"
NOT_LOGGED_IN = "This browser is not logged in to the approval hub."
LOGIN_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Log in: Cloister approvals</title>
</head>
<body>
  <h1>Cloister approvals</h1>
  <p>{reason}</p>
{instructions}</body>
</html>
"""


def login_instructions() -> str:
    """How to log in (HTML): the 401 page's, and the UI page's when it has no valid token."""
    return (files("cloister_approval") / "templates" / "_login.html").read_text(encoding="utf-8")


def login_page(reason: str) -> bytes:
    return LOGIN_PAGE.format(reason=html.escape(reason), instructions=login_instructions()).encode()


async def log_in(request: Request) -> Response:
    auth: HubAuth = request.app.state.auth
    session = auth.log_in((await read_model(request, LoginIn)).ticket)
    audit: AuditLog | None = request.app.state.audit
    if audit is not None:
        audit.write("approval.browser.login", session=session.credential, expiry=session.expiry)
    out = SessionOut(
        token=session.token,
        session=session.credential,
        expires_at=datetime.fromtimestamp(session.expiry, UTC),
    )
    response = json_response(out)
    response.headers["Cache-Control"] = "no-store"
    return response


async def bad_ticket(request: Request, error: Exception) -> Response:
    """The exception handler for :class:`TicketError`: a 401 that says why."""
    reason = str(error) if isinstance(error, TicketError) else NOT_LOGGED_IN
    response = error_response(reason, 401)
    response.headers["Cache-Control"] = "no-store"
    return response


ROUTES = [Route(LOGIN_API_PATH, log_in, methods=["POST"])]
