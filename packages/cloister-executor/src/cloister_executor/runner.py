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


async def _pipe_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.ReadTransport]:
    """A stream over the read end *fd* of a pipe, whose transport we own (and close)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


class _SpawnError(Exception):
    """The command could not be started; the exit code and message say why."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


def _check(argv: Sequence[str], cwd: Path) -> None:
    if not cwd.is_dir():
        raise _SpawnError(126, f"working directory {str(cwd)!r} does not exist")
    if any("\x00" in arg for arg in argv):
        raise _SpawnError(126, "an argument contains a NUL byte")


async def _spawn(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
) -> tuple[asyncio.subprocess.Process, int, int]:
    """Start *argv* in its own session; returns it and the read ends of its output pipes."""
    _check(argv, cwd)
    # Our own pipes (not asyncio's): we hold the read ends and can close them even if
    # something escapes the process group and keeps the write ends open.
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out_write,
            stderr=err_write,
            start_new_session=True,
        )
    except BaseException as error:
        os.close(out_read)
        os.close(err_read)
        if isinstance(error, FileNotFoundError):
            raise _SpawnError(127, f"command not found: {argv[0]}") from None
        if isinstance(error, PermissionError):
            raise _SpawnError(126, f"permission denied: {argv[0]}") from None
        if isinstance(error, OSError | ValueError):
            raise _SpawnError(126, f"cannot run {argv[0]}: {error}") from None
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return process, out_read, err_read


async def _supervise(
    process: asyncio.subprocess.Process,
    pipes: tuple[int, int],
    captures: tuple[_Capture, _Capture],
    timeout_seconds: float,
) -> bool:
    """Collect output until every pipe holder exits or the timeout; True if timed out."""
    out, err = captures
    (out_stream, out_transport), (err_stream, err_transport) = (
        await _pipe_reader(pipes[0]),
        await _pipe_reader(pipes[1]),
    )
    timed_out = False
    try:
        async with asyncio.TaskGroup() as tasks:
            readers = {
                tasks.create_task(out.drain(out_stream)),
                tasks.create_task(err.drain(err_stream)),
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
    finally:
        out_transport.close()
        err_transport.close()
    return timed_out


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
    out, err = _Capture(cap), _Capture(cap)
    try:
        process, out_read, err_read = await _spawn(argv, cwd, env)
    except _SpawnError as refused:
        return ExecResult(
            exit_code=refused.exit_code,
            stdout=b"",
            stderr=f"hostexec: {refused.message}\n".encode(),
            duration_ms=round((time.monotonic() - started) * 1000, 3),
        )
    timed_out = await _supervise(process, (out_read, err_read), (out, err), timeout_seconds)
    # Anything the command left behind in its group goes with it.
    _kill_group(process)
    returncode = await process.wait()
    stderr = bytes(err.kept)
    if timed_out:
        notice = f"\nhostexec: killed after {timeout_seconds:g}s (the command and its children)\n"
        stderr += notice.encode()
    return ExecResult(
        exit_code=_exit_code(returncode),
        stdout=bytes(out.kept),
        stderr=stderr,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        timed_out=timed_out,
        duration_ms=round((time.monotonic() - started) * 1000, 3),
    )
