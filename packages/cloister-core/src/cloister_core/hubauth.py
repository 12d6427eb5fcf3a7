"""The approval hub's human credential: the hub secret and one-time login tickets.

The hub answers only its human. ``cloister guardian start`` writes the hub secret
(32 random bytes, hex) to ``<data>/guardian/hub.secret`` (0600); the hub reads it from
a read-only mount. The CLI sends it on every call as ``Authorization: Bearer
<secret>``. A browser gets in through a one-time login URL (``cloister guardian
open``)::

    http://127.0.0.1:<port>/login?ticket=<nonce>.<issued>.<expiry>.<mac>

``nonce`` is 16 random bytes (hex), ``issued`` and ``expiry`` Unix seconds, and ``mac``
the hex HMAC-SHA256 under the secret of ``login|<nonce>|<issued>|<expiry>``. The hub's
login page trades the ticket (once, before it expires) for a browser session token,
which it keeps in the hub origin's own storage. Whoever holds the secret can mint a
ticket, nobody else can.

``cloister guardian logout`` ends every browser session issued so far, and every
ticket minted so far: it writes the Unix second before which neither counts to
``<data>/guardian/hub-sessions/revoked-before`` (atomically; the hub mounts the
directory read-only, so it sees each new file, and re-reads it when it changes).

Before it sends the secret or opens a browser on the hub's port, the CLI has the hub
prove that it holds the secret: ``GET /api/v1/proof?challenge=<random hex>`` answers
the HMAC of ``hub-proof|<challenge>``. Whatever else listens on the port (the guardian
stopped, another user's program there) cannot.

The CLI mints tickets and revokes sessions, the hub verifies both, so the formats
live here, once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write

SECRET_BYTES = 32
AUTH_HEADER = "Authorization"
AUTH_SCHEME = "Bearer"
HEALTH_PATH = "/api/v1/health"
# Open: the hub proves it holds the hub secret (before the CLI sends the secret, or opens
# a browser on the port: while the guardian is down, anything may listen there).
PROOF_PATH = "/api/v1/proof"
_CHALLENGE = re.compile(r"[0-9a-f]{32,128}")
LOGIN_PATH = "/login"
LOGIN_PARAMETER = "ticket"
TICKET_SECONDS = 60
# The hub refuses tickets that claim to live longer: it remembers used nonces until
# they expire, so this bounds that memory (and a ticket copied by mistake).
MAX_TICKET_SECONDS = 600
_TICKET = re.compile(r"([0-9a-f]{32})\.([0-9]{1,12})\.([0-9]{1,12})\.([0-9a-f]{64})")
SESSIONS_DIR = "hub-sessions"  # in <data>/guardian, beside hub.secret
REVOKED_BEFORE = "revoked-before"
_SECONDS = re.compile(r"[0-9]{1,12}")


class TicketError(CloisterError):
    """A login ticket the hub refuses; the message says why, for the person."""


@dataclass(frozen=True, slots=True)
class Ticket:
    nonce: str
    issued: int  # Unix seconds: a logout after it refuses the ticket
    expiry: int


def generate_secret() -> str:
    """A new hub secret: 32 random bytes as 64 lower-case hex characters."""
    return secrets.token_hex(SECRET_BYTES)


def mac(secret: str, purpose: str, *parts: str) -> str:
    """Hex HMAC-SHA256 of ``purpose|part|…`` under *secret* (one key, separate purposes)."""
    message = "|".join((purpose, *parts)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def new_challenge() -> str:
    return secrets.token_hex(32)


def proof(secret: str, challenge: str) -> str:
    """What the hub answers to *challenge* (``hub-proof`` purpose: no ticket or session
    MAC is ever this); ValueError for a challenge that is not 32-128 hex digits."""
    if not _CHALLENGE.fullmatch(challenge):
        raise ValueError(f"a challenge is 32 to 128 lower-case hex digits, got {challenge!r}")
    return mac(secret, "hub-proof", challenge)


def mint_ticket(secret: str, *, now: float, lifetime: int = TICKET_SECONDS) -> str:
    nonce = secrets.token_hex(16)
    issued = str(int(now))
    expiry = str(int(now) + lifetime)
    return f"{nonce}.{issued}.{expiry}.{mac(secret, 'login', nonce, issued, expiry)}"


def login_url(base_url: str, secret: str, *, now: float, lifetime: int = TICKET_SECONDS) -> str:
    """The one-time login URL of the hub at *base_url* (``http://127.0.0.1:9999/``)."""
    query = urlencode({LOGIN_PARAMETER: mint_ticket(secret, now=now, lifetime=lifetime)})
    return f"{base_url.rstrip('/')}{LOGIN_PATH}?{query}"


def verify_ticket(secret: str, ticket: str, *, now: float) -> Ticket:
    """The ticket's nonce, issue and expiry time if its MAC is right and it has not
    expired.

    Whether the nonce was already used, and whether a logout came after the ticket,
    are the hub's to know.
    """
    match = _TICKET.fullmatch(ticket)
    if match is None:
        raise TicketError("this login link is not valid")
    nonce, issued, expiry, presented = match.groups()
    if not hmac.compare_digest(presented, mac(secret, "login", nonce, issued, expiry)):
        raise TicketError("this login link is not valid (made with another hub secret?)")
    if int(expiry) <= now:
        raise TicketError("this login link has expired")
    if int(expiry) - int(issued) > MAX_TICKET_SECONDS or int(expiry) > now + MAX_TICKET_SECONDS:
        raise TicketError(f"this login link claims to live longer than {MAX_TICKET_SECONDS}s")
    return Ticket(nonce, int(issued), int(expiry))


def sessions_dir(hub_secret_file: Path) -> Path:
    """The directory of the session revocation file: beside the hub secret."""
    return hub_secret_file.parent / SESSIONS_DIR


def revoke_sessions(directory: Path, *, now: float) -> int:
    """End every browser session issued, and every ticket minted, up to *now*; the
    cut-off (Unix seconds) written.

    Both count from the second after: one made in the same second as the logout is
    ended too, rather than one made before it kept.
    """
    cutoff = int(now) + 1
    atomic_write(directory / REVOKED_BEFORE, f"{cutoff}\n", mode=0o644, dir_mode=0o755)
    return cutoff


def parse_revoked_before(text: str) -> int:
    """The cut-off in a revocation file; ValueError for anything but Unix seconds."""
    value = text.strip()
    if not _SECONDS.fullmatch(value):
        raise ValueError(f"not Unix seconds: {value[:40]!r}")
    return int(value)
