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
  read anything either. Requests without ``Origin`` (curl, the CLI) are not browsers'
  cross-site requests and are allowed.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

SERVICE_PREFIX = "/api/v1/service/"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _headers(scope: Scope) -> dict[str, str]:
    return {
        key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]
    }


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """Host, Origin and service-credential checks for every HTTP request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        public_hosts: frozenset[str],
        allowed_origins: frozenset[str],
        service_credential: str | None,
    ) -> None:
        self.app = app
        self.public_hosts = public_hosts
        self.allowed_origins = allowed_origins
        self.service_credential = service_credential

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        problem = self._problem(scope, headers)
        if problem is not None:
            await _refuse(send, *problem)
            return
        await self.app(scope, receive, send)

    def _problem(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        path: str = scope["path"]
        if path.startswith(SERVICE_PREFIX):
            return self._service_problem(headers)
        host = headers.get("host", "").lower()
        if host not in self.public_hosts:
            expected = ", ".join(sorted(self.public_hosts))
            return 403, f"host {host!r} is not this hub's address (expected one of {expected})"
        if scope["method"] in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self.allowed_origins:
            return 403, f"cross-origin request from {origin!r} refused"
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return 403, "cross-site request refused"
        return None

    def _service_problem(self, headers: dict[str, str]) -> tuple[int, str] | None:
        if self.service_credential is None:
            return 403, "the service API is disabled (no service credential configured)"
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        expected = self.service_credential.encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            presented.strip().encode(), expected
        ):
            return 401, "service credential missing or wrong"
        return None
