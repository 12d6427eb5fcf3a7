"""Who may talk to the hub: the human's browser and CLI, and the stack's services.

Two audiences, two rules, enforced before any route runs (pure ASGI middleware):

* **Service routes** (``/api/v1/service/...``): the proxy and the hostexec gateway on
  the control network. They must present the stack's credential
  (``Authorization: Bearer``, compared in constant time); their Host is whatever name
  the network gives the hub.
* **Everything else** (UI and API): the human, on ``127.0.0.1``. The ``Host`` header
  must be one of ``public_hosts``, so a DNS-rebinding page (``evil.example`` resolving
  to 127.0.0.1) is refused even though it reaches the port. State-changing requests
  whose ``Origin`` (or ``Sec-Fetch-Site``) says another site sent them are refused:
  no CSRF from a browser tab. No CORS headers are ever sent, so other origins cannot
  read anything either. Before all that, the request must be the human's
  (:class:`~cloister_approval.auth.HubAuth`: the hub secret or a browser session
  token, in ``Authorization``; cookies are ignored), or it is a 401: the login page
  for a page, JSON for the API. Open: the page's shell (``/``, ``/login`` and
  ``/static/``, which hold no data: the page fetches everything with its token),
  ``GET /api/v1/health`` (the stack's readiness check) and ``POST /api/v1/login``
  (which checks its own ticket). Any local process, any other user of the machine and
  any container on the control network reaches the port; none of them has the secret.

The credential that was accepted (``cli`` or ``browser:<session id>``) is handed to
the routes in the scope (:func:`credential`), so decisions can say who made them.
"""

from __future__ import annotations

import hmac
import json

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from cloister_approval.auth import HubAuth, Refused
from cloister_approval.login import LOGIN_API_PATH, NOT_LOGGED_IN, login_page
from cloister_core.hubauth import AUTH_SCHEME, HEALTH_PATH, LOGIN_PATH, PROOF_PATH

SERVICE_PREFIX = "/api/v1/service/"
STATIC_PREFIX = "/static/"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_ROUTES = frozenset(
    {
        (method, path)
        for method in ("GET", "HEAD")
        for path in ("/", LOGIN_PATH, HEALTH_PATH, PROOF_PATH)
    }
    | {("POST", LOGIN_API_PATH)}
)
API_NOT_LOGGED_IN = (
    "not logged in: send the hub secret (Authorization: Bearer <secret>, the file"
    " <data>/guardian/hub.secret), or log the browser in with `cloister guardian open`"
)
CREDENTIAL_KEY = "cloister.credential"
REFUSED_KEY = "cloister.refused"  # why: the 401's detail (the page shows it)


def credential(request: Request) -> str:
    """Who the guard let in: ``cli`` or ``browser:<session id>``."""
    value: str = request.scope[CREDENTIAL_KEY]
    return value


def is_open(method: str, path: str) -> bool:
    """A route anyone may ask for: the page's shell, health, the ticket exchange."""
    return (method, path) in OPEN_ROUTES or (
        method in ("GET", "HEAD") and path.startswith(STATIC_PREFIX)
    )


Refusal = tuple[int, str]  # status, message


def _headers(scope: Scope) -> dict[str, str]:
    return {
        key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]
    }


async def _refuse(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", f'{AUTH_SCHEME} realm="cloister-hub"'.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """Host, Origin, human and service-credential checks for every HTTP request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        public_hosts: frozenset[str],
        allowed_origins: frozenset[str],
        service_credential: str | None,
        auth: HubAuth,
    ) -> None:
        self.app = app
        self.public_hosts = public_hosts
        self.allowed_origins = allowed_origins
        self.service_credential = service_credential
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        problem = self._problem(scope, headers)
        if problem is None:
            await self.app(scope, receive, send)
        elif problem[0] == 401 and not scope["path"].startswith("/api/"):
            await _refuse(send, 401, login_page(problem[1]), b"text/html; charset=utf-8")
        else:
            document: dict[str, str] = {"error": problem[1]}
            if REFUSED_KEY in scope:
                document["detail"] = scope[REFUSED_KEY]
            await _refuse(send, problem[0], json.dumps(document).encode(), b"application/json")

    def _problem(self, scope: Scope, headers: dict[str, str]) -> Refusal | None:
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith(SERVICE_PREFIX):
            return self._service_problem(headers)
        # Who first: without the secret, every name the hub is reached by gets the 401.
        if not is_open(method, path):
            who = self.auth.authenticate(headers)
            if isinstance(who, Refused):
                scope[REFUSED_KEY] = who.reason
                return 401, API_NOT_LOGGED_IN if path.startswith("/api/") else NOT_LOGGED_IN
            scope[CREDENTIAL_KEY] = who
        host = headers.get("host", "").lower()
        if host not in self.public_hosts:
            expected = ", ".join(sorted(self.public_hosts))
            return 403, f"host {host!r} is not this hub's address (expected one of {expected})"
        if method not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None and origin.lower() not in self.allowed_origins:
                return 403, f"cross-origin request from {origin!r} refused"
            if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
                return 403, "cross-site request refused"
        return None

    def _service_problem(self, headers: dict[str, str]) -> Refusal | None:
        if self.service_credential is None:
            return 403, "the service API is disabled (no service credential configured)"
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        expected = self.service_credential.encode()
        if scheme.lower() != AUTH_SCHEME.lower() or not hmac.compare_digest(
            presented.strip().encode(), expected
        ):
            return 401, "service credential missing or wrong"
        return None
