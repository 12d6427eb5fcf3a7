"""The CLI's client of the approval hub, against the real hub served by uvicorn.

Held requests are made the way the proxy and the gateway make them (the service API,
with the stack credential); the CLI then sees and decides them as the human would.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloister_cli.hub_client import HubClient, HubError
from cloister_core.tokens import TokenRecord
from tests.approval.conftest import SERVICE_HEADERS, Background, LiveHub, wait_for


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    """One hub for the module: each test leaves nothing pending, and the domains of
    different tests differ (a global or session decision outlives its test)."""
    live = LiveHub(tmp_path_factory.mktemp("hub"))
    yield live
    live.stop()


@pytest.fixture
def client(hub: LiveHub) -> HubClient:
    return HubClient(hub.port)


def registered(hub: LiveHub) -> list[dict[str, Any]]:
    response = httpx.get(f"{hub.url}/api/v1/tokens")
    response.raise_for_status()
    tokens: list[dict[str, Any]] = response.json()
    return tokens


def hold(hub: LiveHub, kind: str, body: dict[str, Any]) -> Background:
    """A request held by the hub until it is decided, as the proxy or gateway makes it."""
    url = f"{hub.url}/api/v1/service/{kind}"
    return Background(lambda: httpx.post(url, json=body, headers=SERVICE_HEADERS, timeout=10))


def hold_domain(hub: LiveHub, host: str) -> Background:
    return hold(hub, "domains", {"cloister": "api", "project": "api", "host": host, "port": 443})


def hold_command(hub: LiveHub, argv: list[str]) -> Background:
    body = {
        "cloister": "api",
        "project": "api",
        "argv": argv,
        "command": " ".join(argv),
        "cwd": "/home/me/api",
    }
    return hold(hub, "commands", body)


def test_register_and_revoke(hub: LiveHub, client: HubClient) -> None:
    record = TokenRecord.create(
        cloister="api-feature", project="api", branch="feature", path=Path("/home/me/api")
    )
    client.register(record)
    (entry,) = registered(hub)
    assert {key: entry[key] for key in ("cloister", "project", "branch", "path")} == {
        "cloister": "api-feature",
        "project": "api",
        "branch": "feature",
        "path": "/home/me/api",
    }
    client.register(record)  # again: replaces, no duplicate
    assert len(registered(hub)) == 1
    client.revoke("api-feature")
    assert registered(hub) == []
    with pytest.raises(HubError, match=r"^the hub refused: no registered cloister 'api-feature'$"):
        client.revoke("api-feature")


def test_pending_is_empty_at_first(client: HubClient) -> None:
    assert client.pending() == {"domains": [], "commands": []}


@pytest.mark.parametrize(
    ("host", "allow", "scope", "wildcard", "summary"),
    [
        ("api.one.test", True, "once", False, "Allowed api.one.test once"),
        ("api.two.test", False, "once", False, "Blocked api.two.test once"),
        ("api.three.test", True, "session", True, "Allowed *.three.test for the session of api"),
        ("api.four.test", False, "global", True, "Blocked *.four.test for every project"),
    ],
)
def test_decide_a_domain(
    hub: LiveHub,
    client: HubClient,
    host: str,
    allow: bool,
    scope: str,
    wildcard: bool,
    summary: str,
) -> None:
    waiting = hold_domain(hub, host)
    (item,) = wait_for(lambda: client.pending()["domains"])
    assert (item["host"], item["port"], item["cloister"]) == (host, 443, "api")
    decision = client.decide(item["id"], allow=allow, scope=scope, wildcard=wildcard, reason=None)
    assert decision["summary"] == summary
    released = waiting.join().json()
    assert (released["action"], released["scope"]) == ("allow" if allow else "deny", scope)
    assert client.pending() == {"domains": [], "commands": []}


def test_approve_a_command(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_command(hub, ["git", "push", "origin", "main"])
    (item,) = wait_for(lambda: client.pending()["commands"])
    assert item["argv"] == ["git", "push", "origin", "main"]
    decision = client.decide(item["id"], allow=True, scope="once", wildcard=False, reason=None)
    assert decision["summary"] == "Approved `git push origin main` in /home/me/api"
    assert waiting.join().json() == {"action": "approve", "reason": None}


def test_deny_a_command_with_a_reason(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_command(hub, ["rm", "-rf", "/"])
    (item,) = wait_for(lambda: client.pending()["commands"])
    client.decide(item["id"], allow=False, scope="once", wildcard=False, reason="not today")
    assert waiting.join().json() == {"action": "deny", "reason": "not today"}


def test_an_unknown_id_is_an_error(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_domain(hub, "api.unknown-id.test")
    (item,) = wait_for(lambda: client.pending()["domains"])
    with pytest.raises(HubError) as caught:
        client.decide("nope", allow=True, scope="once", wildcard=False, reason=None)
    assert str(caught.value) == "nothing pending with id 'nope' (`cloister approvals list`)"
    assert client.pending()["domains"] == [item]  # nothing was decided
    client.decide(item["id"], allow=False, scope="once", wildcard=False, reason=None)
    waiting.join()


def test_a_refusal_carries_the_hubs_message(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_domain(hub, host="203.0.113.5")  # an address has no wildcard
    (item,) = wait_for(lambda: client.pending()["domains"])
    with pytest.raises(HubError, match=r"^the hub refused: "):
        client.decide(item["id"], allow=True, scope="once", wildcard=True, reason=None)
    client.decide(item["id"], allow=False, scope="once", wildcard=False, reason=None)
    waiting.join()


def test_a_hub_that_is_down() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = HubClient(port, timeout=2)
    for call in (client.pending, lambda: client.revoke("api")):
        with pytest.raises(HubError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f"the approval hub at http://127.0.0.1:{port} is not reachable")
        assert message.endswith("is the guardian running? (`cloister guardian status`)")
