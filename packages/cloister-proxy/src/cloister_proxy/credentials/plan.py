"""What the credential gateway does with one request, sans I/O: head in, decision out.

A request arrives in origin form on the gateway (``POST /claude/v1/messages``): the
path's first segment names the agent (:data:`cloister_core.credentials.PROVIDERS`),
the key the agent sent is its cloister token. :func:`plan` turns that into a
:class:`Forward` (the upstream URL and the request head to send, the real credential
in place of the token) or a :class:`Refusal` (status and the vendor-shaped JSON error
an SDK shows to its user). Only the calls of :data:`~cloister_proxy.credentials.calls.CALLS`
are forwarded, and of their headers only those of
:data:`~cloister_proxy.credentials.headers.FORWARDED`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from cloister_core.credentials import (
    PROVIDERS,
    Provider,
    StoredCredential,
    client_token,
    provider_of,
)
from cloister_core.tokens import TokenRecord
from cloister_proxy.credentials.calls import check
from cloister_proxy.credentials.headers import forwarded
from cloister_proxy.http1 import RequestHead, render_head


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a provider's calls go: ``https://api.anthropic.com`` and a base path."""

    scheme: str  # "http" or "https"
    host: str
    port: int
    base_path: str  # "" or "/proxy/v1" (without the trailing slash)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


@dataclass(frozen=True, slots=True)
class Forward:
    """Send *head* to *upstream* and relay the answer."""

    provider: Provider
    record: TokenRecord
    method: str  # the credential's method, for the audit line
    upstream: Upstream
    head: bytes  # the request head as sent upstream
    path: str  # the path after the agent's prefix (audited; no query string)
    dropped: tuple[str, ...]  # the client's headers not forwarded (audited)
    expects_continue: bool  # answer the client's Expect: 100-continue before its body
    secret: bytes = field(repr=False)  # what was sent upstream: scrubbed from the answer


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str
    reason: str  # for the audit line: "no-agent", "token", "not-set-up", ...
    record: TokenRecord | None = None

    def body(self, provider: Provider | None) -> bytes:
        """The error as the vendor's SDK expects it (so the agent shows the message)."""
        agent = provider.agent if provider is not None else None
        document: object
        if agent == "claude":
            kind = _ANTHROPIC_TYPES.get(self.status, "api_error")
            document = {"type": "error", "error": {"type": kind, "message": self.message}}
        elif agent == "gemini":
            status = _GOOGLE_STATUSES.get(self.status, "UNKNOWN")
            document = {"error": {"code": self.status, "message": self.message, "status": status}}
        elif agent == "codex":
            kind = "invalid_request_error" if self.status < 500 else "server_error"
            document = {
                "error": {"message": self.message, "type": kind, "param": None, "code": self.reason}
            }
        else:
            document = {
                "error": {"code": self.status, "message": self.message, "type": self.reason}
            }
        return json.dumps(document).encode("utf-8")


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    429: "rate_limit_error",
}
_GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "PERMISSION_DENIED",
    429: "RESOURCE_EXHAUSTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}

TokenLookup = Callable[[str], TokenRecord | None]
CredentialLookup = Callable[[str], StoredCredential | None]


def plan(
    head: RequestHead,
    *,
    tokens: TokenLookup,
    credentials: CredentialLookup,
    api_bases: Mapping[str, str | None],
    peer: str | None,
) -> Forward | Refusal:
    """Decide one request from *peer*. *api_bases*: ``agents.<name>.api_base`` (None:
    the vendor's)."""
    path_only = head.target.split("?", 1)[0]
    query = head.target[len(path_only) :]
    found = provider_of(path_only)
    if found is None:
        known = ", ".join(provider.prefix for provider in PROVIDERS.values())
        return Refusal(404, f"cloister: no agent at {head.target!r} (one of {known})", "no-agent")
    provider, rest = found
    lowered = {name.lower(): value for name, value in head.headers.fields}
    token = client_token(provider, lowered)
    record = tokens(token) if token else None
    if record is None:
        return Refusal(401, "cloister: the key is not a cloister's token", "token")
    if not record.accepts_from(peer):
        # another cloister's token: refused, and never audited as that cloister
        return Refusal(401, "cloister: this token belongs to another cloister", "token-address")
    refused = check(provider.agent, head.method, rest + query, lowered)
    if refused is not None:
        return Refusal(
            405 if refused.by == "method" else 403,
            f"cloister: {refused.message}: the credential gateway forwards only the"
            f" {provider.agent} CLI's model calls",
            refused.by,
            record,
        )
    if head.method == "GET" and head.framing.kind != "none":
        return Refusal(400, f"cloister: a {head.method} with a body", "body", record)
    credential = credentials(provider.agent)
    if credential is None or credential.secret is None:
        return Refusal(
            503,
            f"cloister: no credential for {provider.agent} on this machine: run `cloister"
            f" setup {provider.agent}` (api-key or oauth-token)",
            "not-set-up",
            record,
        )
    upstream = Upstream.parse(api_bases.get(provider.agent) or provider.default_api_base)
    secret = credential.secret.get_secret_value()
    kept, dropped = forwarded(provider.agent, head.headers)
    fields = [
        ("Host", upstream.authority),
        *kept,
        *_framing(head),  # as parsed here, whatever spelling the client used
        ("Accept-Encoding", "identity"),  # the key is masked in the answer: not in gzip
        *provider.upstream_headers(credential.method, secret),
    ]
    request = render_head(f"{head.method} {upstream.base_path}{rest}{query} HTTP/1.1", fields)
    return Forward(
        provider,
        record,
        credential.method,
        upstream,
        request,
        rest,
        dropped,
        _expects_continue(head),
        secret.encode(),
    )


def _framing(head: RequestHead) -> list[tuple[str, str]]:
    if head.framing.kind == "chunked":
        return [("Transfer-Encoding", "chunked")]
    if head.framing.kind == "length":
        return [("Content-Length", str(head.framing.length))]
    return [("Content-Length", "0")] if head.method == "POST" else []


def _expects_continue(head: RequestHead) -> bool:
    """Whether the client waits for a ``100 Continue`` before it sends its body: the
    gateway answers it itself (it reads the body before the upstream's answer)."""
    values = [value.strip().lower() for value in head.headers.get_all("expect")]
    return head.framing.kind != "none" and values == ["100-continue"]
