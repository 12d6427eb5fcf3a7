"""Shared wiring for the executor's tests: a daemon in a thread, raw requests, waiting.

The daemon runs for real (its own thread and event loop, the standard one) on a Unix
socket under a temporary data directory, so tests talk to it with ordinary blocking
sockets or with :class:`ExecutorClient` in an ``asyncio.run`` of their own. Waiting is
done on events, socket reads with timeouts and polled conditions with deadlines, never
on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from cloister_core.paths import CloisterPaths
from cloister_core.tokens import TokenRecord, remove_token_file, write_token_file
from cloister_executor.client import ExecutorClient
from cloister_executor.daemon import ExecutorDaemon, ExecutorSettings
from cloister_executor.environment import DEFAULT_PATH
from cloister_executor.locations import secret_path
from cloister_executor.protocol import ExecRefusal, ExecResult

TIMEOUT = 10.0
HOST_PATH = os.environ.get("PATH") or DEFAULT_PATH
ANSWER: TypeAdapter[ExecResult | ExecRefusal] = TypeAdapter(ExecResult | ExecRefusal)
# The daemon's own tasks, which run until it stops (not requests in flight).
LONG_LIVED = frozenset({"ExecutorDaemon._accept", "SyncWatch.run"})


def process_gone(pid: int) -> bool:
    """True once *pid* runs nothing: no such process, or a zombie nobody reaped yet.

    A killed group's orphans are re-parented to PID 1 (or a subreaper). Where PID 1 is
    not an init that reaps its children (as in some containers, this test machine's
    among them), they stay behind as defunct entries: dead, holding no pipe and no
    memory, only a process-table slot. For "was it killed?" a zombie counts as gone.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:  # no procfs: ask the kernel, which cannot tell a zombie apart
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    # "pid (comm) state ...": comm may contain spaces and parentheses, so split after
    # the last ')'.
    state = stat.rpartition(")")[2].split()[0]
    return state in {"Z", "X"}


def exchange(path: Path, data: bytes, *, close_write: bool = True) -> bytes:
    """Send *data* over the Unix socket at *path*, return everything that comes back."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(str(path))
        try:
            if data:
                sock.sendall(data)
            if close_write:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon answered and closed before taking all of it
        chunks: list[bytes] = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                # The daemon closed with bytes of ours unread: the kernel reports that
                # as a reset, after the answer already queued for us.
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def parse_answer(raw: bytes) -> ExecResult | ExecRefusal:
    """Exactly one JSON line, an :class:`ExecResult` or an :class:`ExecRefusal`."""
    assert raw.endswith(b"\n"), raw[:200]
    assert raw.count(b"\n") == 1, raw[:200]
    return ANSWER.validate_json(raw)


def as_result(answer: ExecResult | ExecRefusal) -> ExecResult:
    assert isinstance(answer, ExecResult), answer
    return answer


def as_refusal(answer: ExecResult | ExecRefusal) -> ExecRefusal:
    assert isinstance(answer, ExecRefusal), answer
    return answer


class DaemonHarness:
    """A config and data directory, a project directory, tokens, and a running daemon."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_dir = root / "config"
        self.data_dir = root / "data"
        self.project = root / "project"
        self.config_dir.mkdir(parents=True)
        self.project.mkdir()
        self.paths = CloisterPaths(config_dir=self.config_dir, data_dir=self.data_dir)
        self.messages: list[str] = []
        self.tokens: dict[str, TokenRecord] = {}
        self._daemon: ExecutorDaemon | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    # files
    def write_config(self, text: str) -> Path:
        """Replace config.yaml (a new inode, as an editor or a human's mv would)."""
        temp = self.paths.config_file.with_name("config.yaml.tmp")
        temp.write_text(text, encoding="utf-8")
        temp.replace(self.paths.config_file)
        return self.paths.config_file

    def add_token(self, cloister: str = "demo", path: Path | None = None) -> TokenRecord:
        record = TokenRecord.create(
            cloister=cloister, project=cloister, path=self.project if path is None else path
        )
        write_token_file(self.paths.tokens_dir, record)
        self.tokens[cloister] = record
        return record

    def remove_token(self, cloister: str) -> None:
        assert remove_token_file(self.paths.tokens_dir, cloister)

    @property
    def secret_file(self) -> Path:
        return secret_path(self.paths)

    @property
    def secret(self) -> str:
        return self.secret_file.read_text(encoding="ascii").strip()

    # lifecycle
    @property
    def daemon(self) -> ExecutorDaemon:
        assert self._daemon is not None, "the daemon was not started"
        return self._daemon

    def start(self, *, host_environment: dict[str, str] | None = None, **overrides: Any) -> None:
        settings = ExecutorSettings(
            **({"config_dir": self.config_dir, "data_dir": self.data_dir} | overrides)
        )
        environment = {"PATH": HOST_PATH} if host_environment is None else host_environment
        self._daemon = ExecutorDaemon(settings, self.messages.append, environment)
        self._ready.clear()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + TIMEOUT
        while not self._ready.wait(0.01):
            if self._error is not None:
                raise self._error
            assert time.monotonic() < deadline, "the daemon did not start"

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        try:
            await self.daemon.serve(ready=self._ready.set)
        except asyncio.CancelledError:
            pass
        except BaseException as error:  # surfaced to the test by start() and stop()
            self._error = error

    async def _requests_done(self) -> None:
        """Return once no request is in flight (only the server and its accept loops)."""
        current = asyncio.current_task()

        def in_flight() -> set[asyncio.Task[object]]:
            return {
                task
                for task in asyncio.all_tasks()
                if task is not current
                and task is not self._task
                and getattr(task.get_coro(), "__qualname__", "") not in LONG_LIVED
            }

        while tasks := in_flight():
            await asyncio.wait(tasks)

    def forget_error(self) -> None:
        """The test has checked the error start() raised; teardown need not raise it."""
        self._error = None

    def stop(self, *, finish_requests: bool = True) -> None:
        """Stop the daemon; first let requests in flight finish, unless told not to."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._task is not None and thread.is_alive():
            if finish_requests:
                done = asyncio.run_coroutine_threadsafe(self._requests_done(), self._loop)
                done.result(TIMEOUT)
            self._loop.call_soon_threadsafe(self._task.cancel)
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "the daemon did not stop"
        if self._error is not None:
            raise self._error

    # talking to it
    def send(self, data: bytes, *, close_write: bool = True) -> ExecResult | ExecRefusal:
        return parse_answer(exchange(self.daemon.socket_path, data, close_write=close_write))

    def request_line(
        self,
        argv: Sequence[str],
        *,
        token: str | None = None,
        secret: str | None = None,
        timeout_seconds: float = 5.0,
        **extra: object,
    ) -> bytes:
        body = {
            "secret": self.secret if secret is None else secret,
            "token": self.tokens["demo"].secret if token is None else token,
            "argv": list(argv),
            "timeout_seconds": timeout_seconds,
        } | extra
        return json.dumps(body).encode() + b"\n"

    def request(
        self,
        argv: Sequence[str],
        *,
        token: str | None = None,
        secret: str | None = None,
        timeout_seconds: float = 5.0,
    ) -> ExecResult | ExecRefusal:
        line = self.request_line(argv, token=token, secret=secret, timeout_seconds=timeout_seconds)
        return self.send(line)

    def client(self, *, tcp: bool = False) -> ExecutorClient:
        if tcp:
            assert self.daemon.tcp_address is not None
            host, port = self.daemon.tcp_address
            return ExecutorClient(f"tcp:{host}:{port}", self.secret_file)
        return ExecutorClient(f"unix:{self.daemon.socket_path}", self.secret_file)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DaemonHarness]:
    """A daemon harness (not yet started) with a ``demo`` token for its project dir."""
    daemon = DaemonHarness(tmp_path)
    daemon.add_token()
    yield daemon
    daemon.stop()
