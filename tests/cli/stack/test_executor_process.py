"""Starting and stopping the real host executor daemon (``cloister-executor serve``).

Each test gets its own config and data directories; every daemon a test starts is
stopped by its pid when the test ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cloister_cli.stack import executor_process
from cloister_cli.stack.executor_process import ExecutorError
from cloister_core.paths import CloisterPaths
from cloister_executor.locations import secret_path, socket_path
from cloister_executor.protocol import ExecutorState
from tests.waiting import wait_until


def alive(pid: int) -> bool:
    """Running (a zombie, which only waits to be reaped, is not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[CloisterPaths]:
    paths = CloisterPaths(config_dir=tmp_path / "c", data_dir=tmp_path / "d")
    started: list[int] = []
    original = executor_process.start

    def tracking_start(paths: CloisterPaths, *, tcp: str | None = None) -> ExecutorState:
        state = original(paths, tcp=tcp)
        started.append(state.pid)
        return state

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(executor_process, "start", tracking_start)
        yield paths
    for pid in started:  # only the daemons this test started, by pid
        if alive(pid) and b"cloister_executor" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not the executor."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def write_state(paths: CloisterPaths, pid: int) -> None:
    """An executor.json as a daemon would leave it, with a socket path that exists."""
    socket = socket_path(paths)
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.touch()
    state = ExecutorState(
        pid=pid, socket=socket, secret_file=secret_path(paths), started_at=datetime.now(UTC)
    )
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    paths.executor_state.write_text(state.model_dump_json(), encoding="utf-8")


def test_start_is_idempotent_and_stop_ends_it(paths: CloisterPaths) -> None:
    assert executor_process.running(paths) is None
    state = executor_process.start(paths)
    assert alive(state.pid)
    cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[:5] == [
        sys.executable.encode(),
        b"-P",
        b"-m",
        b"cloister_executor.main",
        b"serve",
    ]
    assert Path(f"/proc/{state.pid}/cwd").readlink() == Path("/")
    assert str(paths.data_dir).encode() in cmdline
    assert state.socket == socket_path(paths)
    assert stat.S_ISSOCK(state.socket.stat().st_mode)
    assert state.tcp is None  # no TCP listener on Linux
    assert executor_process.running(paths) == state
    assert executor_process.start(paths) == state  # the same daemon, not a second one
    log = paths.executor_log
    assert f"listening on {state.socket}" in log.read_text(encoding="utf-8")

    assert executor_process.stop(paths) is True
    wait_until(lambda: not alive(state.pid), 5, f"the executor {state.pid} to end")
    assert executor_process.running(paths) is None
    assert not state.socket.exists()
    assert executor_process.stop(paths) is False  # nothing left to stop


def test_a_cloister_executor_package_in_the_working_directory_never_runs(
    paths: CloisterPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cloister start` runs in a project an agent writes: a package of the daemon's name
    there must not be the one Python imports, neither for the start nor the daemon."""
    project = tmp_path / "project"
    planted = project / "cloister_executor"
    planted.mkdir(parents=True)
    marker = tmp_path / "ran"
    (planted / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('the agent code ran on the host')\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(project)
    state = executor_process.start(paths)
    assert alive(state.pid)
    assert not marker.exists()


def test_start_replaces_a_stale_state_file(paths: CloisterPaths) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_state(paths, dead.pid)
    state = executor_process.start(paths)
    assert state.pid != dead.pid
    assert ExecutorState.model_validate_json(paths.executor_state.read_bytes()) == state
    # Without its socket it is of no use to the gateway: not "running".
    state.socket.unlink()
    assert executor_process.running(paths) is None
    os.kill(state.pid, signal.SIGTERM)
    wait_until(lambda: not alive(state.pid), 5, f"the executor {state.pid} to end")


def test_a_dead_pid_is_not_running(paths: CloisterPaths) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_state(paths, dead.pid)
    assert executor_process.running(paths) is None
    assert executor_process.stop(paths) is False


def test_a_pid_that_is_not_the_executor_is_never_killed(
    paths: CloisterPaths, bystander: subprocess.Popen[bytes]
) -> None:
    for pid in (bystander.pid, os.getpid()):
        write_state(paths, pid)
        assert executor_process.running(paths) is None
        assert executor_process.stop(paths) is False
    time.sleep(0.1)
    assert bystander.poll() is None  # still running


@pytest.mark.parametrize("content", [b"", b"{", b'{"pid": "x"}', b"\xff"])
def test_an_unreadable_state_file_is_not_running(paths: CloisterPaths, content: bytes) -> None:
    paths.data_dir.mkdir(parents=True)
    paths.executor_state.write_bytes(content)
    assert executor_process.running(paths) is None
    assert executor_process.stop(paths) is False


def test_a_daemon_that_cannot_start_is_reported(tmp_path: Path) -> None:
    # A Unix socket path longer than the kernel allows (108 bytes): the bind fails.
    deep = tmp_path / ("d" * 100)
    paths = CloisterPaths(config_dir=tmp_path / "c", data_dir=deep)
    with pytest.raises(ExecutorError) as caught:
        executor_process.start(paths)
    log = deep / "guardian" / "executor.log"
    assert str(caught.value) == f"the host executor did not start; see {log}"
    assert log.read_text(encoding="utf-8") != ""
    with contextlib.suppress(FileNotFoundError):
        assert executor_process.running(paths) is None
