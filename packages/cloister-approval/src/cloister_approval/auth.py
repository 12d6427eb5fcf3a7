"""Who is the human: the hub secret (CLI) or the browser cookie (the UI).

* The CLI sends ``Authorization: Bearer <hub secret>``.
* A browser logs in once through a one-time URL (``cloister guardian open``; format in
  :mod:`cloister_core.hubauth`). The hub then sets the cookie
  ``cloister_hub_<port>=<expiry>.<HMAC(secret, "browser|<expiry>")>``, HttpOnly,
  SameSite=Strict, Path=/. The hub keeps no session table: it recomputes the MAC, so
  the cookie survives hub restarts and a new secret revokes every cookie at once.
  The port is in the name because cookies are not separated by port: two hubs on
  one machine must not overwrite each other's.

Every comparison with a secret value is constant-time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Mapping
from datetime import timedelta

from starlette.requests import cookie_parser

from cloister_core.hubauth import AUTH_SCHEME, Ticket, TicketError, mac, verify_ticket

COOKIE_PREFIX = "cloister_hub_"
_EXPIRY = re.compile(r"[0-9]{1,12}")  # Unix seconds; a longer number is not ours


class HubAuth:
    """The hub secret's checks, and the one-time login tickets already used."""

    def __init__(
        self,
        secret: str,
        *,
        cookie_lifetime: timedelta,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret
        self._cookie_seconds = int(cookie_lifetime.total_seconds())
        self._clock = clock
        self._used: dict[str, int] = {}  # nonce → expiry: a ticket works once

    @staticmethod
    def cookie_name(host: str) -> str:
        """The cookie's name for the Host header the browser used (``127.0.0.1:9999``)."""
        _, colon, port = host.rpartition(":")
        return COOKIE_PREFIX + (port if colon and port.isdigit() else "80")

    def is_human(self, headers: Mapping[str, str]) -> bool:
        """The request carries the hub secret or a valid browser cookie."""
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        if scheme.lower() == AUTH_SCHEME.lower():
            return hmac.compare_digest(presented.strip().encode(), self._secret.encode())
        cookies = cookie_parser(headers.get("cookie", ""))
        value = cookies.get(self.cookie_name(headers.get("host", "")))
        return value is not None and self._cookie_is_valid(value)

    def _cookie_is_valid(self, value: str) -> bool:
        expiry, _, presented = value.partition(".")
        if not _EXPIRY.fullmatch(expiry) or int(expiry) <= self._clock():
            return False
        expected = mac(self._secret, "browser", expiry)
        return hmac.compare_digest(presented.encode(), expected.encode())

    def log_in(self, ticket: str) -> str:
        """The cookie value for a valid, unused, unexpired *ticket*; TicketError otherwise."""
        now = self._clock()
        checked: Ticket = verify_ticket(self._secret, ticket, now=now)
        self._used = {nonce: expiry for nonce, expiry in self._used.items() if expiry > now}
        if checked.nonce in self._used:
            raise TicketError("this login link was already used")
        self._used[checked.nonce] = checked.expiry
        expiry = str(int(now) + self._cookie_seconds)
        return f"{expiry}.{mac(self._secret, 'browser', expiry)}"

    @property
    def cookie_seconds(self) -> int:
        return self._cookie_seconds
