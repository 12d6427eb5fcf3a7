"""The browser's way in: a one-time login URL becomes an HttpOnly, SameSite=Strict cookie.

The URL is what ``cloister guardian open`` prints (cloister-core's hubauth); the cookie
is checked by recomputing its MAC, so it outlives a hub restart and dies with the secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.testclient import TestClient

from cloister_approval.app import create_app
from cloister_approval.auth import HubAuth
from cloister_approval.settings import ApprovalSettings
from cloister_core.hubauth import TicketError, login_url, mint_ticket
from tests.approval.conftest import HUB_SECRET, UI, make_settings

COOKIE = "cloister_hub_9999"


def link(secret: str = HUB_SECRET, *, now: float | None = None, lifetime: int = 60) -> str:
    return login_url(UI, secret, now=time.time() if now is None else now, lifetime=lifetime)


def tampered(url: str) -> str:
    """*url* with the last character of its MAC changed."""
    return url[:-1] + ("0" if url[-1] != "0" else "1")


def log_in(browser: TestClient, url: str) -> None:
    response = browser.get(url, follow_redirects=False)
    assert response.status_code == 200, response.text
    assert '<meta http-equiv="refresh" content="0; url=/">' in response.text


def test_the_login_url_sets_the_cookie_and_leads_to_the_page(anonymous: TestClient) -> None:
    assert anonymous.get("/").status_code == 401
    response = anonymous.get(link(), follow_redirects=False)
    # A page that goes on to / itself (a same-site navigation, so the cookie is sent).
    assert response.status_code == 200
    assert '<meta http-equiv="refresh" content="0; url=/">' in response.text
    assert response.headers["cache-control"] == "no-store"
    cookie = response.headers["set-cookie"]
    attributes = [part.strip().lower() for part in cookie.split(";")]
    assert attributes[0].startswith(f"{COOKIE}=")
    assert "httponly" in attributes
    assert "samesite=strict" in attributes
    assert "path=/" in attributes
    assert f"max-age={30 * 24 * 3600}" in attributes
    assert HUB_SECRET not in cookie  # a MAC, never the secret itself
    assert anonymous.get("/").status_code == 200
    assert anonymous.get("/api/v1/pending").status_code == 200
    assert anonymous.get("/static/app.js").status_code == 200


def test_following_the_link_leads_to_the_page(anonymous: TestClient) -> None:
    assert 'href="/"' in anonymous.get(link()).text
    page = anonymous.get("/")
    assert page.status_code == 200
    assert "<title>Cloister approvals</title>" in page.text


def test_a_login_url_works_once(anonymous: TestClient, app: Starlette) -> None:
    url = link()
    log_in(anonymous, url)
    with TestClient(app, base_url=UI) as other:
        replay = other.get(url, follow_redirects=False)
        assert replay.status_code == 401
        assert "already used" in replay.text
        assert "cloister guardian open" in replay.text
        assert "set-cookie" not in replay.headers
        assert other.get("/").status_code == 401


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: link(now=time.time() - 61), "has expired"),
        (lambda: link(secret="another-secret"), "not valid"),
        (lambda: tampered(link()), "not valid"),
        (lambda: link(lifetime=3600), "claims to live longer"),
        (lambda: f"{UI}/login?ticket=nonsense", "not valid"),
        (lambda: f"{UI}/login", "not valid"),
    ],
    ids=["expired", "other-secret", "bad-mac", "too-long", "garbage", "none"],
)
def test_a_bad_login_url_is_the_login_page(
    anonymous: TestClient, make: Callable[[], str], why: str
) -> None:
    response = anonymous.get(make(), follow_redirects=False)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert why in response.text
    assert "set-cookie" not in response.headers
    assert anonymous.get("/").status_code == 401


def test_a_tampered_ticket_does_not_extend_its_life(anonymous: TestClient) -> None:
    nonce, expiry, mac = mint_ticket(HUB_SECRET, now=time.time()).split(".")
    forged = f"{UI}/login?ticket={nonce}.{int(expiry) + 100}.{mac}"
    assert anonymous.get(forged, follow_redirects=False).status_code == 401


def test_the_cookie_survives_a_restart_and_dies_with_the_secret(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    with TestClient(create_app(make_settings(tmp_path)), base_url=UI) as first:
        log_in(first, link())
        cookie = first.cookies[COOKIE]
    again = create_app(make_settings(tmp_path))
    with TestClient(again, base_url=UI, cookies={COOKIE: cookie}) as restarted:
        assert restarted.get("/api/v1/pending").status_code == 200
    rotated = create_app(make_settings(tmp_path, hub_secret=SecretStr("a-new-secret")))
    with TestClient(rotated, base_url=UI, cookies={COOKIE: cookie}) as revoked:
        assert revoked.get("/api/v1/pending").status_code == 401


def test_a_cookie_is_for_its_own_port(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    settings: ApprovalSettings = make_settings(
        tmp_path, port=8999, public_hosts=("127.0.0.1:9999",)
    )
    with TestClient(create_app(settings), base_url=UI) as browser:
        log_in(browser, link())
        cookie = browser.cookies[COOKIE]
        other_port = browser.get(
            "/api/v1/pending",
            headers={"Host": "127.0.0.1:8999", "Cookie": f"{COOKIE}={cookie}"},
        )
        assert other_port.status_code == 401  # named cloister_hub_8999 there


def test_hub_auth_cookie_expiry_and_forgery() -> None:
    now = [1_000_000.0]
    auth = HubAuth("s" * 64, cookie_lifetime=timedelta(hours=1), clock=lambda: now[0])
    value = auth.log_in(mint_ticket("s" * 64, now=now[0]))
    host = {"host": "127.0.0.1:9999"}
    assert auth.is_human({**host, "cookie": f"{COOKIE}={value}"})
    expiry, mac = value.split(".")
    assert not auth.is_human({**host, "cookie": f"{COOKIE}={int(expiry) + 3600}.{mac}"})
    assert not auth.is_human({**host, "cookie": f"{COOKIE}=garbage"})
    assert not auth.is_human({**host, "cookie": f"other={value}"})
    # Numbers that are not Unix seconds are refused, not a crash (int() limits digits).
    for expiry in ("9" * 5000, "²³", "-1", ""):
        assert not auth.is_human({**host, "cookie": f"{COOKIE}={expiry}.{mac}"})
    now[0] += 3601
    assert not auth.is_human({**host, "cookie": f"{COOKIE}={value}"})


def test_hub_auth_forgets_used_nonces_only_once_they_expired() -> None:
    now = [1_000_000.0]
    auth = HubAuth("s" * 64, cookie_lifetime=timedelta(hours=1), clock=lambda: now[0])
    ticket = mint_ticket("s" * 64, now=now[0])
    auth.log_in(ticket)
    now[0] += 30
    auth.log_in(mint_ticket("s" * 64, now=now[0]))  # prunes nothing still alive
    with pytest.raises(TicketError, match="already used"):
        auth.log_in(ticket)
    now[0] += 31
    with pytest.raises(TicketError, match="expired"):
        auth.log_in(ticket)
