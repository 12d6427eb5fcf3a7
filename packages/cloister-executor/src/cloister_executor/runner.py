"""Running one approved command on the host: argv only, bounded in time and output.

* No shell, ever: ``argv[0]`` is looked up on ``PATH`` and exec'd with ``argv``.
* The command starts its own session (a new process group), so on timeout the whole
  group is killed, children included.
* stdout and stderr are read concurrently, each kept up to a cap (1 MiB) and drained
  past it (so a chatty command cannot block on a full pipe), with a truncated flag.
* stdin is ``/dev/null``: nobody is there to type.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cloister_executor.protocol import OUTPUT_CAP, ExecResult

READ_CHUNK = 64 * 1024
KILL_GRACE = 5.0  # seconds to let pipes close after the group is killed


class _Capture:
    """One output stream, kept up to *cap* bytes and drained past it."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.truncated = False

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(READ_CHUNK):
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            if len(chunk) > room:
                self.truncated = True


def _kill_group(process: asyncio.subprocess.Process) -> None:
    # start_new_session made the child a group leader: its pid is the group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _exit_code(returncode: int) -> int:
    # A signal death reads like a shell reports it: 128 + the signal number.
    return 128 - returncode if returncode < 0 else returncode


async def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_seconds: float,
    cap: int = OUTPUT_CAP,
) -> ExecResult:
    """Run *argv* in *cwd* with exactly *env*; never raises for the command's failures."""
    started = time.monotonic()

    def result(
        code: int,
        out: bytes,
        err: bytes,
        *,
        stdout_truncated: bool = False,
        stderr_truncated: bool = False,
        timed_out: bool = False,
    ) -> ExecResult:
        return ExecResult(
            exit_code=code,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            stdout_truncated=stdout_truncated,
            stderr_truncated=stderr_truncated,
            timed_out=timed_out,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
        )

    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        return result(127, b"", f"hostexec: command not found: {argv[0]}\n".encode())
    except PermissionError:
        return result(126, b"", f"hostexec: permission denied: {argv[0]}\n".encode())
    except OSError as error:
        return result(126, b"", f"hostexec: cannot run {argv[0]}: {error}\n".encode())

    out, err = _Capture(cap), _Capture(cap)
    timed_out = False
    try:
        async with asyncio.TaskGroup() as tasks:
            readers = {
                tasks.create_task(out.drain(process.stdout)),
                tasks.create_task(err.drain(process.stderr)),
            }
            try:
                # Done when every holder of the pipes (the command and anything it left
                # running in the background) has exited, or at the timeout.
                async with asyncio.timeout(timeout_seconds):
                    await asyncio.wait(readers)
                    await process.wait()
            except TimeoutError:
                timed_out = True
                _kill_group(process)
                try:
                    async with asyncio.timeout(KILL_GRACE):
                        await asyncio.wait(readers)
                except TimeoutError:  # something escaped the group and holds a pipe
                    for reader in readers:
                        reader.cancel()
    except BaseException:
        _kill_group(process)
        raise
    # Anything the command left behind in its group goes with it.
    _kill_group(process)
    returncode = await process.wait()
    stderr = bytes(err.kept)
    if timed_out:
        notice = f"\nhostexec: killed after {timeout_seconds:g}s (the command and its children)\n"
        stderr += notice.encode()
    return result(
        _exit_code(returncode),
        bytes(out.kept),
        stderr,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        timed_out=timed_out,
    )
