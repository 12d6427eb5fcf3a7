"""Starting and stopping the host executor daemon (``cloister-executor serve``).

It runs detached (its own session) with its output in ``<data>/guardian/executor.log``;
``<data>/executor.json`` says which process it is. Whether it is ours is checked by
its command line, so a stale pid that now belongs to something else is never killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_executor.locations import socket_path
from cloister_executor.protocol import ExecutorState

START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0


class ExecutorError(CloisterError):
    """The executor daemon did not start or stop as asked."""


def _is_ours(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False
        return True  # no /proc (macOS): trust the state file
    return b"cloister_executor" in cmdline and b"serve" in cmdline


def running(paths: CloisterPaths) -> ExecutorState | None:
    """The running daemon's state, or None."""
    try:
        state = ExecutorState.model_validate_json(paths.executor_state.read_bytes())
    except (OSError, ValueError):
        return None
    return state if _is_ours(state.pid) and state.socket.exists() else None


def start(paths: CloisterPaths, *, tcp: str | None = None) -> ExecutorState:
    """Start the daemon unless it runs already (idempotent)."""
    state = running(paths)
    if state is not None:
        return state
    paths.executor_log.parent.mkdir(parents=True, exist_ok=True)
    # -P and "/": `-m` would put the working directory (a project, written by its agent)
    # first on sys.path, and a cloister_executor/ there would be what runs.
    argv = [
        sys.executable, "-P", "-m", "cloister_executor.main", "serve", "--background",
        "--config-dir", str(paths.config_dir), "--data-dir", str(paths.data_dir),
        *(["--tcp", tcp] if tcp else []),
    ]  # fmt: skip
    # --background: the daemon is not our child, so nothing here has to reap it later.
    with paths.executor_log.open("ab") as log:
        launched = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            check=False,
            cwd="/",
        )
    pid = int(launched.stdout) if launched.stdout.strip().isdigit() else None
    deadline = time.monotonic() + START_TIMEOUT
    while pid is not None and time.monotonic() < deadline:
        state = running(paths)
        if state is not None and state.pid == pid:
            return state
        if not _is_ours(pid):
            break
        time.sleep(0.05)
    if pid is not None and _is_ours(pid):
        os.kill(pid, signal.SIGKILL)
    raise ExecutorError(f"the host executor did not start; see {paths.executor_log}")


def stop(paths: CloisterPaths) -> bool:
    """Stop the daemon; False if none was running."""
    state = running(paths)
    if state is None:
        return False
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline and _is_ours(state.pid):
        time.sleep(0.05)
    if _is_ours(state.pid):
        os.kill(state.pid, signal.SIGKILL)
    socket_path(paths).unlink(missing_ok=True)
    return True
