"""The browser's way in: a one-time login ticket becomes a session token, never a cookie.

The URL is what ``cloister guardian open`` prints (cloister-core's hubauth); the page
at ``/login`` trades its ticket at ``POST /api/v1/login`` for a token the browser sends
as ``Authorization: Bearer browser-session.…``. The token is checked by recomputing its
MAC, so it outlives a hub restart, dies with the secret, and is ended for good by
``cloister guardian logout`` (the revoked-before file).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.testclient import TestClient

from cloister_approval.app import create_app
from cloister_approval.auth import CLI, SESSION_PREFIX, HubAuth, Refused, Revocations
from cloister_core.hubauth import (
    REVOKED_BEFORE,
    TicketError,
    login_url,
    mac,
    mint_ticket,
    revoke_sessions,
)
from tests.approval.conftest import HUB_SECRET, UI, make_settings

SECRET = "s" * 64


def link(secret: str = HUB_SECRET, *, now: float | None = None, lifetime: int = 60) -> str:
    return login_url(UI, secret, now=time.time() if now is None else now, lifetime=lifetime)


def ticket_of(url: str) -> str:
    return parse_qs(urlsplit(url).query).get("ticket", [""])[0]


def tampered(ticket: str) -> str:
    """*ticket* with the last character of its MAC changed."""
    return ticket[:-1] + ("0" if ticket[-1] != "0" else "1")


def log_in(browser: TestClient, url: str) -> dict[str, Any]:
    """What the login page's script does: POST the ticket, get the session."""
    response = browser.post("/api/v1/login", json={"ticket": ticket_of(url)})
    assert response.status_code == 200, response.text
    session: dict[str, Any] = response.json()
    return session


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def header(token: str) -> dict[str, str]:
    """The headers as the guard hands them to HubAuth (lower-case names)."""
    return {"authorization": f"Bearer {token}"}


def test_a_login_ticket_becomes_a_session_token_and_no_cookie(anonymous: TestClient) -> None:
    assert anonymous.get("/api/v1/pending").status_code == 401
    response = anonymous.post("/api/v1/login", json={"ticket": ticket_of(link())})
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    assert "set-cookie" not in response.headers
    session = response.json()
    assert set(session) == {"token", "session", "expires_at"}
    token = session["token"]
    assert token.startswith(SESSION_PREFIX)
    assert HUB_SECRET not in token  # a MAC, never the secret itself
    session_id = token.removeprefix(SESSION_PREFIX).split(".")[0]
    assert session["session"] == f"browser:{session_id}"
    assert anonymous.get("/api/v1/pending", headers=bearer(token)).status_code == 200
    assert anonymous.get("/fragments/pending", headers=bearer(token)).status_code == 200
    # Without the header the same client is nobody: there is nothing else to send.
    assert anonymous.get("/api/v1/pending").status_code == 401
    assert not anonymous.cookies


def test_the_login_page_is_the_shell_and_sets_nothing(anonymous: TestClient) -> None:
    page = anonymous.get(link(), follow_redirects=False)
    assert page.status_code == 200
    assert "set-cookie" not in page.headers
    assert page.headers["cache-control"] == "no-store"
    assert 'src="/static/app.js"' in page.text
    assert "cloister guardian open" in page.text  # shown when the ticket is refused
    # The ticket is only traded by the script: loading the page used nothing up.
    traded = anonymous.post("/api/v1/login", json={"ticket": ticket_of(str(page.url))})
    assert traded.status_code == 200


def test_the_page_script_trades_the_ticket_and_keeps_the_token_in_its_origin() -> None:
    from importlib.resources import files

    script = (files("cloister_approval") / "static" / "app.js").read_text(encoding="utf-8")
    assert 'history.replaceState(null, "", "/login")' in script  # the ticket leaves the bar
    assert 'fetch("/api/v1/login"' in script
    assert "localStorage.setItem(TOKEN_KEY, payload.token)" in script
    assert "Authorization: `Bearer ${token}`" in script
    assert "new EventSource" not in script  # it cannot send the header
    assert "document.cookie" not in script


def test_a_login_ticket_works_once(anonymous: TestClient, app: Starlette) -> None:
    url = link()
    log_in(anonymous, url)
    with TestClient(app, base_url=UI) as other:
        replay = other.post("/api/v1/login", json={"ticket": ticket_of(url)})
        assert replay.status_code == 401
        assert replay.json() == {"error": "this login link was already used"}
        assert replay.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: ticket_of(link(now=time.time() - 61)), "has expired"),
        (lambda: ticket_of(link(secret="another-secret")), "not valid"),
        (lambda: tampered(ticket_of(link())), "not valid"),
        (lambda: ticket_of(link(lifetime=3600)), "claims to live longer"),
        (lambda: "nonsense", "not valid"),
        (lambda: "", "not valid"),
    ],
    ids=["expired", "other-secret", "bad-mac", "too-long", "garbage", "none"],
)
def test_a_bad_ticket_is_a_401_that_says_why(
    anonymous: TestClient, make: Callable[[], str], why: str
) -> None:
    response = anonymous.post("/api/v1/login", json={"ticket": make()})
    assert response.status_code == 401
    assert why in response.json()["error"]
    assert "set-cookie" not in response.headers


def test_the_ticket_exchange_is_refused_from_another_origin(anonymous: TestClient) -> None:
    response = anonymous.post(
        "/api/v1/login",
        json={"ticket": ticket_of(link())},
        headers={"Origin": "http://127.0.0.1:8000"},
    )
    assert response.status_code == 403
    response = anonymous.post(
        "/api/v1/login", json={"ticket": ticket_of(link())}, headers={"Host": "evil.example"}
    )
    assert response.status_code == 403


def test_a_tampered_ticket_does_not_extend_its_life(anonymous: TestClient) -> None:
    nonce, issued, expiry, digest = mint_ticket(HUB_SECRET, now=time.time()).split(".")
    for forged in (
        f"{nonce}.{issued}.{int(expiry) + 100}.{digest}",
        f"{nonce}.{int(issued) + 100}.{expiry}.{digest}",  # as if made after a logout
    ):
        assert anonymous.post("/api/v1/login", json={"ticket": forged}).status_code == 401


def test_a_login_is_in_the_audit_log(anonymous: TestClient, tmp_path: Path) -> None:
    session = log_in(anonymous, link())
    lines = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    (login,) = [line for line in lines if line["event"] == "approval.browser.login"]
    assert login["session"] == session["session"]
    assert session["token"] not in json.dumps(lines)  # the id, never the token


def test_a_restart_of_the_hub_ends_every_session(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    with TestClient(create_app(make_settings(tmp_path)), base_url=UI) as first:
        token = log_in(first, link())["token"]
        assert first.get("/api/v1/pending", headers=bearer(token)).status_code == 200
    # Same secret, same files: only the run differs (a token taken while the hub was
    # down is worthless once it is up again).
    with TestClient(create_app(make_settings(tmp_path)), base_url=UI) as restarted:
        refused = restarted.get("/api/v1/pending", headers=bearer(token))
        assert refused.status_code == 401
        assert refused.json()["detail"] == (
            "this browser's login is not valid (the hub restarted since, or its secret changed)"
        )
        page = restarted.get("/", headers=bearer(token))
        assert page.status_code == 200  # the shell; its script shows the login
        fresh = log_in(restarted, link())["token"]
        assert restarted.get("/api/v1/pending", headers=bearer(fresh)).status_code == 200
    rotated = create_app(make_settings(tmp_path, hub_secret=SecretStr("a-new-secret")))
    with TestClient(rotated, base_url=UI) as revoked:
        assert revoked.get("/api/v1/pending", headers=bearer(token)).status_code == 401


def test_cookies_are_ignored(anonymous: TestClient) -> None:
    token = log_in(anonymous, link())["token"]
    for cookie in (f"cloister_hub_9999={token}", f"session={token}", token):
        response = anonymous.get("/api/v1/pending", headers={"Cookie": cookie})
        assert response.status_code == 401, cookie


def test_logout_ends_every_session_made_before_it(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    sessions = tmp_path / "hub-sessions"
    app = create_app(make_settings(tmp_path, hub_sessions_dir=sessions))
    with TestClient(app, base_url=UI) as browser:
        token = log_in(browser, link())["token"]
        assert browser.get("/api/v1/pending", headers=bearer(token)).status_code == 200
        cutoff = revoke_sessions(sessions, now=time.time())
        refused = browser.get("/api/v1/pending", headers=bearer(token))
        assert refused.status_code == 401
        assert refused.json()["detail"] == (
            "this browser was logged out (`cloister guardian logout`)"
        )
        # The CLI's secret is not a browser session: it keeps working.
        cli = browser.get("/api/v1/pending", headers=bearer(HUB_SECRET))
        assert cli.status_code == 200
        # A session made after the logout works (the cut-off is the second after it).
        time.sleep(max(0.0, cutoff - time.time()))
        fresh = log_in(browser, link())["token"]
        assert browser.get("/api/v1/pending", headers=bearer(fresh)).status_code == 200


def test_the_sessions_directory_defaults_to_beside_the_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "guardian" / "hub.secret"
    secret.parent.mkdir()
    secret.write_text(HUB_SECRET + "\n", encoding="utf-8")
    settings = make_settings(tmp_path, hub_secret=None, hub_secret_file=secret)
    assert settings.sessions_dir == tmp_path / "guardian" / "hub-sessions"
    assert make_settings(tmp_path).sessions_dir is None  # a secret in memory: no file
    chosen = make_settings(tmp_path, hub_sessions_dir=tmp_path / "elsewhere")
    assert chosen.sessions_dir == tmp_path / "elsewhere"


# -- HubAuth and Revocations, without HTTP -------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_auth(clock: Clock, revocations: Revocations | None = None) -> HubAuth:
    return HubAuth(
        SECRET, session_lifetime=timedelta(hours=1), revocations=revocations, clock=clock
    )


def test_credentials_are_named_cli_or_browser_with_the_session_id() -> None:
    clock = Clock()
    auth = make_auth(clock)
    assert auth.authenticate(header(SECRET)) == CLI
    session = auth.log_in(mint_ticket(SECRET, now=clock.now))
    assert len(session.id) == 16
    assert session.expiry == int(clock.now) + 3600
    assert session.credential == f"browser:{session.id}"
    assert auth.authenticate(header(session.token)) == session.credential
    assert auth.authenticate({"authorization": f"bearer  {session.token} "}) == session.credential
    other = auth.log_in(mint_ticket(SECRET, now=clock.now))
    assert other.id != session.id


def test_session_tokens_cannot_be_forged_or_stretched() -> None:
    clock = Clock()
    auth = make_auth(clock)
    token = auth.log_in(mint_ticket(SECRET, now=clock.now)).token
    session_id, issued, expiry, digest = token.removeprefix(SESSION_PREFIX).split(".")

    def refused(value: str) -> str:
        result = auth.authenticate({"authorization": value})
        assert isinstance(result, Refused), value
        return result.reason

    assert "not valid" in refused(
        f"Bearer {SESSION_PREFIX}{session_id}.{issued}.{int(expiry) + 3600}.{digest}"
    )
    assert "not valid" in refused(f"Bearer {SESSION_PREFIX}{'0' * 16}.{issued}.{expiry}.{digest}")
    assert "not valid" in refused(f"Bearer {token[:-1]}{'0' if token[-1] != '0' else '1'}")
    # A MAC made for the ticket purpose (or any other) is not a session's.
    ticket_mac = mac(SECRET, "login", session_id, issued, expiry)
    assert "not valid" in refused(
        f"Bearer {SESSION_PREFIX}{session_id}.{issued}.{expiry}.{ticket_mac}"
    )
    for garbage in ("9" * 5000, "²³", "-1", ""):
        reason = refused(f"Bearer {SESSION_PREFIX}{session_id}.{garbage}.{expiry}.{digest}")
        assert reason == "not a browser session token"
    assert refused("") == "no credential"
    assert refused(f"Basic {token}") == "no credential"
    assert refused("Bearer wrong") == "wrong credential"
    assert refused(f"Bearer {token.removeprefix(SESSION_PREFIX)}") == "wrong credential"
    clock.now += 3600
    assert refused(f"Bearer {token}") == "this browser's login has expired"


def test_revocation_reads_the_file_only_when_it_changes(tmp_path: Path) -> None:
    reports: list[str] = []
    revocations = Revocations(tmp_path, reports.append)
    assert revocations.cutoff() is None  # no file: nothing ended
    cutoff = revoke_sessions(tmp_path, now=1_000_000.4)
    assert cutoff == 1_000_001
    assert (tmp_path / REVOKED_BEFORE).read_text() == "1000001\n"
    assert revocations.cutoff() == 1_000_001
    # Unchanged (same inode, time and size): not read again. Rewritten in place with
    # its old time, the file says something else, and the hub still has the old value.
    path = tmp_path / REVOKED_BEFORE
    status = path.stat()
    path.write_text("1000009\n", encoding="ascii")
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert revocations.cutoff() == 1_000_001
    # A new file (the CLI's atomic replace) is read at once.
    revoke_sessions(tmp_path, now=2_000_000.0)
    assert revocations.cutoff() == 2_000_001
    assert reports == []


def test_an_unusable_revocation_file_ends_every_session(tmp_path: Path) -> None:
    clock = Clock()
    reports: list[str] = []
    auth = make_auth(clock, Revocations(tmp_path, reports.append))
    session = auth.log_in(mint_ticket(SECRET, now=clock.now))
    token = session.token
    assert auth.authenticate(header(token)) == session.credential
    (tmp_path / REVOKED_BEFORE).write_text("yesterday\n", encoding="ascii")
    assert isinstance(auth.authenticate(header(token)), Refused)
    assert auth.authenticate(header(SECRET)) == CLI
    assert len(reports) == 1
    assert "revoked-before" in reports[0]
    assert "'yesterday'" in reports[0]
    auth.authenticate(header(token))
    assert len(reports) == 1  # said once, not on every request
    # Fixed: sessions made after the (readable) cut-off work again.
    revoke_sessions(tmp_path, now=clock.now - 10)
    assert auth.authenticate(header(token)) == session.credential


def test_sessions_made_in_the_second_of_the_logout_are_ended(tmp_path: Path) -> None:
    clock = Clock()
    auth = make_auth(clock, Revocations(tmp_path, print))
    before = auth.log_in(mint_ticket(SECRET, now=clock.now)).token
    revoke_sessions(tmp_path, now=clock.now + 0.9)
    assert isinstance(auth.authenticate(header(before)), Refused)
    clock.now += 1
    after = auth.log_in(mint_ticket(SECRET, now=clock.now))
    assert auth.authenticate(header(after.token)) == after.credential


def test_a_token_from_an_earlier_start_is_refused() -> None:
    clock = Clock()
    earlier = make_auth(clock)
    session = earlier.log_in(mint_ticket(SECRET, now=clock.now))
    assert earlier.authenticate(header(session.token)) == session.credential
    # The same secret, clock and token, in the hub started next: not its session.
    later = make_auth(clock)
    refused = later.authenticate(header(session.token))
    assert isinstance(refused, Refused)
    assert "the hub restarted" in refused.reason
    assert later.authenticate(header(SECRET)) == CLI  # the CLI's secret is not a session


def test_a_ticket_minted_before_the_logout_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    auth = make_auth(clock, Revocations(tmp_path, print))
    before = mint_ticket(SECRET, now=clock.now)  # e.g. the one in guardian open's page
    same_second = mint_ticket(SECRET, now=clock.now + 0.5)
    revoke_sessions(tmp_path, now=clock.now + 0.5)
    clock.now += 2
    for ticket in (before, same_second):
        with pytest.raises(TicketError, match="made before `cloister guardian logout`"):
            auth.log_in(ticket)
    after = auth.log_in(mint_ticket(SECRET, now=clock.now))
    assert auth.authenticate(header(after.token)) == after.credential


def test_a_ticket_minted_before_the_hub_started_is_refused() -> None:
    clock = Clock()
    earlier = make_auth(clock)
    ticket = mint_ticket(SECRET, now=clock.now)
    earlier.log_in(ticket)
    clock.now += 5
    # The hub restarted within the ticket's minute: it no longer knows the ticket was used.
    restarted = make_auth(clock)
    with pytest.raises(TicketError, match="made before the hub started"):
        restarted.log_in(ticket)
    session = restarted.log_in(mint_ticket(SECRET, now=clock.now))
    assert restarted.authenticate(header(session.token)) == session.credential


def test_hub_auth_forgets_used_nonces_only_once_they_expired() -> None:
    clock = Clock()
    auth = make_auth(clock)
    ticket = mint_ticket(SECRET, now=clock.now)
    auth.log_in(ticket)
    clock.now += 30
    auth.log_in(mint_ticket(SECRET, now=clock.now))  # prunes nothing still alive
    with pytest.raises(TicketError, match="already used"):
        auth.log_in(ticket)
    clock.now += 31
    with pytest.raises(TicketError, match="expired"):
        auth.log_in(ticket)
