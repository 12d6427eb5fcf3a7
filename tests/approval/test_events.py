"""The Server-Sent Events stream, against a real server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from cloister_core.hubauth import mint_ticket, revoke_sessions
from tests.approval.conftest import HUB_SECRET, SERVICE_HEADERS, Background, LiveHub


def events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    name = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, json.loads(line.removeprefix("data: "))


def test_stream_carries_items_with_rendered_html_and_decisions(live_hub: LiveHub) -> None:
    with (
        live_hub.human(timeout=10) as client,
        client.stream("GET", "/api/v1/events") as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        received = events(stream)
        assert next(received) == ("hello", {"pending": 0})
        waiting = Background(
            lambda: httpx.post(
                f"{live_hub.url}/api/v1/service/domains",
                json={"cloister": "api", "project": "api", "host": "new.example.com", "port": 443},
                headers=SERVICE_HEADERS,
                timeout=10,
            )
        )
        name, added = next(received)
        assert name == "domain-added"
        assert added["item"]["host"] == "new.example.com"
        assert added["pending"] == 1
        assert f'id="domain-{added["item"]["id"]}"' in added["html"]
        assert "Allow new.example.com (project)" in added["html"]
        decided = client.post(
            f"/api/v1/domains/{added['item']['id']}/decision",
            json={"action": "allow", "scope": "once"},
        )
        assert decided.status_code == 200
        assert next(received)[0] == "domain-removed"
        name, decision = next(received)
        assert name == "decision"
        assert decision["decision"]["summary"] == "Allowed new.example.com once"
        assert "Allowed new.example.com once" in decision["html"]
        assert waiting.join().json()["action"] == "allow"


def test_slow_subscribers_are_dropped_not_buffered() -> None:
    from cloister_approval.broadcast import QUEUE_LIMIT, Broadcaster, Event

    broadcaster = Broadcaster()
    with broadcaster.subscribe() as queue:
        for index in range(QUEUE_LIMIT + 5):
            broadcaster.publish(Event("x", {"i": index}))
        assert broadcaster.subscribers == 0
        assert queue.qsize() == QUEUE_LIMIT


def test_a_browser_session_reads_the_stream_until_it_is_logged_out(tmp_path: Path) -> None:
    sessions = tmp_path / "hub-sessions"
    hub = LiveHub(tmp_path, hub_sessions_dir=sessions)
    try:
        ticket = mint_ticket(HUB_SECRET, now=time.time())
        login = httpx.post(f"{hub.url}/api/v1/login", json={"ticket": ticket}, timeout=10)
        browser = {"Authorization": f"Bearer {login.json()['token']}"}
        with (
            httpx.Client(base_url=hub.url, headers=browser, timeout=10) as client,
            client.stream("GET", "/api/v1/events") as stream,
        ):
            received = events(stream)
            assert next(received) == ("hello", {"pending": 0})
            revoke_sessions(sessions, now=time.time())
            # The next event is not delivered: the stream ends instead.
            waiting = Background(
                lambda: httpx.post(
                    f"{hub.url}/api/v1/service/domains",
                    json={"cloister": "c", "project": "p", "host": "after.example", "port": 443,
                          "wait_seconds": 0.5},
                    headers=SERVICE_HEADERS,
                    timeout=10,
                )
            )  # fmt: skip
            assert list(received) == []
            assert waiting.join().json()["action"] == "timeout"
            again = client.get("/api/v1/events")
            assert again.status_code == 401
            assert "logged out" in again.json()["detail"]
    finally:
        hub.stop()
