"""DNS rebinding, CSRF and CORS from a browser tab; credentials for the service API."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from cloister_approval.app import create_app
from tests.approval.conftest import CREDENTIAL, UI, make_settings

ROUTES = ["/", "/api/v1/pending", "/api/v1/decisions", "/api/v1/tokens", "/api/v1/openapi.json"]


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("host", ["evil.example", "evil.example:9999", "127.0.0.1:8080", ""])
def test_foreign_host_is_refused(client: TestClient, path: str, host: str) -> None:
    response = client.get(path, headers={"Host": host})
    assert response.status_code == 403
    assert "is not this hub's address" in response.json()["error"]


@pytest.mark.parametrize("host", ["127.0.0.1:9999", "localhost:9999", "LOCALHOST:9999"])
def test_own_hosts_are_served(client: TestClient, host: str) -> None:
    assert client.get("/api/v1/pending", headers={"Host": host}).status_code == 200


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
        ("POST", "/api/v1/tokens"),
        ("DELETE", "/api/v1/tokens/api"),
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
        "/api/v1/tokens",
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
    with TestClient(app, base_url=UI) as client:
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
