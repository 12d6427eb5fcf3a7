"""A real approval hub (uvicorn in a thread) and headless Chromium, for the browser tests.

Server-Sent Events need a real server, so the hub runs under uvicorn on a free port of
127.0.0.1, in a background thread of the test process (its state stays inspectable:
``hub.app.state.hub``). Chromium is Debian's, driven by Playwright; no browser is
downloaded and the page needs no network beyond the hub.

Shutdown order matters: an open page holds an SSE stream that never ends by itself, and
sse-starlette cannot see a threaded uvicorn's exit flag, so close the browser context
before stopping the hub (``timeout_graceful_shutdown`` is only the safety net).
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from playwright.sync_api import Browser, Playwright
from starlette.applications import Starlette

from cloister_approval.app import create_app
from cloister_approval.settings import ApprovalSettings
from cloister_core.hub import SERVICE_COMMANDS_PATH, SERVICE_DOMAINS_PATH
from tests.conftest import chromium_path

CREDENTIAL = "service-credential-for-tests"
SERVICE_HEADERS = {"Authorization": f"Bearer {CREDENTIAL}"}
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
