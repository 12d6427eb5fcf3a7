"""What the credential gateway does with one request, sans I/O: head in, decision out.

A request arrives in origin form on the gateway (``POST /claude/v1/messages``): the
path's first segment names the agent (:data:`cloister_core.credentials.PROVIDERS`),
the key the agent sent is its cloister token. :func:`plan` turns that into a
:class:`Forward` (the upstream URL and the request head to send, the real credential
in place of the token) or a :class:`Refusal` (status and the vendor-shaped JSON error
an SDK shows to its user).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from cloister_core.credentials import (
    PROVIDERS,
    Provider,
    StoredCredential,
    client_token,
    provider_of,
)
from cloister_core.tokens import TokenRecord
from cloister_proxy.http1 import FRAMING_FIELDS, RequestHead, render_head


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


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str
    reason: str  # for the audit line: "no-agent", "token", "not-set-up", ...
    record: TokenRecord | None = None

    def body(self, provider: Provider | None) -> bytes:
        """The error as the vendor's SDK expects it (so the agent shows the message)."""
        if provider is not None and provider.agent == "claude":
            document: object = {
                "type": "error",
                "error": {"type": _anthropic_type(self.status), "message": self.message},
            }
        else:
            document = {
                "error": {"code": self.status, "message": self.message, "type": self.reason}
            }
        return json.dumps(document).encode("utf-8")


def _anthropic_type(status: int) -> str:
    return {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}.get(
        status, "api_error"
    )


METHODS = frozenset({"GET", "HEAD", "POST", "DELETE"})  # not TRACE (echoes the key), CONNECT…
# Dot segments, empty segments and backslashes, raw or percent-encoded (also an encoded
# slash): a path that could climb out of api_base's own path on the way upstream.
_UNSAFE_PATH = re.compile(r"(^|/)(\.|%2e){1,2}(/|$)|//|\\|%2f|%5c", re.IGNORECASE)

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
    if head.method not in METHODS:
        return Refusal(405, f"cloister: {head.method} is not forwarded", "method", record)
    if head.method in ("GET", "HEAD") and head.framing.kind != "none":
        return Refusal(400, f"cloister: a {head.method} with a body", "body", record)
    if _UNSAFE_PATH.search(path_only) or not provider.paths.fullmatch(rest):
        return Refusal(
            403,
            f"cloister: {rest!r} is not part of the {provider.agent} model API that the"
            " credential gateway forwards",
            "path",
            record,
        )
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
    dropped = {"host", *provider.token_headers, "x-api-key", "authorization", *FRAMING_FIELDS}
    fields = [
        ("Host", upstream.authority),
        *head.headers.without_hop_by_hop(also=dropped),
        *_framing(head),  # as parsed here, whatever spelling the client used
        *provider.upstream_headers(credential.method, credential.secret.get_secret_value()),
    ]
    request = render_head(f"{head.method} {upstream.base_path}{rest}{query} HTTP/1.1", fields)
    return Forward(provider, record, credential.method, upstream, request, rest)


def _framing(head: RequestHead) -> list[tuple[str, str]]:
    if head.framing.kind == "chunked":
        return [("Transfer-Encoding", "chunked")]
    if head.framing.kind == "length":
        return [("Content-Length", str(head.framing.length))]
    return [("Content-Length", "0")] if head.method in ("POST", "DELETE") else []
