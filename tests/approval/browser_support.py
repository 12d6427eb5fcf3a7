"""A real approval hub (uvicorn in a thread) and headless Chromium, for the browser tests.

Server-Sent Events need a real server, so the hub runs under uvicorn on a free port of
127.0.0.1, in a background thread of the test process (its state stays inspectable:
``hub.app.state.hub``). Chromium is Debian's, driven by Playwright; no browser is
downloaded and the page needs no network beyond the hub.

The page is logged in the way a person is, through a one-time login URL
(:func:`log_in`); every hub of a test shares one secret, so a restart keeps the login.

The fixtures a browser test module needs are defined here and bound in each module
(``browser = browser_support.browser``): ``browser`` (one per module), ``calls``
(threads for the long polls), ``hub``, ``page`` (logged in, live, and checked for
script errors at the end) and ``artifacts_dir`` (where screenshots are kept:
``$CLOISTER_TEST_ARTIFACTS`` or ``test-artifacts`` at the repository root, then
``approval-ui``; ``test-artifacts/`` is ignored by git).

Shutdown order matters: an open page holds an SSE stream that never ends by itself, and
sse-starlette cannot see a threaded uvicorn's exit flag, so close the browser context
before stopping the hub (``timeout_graceful_shutdown`` is only the safety net).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Error,
    Locator,
    Page,
    Playwright,
    expect,
    sync_playwright,
)
from starlette.applications import Starlette

from cloister_approval.app import create_app
from cloister_approval.settings import ApprovalSettings
from cloister_core.hub import SERVICE_COMMANDS_PATH, SERVICE_DOMAINS_PATH
from cloister_core.hubauth import login_url
from tests.conftest import chromium_path
from tests.waiting import free_port

CREDENTIAL = "service-credential-for-tests"
SERVICE_HEADERS = {"Authorization": f"Bearer {CREDENTIAL}"}
# One secret for every hub of a test: a browser logged in to one stays logged in when
# the hub restarts on the same port (the cookie is checked against the secret only).
HUB_SECRET = "hub-secret-for-the-browser-tests"
HUMAN_HEADERS = {"Authorization": f"Bearer {HUB_SECRET}"}
LONG_POLL_SECONDS = 30.0
VIEWER_TIME_ZONE = "America/New_York"  # not the hub's UTC: times are shown in local time
REPO_ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 10.0
STOP_SECONDS = 10.0

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch_chromium(playwright: Playwright) -> Browser:
    """Debian's Chromium, headless, with nothing that reaches for the network."""
    return playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
    )


@dataclass
class RunningHub:
    """A hub served on ``base_url``; ``app.state.hub`` is its :class:`ApprovalHub`."""

    app: Starlette
    settings: ApprovalSettings
    base_url: str
    port: int

    @property
    def config_dir(self) -> Path:
        return self.settings.config_dir


def hub_settings(tmp_path: Path, port: int, **overrides: Any) -> ApprovalSettings:
    """Settings for a hub on 127.0.0.1:*port* with its config under *tmp_path*."""
    config = tmp_path / "config"
    config.mkdir(parents=True, exist_ok=True)
    config_file = config / "config.yaml"
    if not config_file.exists():
        config_file.write_text("proxy:\n  allow: []\n", encoding="utf-8")
    values: dict[str, Any] = {
        "config_dir": config,
        "data_dir": tmp_path / "data",
        "service_credential": CREDENTIAL,
        "hub_secret": HUB_SECRET,
        "audit_log": tmp_path / "audit.log",
        "host": "127.0.0.1",
        "port": port,
        "public_hosts": (f"127.0.0.1:{port}",),
    }
    return ApprovalSettings(**(values | overrides))


@contextlib.contextmanager
def serve_hub(tmp_path: Path, port: int | None = None, **overrides: Any) -> Iterator[RunningHub]:
    """Run the hub under uvicorn in a thread until the block ends; always stopped."""
    port = port or free_port()
    settings = hub_settings(tmp_path, port, **overrides)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"hub-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_SECONDS
        while not server.started:
            assert thread.is_alive(), "the hub's server thread died while starting"
            assert time.monotonic() < deadline, "the hub did not start in time"
            time.sleep(0.01)
        yield RunningHub(app=app, settings=settings, base_url=f"http://127.0.0.1:{port}", port=port)
    finally:
        server.should_exit = True
        thread.join(STOP_SECONDS)
        assert not thread.is_alive(), "the hub's server thread did not stop"


def log_in(page: Page, base_url: str) -> None:
    """Log *page* in as ``cloister guardian open`` does: its one-time URL, which lands on /."""
    page.goto(login_url(base_url, HUB_SECRET, now=time.time()))
    page.wait_for_url(base_url.rstrip("/") + "/")  # the login page goes on to / itself


def human_client(hub: RunningHub, timeout: float = 30.0) -> httpx.Client:
    """A client for the human's API (``cloister approvals``' view of the hub)."""
    return httpx.Client(base_url=hub.base_url, headers=HUMAN_HEADERS, timeout=timeout)


def service_client(hub: RunningHub, timeout: float = 60.0) -> httpx.Client:
    """A client for the service API (the proxy's or the gateway's view of the hub)."""
    return httpx.Client(base_url=hub.base_url, headers=SERVICE_HEADERS, timeout=timeout)


def request_domain(
    hub: RunningHub, *, cloister: str, project: str, host: str, port: int = 443
) -> dict[str, Any]:
    """Submit a held domain and wait (long poll) for the decision's JSON."""
    body = {"cloister": cloister, "project": project, "host": host, "port": port}
    with service_client(hub) as client:
        response = client.post(SERVICE_DOMAINS_PATH, json=body)
    response.raise_for_status()
    decision: dict[str, Any] = response.json()
    return decision


def request_command(
    hub: RunningHub, *, cloister: str, project: str, argv: list[str], cwd: str
) -> dict[str, Any]:
    """Submit a command for manual approval and wait for the decision's JSON."""
    body = {
        "cloister": cloister,
        "project": project,
        "argv": argv,
        "command": shlex.join(argv),
        "cwd": cwd,
    }
    with service_client(hub) as client:
        response = client.post(SERVICE_COMMANDS_PATH, json=body)
    response.raise_for_status()
    decision: dict[str, Any] = response.json()
    return decision


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc``), 0 where unavailable."""
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# -- the page ----------------------------------------------------------------------------


class PageProblems:
    """JavaScript errors and console errors seen on the page (there must be none)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.messages.append(f"console: {message.text} at {message.location}")

    def on_page_error(self, error: Error) -> None:
        self.messages.append(f"page error: {error}")


def open_page(
    browser: Browser, base_url: str, **options: Any
) -> tuple[Page, PageProblems, Callable[[], None]]:
    """A page in a fresh context (and a function that closes it), its problems recorded.

    *options* go to ``new_context`` (``viewport``, ``color_scheme``, ...).
    """
    context_options: dict[str, Any] = {
        "base_url": base_url,
        "viewport": {"width": 1280, "height": 900},
        "timezone_id": VIEWER_TIME_ZONE,
        "locale": "en-GB",
    }
    context = browser.new_context(**(context_options | options))
    context.set_default_timeout(10_000)
    page = context.new_page()
    problems = PageProblems()
    page.on("console", problems.on_console)
    page.on("pageerror", problems.on_page_error)
    return page, problems, context.close


@contextlib.contextmanager
def live_page(browser: Browser, hub: RunningHub, **options: Any) -> Iterator[Page]:
    """The approval page, logged in and live (its event stream connected); no script errors."""
    opened, problems, close = open_page(browser, hub.base_url, **options)
    try:
        log_in(opened, hub.base_url)
        expect(opened).to_have_url(hub.base_url + "/")
        expect(opened.locator("body")).to_have_attribute("data-live", "true")
        yield opened
    finally:
        close()  # before the hub stops: the page's event stream would hold it up
    assert not problems.messages, problems.messages


def domain_item(page: Page, host: str) -> Locator:
    """The pending item of *host* (matched on its exact ``host:port`` text)."""
    return page.locator("li.item.domain").filter(
        has=page.locator("code.target", has_text=re.compile(rf"^{re.escape(host)}:\d+$"))
    )


def submit_domain(
    calls: ThreadPoolExecutor,
    hub: RunningHub,
    host: str,
    *,
    cloister: str = "alpha",
    project: str = "webshop",
    port: int = 443,
) -> Future[dict[str, Any]]:
    return calls.submit(
        request_domain, hub, cloister=cloister, project=project, host=host, port=port
    )


def submit_command(
    calls: ThreadPoolExecutor,
    hub: RunningHub,
    argv: list[str],
    cwd: str,
    *,
    cloister: str = "alpha",
    project: str = "webshop",
) -> Future[dict[str, Any]]:
    return calls.submit(
        request_command, hub, cloister=cloister, project=project, argv=argv, cwd=cwd
    )


# -- fixtures (bound in each browser test module) ------------------------------------------


@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    chromium = launch_chromium(playwright_driver)
    expect.set_options(timeout=10_000)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture
def calls() -> Iterator[ThreadPoolExecutor]:
    """Worker threads for the service API's long polls, all joined at the end.

    Set up before the hub, so it is torn down after the hub has stopped: by then every
    long poll has had its answer (or lost its connection) and the threads end.
    """
    executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="service-call")
    try:
        yield executor
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def hub(calls: ThreadPoolExecutor, tmp_path: Path) -> Iterator[RunningHub]:
    with serve_hub(tmp_path) as running:
        yield running


@pytest.fixture
def page(browser: Browser, hub: RunningHub) -> Iterator[Page]:
    """The approval page (1280 x 900, light), open and live."""
    with live_page(browser, hub) as opened:
        yield opened


@pytest.fixture
def artifacts_dir() -> Path:
    """Where screenshots go: ``$CLOISTER_TEST_ARTIFACTS/approval-ui`` or
    ``<repo>/test-artifacts/approval-ui`` (ignored by git); created on demand."""
    base = Path(os.environ.get("CLOISTER_TEST_ARTIFACTS", "test-artifacts"))
    directory = (base if base.is_absolute() else REPO_ROOT / base) / "approval-ui"
    directory.mkdir(parents=True, exist_ok=True)
    return directory
