"""Who is the human: the hub secret (CLI) or a browser session token (the UI).

Both come in the ``Authorization`` header, which a browser never sends by itself, so
no page on another port of the same host (cookies ignore ports) gets or replaces it:

* The CLI sends ``Authorization: Bearer <hub secret>``; the credential is ``cli``.
* A browser logs in once through a one-time URL (``cloister guardian open``; format in
  :mod:`cloister_core.hubauth`). The hub's login page trades the ticket
  (``POST /api/v1/login``) for a session token, keeps it in the hub origin's
  ``localStorage`` and sends ``Authorization: Bearer <token>`` on every request. The
  token is ``browser-session.<id>.<issued>.<expiry>.<mac>``: ``id`` 8 random bytes
  (hex, not secret: the credential is ``browser:<id>`` in the audit), ``issued`` and
  ``expiry`` Unix seconds, ``mac`` the hex HMAC-SHA256 under the hub secret of
  ``browser-session|<run>|<id>|<issued>|<expiry>``. ``run`` is 32 random bytes the hub
  draws when it starts and keeps in memory only: the hub keeps no session table (it
  recomputes the MAC), yet every session dies with the hub process that issued it.
  A token taken while the hub was down, or any other, is worthless once the hub
  restarts: restarting the guardian logs every browser out. A new secret ends every
  session too, and so does ``cloister guardian logout`` (:class:`Revocations`), which
  also refuses the login tickets minted before it. So does a restart (the used
  tickets are remembered in memory only).

Cookies are never set and never read. Every comparison with a secret value is
constant-time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from cloister_core.hubauth import (
    AUTH_SCHEME,
    REVOKED_BEFORE,
    Ticket,
    TicketError,
    mac,
    parse_revoked_before,
    proof,
    verify_ticket,
)

SESSION_PREFIX = "browser-session."
CLI = "cli"
_SESSION = re.compile(r"([0-9a-f]{16})\.([0-9]{1,12})\.([0-9]{1,12})\.([0-9a-f]{64})")
_REVOKE_ALL = 2**63  # an unreadable revocation file ends every session (fail closed)
RUN_BYTES = 32


@dataclass(frozen=True, slots=True)
class Session:
    """A browser session just issued: the token (secret) and its id (not secret)."""

    token: str
    id: str
    expiry: int

    @property
    def credential(self) -> str:
        return f"browser:{self.id}"


@dataclass(frozen=True, slots=True)
class Refused:
    """No credential of the human: why, for the 401."""

    reason: str


class Revocations:
    """``<sessions dir>/revoked-before``, re-read only when its file changes.

    Checked on every request (one ``stat``); the CLI replaces the file atomically and
    the directory is mounted, so a new file is seen at once. A file that cannot be
    read or parsed ends every session until it is fixed: a logout must not fail open.
    """

    def __init__(self, directory: Path, report: Callable[[str], None]) -> None:
        self._path = directory / REVOKED_BEFORE
        self._report = report
        self._seen: tuple[int, int, int] | None = None
        self._cutoff: int | None = None

    def cutoff(self) -> int | None:
        """Sessions issued before this Unix second are ended; None: none are."""
        try:
            status = self._path.stat()
        except FileNotFoundError:
            self._seen, self._cutoff = None, None
            return None
        except OSError as error:
            return self._unreadable(f"cannot read {str(self._path)!r}: {error.strerror}")
        seen = (status.st_ino, status.st_mtime_ns, status.st_size)
        if seen != self._seen:
            try:
                self._cutoff = parse_revoked_before(self._path.read_text(encoding="ascii"))
            except (OSError, ValueError) as error:
                return self._unreadable(f"cannot use {str(self._path)!r}: {error}")
            self._seen = seen
        return self._cutoff

    def _unreadable(self, message: str) -> int:
        if self._cutoff != _REVOKE_ALL:
            self._report(f"{message}; every browser session is refused until it is fixed")
        self._seen, self._cutoff = None, _REVOKE_ALL
        return _REVOKE_ALL


class HubAuth:
    """The hub secret's checks, browser sessions, and the login tickets already used."""

    def __init__(
        self,
        secret: str,
        *,
        session_lifetime: timedelta,
        revocations: Revocations | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret
        self._session_seconds = int(session_lifetime.total_seconds())
        self._revocations = revocations
        self._clock = clock
        # Never stored: the sessions of this run are signed with it, and only they pass.
        self._run = secrets.token_hex(RUN_BYTES)
        # Used nonces are forgotten at a restart: a ticket from before it could be replayed.
        self._started = int(clock())
        self._used: dict[str, int] = {}  # nonce → expiry: a ticket works once

    def prove(self, challenge: str) -> str:
        """The answer to the CLI's challenge: this hub holds the secret."""
        return proof(self._secret, challenge)

    def authenticate(self, headers: Mapping[str, str]) -> str | Refused:
        """``cli``, ``browser:<session id>``, or why the request is not the human's."""
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        presented = presented.strip()
        if scheme.lower() != AUTH_SCHEME.lower() or not presented:
            return Refused("no credential")
        if presented.startswith(SESSION_PREFIX):
            return self._session(presented.removeprefix(SESSION_PREFIX))
        if hmac.compare_digest(presented.encode(), self._secret.encode()):
            return CLI
        return Refused("wrong credential")

    def _session(self, token: str) -> str | Refused:
        match = _SESSION.fullmatch(token)
        if match is None:
            return Refused("not a browser session token")
        session_id, issued, expiry, presented = match.groups()
        expected = self._session_mac(session_id, issued, expiry)
        if not hmac.compare_digest(presented.encode(), expected):
            return Refused(
                "this browser's login is not valid (the hub restarted since, or its secret changed)"
            )
        if int(expiry) <= self._clock():
            return Refused("this browser's login has expired")
        if self._revoked(int(issued)):
            return Refused("this browser was logged out (`cloister guardian logout`)")
        return f"browser:{session_id}"

    def _session_mac(self, session_id: str, issued: str, expiry: str) -> bytes:
        return mac(self._secret, "browser-session", self._run, session_id, issued, expiry).encode()

    def _revoked(self, issued: int) -> bool:
        cutoff = self._revocations.cutoff() if self._revocations is not None else None
        return cutoff is not None and issued < cutoff

    def log_in(self, ticket: str) -> Session:
        """A new session for a valid, unused, unexpired *ticket*; TicketError otherwise."""
        now = self._clock()
        checked: Ticket = verify_ticket(self._secret, ticket, now=now)
        if self._revoked(checked.issued):
            raise TicketError(
                "this login link was made before `cloister guardian logout`;"
                " make a new one with `cloister guardian open`"
            )
        if checked.issued < self._started:
            raise TicketError(
                "this login link was made before the hub started;"
                " make a new one with `cloister guardian open`"
            )
        self._used = {nonce: expiry for nonce, expiry in self._used.items() if expiry > now}
        if checked.nonce in self._used:
            raise TicketError("this login link was already used")
        self._used[checked.nonce] = checked.expiry
        session_id = secrets.token_hex(8)
        issued = str(int(now))
        expiry = str(int(now) + self._session_seconds)
        digest = self._session_mac(session_id, issued, expiry).decode()
        token = f"{SESSION_PREFIX}{session_id}.{issued}.{expiry}.{digest}"
        return Session(token=token, id=session_id, expiry=int(expiry))
