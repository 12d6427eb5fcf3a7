"""Moving a tunnel's bytes between two sockets, as close to wire speed as Python gets.

Each direction is a :class:`Pump` driven by event-loop readiness callbacks, not by
coroutines: no future, no task switch per chunk. A pump starts by copying through a
64 KiB buffer with ``recv_into``/``send`` (two system calls per message, the cheapest
path for the small exchanges most connections are made of). As soon as one read
fills the buffer, the direction is carrying bulk data and, on Linux, switches to
``os.splice``: the bytes then move socket → pipe → socket inside the kernel, up to a
pipe's worth (1 MiB) per call, and never enter Python.

Flow control is the kernel's: a pump stops reading its source while it holds bytes
the destination cannot take (a full pipe, or a copy-mode remainder) and waits for
writability. So a fast sender is throttled to the speed of the slow receiver, and
memory stays flat whatever the volume.

Half-close is honoured (EOF one way shuts down the write side of the other socket),
so request/response protocols that signal the end of input with EOF keep working.
Pipes are created only when a direction first carries data, so an idle tunnel costs
two sockets and a few small objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import sys
from collections.abc import Callable

CHUNK = 1 << 20
COPY_BUFFER = 64 * 1024
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
SPLICE_AVAILABLE = sys.platform == "linux" and hasattr(os, "splice")
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


def _open_pipe() -> tuple[int, int, int]:
    """A non-blocking pipe as large as the system allows (up to CHUNK)."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        size = fcntl.fcntl(write_end, _F_SETPIPE_SZ, CHUNK)
    except OSError:
        size = 64 * 1024
    return read_end, write_end, size


class Pump:
    """One direction of a tunnel: *src* → *dst*, until EOF or an error.

    Copy mode reads into *shared*, a buffer every pump of the event loop uses in turn
    (the loop runs one callback at a time); only bytes the destination could not take
    at once are copied out, into this pump's ``_pending``. Splice mode keeps up to a
    pipe's worth in flight and reads again as soon as the pipe has room, so reading
    the source overlaps writing the destination.
    """

    __slots__ = (
        "_dst",
        "_eof",
        "_in_pipe",
        "_loop",
        "_on_activity",
        "_on_done",
        "_pending",
        "_pipe",
        "_reading",
        "_shared",
        "_src",
        "_use_splice",
        "_writing",
        "bytes",
        "done",
        "error",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        src: socket.socket,
        dst: socket.socket,
        *,
        shared: bytearray,
        on_activity: Callable[[], None],
        on_done: Callable[[], None],
        use_splice: bool = SPLICE_AVAILABLE,
    ) -> None:
        self._loop = loop
        self._src = src
        self._dst = dst
        self._shared = shared
        self._on_activity = on_activity
        self._on_done = on_done
        self._use_splice = use_splice
        self._pipe: tuple[int, int, int] | None = None
        self._pending = b""  # copy mode: what dst has not taken yet
        self._in_pipe = 0  # splice mode: bytes sitting in the pipe
        self._eof = False
        self._reading = False
        self._writing = False
        self.bytes = 0
        self.done = False
        self.error: OSError | None = None

    def start(self) -> None:
        self._want_reading(True)

    def _want_reading(self, wanted: bool) -> None:
        if wanted and not self._reading:
            self._reading = True
            self._loop.add_reader(self._src.fileno(), self._on_readable)
        elif not wanted and self._reading:
            self._reading = False
            self._loop.remove_reader(self._src.fileno())

    def _want_writing(self, wanted: bool) -> None:
        if wanted and not self._writing:
            self._writing = True
            self._loop.add_writer(self._dst.fileno(), self._on_writable)
        elif not wanted and self._writing:
            self._writing = False
            self._loop.remove_writer(self._dst.fileno())

    # -- events ------------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            if self._pipe is not None:
                self._splice_in(self._pipe)
            else:
                self._copy()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._finish(error)

    def _on_writable(self) -> None:
        try:
            if self._pipe is not None:
                self._splice_out(self._pipe)
            else:
                self._copy_out()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._finish(error)

    # -- copy mode ---------------------------------------------------------------------

    def _copy(self) -> None:
        count = self._src.recv_into(self._shared)
        if count == 0:
            self._end_of_input()
            return
        view = memoryview(self._shared)[:count]
        try:
            sent = self._dst.send(view)
        except (BlockingIOError, InterruptedError):
            sent = 0
        self.bytes += sent
        if sent < count:
            # Back-pressure: keep the rest, stop reading until dst takes it.
            self._pending = bytes(view[sent:])
            self._want_reading(False)
            self._want_writing(True)
        elif count == len(self._shared) and self._use_splice:
            # A full buffer: this direction carries bulk data; move it in the kernel.
            self._pipe = _open_pipe()
        self._on_activity()

    def _copy_out(self) -> None:
        sent = self._dst.send(self._pending)
        self.bytes += sent
        self._pending = self._pending[sent:]
        if not self._pending:
            self._want_writing(False)
            self._want_reading(True)
            self._on_activity()

    # -- splice mode -------------------------------------------------------------------

    def _splice_in(self, pipe: tuple[int, int, int]) -> None:
        room = pipe[2] - self._in_pipe
        count = os.splice(self._src.fileno(), pipe[1], room, flags=_SPLICE_FLAGS)
        if count == 0:
            self._eof = True
            self._want_reading(False)
        self._in_pipe += count
        self._splice_out(pipe)

    def _splice_out(self, pipe: tuple[int, int, int]) -> None:
        while self._in_pipe:
            try:
                sent = os.splice(pipe[0], self._dst.fileno(), self._in_pipe, flags=_SPLICE_FLAGS)
            except (BlockingIOError, InterruptedError):
                break
            self._in_pipe -= sent
            self.bytes += sent
        self._on_activity()
        self._want_writing(self._in_pipe > 0)
        if self._eof:
            if not self._in_pipe:
                self._end_of_input()
            return
        # Keep reading while the pipe has room: reads overlap writes.
        self._want_reading(self._in_pipe < pipe[2])

    # -- ending ------------------------------------------------------------------------

    def _end_of_input(self) -> None:
        # The other side may already be gone; the tunnel ends either way.
        with contextlib.suppress(OSError):
            self._dst.shutdown(socket.SHUT_WR)
        self._finish(None)

    def _finish(self, error: OSError | None) -> None:
        if self.done:
            return
        self.done = True
        self.error = error
        self.stop()
        self._on_done()

    def stop(self) -> None:
        """Unregister from the loop and release the pipe (idempotent)."""
        self._want_reading(False)
        self._want_writing(False)
        self._pending = b""
        if self._pipe is not None:
            os.close(self._pipe[0])
            os.close(self._pipe[1])
            self._pipe = None


class Tunnel:
    """Both directions of a CONNECT tunnel, with an idle timeout."""

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        *,
        idle_timeout: float,
        shared: bytearray | None = None,
        use_splice: bool = SPLICE_AVAILABLE,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        shared = bytearray(COPY_BUFFER) if shared is None else shared
        self._idle_timeout = idle_timeout
        self._finished = self._loop.create_future()
        self._timer: asyncio.TimerHandle | None = None
        self.last_activity = self._loop.time()
        self.idled_out = False
        self.up = Pump(
            self._loop,
            client,
            upstream,
            shared=shared,
            on_activity=self._activity,
            on_done=self._pump_done,
            use_splice=use_splice,
        )
        self.down = Pump(
            self._loop,
            upstream,
            client,
            shared=shared,
            on_activity=self._activity,
            on_done=self._pump_done,
            use_splice=use_splice,
        )

    def _activity(self) -> None:
        self.last_activity = self._loop.time()

    def _end(self) -> None:
        if not self._finished.done():
            self._finished.set_result(None)

    def _pump_done(self) -> None:
        # Both directions at EOF, or either one failed: the tunnel is over.
        if (
            self.up.error is not None
            or self.down.error is not None
            or (self.up.done and self.down.done)
        ):
            self._end()

    def _check_idle(self) -> None:
        # One timer per tunnel, re-armed from the last activity: activity itself
        # only stores a timestamp, which keeps the data path free of timer churn.
        deadline = self.last_activity + self._idle_timeout
        if self._loop.time() >= deadline:
            self.idled_out = True
            self._end()
        else:
            self._timer = self._loop.call_at(deadline, self._check_idle)

    async def run(self) -> None:
        """Relay until both sides are done, one fails, or the tunnel idles out."""
        self.up.start()
        self.down.start()
        self._timer = self._loop.call_at(self.last_activity + self._idle_timeout, self._check_idle)
        try:
            await self._finished
        finally:
            self._timer.cancel()
            self.up.stop()
            self.down.stop()
