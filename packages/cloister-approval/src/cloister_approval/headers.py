"""Headers every response carries, errors and refusals included: no framing, no sniffing.

The UI's clicks are same-origin POSTs, so a page that could frame it could have the
human click for it: ``X-Frame-Options: DENY`` and ``frame-ancestors 'none'`` forbid
framing. ``default-src 'self'`` allows only the hub's own files (the page has no
inline script or style, and no other origin). ``Referrer-Policy: no-referrer`` keeps
a login URL out of any ``Referer``.

Applied outermost (:class:`HubApp`), around Starlette's own error middleware, so a
500 carries them too.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self';"
    " object-src 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HubApp(Starlette):
    """Starlette, with :class:`SecurityHeadersMiddleware` outside everything else."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeadersMiddleware(super().build_middleware_stack())
