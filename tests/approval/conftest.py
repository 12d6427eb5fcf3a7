"""Fixtures: the hub app for a temporary config dir, and clients for each audience."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.testclient import TestClient

from cloister_approval.app import create_app
from cloister_approval.settings import ApprovalSettings
from tests.waiting import free_port, wait_until

CREDENTIAL = "service-credential-for-tests"
HUB_SECRET = "hub-secret-for-tests-0123456789abcdef"
UI = "http://127.0.0.1:9999"
HUMAN_HEADERS = {"Authorization": f"Bearer {HUB_SECRET}"}
TIMEOUT = 10.0  # for what the hub does in a thread of its own: hold, start, withdraw


def make_settings(tmp_path: Path, **overrides: Any) -> ApprovalSettings:
    values: dict[str, Any] = {
        "config_dir": tmp_path / "config",
        "data_dir": tmp_path / "data",
        "service_credential": SecretStr(CREDENTIAL),
        "hub_secret": SecretStr(HUB_SECRET),
        "audit_log": tmp_path / "audit.log",
    }
    return ApprovalSettings(**(values | overrides))


@pytest.fixture
def settings(tmp_path: Path) -> ApprovalSettings:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("proxy:\n  allow: []\n", encoding="utf-8")
    return make_settings(tmp_path)


@pytest.fixture
def app(settings: ApprovalSettings) -> Starlette:
    return create_app(settings)


@pytest.fixture
def client(app: Starlette) -> Iterator[TestClient]:
    """The human's CLI: the UI's own Host, and the hub secret."""
    with TestClient(app, base_url=UI, headers=HUMAN_HEADERS) as test_client:
        yield test_client


@pytest.fixture
def anonymous(app: Starlette) -> Iterator[TestClient]:
    """Anyone else on the machine: the UI's own Host, no secret, no cookie."""
    with TestClient(app, base_url=UI) as test_client:
        yield test_client


SERVICE_HEADERS = {"Authorization": f"Bearer {CREDENTIAL}"}


class Background:
    """A blocking call (a long poll) run in a thread; its result collected later."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as error:  # reported by join()
            self.error = error

    def join(self, timeout: float = 10) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


class LiveHub:
    """The hub served by uvicorn on 127.0.0.1 (SSE and long polls need a real server)."""

    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        import uvicorn

        self.port = free_port()
        (tmp_path / "config").mkdir(parents=True, exist_ok=True)
        self.settings = make_settings(
            tmp_path, port=self.port, public_hosts=(f"127.0.0.1:{self.port}",), **overrides
        )
        self.app = create_app(self.settings)
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)
        self._thread.start()
        wait_until(lambda: self.server.started, TIMEOUT, "the hub to start")

    def human(self, **options: Any) -> httpx.Client:
        """An HTTP client for the human's API: the hub secret in every request."""
        return httpx.Client(base_url=self.url, headers=HUMAN_HEADERS, **options)

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)


@pytest.fixture
def live_hub(tmp_path: Path) -> Iterator[LiveHub]:
    hub = LiveHub(tmp_path)
    yield hub
    hub.stop()
