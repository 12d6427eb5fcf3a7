"""The hub reads the token directory as the proxy and the gateway do: no second registry.

A token file that appears is a cloister the hub knows; one that goes away takes its
cloister's held items (their callers are answered ``deny``) and session file with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.testclient import TestClient

from cloister_approval.app import create_app
from cloister_approval.hub import ApprovalHub
from cloister_approval.settings import ApprovalSettings
from cloister_core.tokens import TokenRecord, remove_token_file, write_token_file
from tests.approval.conftest import (
    HUMAN_HEADERS,
    SERVICE_HEADERS,
    TIMEOUT,
    UI,
    Background,
    make_settings,
)
from tests.waiting import wait_until


def add_token(settings: ApprovalSettings, cloister: str, project: str = "api") -> TokenRecord:
    record = TokenRecord.create(cloister=cloister, project=project, path=Path(f"/w/{cloister}"))
    write_token_file(settings.paths.tokens_dir, record)
    return record


def hold(client: TestClient, kind: str, cloister: str, what: str) -> Background:
    body: dict[str, Any] = {"cloister": cloister, "project": "api"}
    if kind == "domains":
        body |= {"host": what, "port": 443}
    else:
        body |= {"argv": [what], "command": what, "cwd": "/w"}
    return Background(
        lambda: client.post(f"/api/v1/service/{kind}", json=body, headers=SERVICE_HEADERS)
    )


def pending(client: TestClient) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = client.get("/api/v1/pending").json()
    return result


def session_rules(client: TestClient) -> list[str]:
    rules = client.get("/api/v1/projects/api/rules").json()["rules"]
    return [f"{rule['scope']}: {rule['rule']}" for rule in rules if rule["scope"] != "project"]


def allow_for_the_session(client: TestClient, cloister: str, host: str) -> None:
    waiting = hold(client, "domains", cloister, host)
    (item,) = wait_until(
        lambda: [i for i in pending(client)["domains"] if i["host"] == host],
        TIMEOUT,
        f"the held domain {host}",
    )
    client.post(
        f"/api/v1/domains/{item['id']}/decision", json={"action": "allow", "scope": "session"}
    ).raise_for_status()
    assert waiting.join().json()["scope"] == "session"


def test_a_token_file_that_appears_is_seen(
    client: TestClient, app: Starlette, settings: ApprovalSettings
) -> None:
    hub: ApprovalHub = app.state.hub
    assert hub.cloisters() == []
    add_token(settings, "api")
    add_token(settings, "web", project="web")
    pending(client)
    assert hub.cloisters() == ["api", "web"]


def test_a_token_that_goes_drops_its_items_and_session_rules(
    client: TestClient, settings: ApprovalSettings
) -> None:
    add_token(settings, "api")
    add_token(settings, "api-other")
    allow_for_the_session(client, "api", "kept.example.com")
    allow_for_the_session(client, "api-other", "other.example.com")
    assert session_rules(client) == [
        "session (api): kept.example.com",
        "session (api-other): other.example.com",
    ]
    domain = hold(client, "domains", "api", "held.example.com")
    command = hold(client, "commands", "api", "make")
    survivor = hold(client, "domains", "api-other", "held.example.com")
    wait_until(
        lambda: len(pending(client)["domains"]) == 2 and pending(client)["commands"],
        TIMEOUT,
        "two held domains and a command",
    )
    dropped_id = next(i["id"] for i in pending(client)["domains"] if i["cloister"] == "api")

    remove_token_file(settings.paths.tokens_dir, "api")  # what `cloister stop` does

    left = pending(client)
    assert [item["cloister"] for item in left["domains"]] == ["api-other"]
    assert left["commands"] == []
    denied = domain.join().json()
    assert denied["action"] == "deny"
    assert "cloister 'api' was stopped" in denied["reason"]
    assert command.join().json()["action"] == "deny"
    late = client.post(
        f"/api/v1/domains/{dropped_id}/decision", json={"action": "allow", "scope": "once"}
    )
    assert late.status_code == 409
    assert "its cloister was stopped" in late.json()["error"]
    assert session_rules(client) == ["session (api-other): other.example.com"]
    assert not settings.paths.session_decisions("api").exists()
    assert settings.paths.session_decisions("api-other").exists()
    (item,) = left["domains"]
    client.post(f"/api/v1/domains/{item['id']}/decision", json={"action": "deny", "scope": "once"})
    assert survivor.join().json()["action"] == "deny"
    assert settings.audit_log is not None
    events = [json.loads(line)["event"] for line in settings.audit_log.read_text().splitlines()]
    assert "approval.domain.dropped" in events
    assert "approval.command.dropped" in events


def test_a_replaced_token_is_a_new_session(client: TestClient, settings: ApprovalSettings) -> None:
    add_token(settings, "api")
    allow_for_the_session(client, "api", "once-more.example.com")
    assert session_rules(client) == ["session (api): once-more.example.com"]
    add_token(settings, "api")  # stopped and started again between two looks
    assert session_rules(client) == []


def test_the_hub_notices_a_stopped_cloister_without_being_asked(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    settings = make_settings(tmp_path, reload_interval=0.05)
    add_token(settings, "api")
    app = create_app(settings)
    hub: ApprovalHub = app.state.hub
    with TestClient(app, base_url=UI, headers=HUMAN_HEADERS) as client:
        waiting = hold(client, "domains", "api", "quiet.example.com")
        wait_until(lambda: hub.pending_count() == 1, TIMEOUT, "the held domain")
        remove_token_file(settings.paths.tokens_dir, "api")
        assert waiting.join().json()["action"] == "deny"  # no request asked the hub
        assert hub.pending_count() == 0


def test_requests_of_cloisters_without_a_token_file_are_held(client: TestClient) -> None:
    # The service caller vouches for the cloister; the hub only forgets the ones that go.
    waiting = hold(client, "domains", "unknown", "x.example.com")
    (item,) = wait_until(lambda: pending(client)["domains"], TIMEOUT, "the held domain")
    client.post(f"/api/v1/domains/{item['id']}/decision", json={"action": "deny", "scope": "once"})
    assert waiting.join().json()["action"] == "deny"


def test_the_token_routes_are_gone(client: TestClient) -> None:
    assert client.get("/api/v1/tokens").status_code == 404
    assert client.post("/api/v1/tokens", json={}).status_code == 404
    assert client.delete("/api/v1/tokens/api").status_code == 404
