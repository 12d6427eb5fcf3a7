"""The real proxy asking the real approval hub: a held CONNECT released by a human."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from cloister_core.config import load_decision_file
from tests.approval.conftest import CREDENTIAL, TIMEOUT, Background, LiveHub
from tests.proxy.support import LOCAL_ALLOW, ProxyHarness, ThreadedServer, echo, open_tunnel
from tests.waiting import wait_until


def proxy_allows(proxy: ProxyHarness, host: str, port: int) -> bool:
    """Whether the running proxy's current policy for project "api" allows host:port."""
    assert proxy.server is not None
    policy = proxy.server._state.policies.get("api")
    return policy is not None and policy.domains.decide(host, port).action == "allow"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[ProxyHarness, LiveHub, ThreadedServer]]:
    upstream = ThreadedServer(echo)
    hub = LiveHub(tmp_path)
    proxy = ProxyHarness(tmp_path)  # the same config dir: the hub writes, the proxy reads
    proxy.write_config(
        f"proxy:\n  allow: []\n  allowed_ports: [{upstream.port}]\n  {LOCAL_ALLOW}\n"
    )
    proxy.add_token("api-main", "api")
    proxy.start(hub_url=hub.url, approval_credential=SecretStr(CREDENTIAL))
    yield proxy, hub, upstream
    proxy.stop()
    hub.stop()
    upstream.close()


def test_a_held_request_is_released_by_a_project_decision(
    stack: tuple[ProxyHarness, LiveHub, ThreadedServer],
) -> None:
    proxy, hub, upstream = stack
    record = proxy.tokens["api-main"]
    target = f"localhost:{upstream.port}"
    with hub.human() as human:
        held = Background(lambda: open_tunnel(proxy, target, record.secret))
        (item,) = wait_until(
            lambda: human.get("/api/v1/pending").json()["domains"], TIMEOUT, "the held domain"
        )
        assert (item["cloister"], item["project"], item["host"]) == ("api-main", "api", "localhost")
        decision = human.post(
            f"/api/v1/domains/{item['id']}/decision", json={"action": "allow", "scope": "project"}
        ).json()
        sock, response = held.join()
        sock.close()
        assert response.status == 200
        assert decision["file"] == str(proxy.config_dir / "decisions" / "projects" / "api.yaml")
        assert load_decision_file(Path(decision["file"])).allow[0].domain == "localhost"
        # Persisted: the next request goes straight through, nobody is asked.
        sock, response = open_tunnel(proxy, target, record.secret)
        sock.close()
        assert response.status == 200
        assert human.get("/api/v1/pending").json()["domains"] == []
        # Undo removes the entry; the proxy reloads it and holds the host again.
        human.post(f"/api/v1/decisions/{decision['id']}/undo")
        wait_until(
            lambda: not proxy_allows(proxy, "localhost", upstream.port),
            TIMEOUT,
            "the proxy to hold the host again",
        )
        again = Background(lambda: open_tunnel(proxy, target, record.secret))
        (item,) = wait_until(
            lambda: human.get("/api/v1/pending").json()["domains"], TIMEOUT, "the held domain"
        )
        human.post(
            f"/api/v1/domains/{item['id']}/decision", json={"action": "deny", "scope": "once"}
        )
        sock, response = again.join()
        sock.close()
        assert (response.status, response.headers["x-cloister-reason"]) == (403, "denied")
