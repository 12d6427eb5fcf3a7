"""DNS rebinding, CSRF and CORS from a browser tab; credentials for the service API.

Who the human is (the hub secret, the browser session) and the headers every response
carries are in ``test_login.py`` and ``test_headers.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from cloister_approval.app import create_app
from cloister_core.hubauth import mac, proof
from tests.approval.conftest import CREDENTIAL, HUB_SECRET, HUMAN_HEADERS, UI, make_settings

ROUTES = ["/", "/api/v1/pending", "/api/v1/decisions", "/api/v1/health", "/api/v1/openapi.json"]


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("host", ["evil.example", "evil.example:9999", "127.0.0.1:8080", ""])
def test_foreign_host_is_refused(client: TestClient, path: str, host: str) -> None:
    response = client.get(path, headers={"Host": host})
    assert response.status_code == 403
    assert "is not this hub's address" in response.json()["error"]


def test_the_own_host_is_served(client: TestClient) -> None:
    assert client.get("/api/v1/pending", headers={"Host": "127.0.0.1:9999"}).status_code == 200


@pytest.mark.parametrize("host", ["localhost:9999", "LOCALHOST:9999", "[::1]:9999"])
def test_localhost_is_not_the_hub(client: TestClient, host: str) -> None:
    # localhost may resolve to ::1, where another local user could listen on the hub's
    # port (it is published on 127.0.0.1 only): no login of the hub's belongs there.
    response = client.get("/api/v1/pending", headers={"Host": host})
    assert response.status_code == 403
    assert response.json()["error"] == (
        f"host {host.lower()!r} is not this hub's address (expected one of 127.0.0.1:9999)"
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:8080"},  # another local page (same site, other origin)
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_cross_origin_state_changes_are_refused(
    client: TestClient, headers: dict[str, str]
) -> None:
    for method, path in [
        ("POST", "/api/v1/domains/x/decision"),
        ("POST", "/api/v1/decisions/x/undo"),
        ("POST", "/api/v1/commands/x/decision"),
    ]:
        response = client.request(method, path, json={}, headers=headers)
        assert response.status_code == 403, (method, path)


def test_same_origin_and_non_browser_requests_pass(client: TestClient) -> None:
    for headers in ({"Origin": UI, "Sec-Fetch-Site": "same-origin"}, {}):
        response = client.post("/api/v1/decisions/x/undo", headers=headers)
        assert response.status_code == 404  # reached the route


def test_no_cors_headers_ever(client: TestClient) -> None:
    response = client.get("/api/v1/pending", headers={"Origin": "http://evil.example"})
    assert response.status_code == 200  # a GET is read-only; the browser still may not read it
    assert not [h for h in response.headers if h.lower().startswith("access-control-")]
    preflight = client.options(
        "/api/v1/pending",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert not [h for h in preflight.headers if h.lower().startswith("access-control-")]


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer wrong", 401),
        (f"Basic {CREDENTIAL}", 401),
        (f"Bearer {CREDENTIAL}x", 401),
    ],
)
def test_service_api_needs_the_credential(
    client: TestClient, authorization: str | None, status: int
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = client.post(
        "/api/v1/service/domains",
        json={"cloister": "a", "project": "a", "host": "x.test", "port": 443},
        headers=headers,
    )
    assert response.status_code == status
    assert client.get("/api/v1/pending").json()["domains"] == []


def test_service_api_is_reached_by_its_network_name(client: TestClient) -> None:
    # The proxy calls the hub as http://approval:9999; the Host check is for browsers.
    response = client.post(
        "/api/v1/service/domains",
        json={"cloister": "a", "project": "a", "host": "x.test", "port": 443, "wait_seconds": 0.05},
        headers={"Authorization": f"Bearer {CREDENTIAL}", "Host": "approval:9999"},
    )
    assert response.json()["action"] == "timeout"


def test_service_api_disabled_without_a_credential(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    app = create_app(make_settings(tmp_path, service_credential=None))
    with TestClient(app, base_url=UI, headers=HUMAN_HEADERS) as client:
        response = client.post(
            "/api/v1/service/domains",
            json={"cloister": "a", "project": "a", "host": "x.test", "port": 443},
            headers={"Authorization": "Bearer anything"},
        )
    assert response.status_code == 403
    assert "disabled" in response.json()["error"]


def test_credential_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    secret = tmp_path / "credential"
    secret.write_text("from-file\n", encoding="utf-8")
    settings = make_settings(tmp_path, service_credential=None, service_credential_file=secret)
    assert settings.credential() == "from-file"


# -- the human: the hub secret or a browser session token ---------------------------------

OPEN = {
    *(
        (method, path)
        for method in ("GET", "HEAD")
        for path in ("/", "/login", "/api/v1/health", "/api/v1/proof")
    ),
    ("GET", "/static/app.js"),
    ("GET", "/static/app.css"),
    ("POST", "/api/v1/login"),
}


def every_route(app: Starlette) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves to the human, static files included.

    The service routes keep their own credential (tested above and below)."""
    found = [("GET", "/static/app.js"), ("GET", "/static/app.css"), ("GET", "/no-such-page")]
    for route in app.routes:
        if not isinstance(route, Route) or route.path.startswith("/api/v1/service/"):
            continue
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        found += [(method, path) for method in sorted(route.methods or ())]
    return found


def test_every_route_is_listed(app: Starlette) -> None:
    routes = every_route(app)
    assert ("POST", "/api/v1/domains/x/decision") in routes
    assert ("GET", "/fragments/pending") in routes
    assert ("GET", "/api/v1/events") in routes
    assert not [path for _, path in routes if "tokens" in path]  # no second registry


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {HUB_SECRET}x"},
        {"Authorization": f"Basic {HUB_SECRET}"},
        {"Authorization": f"Bearer {CREDENTIAL}"},  # the services' credential is not the human's
        {"Cookie": "cloister_hub_9999=4102444800.0000"},
        {"Cookie": f"cloister_hub_9999={HUB_SECRET}"},  # cookies are never read
        {"Authorization": "Bearer browser-session.0123456789abcdef.1.4102444800." + "0" * 64},
        {"Host": "approval:9999"},  # a container on the control network
        {"Host": "172.18.0.3:9999"},
    ],
    ids=[
        "nothing",
        "wrong",
        "longer",
        "basic",
        "service",
        "forged-cookie",
        "secret-cookie",
        "forged-session",
        "net-name",
        "net-ip",
    ],
)
def test_every_route_but_health_needs_the_human(
    app: Starlette, anonymous: TestClient, headers: dict[str, str]
) -> None:
    for method, path in every_route(app):
        if (method, path) in OPEN:
            continue
        response = anonymous.request(method, path, headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["www-authenticate"] == 'Bearer realm="cloister-hub"'
        if method == "HEAD":
            continue  # no body
        if path.startswith("/api/"):
            assert "not logged in" in response.json()["error"]
            assert "cloister guardian open" in response.json()["error"]
        else:
            assert response.headers["content-type"].startswith("text/html")
            assert "cloister guardian open" in response.text


def test_with_the_secret_every_route_is_reached(app: Starlette, client: TestClient) -> None:
    for method, path in every_route(app):
        if path in ("/api/v1/events", "/api/v1/login"):
            continue  # a stream that never ends; a login needs its ticket (test_login.py)
        response = client.request(method, path, json={})
        assert response.status_code not in (401, 403), (method, path, response.text)
    assert client.get("/").status_code == 200
    assert client.get("/api/v1/pending").status_code == 200
    assert client.get("/static/app.js").status_code == 200


def test_the_open_routes_hold_no_data(app: Starlette, anonymous: TestClient) -> None:
    hold = anonymous.post(
        "/api/v1/service/domains",
        json={"cloister": "secretive", "project": "p", "host": "held.example", "port": 443,
              "wait_seconds": 0.05},
        headers={"Authorization": f"Bearer {CREDENTIAL}"},
    )  # fmt: skip
    assert hold.json()["action"] == "timeout"
    for method, path in OPEN:
        if method != "GET":
            continue
        params = {"challenge": "ab" * 32} if path == "/api/v1/proof" else None
        response = anonymous.get(path, params=params)
        assert response.status_code == 200, path
        assert "held.example" not in response.text
        assert "secretive" not in response.text
        assert "set-cookie" not in response.headers
    # Open, but still only under the hub's own names.
    assert anonymous.get("/", headers={"Host": "evil.example"}).status_code == 403


def test_health_is_open_and_says_nothing_else(anonymous: TestClient) -> None:
    response = anonymous.get("/api/v1/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}  # not even whether anything waits
    # Open to the stack's readiness check, still only under the hub's own names.
    assert anonymous.get("/api/v1/health", headers={"Host": "evil.example"}).status_code == 403


def test_the_hub_proves_it_holds_the_secret_and_gives_nothing_else(
    anonymous: TestClient,
) -> None:
    """Open, so that the CLI can check who listens before the secret goes there; the
    answer is a MAC of its own purpose, no ticket or session MAC."""
    challenge = "ab" * 32
    response = anonymous.get("/api/v1/proof", params={"challenge": challenge})
    assert response.status_code == 200
    assert response.json() == {"proof": proof(HUB_SECRET, challenge)}
    assert response.json()["proof"] == mac(HUB_SECRET, "hub-proof", challenge)
    assert response.headers["cache-control"] == "no-store"
    for bad in ("", "xyz", "AB" * 32, "ab" * 65, "ab" * 15):
        refused = anonymous.get("/api/v1/proof", params={"challenge": bad})
        assert refused.status_code == 400, bad
    assert anonymous.get("/api/v1/proof", headers={"Host": "evil.example"}).status_code == 403


def test_service_routes_keep_their_own_credential(anonymous: TestClient) -> None:
    body = {"cloister": "a", "project": "a", "host": "x.test", "port": 443, "wait_seconds": 0.05}
    human = anonymous.post(
        "/api/v1/service/domains", json=body, headers={"Authorization": f"Bearer {HUB_SECRET}"}
    )
    assert human.status_code == 401  # the human's secret is not the services'
    service = anonymous.post(
        "/api/v1/service/domains", json=body, headers={"Authorization": f"Bearer {CREDENTIAL}"}
    )
    assert service.json()["action"] == "timeout"


def test_an_app_without_a_hub_secret_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    with pytest.raises(ValueError, match="no hub secret"):
        create_app(make_settings(tmp_path, hub_secret=None))
