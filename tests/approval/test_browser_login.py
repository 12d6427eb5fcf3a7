"""In a real browser: `cloister guardian open` logs the browser in through a private file.

The CLI hands the browser a 0600 file that leads to the one-time login URL (so the
ticket never shows in a process list); from there the hub's login page goes on to /
itself, which is what makes the SameSite=Strict cookie go with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from cloister_cli.hub_client import HubClient
from cloister_core.paths import CloisterPaths
from tests.approval.browser_support import HUB_SECRET, RunningHub, launch_chromium, serve_hub

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
        assert page.locator("h1").inner_text() == "Cloister approvals"
        # Logged in for good: the cookie is sent on a fresh load of the page, too.
        response = page.goto(hub.base_url + "/")
        assert response is not None
        assert response.status == 200
        # The same file again: its ticket was used, so the browser gets the login page.
        second = context.new_page()
        second.goto(login_file.as_uri())
        second.wait_for_url("**/login?ticket=*")
        second.wait_for_load_state("load")
        assert "already used" in second.content()
    finally:
        context.close()
