"""The CLI's client of the approval hub, against the real hub served by uvicorn.

Held requests are made the way the proxy and the gateway make them (the service API,
with the stack credential); the CLI then sees and decides them as the human would,
with the hub secret.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from cloister_cli.stack.hub_client import NOT_STARTED, HubClient, HubError, read_hub_secret
from cloister_core.paths import CloisterPaths
from tests.approval.conftest import HUB_SECRET, SERVICE_HEADERS, TIMEOUT, Background, LiveHub
from tests.waiting import free_port, wait_until


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    """One hub for the module: each test leaves nothing pending, and the domains of
    different tests differ (a global or session decision outlives its test)."""
    live = LiveHub(tmp_path_factory.mktemp("hub"))
    yield live
    live.stop()


@pytest.fixture
def client(hub: LiveHub) -> HubClient:
    return HubClient(hub.url, HUB_SECRET)


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


def test_pending_is_empty_at_first(client: HubClient) -> None:
    assert client.pending() == {"domains": [], "commands": []}


def test_the_secret_is_what_lets_the_client_in(hub: LiveHub) -> None:
    with pytest.raises(HubError) as caught:
        HubClient(hub.url, "not-the-secret").pending()
    message = str(caught.value)
    assert message.startswith(
        f"what answers at {hub.url} cannot prove it holds this machine's hub secret (HTTP 200)"
    )
    assert "\n" not in message


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
    (item,) = wait_until(lambda: client.pending()["domains"], TIMEOUT, "the held domain")
    assert (item["host"], item["port"], item["cloister"]) == (host, 443, "api")
    decision = client.decide(item["id"], allow=allow, scope=scope, wildcard=wildcard, reason=None)
    assert decision["summary"] == summary
    released = waiting.join().json()
    assert (released["action"], released["scope"]) == ("allow" if allow else "deny", scope)
    assert client.pending() == {"domains": [], "commands": []}


def test_approve_a_command(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_command(hub, ["git", "push", "origin", "main"])
    (item,) = wait_until(lambda: client.pending()["commands"], TIMEOUT, "the held command")
    assert item["argv"] == ["git", "push", "origin", "main"]
    decision = client.decide(item["id"], allow=True, scope="once", wildcard=False, reason=None)
    assert decision["summary"] == "Approved git push origin main once, in /home/me/api"
    assert waiting.join().json() == {"action": "approve", "reason": None}


def test_a_command_for_the_session_by_a_prefix_of_its_id(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_command(hub, ["make", "deploy"])
    (item,) = wait_until(lambda: client.pending()["commands"], TIMEOUT, "the held command")
    decision = client.decide(item["id"][:4], allow=True, scope="session", wildcard=False,
                             reason=None)  # fmt: skip
    assert decision["summary"] == "Approved make deploy for the session of api, in /home/me/api"
    assert decision["undoable"] is True
    assert waiting.join().json()["action"] == "approve"


@pytest.mark.parametrize(
    ("allow", "scope", "wildcard", "problem"),
    [
        (True, "global", False, "--scope global is not for commands (once, session or project)"),
        (False, "session", False, "--scope session is not for commands (once only)"),
        (True, "once", True, "--wildcard is for domains"),
    ],
)
def test_what_a_command_cannot_be_given(
    hub: LiveHub, client: HubClient, allow: bool, scope: str, wildcard: bool, problem: str
) -> None:
    waiting = hold_command(hub, ["make", "clean"])
    (item,) = wait_until(lambda: client.pending()["commands"], TIMEOUT, "the held command")
    with pytest.raises(HubError) as caught:
        client.decide(item["id"], allow=allow, scope=scope, wildcard=wildcard, reason=None)
    assert str(caught.value) == f"{item['id']} is a command (make clean): {problem}"
    client.decide(item["id"], allow=False, scope="once", wildcard=False, reason=None)
    waiting.join()


class FixedPending(HubClient):
    """The client's own id resolution over a fixed pending list."""

    def pending(self) -> dict[str, list[dict[str, Any]]]:
        return {"domains": [{"id": "3f2a9c"}, {"id": "3f2b11"}], "commands": [{"id": "77aa01"}]}


@pytest.mark.parametrize(
    ("prefix", "found"),
    [("3f2a", "3f2a9c"), ("3f2b11", "3f2b11"), ("7", "77aa01")],
)
def test_a_unique_prefix_names_its_item(prefix: str, found: str) -> None:
    _kind, item = FixedPending("http://127.0.0.1:9", "s")._resolve(prefix)
    assert item["id"] == found


@pytest.mark.parametrize(
    ("prefix", "problem"),
    [
        ("3f2", "'3f2' names more than one pending item (3f2a9c, 3f2b11); type more of it"),
        ("", "nothing pending with id '' (`cloister approvals list`)"),
        ("3f2a9c0", "nothing pending with id '3f2a9c0' (`cloister approvals list`)"),
    ],
)
def test_an_ambiguous_or_unknown_prefix_is_refused(prefix: str, problem: str) -> None:
    with pytest.raises(HubError) as caught:
        FixedPending("http://127.0.0.1:9", "s")._resolve(prefix)
    assert str(caught.value) == problem


def test_an_unknown_id_is_an_error(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_domain(hub, "api.unknown-id.test")
    (item,) = wait_until(lambda: client.pending()["domains"], TIMEOUT, "the held domain")
    with pytest.raises(HubError) as caught:
        client.decide("nope", allow=True, scope="once", wildcard=False, reason=None)
    assert str(caught.value) == "nothing pending with id 'nope' (`cloister approvals list`)"
    assert client.pending()["domains"] == [item]  # nothing was decided
    client.decide(item["id"], allow=False, scope="once", wildcard=False, reason=None)
    waiting.join()


def test_a_refusal_carries_the_hubs_message(hub: LiveHub, client: HubClient) -> None:
    waiting = hold_domain(hub, host="203.0.113.5")  # an address has no wildcard
    (item,) = wait_until(lambda: client.pending()["domains"], TIMEOUT, "the held domain")
    with pytest.raises(HubError, match=r"^the hub refused: 203\.0\.113\.5 has no wildcard form"):
        client.decide(item["id"], allow=True, scope="once", wildcard=True, reason=None)
    client.decide(item["id"], allow=False, scope="once", wildcard=False, reason=None)
    waiting.join()


def test_the_login_url_is_one_the_hub_accepts_once(hub: LiveHub, client: HubClient) -> None:
    url = client.login_url()
    assert url.startswith(f"{hub.url}/login?ticket=")
    ticket = parse_qs(urlsplit(url).query)["ticket"][0]
    with httpx.Client(base_url=hub.url) as browser:
        assert browser.get(url).status_code == 200  # the page's shell: it trades the ticket
        traded = browser.post("/api/v1/login", json={"ticket": ticket})
        assert traded.status_code == 200, traded.text
        assert not browser.cookies  # the session is the token the page keeps, no cookie
        assert browser.get("/api/v1/pending").status_code == 401
        session = {"Authorization": f"Bearer {traded.json()['token']}"}
        assert browser.get("/api/v1/pending", headers=session).status_code == 200
        assert browser.post("/api/v1/login", json={"ticket": ticket}).status_code == 401  # used


def test_a_hub_that_is_down_is_one_short_line() -> None:
    port = free_port()
    client = HubClient(f"http://127.0.0.1:{port}", HUB_SECRET, timeout=2)
    with pytest.raises(HubError) as caught:
        client.pending()
    assert str(caught.value) == (
        f"the approval hub at http://127.0.0.1:{port} is not reachable (connection refused);"
        " is the guardian running? (`cloister guardian status`)"
    )


def test_something_else_at_the_address_is_one_line() -> None:
    class NotTheHub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotTheHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(HubError) as caught:
            HubClient(url, HUB_SECRET).pending()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert str(caught.value) == (
        f"what answers at {url} cannot prove it holds this machine's hub secret (HTTP 200):"
        " a guardian started with another secret (`cloister guardian stop`, then `start`),"
        " or another program on guardian.ui_port; nothing was sent to it"
    )


@pytest.mark.parametrize("url", ["127.0.0.1:9999", "ftp://x", "http://", ""])
def test_a_bad_hub_url_is_refused(url: str) -> None:
    with pytest.raises(HubError, match=r"^not a hub URL: "):
        HubClient(url, HUB_SECRET)


@pytest.mark.parametrize(
    "url", ["http://hub.example:9999", "http://192.0.2.7:9999", "http://[fd00::1]/"]
)
def test_the_secret_never_goes_in_clear_text_to_another_machine(url: str) -> None:
    with pytest.raises(HubError, match=r"^refusing to send the hub secret in clear text to "):
        HubClient(url, HUB_SECRET)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9999", "http://localhost:1", "http://[::1]:9", "https://hub.example"]
)
def test_loopback_or_https_hubs_are_fine(url: str) -> None:
    assert HubClient(url, HUB_SECRET).base == url.rstrip("/")


def test_the_secret_comes_from_the_data_dir(tmp_path: Path) -> None:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    with pytest.raises(HubError) as caught:
        read_hub_secret(paths)
    assert str(caught.value) == NOT_STARTED
    assert NOT_STARTED == (
        "the guardian has not been started on this machine: `cloister guardian start`"
    )
    secret_file = paths.guardian_dir / "hub.secret"
    secret_file.parent.mkdir(parents=True)
    secret_file.write_text("\n", encoding="utf-8")
    with pytest.raises(HubError, match="is empty"):
        read_hub_secret(paths)
    secret_file.write_text("abc\n", encoding="utf-8")
    assert read_hub_secret(paths) == "abc"
    client = HubClient.for_machine(paths, 8999)
    assert client.base == "http://127.0.0.1:8999"
    assert HubClient.for_machine(paths, 8999, "http://localhost:7000/").base == (
        "http://localhost:7000"
    )
