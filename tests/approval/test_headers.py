"""Every response carries the anti-framing and no-sniffing headers: pages, API, static
files, refusals, 401s, 404s and a crash alike; and the page needs nothing the CSP forbids."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from importlib.resources import files

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.testclient import TestClient

from cloister_approval.headers import SECURITY_HEADERS
from cloister_core.hubauth import login_url
from tests.approval.conftest import HUB_SECRET, HUMAN_HEADERS, UI

EXPECTED = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def assert_protected(headers: Mapping[str, str]) -> None:
    for name, value in EXPECTED.items():
        assert headers[name] == value, name
    policy = headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    assert "default-src 'self'" in policy
    assert "'unsafe-inline'" not in policy


def test_the_policy_is_the_expected_one() -> None:
    assert_protected({name.lower(): value for name, value in SECURITY_HEADERS.items()})


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/", HUMAN_HEADERS, 200),
        ("GET", "/api/v1/pending", HUMAN_HEADERS, 200),
        ("GET", "/api/v1/openapi.json", HUMAN_HEADERS, 200),
        ("GET", "/static/app.js", HUMAN_HEADERS, 200),
        ("GET", "/api/v1/health", {}, 200),
        ("GET", "/", {}, 200),  # the shell: no data
        ("GET", "/api/v1/pending", {}, 401),
        ("GET", "/fragments/pending", {}, 401),
        ("GET", "/login?ticket=bad", {}, 200),  # the shell; its script trades the ticket
        ("POST", "/api/v1/login", {}, 400),
        ("GET", "/", {"Host": "evil.example", **HUMAN_HEADERS}, 403),
        (
            "POST",
            "/api/v1/decisions/x/undo",
            {"Origin": "http://evil.example", **HUMAN_HEADERS},
            403,
        ),
        ("POST", "/api/v1/service/domains", {}, 401),
        ("GET", "/no-such-page", HUMAN_HEADERS, 404),
        ("POST", "/api/v1/decisions/nope/undo", HUMAN_HEADERS, 404),
        ("POST", "/api/v1/domains/x/decision", HUMAN_HEADERS, 400),
        ("DELETE", "/api/v1/pending", HUMAN_HEADERS, 405),
    ],
)
def test_every_kind_of_response_is_protected(
    anonymous: TestClient, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    response = anonymous.request(method, path, headers=headers)
    assert response.status_code == status, response.text
    assert_protected(response.headers)


def test_a_crash_is_protected_too(app: Starlette) -> None:
    async def crash(request: Request) -> Response:
        raise RuntimeError("boom")

    app.add_route("/crash", crash)
    with TestClient(app, base_url=UI, headers=HUMAN_HEADERS, raise_server_exceptions=False) as c:
        response = c.get("/crash")
    assert response.status_code == 500
    assert_protected(response.headers)


def test_the_login_page_and_the_ticket_exchange_are_protected(anonymous: TestClient) -> None:
    url = login_url(UI, HUB_SECRET, now=time.time())
    response = anonymous.get(url, follow_redirects=False)
    assert response.status_code == 200
    assert_protected(response.headers)
    ticket = url.partition("ticket=")[2]
    traded = anonymous.post("/api/v1/login", json={"ticket": ticket})
    assert traded.status_code == 200
    assert_protected(traded.headers)
    refused = anonymous.post("/api/v1/login", json={"ticket": ticket})
    assert refused.status_code == 401
    assert_protected(refused.headers)


INLINE = [
    re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE),  # inline script
    re.compile(r"<style\b", re.IGNORECASE),  # inline style sheet
    re.compile(r"\sstyle\s*=", re.IGNORECASE),  # style attribute
    re.compile(r"\son[a-z]+\s*=", re.IGNORECASE),  # event handler attribute
    re.compile(r"(?:src|href)\s*=\s*\"(?:data|javascript|https?):", re.IGNORECASE),
]


def test_the_page_needs_nothing_the_policy_forbids(client: TestClient) -> None:
    texts = [client.get("/").text, client.get("/fragments/pending").text]
    templates = files("cloister_approval") / "templates"
    texts += [item.read_text(encoding="utf-8") for item in templates.iterdir()]
    for text in texts:
        for pattern in INLINE:
            assert not pattern.search(text), (pattern.pattern, text[:200])
    script = (files("cloister_approval") / "static" / "app.js").read_text(encoding="utf-8")
    assert "eval(" not in script
    assert "new Function" not in script
