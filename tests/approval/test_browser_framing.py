"""In a real browser: another page cannot frame the approval page (clickjacking).

The human decides with same-origin POSTs; a page that could frame the UI could trick a
click. The framing page here is served from another port of 127.0.0.1: the same site
as the hub. The browser is logged in, and only the anti-framing headers stand in the
way of the framed page loading.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.approval.browser_support import RunningHub, launch_chromium, log_in, serve_hub

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


@pytest.fixture
def framer(hub: RunningHub) -> Iterator[str]:
    """A page on another port of 127.0.0.1 whose only content is the hub in a frame."""
    body = f'<!doctype html><title>framer</title><iframe src="{hub.base_url}/"></iframe>'

    class Framer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Framer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_page_that_frames_the_ui_gets_nothing(
    browser: Browser, hub: RunningHub, framer: str
) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        log_in(page, hub.base_url)  # logged in: framing must fail all the same
        assert page.locator("h1").inner_text() == "Cloister approvals"
        page.goto(framer)
        page.wait_for_load_state("load")
        (child,) = page.main_frame.child_frames
        # Chromium refused to render it: its own error page stands in the frame.
        assert child.url.startswith("chrome-error://"), child.url
        assert "Cloister approvals" not in child.content()
        assert page.frame_locator("iframe").locator("button").count() == 0
    finally:
        context.close()
