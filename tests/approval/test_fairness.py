"""Fair shares of the hub: a cloister's held requests are capped, and a caller that
goes away withdraws its item (the ASGI ``http.disconnect`` of its request)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import MutableMapping
from functools import partial
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from cloister_approval.app import create_app
from cloister_approval.settings import ApprovalSettings
from tests.approval.conftest import (
    CREDENTIAL,
    HUMAN_HEADERS,
    SERVICE_HEADERS,
    TIMEOUT,
    UI,
    Background,
    LiveHub,
    make_settings,
)
from tests.waiting import wait_until


def share_settings(tmp_path: Path, share: int) -> ApprovalSettings:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(
        f"proxy:\n  max_held_per_cloister: {share}\n", encoding="utf-8"
    )
    return make_settings(tmp_path)


def ask_domain(client: TestClient, cloister: str, host: str) -> Any:
    return client.post(
        "/api/v1/service/domains",
        json={"cloister": cloister, "project": "api", "host": host, "port": 443},
        headers=SERVICE_HEADERS,
    )


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "audit.log").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_a_cloister_past_its_share_is_refused_at_once_and_others_are_not(
    tmp_path: Path,
) -> None:
    app = create_app(share_settings(tmp_path, 2))
    with TestClient(app, base_url=UI, headers=HUMAN_HEADERS) as client:
        held = [Background(partial(ask_domain, client, "busy", f"h{n}.test")) for n in range(2)]
        wait_until(
            lambda: len(client.get("/api/v1/pending").json()["domains"]) == 2,
            TIMEOUT,
            "two held domains",
        )

        refused = ask_domain(client, "busy", "h3.test")
        assert refused.status_code == 429
        error = refused.json()
        assert "cloister 'busy' already has 2 requests waiting for a human" in error["error"]
        assert "max_held_per_cloister: 2" in error["error"]
        assert error["detail"] == {"cloister": "busy", "held": 2, "limit": 2}
        # Commands count in the same share.
        command = client.post(
            "/api/v1/service/commands",
            json={
                "cloister": "busy",
                "project": "api",
                "argv": ["gh", "pr", "list"],
                "command": "gh pr list",
                "cwd": "/w",
            },
            headers=SERVICE_HEADERS,
        )
        assert command.status_code == 429
        # The same question again joins the held item: no new one, no refusal.
        joined = Background(lambda: ask_domain(client, "busy", "h0.test"))

        # Another cloister is not affected.
        other = Background(lambda: ask_domain(client, "quiet", "q.test"))
        wait_until(
            lambda: any(
                item["cloister"] == "quiet"
                for item in client.get("/api/v1/pending").json()["domains"]
            ),
            TIMEOUT,
            "the other cloister's held domain",
        )
        pending = client.get("/api/v1/pending").json()["domains"]
        assert sorted(item["host"] for item in pending) == ["h0.test", "h1.test", "q.test"]
        for item in pending:
            client.post(
                f"/api/v1/domains/{item['id']}/decision", json={"action": "deny", "scope": "once"}
            )
        for waiting in (*held, joined, other):
            assert waiting.join().json()["action"] == "deny"
    refusals = [line for line in audit(tmp_path) if line["event"].endswith(".refused")]
    assert [(line["event"], line["reason"], line["held"], line["limit"]) for line in refusals] == [
        ("approval.domain.refused", "too-many-held", 2, 2),
        ("approval.command.refused", "too-many-held", 2, 2),
    ]


def test_a_caller_that_goes_away_withdraws_its_item(tmp_path: Path) -> None:
    """Driven as a server drives the app: the body, then ``http.disconnect``."""
    settings = share_settings(tmp_path, 16)
    app = create_app(settings)
    hub = app.state.hub

    async def scenario() -> None:
        gone = asyncio.Event()
        body = json.dumps(
            {"cloister": "api", "project": "api", "host": "gone.test", "port": 443}
        ).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/api/v1/service/domains",
            "raw_path": b"/api/v1/service/domains",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1:9999"),
                (b"content-type", b"application/json"),
                (b"authorization", f"Bearer {CREDENTIAL}".encode()),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("172.18.0.5", 40000),
            "server": ("127.0.0.1", 9999),
            "state": {},
        }
        with hub.events() as events:
            async with asyncio.TaskGroup() as group:
                call = group.create_task(app(scope, receive, send))
                added = await asyncio.wait_for(events.get(), 5)
                assert added.name == "domain-added"
                assert [item.host for item in hub.pending().domains] == ["gone.test"]
                gone.set()
                removed = await asyncio.wait_for(events.get(), 5)
                await call
        assert removed.name == "domain-removed"
        assert removed.data["id"] == added.data["item"]["id"]
        assert removed.data["outcome"] == "withdrawn"
        assert removed.data["pending"] == 0
        assert hub.pending().domains == []
        assert sent[0]["status"] == 499  # never read: the caller has gone

    asyncio.run(scenario())
    withdrawn = [line for line in audit(tmp_path) if line["event"] == "approval.domain.withdrawn"]
    assert [line["cloister"] for line in withdrawn] == ["api"]


def test_a_caller_hanging_up_on_a_real_server_withdraws_its_item(tmp_path: Path) -> None:
    """uvicorn notices the closed connection and the app hears ``http.disconnect``."""
    (tmp_path / "hub" / "config").mkdir(parents=True)
    hub = LiveHub(tmp_path / "hub")
    try:
        body = json.dumps(
            {"cloister": "api", "project": "api", "host": "hangup.test", "port": 443}
        ).encode()
        head = (
            f"POST /api/v1/service/domains HTTP/1.1\r\nHost: 127.0.0.1:{hub.port}\r\n"
            f"Authorization: Bearer {CREDENTIAL}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        with hub.human() as human:
            with socket.create_connection(("127.0.0.1", hub.port), timeout=10) as caller:
                caller.sendall(head + body)
                (item,) = wait_until(
                    lambda: human.get("/api/v1/pending").json()["domains"],
                    TIMEOUT,
                    "the held domain",
                )
                assert item["host"] == "hangup.test"
            wait_until(
                lambda: human.get("/api/v1/pending").json()["domains"] == [],
                TIMEOUT,
                "the withdrawn domain to go",
            )
            stale = human.post(
                f"/api/v1/domains/{item['id']}/decision", json={"action": "allow", "scope": "once"}
            )
            assert stale.status_code == 409
            assert "withdrawn: its requester went away" in stale.json()["error"]
    finally:
        hub.stop()
