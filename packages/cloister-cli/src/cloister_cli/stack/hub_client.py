"""The approval hub's API from the host: approvals from a terminal, and the login link.

The hub answers only its human: every call sends the hub secret that ``cloister
guardian start`` wrote to ``<data>/guardian/hub.secret`` (0600), as ``Authorization:
Bearer <secret>``. The hub also answers only to its own Host (DNS-rebinding guard), so
the default base URL is ``http://127.0.0.1:<guardian.ui_port>`` exactly; ``--hub URL``
or ``$CLOISTER_HUB_URL`` names another. Requests send no Origin, like any non-browser
client. Tokens are not the hub's business: it reads the token files itself.

It speaks HTTP with requests, which the docker SDK loads anyway: importing httpx as
well would add about 0.2 s to every ``cloister start``.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.hubauth import (
    AUTH_HEADER,
    AUTH_SCHEME,
    PROOF_PATH,
    login_url,
    new_challenge,
    proof,
)
from cloister_core.paths import CloisterPaths

NOT_STARTED = "the guardian has not been started on this machine: `cloister guardian start`"


class HubError(CloisterError):
    """The hub could not be reached, or refused."""


def login_page_path(paths: CloisterPaths) -> Path:
    """``<data>/guardian/login.html``: ``guardian open``'s page; ``guardian logout``,
    ``stop`` and ``start`` remove it (the hub cannot: it does not mount it)."""
    return paths.guardian_dir / "login.html"


def hub_secret_path(paths: CloisterPaths) -> Path:
    """``<data>/guardian/hub.secret``: written by ``guardian start``, mounted into the hub."""
    return paths.guardian_dir / "hub.secret"


def read_hub_secret(paths: CloisterPaths) -> str:
    """The hub secret ``guardian start`` wrote; one clean error when there is none."""
    path = hub_secret_path(paths)
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise HubError(NOT_STARTED) from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise HubError(f"cannot read the hub secret {str(path)!r}: {reason}") from None
    if not secret:
        raise HubError(
            f"the hub secret {str(path)!r} is empty; remove it and restart the guardian"
            " (`cloister guardian stop`, then `cloister guardian start`)"
        )
    return secret


def default_hub_url(ui_port: int) -> str:
    return f"http://127.0.0.1:{ui_port}"


def check_hub_url(url: str) -> str:
    """*url* without a trailing slash, if it is an http(s) URL of a host; else HubError."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HubError(f"not a hub URL: {url!r} (e.g. http://127.0.0.1:9999)")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise HubError(
            f"refusing to send the hub secret in clear text to {parts.hostname!r}: use"
            " https:// for a hub on another machine (or an SSH tunnel to 127.0.0.1)"
        )
    return url.rstrip("/")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _reason(error: requests.RequestException) -> str:
    """Why a request failed, in a few words (requests' own message is a paragraph)."""
    if isinstance(error, requests.Timeout):
        return "no answer in time"
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror.lower()
        stack += [current.__cause__, current.__context__, getattr(current, "reason", None)]
        stack += [arg for arg in current.args if isinstance(arg, BaseException)]
    return type(error).__name__


class HubClient:
    def __init__(self, base_url: str, secret: str, timeout: float = 5.0) -> None:
        self.base = check_hub_url(base_url)
        self._secret = secret
        self._timeout = timeout
        self._proven = False

    def verify(self) -> None:
        """Make sure the hub at :attr:`base` holds this machine's hub secret, before the
        secret (or a login link) goes there: while the guardian is down, anything may
        listen on its port, another user's program too. Once per client."""
        if self._proven:
            return
        challenge = new_challenge()
        try:
            response = requests.get(
                self.base + PROOF_PATH, params={"challenge": challenge}, timeout=self._timeout
            )
        except requests.RequestException as error:
            raise self._unreachable(error) from None
        try:
            answer = response.json().get("proof") if response.status_code == 200 else None
        except (ValueError, AttributeError):
            answer = None
        expected = proof(self._secret, challenge)
        if not isinstance(answer, str) or not hmac.compare_digest(answer, expected):
            raise HubError(
                f"what answers at {self.base} cannot prove it holds this machine's hub secret"
                f" (HTTP {response.status_code}): a guardian started with another secret"
                " (`cloister guardian stop`, then `start`), or another program on"
                " guardian.ui_port; nothing was sent to it"
            )
        self._proven = True

    def _unreachable(self, error: requests.RequestException) -> HubError:
        return HubError(
            f"the approval hub at {self.base} is not reachable ({_reason(error)});"
            " is the guardian running? (`cloister guardian status`)"
        )

    @classmethod
    def for_machine(
        cls, paths: CloisterPaths, ui_port: int, base_url: str | None = None
    ) -> HubClient:
        """The client of this machine's guardian (or of the hub at *base_url*)."""
        return cls(base_url or default_hub_url(ui_port), read_hub_secret(paths))

    def login_url(self, now: float | None = None) -> str:
        """A one-time login URL for a browser (valid about a minute)."""
        return login_url(self.base, self._secret, now=time.time() if now is None else now)

    def login_file(self, paths: CloisterPaths, now: float | None = None) -> Path:
        """A private page (0600) that leads a browser to a fresh login URL.

        A browser is started with the page's path, not the URL: a program's arguments
        are visible to every user of the machine (``ps``), and whoever used the ticket
        first would be logged in.
        """
        url = html.escape(self.login_url(now))
        page = (
            '<!doctype html>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="refresh" content="0; url={url}">\n'
            "<title>Opening the Cloister approval UI</title>\n"
            f'<p><a href="{url}">Open the approval UI</a> (this link works once, for a minute).'
            "</p>\n"
        )
        path = login_page_path(paths)
        atomic_write(path, page, mode=0o600, dir_mode=0o700)
        return path

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        self.verify()
        headers = {AUTH_HEADER: f"{AUTH_SCHEME} {self._secret}"}
        try:
            response = requests.request(
                method, self.base + path, json=json, headers=headers, timeout=self._timeout
            )
        except requests.RequestException as error:
            raise self._unreachable(error) from None
        if response.status_code == 401:
            raise HubError(
                f"the approval hub at {self.base} refused this machine's hub secret;"
                " if the guardian was started with another one, restart it"
                " (`cloister guardian stop`, then `cloister guardian start`)"
            )
        try:
            body = response.json() if response.content else None
        except ValueError:
            raise HubError(
                f"{self.base} answered HTTP {response.status_code} that is not the approval"
                " hub's JSON; is that the hub's address?"
            ) from None
        if response.status_code >= 400:
            message = body.get("error") if isinstance(body, dict) else None
            raise HubError(f"the hub refused: {message or f'HTTP {response.status_code}'}")
        return body

    def pending(self) -> dict[str, list[dict[str, Any]]]:
        result: dict[str, list[dict[str, Any]]] = self._call("GET", "/api/v1/pending")
        return result

    def decide(
        self, item_id: str, *, allow: bool, scope: str, wildcard: bool, reason: str | None
    ) -> dict[str, Any]:
        """Decide a pending domain (allow/deny at *scope*) or command (approve/deny).

        *item_id* may be any prefix that names exactly one pending item. A command can
        be approved once, for the session or for the project; it is denied once.
        """
        kind, item = self._resolve(item_id)
        if kind == "domains":
            path = f"/api/v1/domains/{item['id']}/decision"
            body: dict[str, Any] = {
                "action": "allow" if allow else "deny",
                "scope": scope,
                "wildcard": wildcard,
            }
        else:
            what = f"{item['id']} is a command ({item['command']})"
            if wildcard:
                raise HubError(f"{what}: --wildcard is for domains")
            if scope == "global" or (not allow and scope != "once"):
                allowed = "once, session or project" if allow else "once only"
                raise HubError(f"{what}: --scope {scope} is not for commands ({allowed})")
            path = f"/api/v1/commands/{item['id']}/decision"
            body = {"action": "approve" if allow else "deny", "scope": scope, "reason": reason}
        result: dict[str, Any] = self._call("POST", path, body)
        return result

    def _resolve(self, prefix: str) -> tuple[str, dict[str, Any]]:
        """The one pending item whose id starts with *prefix*, and its kind."""
        pending = self.pending()
        matches = [
            (kind, item)
            for kind in ("domains", "commands")
            for item in pending[kind]
            if item["id"].startswith(prefix)
        ]
        if not prefix or not matches:
            raise HubError(f"nothing pending with id {prefix!r} (`cloister approvals list`)")
        if len(matches) > 1:
            ids = ", ".join(item["id"] for _, item in matches)
            raise HubError(f"{prefix!r} names more than one pending item ({ids}); type more of it")
        return matches[0]
