"""Fair shares of the approval hub, end to end on loopback: the real proxy asks the real
hub (uvicorn). One cloister's held requests are capped, the surplus is refused at once
with the reason, another cloister's request still reaches the hub, and a client that
hangs up withdraws its pending item."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.approval.conftest import CREDENTIAL, LiveHub
from tests.proxy.support import (
    TIMEOUT,
    ProxyHarness,
    connect_request,
    read_response,
)
from tests.waiting import wait_until


def proxy_config(share: int) -> str:
    return (
        "proxy:\n  allow: []\n  allowed_ports: [443]\n  approval_timeout: 30s\n"
        f"  max_held_per_cloister: {share}\n"
    )


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[LiveHub]:
    live = LiveHub(tmp_path / "hub")
    yield live
    live.stop()


def pending(human: httpx.Client) -> list[dict[str, Any]]:
    domains: list[dict[str, Any]] = human.get("/api/v1/pending").json()["domains"]
    return domains


def hold(harness: ProxyHarness, token: str, host: str) -> socket.socket:
    sock = harness.connect()
    sock.sendall(connect_request(f"{host}:443", token))
    return sock


def refused(harness: ProxyHarness, token: str, host: str) -> tuple[int, str, bytes]:
    with hold(harness, token, host) as sock:
        response = read_response(sock)
    return response.status, response.headers.get("x-cloister-reason", ""), response.body


def test_a_cloisters_surplus_is_refused_and_others_still_reach_the_hub(
    harness: ProxyHarness, hub: LiveHub
) -> None:
    harness.write_config(proxy_config(3))
    busy = harness.add_token("busy", "api")
    quiet = harness.add_token("quiet", "web")
    harness.start(hub_url=hub.url, approval_credential=CREDENTIAL)
    with hub.human() as human:
        held = [hold(harness, busy.secret, f"h{n}.test") for n in range(3)]
        try:
            wait_until(lambda: len(pending(human)) == 3, TIMEOUT, "3 held items")
            status, reason, body = refused(harness, busy.secret, "h3.test")
            assert (status, reason) == (429, "too-many-held")
            assert body == (
                b"cloister: h3.test is not on the allowlist and 3 requests of this cloister"
                b" already wait for a human in the approval UI (proxy.max_held_per_cloister:"
                b" 3); decide those first or retry later\n"
            )
            other = hold(harness, quiet.secret, "q.test")
            held.append(other)
            wait_until(
                lambda: any(item["cloister"] == "quiet" for item in pending(human)),
                TIMEOUT,
                "the other cloister's item",
            )
            # A held client hangs up: its item leaves the hub, and its place is free.
            gone = held.pop(0)
            gone.close()
            wait_until(
                lambda: "h0.test" not in {item["host"] for item in pending(human)},
                TIMEOUT,
                "the withdrawn item",
            )
            held.append(hold(harness, busy.secret, "h4.test"))
            wait_until(
                lambda: (
                    {item["host"] for item in pending(human)}
                    == {"h1.test", "h2.test", "h4.test", "q.test"}
                ),
                TIMEOUT,
                "h4 in h0's place",
            )
            for item in pending(human):
                human.post(
                    f"/api/v1/domains/{item['id']}/decision",
                    json={"action": "deny", "scope": "once"},
                ).raise_for_status()
            for sock in held:
                assert read_response(sock).status == 403
        finally:
            for sock in held:
                sock.close()
    lines = harness.audit()
    too_many = [line for line in lines if line["reason"] == "too-many-held"]
    assert [(line["cloister"], line["host"], line["status"]) for line in too_many] == [
        ("busy", "h3.test", 429)
    ]
    gone_lines = [line for line in lines if line["reason"] == "client-gone"]
    assert [(line["cloister"], line["host"], line["status"]) for line in gone_lines] == [
        ("busy", "h0.test", 499)
    ]


def test_the_hubs_own_refusal_reaches_the_client(tmp_path: Path, harness: ProxyHarness) -> None:
    # The hub counts hostexec commands too: its share can be used up before the proxy's.
    hub_dir = tmp_path / "small-hub"
    (hub_dir / "config").mkdir(parents=True)
    (hub_dir / "config" / "config.yaml").write_text(proxy_config(1), encoding="utf-8")
    small = LiveHub(hub_dir)
    try:
        harness.write_config(proxy_config(5))
        record = harness.add_token("busy", "api")
        harness.start(hub_url=small.url, approval_credential=CREDENTIAL)
        with small.human() as human, hold(harness, record.secret, "h0.test") as first:
            wait_until(lambda: len(pending(human)) == 1, TIMEOUT, "the held item")
            status, reason, body = refused(harness, record.secret, "h1.test")
            assert (status, reason) == (429, "too-many-held")
            assert b"the approval hub refused to hold another request (cloister 'busy'" in body
            assert b"max_held_per_cloister: 1" in body
            first.close()
            wait_until(lambda: pending(human) == [], TIMEOUT, "the withdrawn item")
    finally:
        small.stop()
