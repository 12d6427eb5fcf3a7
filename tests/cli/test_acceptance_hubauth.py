"""The approval hub's browser login is bound to the hub's origin (issue 19, item 2).

A real guardian and a real cloister whose agent serves a page through ``cloister
port``. The human's Chromium is logged in to the hub the documented way (``cloister
guardian open --no-browser`` and its printed link). The human then opens the agent's
page as ``http://localhost:PORT/``; it redirects to ``http://127.0.0.1:PORT/`` (the
same host as the hub, another port: where a cookie of the hub's would arrive). There
the page collects every cookie and every storage value it can read, and its server
logs every request head the browser sent it; each value is then tried against the
hub's API, as a bearer credential and as a cookie: all are 401. The page also writes
cookies and storage under the hub's names; the hub's tab keeps working afterwards.
Finally ``cloister guardian logout`` sends the hub's tab back to the login, without a
restart (the revocation file reaches the hub through its mounted directory).

The hub's own origin is never the agent's (issue 19's attack review): ``cloister port``
refuses the approval UI's port, with the guardian running and stopped; a login ticket
minted before a logout is refused; and a restart of the guardian logs the browser out
(its token from the earlier run is refused, and the tab shows the login again).

The page's server is a few lines of Perl (the slim image has Perl, not Python). It is
started, read and published through the CLI only (``cloister exec``, ``cloister port``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import httpx
import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from tests.approval.browser_support import launch_chromium
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    guardian,
)
from tests.cli.test_acceptance import Cloisters, new_repo
from tests.waiting import free_port, wait_until

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.browser]

PORT = 8000
TOKEN_KEY = "cloister.hub-session"
LOG = "/tmp/requests.log"
# HTTP/1.0, one client at a time: logs each request head, sends localhost to 127.0.0.1,
# answers anything else with the page (its first argument).
SERVER = (
    "use IO::Socket::INET; $| = 1; my $page = $ARGV[0];"
    f" my $s = IO::Socket::INET->new(LocalPort => {PORT}, Listen => 16, ReuseAddr => 1)"
    " or die $!;"
    " while (my $c = $s->accept) {"
    " my ($head, $host) = ('', '');"
    r" while (<$c>) { $head .= $_; $host = $1 if /^Host:\s*(\S+)/i; last if /^\r?\n$/ }"
    ' print "----\\n$head";'
    " if ($host =~ /^localhost(:\\d+)?$/i) {"
    r' print $c "HTTP/1.0 302 Found\r\nLocation: http://127.0.0.1$1/\r\n'
    r'Content-Length: 0\r\n\r\n" }'
    r' else { print $c "HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n'
    r'Cache-Control: no-store\r\nContent-Length: " . length($page) . "\r\n\r\n$page" }'
    " close $c }"
)


def attacker_page(hub_port: int) -> str:
    """What the agent serves: takes what it can, then plants values under the hub's names."""
    script = f"""
const loot = {{ cookies: document.cookie, local: {{}}, session: {{}} }};
for (let i = 0; i < localStorage.length; i++) {{
  const key = localStorage.key(i); loot.local[key] = localStorage.getItem(key);
}}
for (let i = 0; i < sessionStorage.length; i++) {{
  const key = sessionStorage.key(i); loot.session[key] = sessionStorage.getItem(key);
}}
for (const name of ["cloister_hub_{hub_port}", "cloister_hub_80", "{TOKEN_KEY}"]) {{
  document.cookie = `${{name}}=planted; path=/; max-age=3600`;
  document.cookie = `${{name}}=planted; path=/; domain=127.0.0.1; max-age=3600`;
}}
localStorage.setItem("{TOKEN_KEY}", "browser-session.planted");
sessionStorage.setItem("{TOKEN_KEY}", "browser-session.planted");
document.getElementById("loot").textContent = JSON.stringify(loot);
"""
    return (
        "<!doctype html><html><head><title>agent's dev server</title></head>"
        f'<body><pre id="loot"></pre><script>{script}</script></body></html>'
    )


@pytest.fixture(scope="module")
def ui_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
    ui_port: int,
) -> Iterator[CloisterCli]:
    config = (
        "# Written by tests/cli/test_acceptance_hubauth.py\n"
        f"defaults:\n  image: {SLIM_IMAGE}\n  memory: 512m\n  pids: 256\n"
        f"guardian:\n  ui_port: {ui_port}\n"
    )
    root = tmp_path_factory.mktemp("cloister-hubauth")
    with guardian(docker_client, root, config, skip_or_fail) as tool:
        yield tool


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as driver:
        chromium = launch_chromium(driver)
        try:
            yield chromium
        finally:
            chromium.close()


def serve(cli: CloisterCli, name: str, page: str) -> None:
    """The agent's server, in the background inside cloister *name*, once it accepts."""
    command = f"perl -e {shlex.quote(SERVER)} {shlex.quote(page)}"
    cli.ok("exec", name, "--", "bash", "-c", f"setsid {command} >{LOG} 2>&1 </dev/null &")
    wait_until(
        lambda: (
            cli.run(
                "exec", name, "--", "bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{PORT}"
            ).returncode
            == 0
        ),
        30,
        "the server in the cloister",
    )


def candidates(loot: dict[str, object], cookies: list[str], heads: str) -> set[str]:
    """Every value the agent's page and server got hold of, whole and split up."""
    found: set[str] = set(cookies)
    for part in str(loot["cookies"]).split(";"):
        found.update({part.strip(), part.partition("=")[2].strip()})
    for store in ("local", "session"):
        values = loot[store]
        assert isinstance(values, dict)
        found.update(str(value) for value in values.values())
        found.update(str(key) for key in values)
    for line in heads.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip():
            value = value.strip()
            found.add(value)
            if name.strip().lower() in ("cookie", "authorization"):
                for part in value.replace(";", " ").split():
                    found.update({part, part.partition("=")[2]})
    return {value for value in found if value}


def test_a_page_on_another_port_gets_nothing_that_opens_the_hub(
    cli: CloisterCli, cloisters: Cloisters, browser: Browser, ui_port: int, tmp_path: Path
) -> None:
    hub = f"http://127.0.0.1:{ui_port}"
    repo, name = new_repo(tmp_path, "hubauth")
    cloisters.start(repo, name)
    serve(cli, name, attacker_page(ui_port))
    host_port = cli.json("port", name, f"{PORT}:0", "--json")["host_port"]
    assert isinstance(host_port, int)

    context = browser.new_context()
    context.set_default_timeout(20_000)
    try:
        # The human logs in the documented way: the link `guardian open` prints.
        link = cli.ok("guardian", "open", "--no-browser").stdout.strip()
        assert link.startswith(f"{hub}/login?ticket=")
        human = context.new_page()
        human.goto(link)
        human.wait_for_url(f"{hub}/")
        expect(human.locator("body")).to_have_attribute("data-live", "true")
        token = human.evaluate(f"localStorage.getItem('{TOKEN_KEY}')")
        assert isinstance(token, str)
        assert token.startswith("browser-session.")
        with httpx.Client(base_url=hub, timeout=10) as client:
            assert client.get("/api/v1/pending").status_code == 401
            works = client.get("/api/v1/pending", headers={"Authorization": f"Bearer {token}"})
            assert works.status_code == 200  # the token opens the hub: the check is real

        # The human opens the agent's page by name; it sends them to 127.0.0.1.
        agent = context.new_page()
        agent.goto(f"http://localhost:{host_port}/")
        agent.wait_for_url(f"http://127.0.0.1:{host_port}/")
        expect(agent.locator("#loot")).not_to_have_text("")
        loot = json.loads(agent.locator("#loot").inner_text())
        heads = cli.ok("exec", name, "--", "cat", LOG).stdout
        assert f"Host: localhost:{host_port}" in heads
        assert f"Host: 127.0.0.1:{host_port}" in heads
        every_cookie = [cookie["value"] for cookie in context.cookies()]
        every_cookie += [f"{cookie['name']}={cookie['value']}" for cookie in context.cookies()]
        taken = candidates(loot, every_cookie, heads)
        assert loot["local"] == {}  # this origin's storage held nothing of the hub's
        assert loot["cookies"] == ""  # nor did any cookie reach it
        assert token not in taken
        assert not [value for value in taken if token in value]

        with httpx.Client(base_url=hub, timeout=10) as client:
            for value in sorted(taken):
                for headers in (
                    {"Authorization": f"Bearer {value}"},
                    {"Cookie": value},
                    {"Cookie": f"cloister_hub_{ui_port}={value}"},
                ):
                    try:
                        response = client.get("/api/v1/pending", headers=headers)
                    except httpx.LocalProtocolError:
                        continue  # not even a valid header value: nothing was sent
                    assert response.status_code == 401, (value, headers)

        # What the page planted (cookies on 127.0.0.1, its own storage) changes nothing:
        # the hub's tab still has its token and works, live.
        planted = [cookie["name"] for cookie in context.cookies()]
        assert f"cloister_hub_{ui_port}" in planted
        human.reload()
        expect(human.locator("body")).to_have_attribute("data-live", "true")
        expect(human.locator("#login")).to_be_hidden()
        assert human.evaluate(f"localStorage.getItem('{TOKEN_KEY}')") == token
        expect(human.locator("#pending [data-empty]")).to_have_attribute("data-total", "0")

        # `cloister guardian logout`: the hub's tab is logged out, without a restart.
        cli.ok("guardian", "logout")
        human.reload()
        expect(human.locator("#login")).to_be_visible()
        expect(human.locator("#login-reason")).to_contain_text("cloister guardian logout")
        with httpx.Client(base_url=hub, timeout=10) as client:
            gone = client.get("/api/v1/pending", headers={"Authorization": f"Bearer {token}"})
            assert gone.status_code == 401
    finally:
        context.close()


def test_the_hubs_port_is_refused_and_a_restart_logs_the_browser_out(
    cli: CloisterCli, cloisters: Cloisters, browser: Browser, ui_port: int, tmp_path: Path
) -> None:
    hub = f"http://127.0.0.1:{ui_port}"
    repo, name = new_repo(tmp_path, "hubport")
    cloisters.start(repo, name)
    refusal = f"port {ui_port} on 127.0.0.1 is the approval UI's"
    # The hub's origin: a page there could read the hub's login from its storage.
    assert refusal in cli.fails("port", name, f"{PORT}:{ui_port}").stderr
    assert refusal in cli.fails("port", name, f"{PORT}:{ui_port}", "--json").stderr
    assert cli.json("port", name, "--list", "--json") == []
    # Only 127.0.0.1:<port> is the hub: localhost may be ::1, someone else's.
    with httpx.Client(timeout=10) as client:
        assert client.get(f"{hub}/", headers={"Host": f"localhost:{ui_port}"}).status_code == 403

    context = browser.new_context()
    context.set_default_timeout(20_000)
    try:
        link = cli.ok("guardian", "open", "--no-browser").stdout.strip()
        human = context.new_page()
        human.goto(link)
        human.wait_for_url(f"{hub}/")
        expect(human.locator("body")).to_have_attribute("data-live", "true")
        token = human.evaluate(f"localStorage.getItem('{TOKEN_KEY}')")
        assert isinstance(token, str)

        # A link minted before a logout is refused after it.
        early = cli.ok("guardian", "open", "--no-browser").stdout.strip()
        cli.ok("guardian", "logout")
        with httpx.Client(base_url=hub, timeout=10) as client:
            stale = client.post("/api/v1/login", json={"ticket": early.partition("ticket=")[2]})
            assert stale.status_code == 401
            assert "before `cloister guardian logout`" in stale.json()["error"]
        human.goto(cli.ok("guardian", "open", "--no-browser").stdout.strip())
        human.wait_for_url(f"{hub}/")
        expect(human.locator("body")).to_have_attribute("data-live", "true")
        token = human.evaluate(f"localStorage.getItem('{TOKEN_KEY}')")
        assert isinstance(token, str)

        # With the guardian stopped, its port is still refused (its config says it).
        cli.ok("guardian", "stop")
        assert refusal in cli.fails("port", name, f"{PORT}:{ui_port}").stderr
        cli.ok("guardian", "start", timeout=600)
        with httpx.Client(base_url=hub, timeout=10) as client:
            gone = client.get("/api/v1/pending", headers={"Authorization": f"Bearer {token}"})
            assert gone.status_code == 401
            assert "the hub restarted" in gone.json()["detail"]
        # The open tab reconnects by itself, is refused, and says why.
        expect(human.locator("#login")).to_be_visible(timeout=20_000)
        expect(human.locator("#login-reason")).to_contain_text("the hub restarted", timeout=20_000)
        assert human.evaluate(f"localStorage.getItem('{TOKEN_KEY}')") is None
        # A new link logs it in again.
        human.goto(cli.ok("guardian", "open", "--no-browser").stdout.strip())
        human.wait_for_url(f"{hub}/")
        expect(human.locator("body")).to_have_attribute("data-live", "true")
    finally:
        context.close()
