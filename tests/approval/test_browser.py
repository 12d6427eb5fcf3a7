"""The approval page in a real browser: live updates, decisions, undo, keys, load.

The hub runs under uvicorn on a free port (SSE needs a real server); the page is
driven by Playwright in Debian's headless Chromium, one browser per module and a fresh
context per test. Held requests are submitted through the service API from worker
threads, as the proxy and the hostexec gateway would, and their long polls are
checked for the decision the page made.
"""

from __future__ import annotations

import asyncio
import gc
import re
import shlex
import time
import tracemalloc
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    Locator,
    Page,
    Route,
    expect,
)

from cloister_core.config import load_decision_file
from cloister_core.config.models import RuleEntry
from cloister_core.hub import SERVICE_DOMAINS_PATH
from tests.approval import browser_support as support
from tests.approval.browser_support import (
    LONG_POLL_SECONDS,
    SERVICE_HEADERS,
    VIEWER_TIME_ZONE,
    RunningHub,
    domain_item,
    human_client,
    log_in,
    open_page,
    rss_bytes,
    serve_hub,
    submit_command,
    submit_domain,
)
from tests.waiting import free_port

pytestmark = pytest.mark.browser

ALLOW_GREEN = "rgb(26, 127, 55)"  # --allow in app.css
DENY_RED = "rgb(180, 35, 24)"  # --deny in app.css
SCOPES = ("once", "session", "project", "global")

# The shared fixtures (see browser_support), bound here for pytest.
playwright_driver = support.playwright_driver
browser = support.browser
calls = support.calls
hub = support.hub
page = support.page
artifacts_dir = support.artifacts_dir


COUNTDOWN = re.compile(r"^\d+:[0-5]\d$")  # m:ss


def seconds_left(text: str) -> int:
    match = re.fullmatch(r"(\d+):([0-5]\d)", text.strip())
    assert match is not None, f"unexpected countdown text {text!r}"
    return int(match.group(1)) * 60 + int(match.group(2))


def cloister_group(page: Page, cloister: str) -> Locator:
    return page.locator(f'#pending section.cloister[data-cloister="{cloister}"]')


# -- 1. live arrival -------------------------------------------------------------------


def test_a_held_domain_appears_live_with_everything_needed_to_decide(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    expect(page).to_have_title("Cloister approvals")
    expect(page.locator("li.item")).to_have_count(0)

    waiting = submit_domain(calls, hub, "api.example.com", cloister="alpha-1", port=8443)

    item = domain_item(page, "api.example.com")
    expect(item).to_have_count(1)  # arrived over SSE: no reload
    expect(page).to_have_title("(1) Cloister approvals")
    expect(item.locator("code.target")).to_have_text("api.example.com:8443")
    group = cloister_group(page, "alpha-1")
    expect(group.get_by_role("heading")).to_have_text("alpha-1 project webshop")
    expect(group.locator("li.item")).to_have_count(1)
    held_at = datetime.fromisoformat(item.locator("time").get_attribute("datetime") or "")
    local = held_at.astimezone(ZoneInfo(VIEWER_TIME_ZONE)).strftime("%H:%M:%S")
    expect(item.locator("time")).to_have_text(local)
    expect(page.locator('[data-count="domain"]')).to_have_text("1")
    expect(page.locator("[data-empty]")).to_be_hidden()

    countdown = item.locator(".countdown")
    expect(countdown).to_have_text(COUNTDOWN)
    first = seconds_left(countdown.inner_text())
    assert 50 <= first <= 60  # the default domain_timeout is 60 s
    expect(countdown).not_to_have_text(countdown.inner_text())  # it ticks without a reload
    assert seconds_left(countdown.inner_text()) < first

    allow = item.get_by_role("group", name="Allow api.example.com")
    deny = item.get_by_role("group", name="Deny api.example.com")
    for scope in SCOPES:
        allow_button = allow.get_by_role("button", name=f"Allow api.example.com ({scope})")
        deny_button = deny.get_by_role("button", name=f"Deny api.example.com ({scope})")
        expect(allow_button).to_be_enabled()
        expect(deny_button).to_be_enabled()
        expect(allow_button).to_have_css("color", ALLOW_GREEN)
        expect(deny_button).to_have_css("color", DENY_RED)
    expect(allow.locator(".label")).to_have_css("color", ALLOW_GREEN)
    expect(deny.locator(".label")).to_have_css("color", DENY_RED)

    wildcard = item.get_by_role("checkbox", name=re.compile(r"wildcard"))
    expect(wildcard).not_to_be_checked()
    expect(item.locator("label.wildcard")).to_contain_text("*.example.com")
    expect(item).to_be_focused()  # the first item is selected for the keyboard

    item.get_by_role("button", name="Deny api.example.com (once)").click()
    assert waiting.result(LONG_POLL_SECONDS)["action"] == "deny"
    expect(item).to_have_count(0)
    expect(page).to_have_title("Cloister approvals")


def test_an_ip_address_is_shown_unambiguously_and_offers_no_wildcard(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    waiting = submit_domain(calls, hub, "2606:4700::1111", port=443)
    item = page.locator("li.item.domain")
    expect(item).to_have_count(1)
    # "2606:4700::1111:443" would itself be an IPv6 address: the port must stand apart.
    expect(item.locator("code.target")).to_have_text("[2606:4700::1111]:443")
    expect(item.get_by_role("checkbox")).to_have_count(0)  # no *.parent for an address
    item.get_by_role("button", name="Deny 2606:4700::1111 (session)").click()
    decision = waiting.result(LONG_POLL_SECONDS)
    assert decision["action"] == "deny"
    assert decision["entry"]["domain"] == "2606:4700::1111"


def test_a_request_held_while_the_page_loads_is_not_lost(
    browser: Browser, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    """The page is rendered, then a domain is held, then the event stream connects."""
    page, problems, close = open_page(browser, hub.base_url)
    waiting: list[Future[dict[str, Any]]] = []
    hold = hub.app.state.hub

    def late_stream(route: Route) -> None:
        # The page has been rendered (without the item) when its script asks for the
        # stream; the item is held now, so no event will ever announce it.
        waiting.append(submit_domain(calls, hub, "late.example.org"))
        deadline = time.monotonic() + 10
        while hold.pending_count() == 0:
            assert time.monotonic() < deadline, "the late domain was never held"
            time.sleep(0.005)
        route.continue_()

    try:
        page.route("**/api/v1/events", late_stream, times=1)
        log_in(page, hub.base_url)
        expect(page.locator("body")).to_have_attribute("data-live", "true")
        item = domain_item(page, "late.example.org")
        expect(item).to_have_count(1)
        expect(page).to_have_title("(1) Cloister approvals")
        expect(page.locator('[data-count="domain"]')).to_have_text("1")
        item.get_by_role("button", name="Allow late.example.org (once)").click()
        assert waiting[0].result(LONG_POLL_SECONDS)["action"] == "allow"
        expect(item).to_have_count(0)
    finally:
        close()
    assert not problems.messages, problems.messages


def test_a_restarted_hub_logs_the_page_out_and_a_new_login_shows_its_new_state(
    browser: Browser, calls: ThreadPoolExecutor, tmp_path: Path
) -> None:
    port = free_port()
    page, problems, close = open_page(browser, f"http://127.0.0.1:{port}")
    try:
        with serve_hub(tmp_path / "before", port=port) as before:
            log_in(page, before.base_url)
            expect(page.locator("body")).to_have_attribute("data-live", "true")
            stale = submit_domain(calls, before, "old.example.com")
            expect(domain_item(page, "old.example.com")).to_have_count(1)
        # The hub stopped with the item held: its caller's long poll fails.
        with pytest.raises(httpx.HTTPError):
            stale.result(LONG_POLL_SECONDS)
        expect(page.locator("body")).to_have_attribute("data-live", "false")

        with serve_hub(tmp_path / "after", port=port) as after:
            fresh = submit_domain(calls, after, "new.example.com")
            # Its session died with the hub that issued it: the page says how to log in.
            expect(page.locator("#login")).to_be_visible()
            expect(page.locator("#login-reason")).to_contain_text("the hub restarted")
            expect(page.locator("#login")).to_contain_text("when the hub restarts")
            assert page.evaluate("localStorage.getItem('cloister.hub-session')") is None
            log_in(page, after.base_url)
            expect(page.locator("body")).to_have_attribute("data-live", "true")
            expect(domain_item(page, "new.example.com")).to_have_count(1)
            expect(domain_item(page, "old.example.com")).to_have_count(0)  # gone with the hub
            expect(page).to_have_title("(1) Cloister approvals")
            page.get_by_role("button", name="Allow new.example.com (once)").click()
            assert fresh.result(LONG_POLL_SECONDS)["action"] == "allow"
            close()
    finally:
        close()
    # While the hub was down, the browser logged the event stream's failed reconnects,
    # and the restarted hub's 401 to the old token.
    unexpected = [
        m
        for m in problems.messages
        if "/api/v1/events" not in m and not ("/api/v1/" in m and "401" in m)
    ]
    assert not unexpected, unexpected


# -- 2. a project decision with the wildcard, then undo ---------------------------------


def test_allow_for_the_project_with_wildcard_writes_the_file_and_undo_removes_it(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    waiting = submit_domain(calls, hub, "cdn.example.net", project="webshop")
    item = domain_item(page, "cdn.example.net")
    expect(item).to_have_count(1)

    item.get_by_role("checkbox", name=re.compile(r"wildcard")).check()
    item.get_by_role("button", name="Allow cdn.example.net (project)").click()

    decision = waiting.result(LONG_POLL_SECONDS)
    assert decision["action"] == "allow"
    assert decision["scope"] == "project"
    assert decision["entry"]["pattern"] == "*.example.net"
    assert decision["entry"]["domain"] is None

    decisions_file = hub.config_dir / "decisions" / "projects" / "webshop.yaml"
    written = load_decision_file(decisions_file)
    assert RuleEntry(pattern="*.example.net") in written.allow
    assert not written.deny

    expect(item).to_have_count(0)
    expect(page).to_have_title("Cloister approvals")
    record = page.locator("#decisions li.decision").first
    expect(record.locator(".summary")).to_have_text("Allowed *.example.net for project webshop")
    expect(record.locator(".file")).to_contain_text(str(decisions_file))
    expect(record.locator(".effective")).to_have_text(
        re.compile(r"^cdn\.example\.net:443 is now allowed by \*\.example\.net")
    )
    expect(record).not_to_have_class(re.compile(r"\bundone\b"))
    decided_at = datetime.fromisoformat(record.locator("time").get_attribute("datetime") or "")
    local = decided_at.astimezone(ZoneInfo(VIEWER_TIME_ZONE)).strftime("%H:%M:%S")
    expect(record.locator("time")).to_have_text(local)

    record.get_by_role("button", name=re.compile(r"^Undo: Allowed \*\.example\.net")).click()

    expect(record).to_have_class(re.compile(r"\bundone\b"))
    expect(record.locator(".summary")).to_have_text(
        "Undone: Allowed *.example.net for project webshop"
    )
    expect(record.get_by_role("button", name=re.compile("^Undo"))).to_have_count(0)
    after = load_decision_file(decisions_file)  # still a valid decision file
    assert RuleEntry(pattern="*.example.net") not in after.allow
    assert not after.allow
    assert not after.deny


# -- 3. commands: the exact argv, approve and deny with a reason ------------------------


def test_a_command_shows_its_exact_argv_and_approve_and_deny_release_the_caller(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    argv = [
        "git",
        "commit",
        "-m",
        "fix  the bug",  # two spaces, kept
        "a; touch /tmp/x",
        "<b>x</b>",
        "$(id) && `id` | cat > ~/.ssh/authorized_keys",
    ]
    cwd = "/home/dev/my project <main>"
    approved = submit_command(calls, hub, argv, cwd)

    item = page.locator("li.item.command")
    expect(item).to_have_count(1)
    expect(page).to_have_title("(1) Cloister approvals")
    arguments = item.get_by_role("list", name="arguments").locator("> li")
    expect(arguments).to_have_count(len(argv))
    assert arguments.all_text_contents() == argv  # every argument, exactly, in order
    expect(item.locator("b")).to_have_count(0)  # the markup-looking argument is text
    expect(item.locator(".cwd code")).to_have_text(cwd)
    expect(cloister_group(page, "alpha").get_by_role("heading")).to_have_text(
        "alpha project webshop"
    )
    expect(item.locator(".countdown")).to_have_text(COUNTDOWN)

    item.get_by_role("button", name=re.compile(r"^Approve .* \(once\)$")).click()
    assert approved.result(LONG_POLL_SECONDS) == {"action": "approve", "reason": None}
    expect(item).to_have_count(0)
    approved_record = page.locator("#decisions li.decision").first
    expect(approved_record.locator(".summary")).to_have_text(
        f"Approved {shlex.join(argv)} once, in {cwd}"
    )

    denied = submit_command(calls, hub, ["docker", "system", "prune", "-af"], "/srv/app")
    item = page.locator("li.item.command")
    expect(item).to_have_count(1)
    item.get_by_role("textbox", name="reason").fill("not on my machine <script>")
    item.get_by_role("button", name=re.compile(r"^Deny ")).click()
    assert denied.result(LONG_POLL_SECONDS) == {
        "action": "deny",
        "reason": "not on my machine <script>",
    }
    expect(item).to_have_count(0)
    denied_record = page.locator("#decisions li.decision").first
    expect(denied_record.locator(".summary")).to_have_text(
        "Denied docker system prune -af once, in /srv/app (not on my machine <script>)"
    )
    expect(page.locator("#decisions script")).to_have_count(0)


# -- 4. the keyboard -------------------------------------------------------------------


def test_keyboard_shortcuts_decide_the_selected_item(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    first = submit_domain(calls, hub, "one.example.com")
    expect(domain_item(page, "one.example.com")).to_be_focused()
    second = submit_domain(calls, hub, "two.example.org")
    expect(domain_item(page, "two.example.org")).to_have_count(1)

    page.keyboard.press("o")  # allow the selected (first) domain once
    assert first.result(LONG_POLL_SECONDS)["scope"] == "once"
    assert first.result()["action"] == "allow"

    second_item = domain_item(page, "two.example.org")
    expect(second_item).to_be_focused()  # the selection moved on
    page.keyboard.press("w")  # tick the wildcard box
    expect(second_item.get_by_role("checkbox", name=re.compile("wildcard"))).to_be_checked()
    page.keyboard.press("Shift+S")  # deny for the session
    decision = second.result(LONG_POLL_SECONDS)
    assert decision["action"] == "deny"
    assert decision["scope"] == "session"
    assert decision["entry"]["pattern"] == "*.example.org"

    approve = submit_command(calls, hub, ["make", "test"], "/srv/app")
    commands = page.locator("li.item.command")
    expect(commands).to_have_count(1)
    deny = submit_command(calls, hub, ["rm", "-rf", "build"], "/srv/app")
    expect(commands).to_have_count(2)
    expect(commands.first.locator(".cwd + ol > li")).to_have_text(["make", "test"])
    expect(commands.first).to_be_focused()
    page.keyboard.press("j")  # select the second command
    expect(commands.nth(1)).to_be_focused()
    page.keyboard.press("k")
    expect(commands.first).to_be_focused()
    page.keyboard.press("y")  # approve the selected command
    assert approve.result(LONG_POLL_SECONDS)["action"] == "approve"
    expect(commands).to_have_count(1)
    expect(commands.first).to_be_focused()
    page.keyboard.press("n")
    assert deny.result(LONG_POLL_SECONDS)["action"] == "deny"
    expect(commands).to_have_count(0)

    written = submit_domain(calls, hub, "three.example.com")
    expect(domain_item(page, "three.example.com")).to_be_focused()
    page.keyboard.press("p")  # allow for the project: written to the decision file
    assert written.result(LONG_POLL_SECONDS)["scope"] == "project"
    decisions_file = hub.config_dir / "decisions" / "projects" / "webshop.yaml"
    assert RuleEntry(domain="three.example.com") in load_decision_file(decisions_file).allow
    # The session denial and this project decision are both in files (both undoable).
    expect(page.locator("#decisions button.undo")).to_have_count(2)
    page.keyboard.press("u")  # undo the latest decision that wrote a file
    expect(page.locator("#decisions li.decision.undone")).to_have_count(1)
    expect(page.locator("#decisions li.decision.undone .summary")).to_have_text(
        "Undone: Allowed three.example.com for project webshop"
    )
    assert not load_decision_file(decisions_file).allow

    typing = submit_command(calls, hub, ["ls"], "/srv/app")
    command = page.locator("li.item.command")
    reason = command.get_by_role("textbox", name="reason")
    reason.fill("")
    reason.press_sequentially("yes no")  # typing a reason is not a shortcut
    expect(reason).to_have_value("yes no")
    expect(command).to_have_count(1)
    command.get_by_role("button", name=re.compile("^Deny ")).click()
    assert typing.result(LONG_POLL_SECONDS) == {"action": "deny", "reason": "yes no"}


# -- 5. two hundred at once ----------------------------------------------------------


MANY = 200


async def _submit_many(base_url: str, hosts: list[str]) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=MANY + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=base_url, headers=SERVICE_HEADERS, timeout=120, limits=limits
    ) as client:

        async def one(index: int, host: str) -> dict[str, Any]:
            # 20 cloisters, 10 requests each: within any cloister's own share of held items.
            body = {"cloister": f"c{index % 20}", "project": "load", "host": host, "port": 443}
            response = await client.post(SERVICE_DOMAINS_PATH, json=body)
            response.raise_for_status()
            decision: dict[str, Any] = response.json()
            return decision

        return await asyncio.gather(*(one(i, host) for i, host in enumerate(hosts)))


def _decide_all_through_the_api(hub: RunningHub) -> int:
    with human_client(hub) as client:
        pending = client.get("/api/v1/pending").raise_for_status().json()
        for item in pending["domains"]:
            client.post(
                f"/api/v1/domains/{item['id']}/decision",
                json={"action": "allow", "scope": "once"},
            ).raise_for_status()
        return len(pending["domains"])


def test_two_hundred_pending_requests_stay_usable_and_memory_is_released(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    hosts = [f"host-{index:03d}.load-{index % 13}.example.com" for index in range(MANY)]
    state = hub.app.state.hub
    gc.collect()
    rss_before = rss_bytes()
    tracemalloc.start()
    try:
        everyone = calls.submit(asyncio.run, _submit_many(hub.base_url, hosts))

        expect(page.locator("li.item.domain")).to_have_count(MANY, timeout=30_000)
        expect(page).to_have_title(f"({MANY}) Cloister approvals")
        expect(page.locator('[data-count="domain"]')).to_have_text(str(MANY))
        assert state.pending_count() == MANY

        last = page.locator("li.item.domain").last
        last_host = last.locator("code.target").inner_text().rsplit(":", 1)[0]
        last.get_by_role("button", name=f"Deny {last_host} (once)").click()
        expect(page).to_have_title(f"({MANY - 1}) Cloister approvals")
        expect(page.locator("li.item.domain")).to_have_count(MANY - 1)
        expect(domain_item(page, last_host)).to_have_count(0)

        assert _decide_all_through_the_api(hub) == MANY - 1
        results = everyone.result(60)
        expect(page.locator("li.item.domain")).to_have_count(0)
        expect(page).to_have_title("Cloister approvals")
        page.mouse.move(0, 0)  # decided cards keep their place until the pointer leaves
        expect(page.locator("[data-empty]")).to_be_visible()

        actions = [result["action"] for result in results]
        assert actions.count("deny") == 1
        assert actions.count("allow") == MANY - 1
        assert state.pending_count() == 0
        assert state.pending().domains == []
        assert state.pending().commands == []

        del results, actions, everyone
        gc.collect()
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = rss_bytes() - rss_before
    # What stays is bounded bookkeeping: the recent-decisions ring and the ids of
    # finished items, not the 200 requests themselves.
    assert retained < 8 * 1024 * 1024, f"{retained / 1e6:.1f} MB still allocated"
    assert peak < 64 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    assert rss_growth < 128 * 1024 * 1024, f"RSS grew by {rss_growth / 1e6:.1f} MB"
