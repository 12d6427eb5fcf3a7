"""A real credential gateway on 127.0.0.1 in a thread, with its files in a temp dir."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloister_core.audit import AuditLog
from cloister_core.credentials import Method, store
from cloister_core.paths import CloisterPaths
from cloister_core.tokens import TokenRecord, write_token_file
from cloister_proxy.credentials.server import CredentialGateway
from cloister_proxy.credentials.settings import CredentialSettings
from cloister_proxy.credentials.state import CredentialState
from cloister_proxy.netinfo import OwnNetworks, own_addresses
from tests.proxy.support import LOCAL_ALLOW, TIMEOUT
from tests.waiting import wait_until

REAL_KEY = "sk-ant-api03-the-real-key-0123456789"


class GatewayHarness:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = CloisterPaths(config_dir=root / "config", data_dir=root / "data")
        self.paths.config_dir.mkdir(parents=True)
        self.audit_path = root / "audit.log"
        self.messages: list[str] = []
        self.gateway: CredentialGateway | None = None
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None

    def configure(self, api_base: str, *, private: bool = True) -> None:
        text = f"proxy:\n  {LOCAL_ALLOW}\n" if private else ""
        text += "agents:\n" + "".join(
            f"  {agent}: {{api_base: {api_base!r}}}\n" for agent in ("claude", "codex", "gemini")
        )
        temp = self.paths.config_file.with_suffix(".tmp")
        temp.write_text(text, encoding="utf-8")
        temp.replace(self.paths.config_file)

    def add_token(self, cloister: str = "api", address: str = "127.0.0.1") -> TokenRecord:
        record = TokenRecord.create(
            cloister=cloister, project=cloister, path=self.root, address=address
        )
        write_token_file(self.paths.tokens_dir, record)
        return record

    def store(self, agent: str = "claude", method: Method = "api-key", key: str = REAL_KEY) -> None:
        store(self.paths, agent, method, key)

    def audit(self) -> list[dict[str, Any]]:
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text("utf-8").splitlines()]

    def wait_for_audit(self, count: int) -> list[dict[str, Any]]:
        wait_until(lambda: len(self.audit()) >= count, TIMEOUT, f"{count} audit lines")
        return self.audit()

    def start(self, **overrides: Any) -> None:
        values: dict[str, Any] = {
            "config_dir": self.paths.config_dir,
            "data_dir": self.paths.data_dir,
            "listen": "127.0.0.1:0",
            "audit_log": self.audit_path,
            # The fake vendors run on loopback, beside the gateway.
            "refuse_own_networks": False,
        }
        settings = CredentialSettings(**(values | overrides))
        ready = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            own = tuple(own_addresses())
            state = CredentialState(
                settings.paths,
                settings.secrets,
                own,
                self.messages.append,
                guardian_networks=settings.guardian_networks,
                own_networks=OwnNetworks(own=own) if settings.refuse_own_networks else None,
            )
            with AuditLog(settings.audit_log) as audit:
                self.gateway = CredentialGateway(settings, state, audit, self.messages.append)

                def on_ready(address: tuple[str, int]) -> None:
                    self.address = address
                    ready.set()

                self._task = asyncio.create_task(self.gateway.serve(ready=on_ready))
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        self._thread.start()
        if not ready.wait(TIMEOUT):
            raise AssertionError(f"gateway did not start: {self.messages}")

    @property
    def url(self) -> str:
        return f"http://{self.address[0]}:{self.address[1]}"

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(TIMEOUT)
            assert not self._thread.is_alive(), "gateway thread did not stop"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayHarness]:
    harness = GatewayHarness(tmp_path)
    yield harness
    harness.stop()
