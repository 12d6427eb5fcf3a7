"""In a real browser: `cloister guardian open` logs the browser in through a private file.

The CLI hands the browser a 0600 file that leads to the one-time login URL (so the
ticket never shows in a process list); the hub's login page takes the ticket out of
the address bar and the history, trades it for a session token kept in the hub
origin's localStorage, and goes on to /. No cookie is set. ``cloister guardian
logout`` (the revoked-before file) sends every open page back to the login.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from cloister_cli.stack.hub_client import HubClient
from cloister_core.hubauth import revoke_sessions
from cloister_core.paths import CloisterPaths
from tests.approval.browser_support import (
    HUB_SECRET,
    RunningHub,
    launch_chromium,
    log_in,
    serve_hub,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as driver:
        chromium = launch_chromium(driver)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[RunningHub]:
    with serve_hub(tmp_path) as running:
        yield running


def test_the_private_login_file_logs_the_browser_in(
    browser: Browser, hub: RunningHub, tmp_path: Path
) -> None:
    paths = CloisterPaths(config_dir=tmp_path / "cli-config", data_dir=tmp_path / "cli-data")
    login_file = HubClient(hub.base_url, HUB_SECRET).login_file(paths)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(login_file.as_uri())
        page.wait_for_url(hub.base_url.rstrip("/") + "/")
        expect(page.locator("body")).to_have_attribute("data-live", "true")
        assert page.locator("h1").inner_text() == "Cloister approvals"
        expect(page.locator("#login")).to_be_hidden()
        # Nothing of the ticket is left in the history: back leads to the private file
        # (or nowhere), never to the login URL.
        urls = page.evaluate("[history.length, location.href]")
        assert "ticket" not in urls[1]
        token = page.evaluate("localStorage.getItem('cloister.hub-session')")
        assert token.startswith("browser-session.")
        assert context.cookies() == []  # the hub set none
        # Logged in for good: a fresh load of the page fetches its data with the token.
        response = page.goto(hub.base_url + "/")
        assert response is not None
        assert response.status == 200
        expect(page.locator("body")).to_have_attribute("data-live", "true")
        # The same file again: its ticket was used, so the browser gets the login text.
        second = context.new_page()
        second.goto(login_file.as_uri())
        second.wait_for_url(hub.base_url + "/login")  # the ticket left the address bar
        expect(second.locator("#login-reason")).to_have_text("this login link was already used.")
        expect(second.locator("#login")).to_contain_text("cloister guardian open")
    finally:
        context.close()


def test_logout_sends_open_pages_back_to_the_login(tmp_path: Path, browser: Browser) -> None:
    sessions = tmp_path / "hub-sessions"
    with serve_hub(tmp_path, hub_sessions_dir=sessions) as running:
        context = browser.new_context()
        try:
            page = context.new_page()
            log_in(page, running.base_url)
            expect(page.locator("body")).to_have_attribute("data-live", "true")
            revoke_sessions(sessions, now=time.time())
            # The open page's next request (here: a reload) is refused: login shown,
            # the dead token dropped.
            page.reload()
            expect(page.locator("#login")).to_be_visible()
            expect(page.locator("#login-reason")).to_have_text(
                "this browser was logged out (`cloister guardian logout`)."
            )
            expect(page.locator("#app")).to_be_hidden()
            assert page.evaluate("localStorage.getItem('cloister.hub-session')") is None
            # Logging in again works (a session made after the logout).
            time.sleep(1.0)
            log_in(page, running.base_url)
            expect(page.locator("body")).to_have_attribute("data-live", "true")
        finally:
            context.close()


def test_without_a_token_the_page_shows_how_to_log_in(browser: Browser, hub: RunningHub) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(hub.base_url + "/")
        expect(page.locator("#login")).to_be_visible()
        expect(page.locator("#login-reason")).to_have_text(
            "This browser is not logged in to the approval hub."
        )
        expect(page.locator("#login")).to_contain_text("cloister guardian open --no-browser")
        expect(page.locator("#app")).to_be_hidden()
        # A token someone planted in this origin's storage is nothing: refused, dropped.
        page.evaluate("localStorage.setItem('cloister.hub-session', 'browser-session.x')")
        page.reload()
        expect(page.locator("#login")).to_be_visible()
        assert page.evaluate("localStorage.getItem('cloister.hub-session')") is None
    finally:
        context.close()
