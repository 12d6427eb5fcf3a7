"""The approval hub's human credential: the hub secret and one-time login tickets.

The hub answers only its human. ``cloister guardian start`` writes the hub secret
(32 random bytes, hex) to ``<data>/guardian/hub.secret`` (0600); the hub reads it from
a read-only mount. The CLI sends it on every call as ``Authorization: Bearer
<secret>``. A browser gets in through a one-time login URL (``cloister guardian
open``)::

    http://127.0.0.1:<port>/login?ticket=<nonce>.<expiry>.<mac>

``nonce`` is 16 random bytes (hex), ``expiry`` Unix seconds, and ``mac`` the hex
HMAC-SHA256 under the secret of ``login|<nonce>|<expiry>``. The hub checks the MAC
and the expiry and accepts each nonce once, then sets its browser cookie. No file or
socket carries the ticket: whoever holds the secret can mint one, nobody else can.

The CLI mints tickets and the hub verifies them, so the format lives here, once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from urllib.parse import urlencode

from cloister_core.errors import CloisterError

SECRET_BYTES = 32
AUTH_HEADER = "Authorization"
AUTH_SCHEME = "Bearer"
HEALTH_PATH = "/api/v1/health"
LOGIN_PATH = "/login"
LOGIN_PARAMETER = "ticket"
TICKET_SECONDS = 60
# The hub refuses tickets that claim to live longer: it remembers used nonces until
# they expire, so this bounds that memory (and a ticket copied by mistake).
MAX_TICKET_SECONDS = 600
_TICKET = re.compile(r"([0-9a-f]{32})\.([0-9]{1,12})\.([0-9a-f]{64})")


class TicketError(CloisterError):
    """A login ticket the hub refuses; the message says why, for the person."""


@dataclass(frozen=True, slots=True)
class Ticket:
    nonce: str
    expiry: int


def generate_secret() -> str:
    """A new hub secret: 32 random bytes as 64 lower-case hex characters."""
    return secrets.token_hex(SECRET_BYTES)


def mac(secret: str, purpose: str, *parts: str) -> str:
    """Hex HMAC-SHA256 of ``purpose|part|…`` under *secret* (one key, separate purposes)."""
    message = "|".join((purpose, *parts)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def mint_ticket(secret: str, *, now: float, lifetime: int = TICKET_SECONDS) -> str:
    nonce = secrets.token_hex(16)
    expiry = str(int(now) + lifetime)
    return f"{nonce}.{expiry}.{mac(secret, 'login', nonce, expiry)}"


def login_url(base_url: str, secret: str, *, now: float, lifetime: int = TICKET_SECONDS) -> str:
    """The one-time login URL of the hub at *base_url* (``http://127.0.0.1:9999/``)."""
    query = urlencode({LOGIN_PARAMETER: mint_ticket(secret, now=now, lifetime=lifetime)})
    return f"{base_url.rstrip('/')}{LOGIN_PATH}?{query}"


def verify_ticket(secret: str, ticket: str, *, now: float) -> Ticket:
    """The ticket's nonce and expiry if its MAC is right and it has not expired.

    Whether the nonce was already used is the hub's to remember.
    """
    match = _TICKET.fullmatch(ticket)
    if match is None:
        raise TicketError("this login link is not valid")
    nonce, expiry, presented = match.groups()
    if not hmac.compare_digest(presented, mac(secret, "login", nonce, expiry)):
        raise TicketError("this login link is not valid (made with another hub secret?)")
    if int(expiry) <= now:
        raise TicketError("this login link has expired")
    if int(expiry) > now + MAX_TICKET_SECONDS:
        raise TicketError(f"this login link claims to live longer than {MAX_TICKET_SECONDS}s")
    return Ticket(nonce, int(expiry))
