"""The command server: Cloister imported once, each command run in a fork of it.

Started by the console script (:mod:`cloister_cli.launch.client`) when it found none:
``python -P -m cloister_cli.launch.server SOCKET``. It takes the lock beside the socket
(a second server for the same socket exits at once), imports the commands and the
library, freezes what it imported out of the collector's way, and listens.

A caller is served when it is of the server's user and its :class:`Credentials` are
the server's (the same namespaces, root directory and cgroups, user and groups,
capabilities, limits, security label and nice value): a command never gets more, nor
other, than its caller had. Otherwise it is told ``declined`` and runs the command
itself. A server under seccomp or no_new_privs (whose filters no one can compare)
serves no one. The server
reads nothing of a request: it forks at once, and the fork reads it (a slow caller holds
up no one else, and no caller's environment stays in the server for the next fork). The
fork becomes the command: the caller's standard streams, working directory (a
descriptor), umask, environment and arguments, a process group of its own (the caller
passes it the terminal's signals); it says who it is, waits for the caller's go, then
runs the console script's ``main``. The server reaps it and sends the caller its exit
status (or the signal that ended it). A command whose caller goes away gets SIGHUP, as a
command whose terminal closed would.

It stops when its code changed since it imported it (a file of a module it loaded has
another modification time or size: an upgrade, an edit), answering the caller that
asked "stale" so that it runs the command itself; when its socket is gone; when no
command has run for :data:`IDLE_SECONDS` (``--idle``); and on SIGTERM. Each command's
name (not its arguments, which may hold secrets) is a line of its log (the socket's
name with ``.log``).

Everything a command reads from its environment is read when it runs (never at import:
a rule of the whole project, which is what makes a fork of a warm process the same as a
fresh one), and the forks share nothing else: the server makes no connection, reads no
file of the user's and starts no thread.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import gc
import importlib
import io
import os
import pkgutil
import queue
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloister_cli.launch import terminal, wire

IDLE_SECONDS = 600.0
LOG_LIMIT = 1 << 20  # emptied by the next server once it is longer
REQUEST_TIMEOUT_SECONDS = 10.0  # the caller's request, then its go, each
SOCKET_CHECK_SECONDS = 60.0
ENTRY = "cloister_cli.commands.main:main"
# Imported ahead besides the entry's module: the library and what its commands load when
# they run. The files inside the cloister are not Python Cloister runs.
WARM_PACKAGES = ("cloister_cli", "cloister_core", "cloister_executor")
COLD = ("cloister_cli.inside", "cloister_cli.launch")
WARM_MODULES = ("docker",)


@dataclass(frozen=True, slots=True)
class Request:
    argv: list[str]
    env: dict[str, str]
    umask: int
    streams: list[tuple[str, str]]

    @classmethod
    def of(cls, message: dict[str, Any]) -> Request:
        try:
            argv, env = message["argv"], message["env"]
            umask, streams = message["umask"], message["streams"]
            if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
                raise TypeError(f"argv {argv!r}")
            if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()
            ):
                raise TypeError("env")
            if not isinstance(umask, int) or len(streams) != 3:
                raise TypeError(f"umask {umask!r}, streams {streams!r}")
            pairs = [(str(encoding), str(errors)) for encoding, errors in streams]
        except (KeyError, TypeError, ValueError) as error:
            raise wire.WireError(f"not a command request: {error}") from None
        return cls(argv, env, umask & 0o777, pairs)


class Fingerprint:
    """The files of the modules a process has loaded, as they were."""

    def __init__(self) -> None:
        self.files = dict(self._now())

    @staticmethod
    def _now() -> Iterator[tuple[str, tuple[int, int]]]:
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                try:
                    found = Path(path).stat()
                except OSError:
                    yield path, (-1, -1)
                else:
                    yield path, (found.st_mtime_ns, found.st_size)

    def changed(self) -> bool:
        for path, then in self.files.items():
            try:
                found = Path(path).stat()
            except OSError:
                return True
            if (found.st_mtime_ns, found.st_size) != then:
                return True
        return False


# What /proc/PID/status says of a process's privileges (the user's, its groups', its
# capabilities', no_new_privs', seccomp's): a caller's must be the server's, as its
# namespaces, root, cgroups, limits, security label and nice value must.
PRIVILEGES = (
    "Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "Seccomp_filters",
    "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a process may do and see, as far as a command it runs inherits it."""

    namespaces: tuple[tuple[str, int, int], ...]  # files, network, processes...
    root: tuple[int, int]  # its root directory (a chroot)
    cgroups: str
    privileges: tuple[tuple[str, str], ...]  # PRIVILEGES, as /proc/PID/status says
    limits: str
    label: bytes  # the security module's
    nice: int

    @property
    def sandboxed(self) -> bool:
        """Under a filter whose rules no one can read (seccomp; Landlock, which needs
        no_new_privs): a caller under another one would look the same, so a server
        under one serves no one."""
        status = dict(self.privileges)
        return status.get("NoNewPrivs", "0") != "0" or status.get("Seccomp", "0") != "0"


def credentials(pid: int) -> Credentials | None:
    """Process *pid*'s :class:`Credentials` (None: not readable, or gone)."""
    proc = Path(f"/proc/{pid}")
    try:
        namespaces = []
        for entry in sorted((proc / "ns").iterdir()):
            found = entry.stat()
            namespaces.append((entry.name, found.st_dev, found.st_ino))
        root = (proc / "root").stat()
        cgroups = (proc / "cgroup").read_text(encoding="utf-8")
        status = (proc / "status").read_text(encoding="utf-8").splitlines()
        limits = (proc / "limits").read_text(encoding="utf-8")
        nice = os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None
    try:
        label = (proc / "attr" / "current").read_bytes()
    except OSError:  # no security module
        label = b""
    fields = (line.partition(":") for line in status)
    privileges = tuple((name, value.strip()) for name, _, value in fields if name in PRIVILEGES)
    return Credentials(
        tuple(namespaces), (root.st_dev, root.st_ino), cgroups, privileges, limits, label, nice
    )


def warm(entry: str) -> Callable[[], Any]:
    """Import the entry's module and what the commands import when they run; the entry."""
    module_name, _, attribute = entry.partition(":")
    target: Callable[[], Any] = getattr(importlib.import_module(module_name), attribute)
    if entry != ENTRY:
        return target
    for name in WARM_MODULES:
        importlib.import_module(name)
    for package_name in WARM_PACKAGES:
        package = importlib.import_module(package_name)
        for found in pkgutil.walk_packages(package.__path__, f"{package_name}."):
            if not found.name.startswith(COLD):
                importlib.import_module(found.name)
    return target


class Server:
    """The accept loop: forks a command per request, reaps them, reports their status."""

    def __init__(self, path: Path, lock_fd: int, log: io.TextIOBase, idle: float) -> None:
        self.path = path
        self.idle = idle
        self.lock_fd = lock_fd
        self.log = log
        self.listener = listen(path)
        self.inode = path.stat().st_ino
        self.credentials = credentials(os.getpid())
        self.fingerprint = Fingerprint()
        self.commands: dict[int, wire.Channel] = {}
        self.selector = selectors.DefaultSelector()
        self.wakeup_read, self.wakeup_write = os.pipe()
        self.listening = True

    def serve(self) -> Command | None:
        """Serve until it stops (None), or, in a fork, the command it is to run."""
        for fd in (self.wakeup_read, self.wakeup_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wakeup_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop)
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wakeup_read, selectors.EVENT_READ)
        idle_since = time.monotonic()
        while self.listening or self.commands:
            timeout = None if self.commands else self.idle - (time.monotonic() - idle_since)
            if timeout is not None and timeout <= 0:
                self.retire("idle")
                break
            if self.listening and not self._socket_is_ours():
                self.retire("its socket is gone")
                continue
            waiting = (
                SOCKET_CHECK_SECONDS if timeout is None else min(timeout, SOCKET_CHECK_SECONDS)
            )
            for found, _ in self.selector.select(waiting):
                if found.fileobj is self.listener and self.listening:
                    command = self._accept()
                    if command is not None:
                        return command
                elif found.fileobj == self.wakeup_read:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wakeup_read, 512):
                            pass
                    self._reap()
            if self.commands:
                idle_since = time.monotonic()
        return None

    def _socket_is_ours(self) -> bool:
        """Whether the path is still this server's socket (a temporary directory
        cleaned, the user's files removed: then no caller can reach it)."""
        try:
            return self.path.stat().st_ino == self.inode
        except OSError:
            return False

    def _stop(self, *_: object) -> None:
        self.retire("SIGTERM")

    def retire(self, why: str) -> None:
        """Listen no more, and let a new server take the socket at once; the commands
        still running are reaped before this one exits."""
        if not self.listening:
            return
        self.listening = False
        self.selector.unregister(self.listener)
        self.listener.close()
        # Holding the lock, this server is the only one that binds the path.
        if self._socket_is_ours():
            self.path.unlink()
        os.close(self.lock_fd)
        self._say(f"stopping: {why}")

    def _accept(self) -> Command | None:
        try:
            connection, _ = self.listener.accept()
        except OSError:
            return None
        channel = wire.Channel(connection)
        try:
            caller, uid = wire.peer(connection)
            if uid != os.getuid():
                raise wire.WireError(f"a caller of another user (uid {uid})")
            if not wire.same_mount_namespace(caller):
                raise wire.WireError(f"a caller in another mount namespace (pid {caller})")
            if credentials(caller) != self.credentials:
                channel.send({"declined": "its privileges or limits are not the server's"})
                self._say(f"declined pid {caller}: other privileges or limits")
                channel.close()
                return None
            if self.fingerprint.changed():
                self.retire("its code changed since it started")
                channel.send({"stale": True})
                channel.close()
                return None
        except (OSError, wire.WireError) as error:
            self._say(f"refused a request: {error}")
            channel.close()
            return None
        pid = os.fork()
        if pid == 0:
            return self._become(channel)
        self.commands[pid] = channel
        return None

    def _become(self, channel: wire.Channel) -> Command:
        """In the fork: drop the server's parts; the command to run."""
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        self.selector.close()
        self.listener.close()
        if self.listening:
            os.close(self.lock_fd)  # the lock is the server's, not a command's
        os.close(self.wakeup_read)
        os.close(self.wakeup_write)
        for other in self.commands.values():
            other.connection.close()
        return Command(channel, self.log)

    def _reap(self) -> None:
        while self.commands:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            channel = self.commands.pop(pid, None)
            if channel is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                channel.send({"signal": -code} if code < 0 else {"exit": code})
            channel.close()

    def _say(self, line: str) -> None:
        say(self.log, line)


class Command:
    """A fork of the server that becomes the caller's command."""

    def __init__(self, channel: wire.Channel, log: io.TextIOBase) -> None:
        self.channel = channel
        self.log = log
        self.replies: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def receive(self) -> tuple[Request, list[int]]:
        """The caller's request and its descriptors (streams, directory), then its go;
        WireError or OSError (a timeout) when it is not there in time."""
        connection = self.channel.connection
        connection.settimeout(REQUEST_TIMEOUT_SECONDS)
        message = self.channel.receive()
        fds = self.channel.take_fds()
        try:
            if message is None:
                raise wire.WireError("no request")
            if len(fds) != wire.MAX_FDS:
                raise wire.WireError(f"{len(fds)} descriptors, not {wire.MAX_FDS}")
            request = Request.of(message)
            self.channel.send({"pid": os.getpid()})
            go = self.channel.receive()
            if go is None or not go.get("go"):
                raise wire.WireError(f"no go: {go!r:.100}")
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        connection.settimeout(None)
        return request, fds

    def run(self, entry: Callable[[], Any]) -> Any:
        """Take the caller's place, then run *entry*; what it returns."""
        try:
            request, fds = self.receive()
        except (OSError, wire.WireError) as error:
            self._say(f"{os.getpid()}: ran nothing: {error}")
            with contextlib.suppress(OSError):
                self.channel.send({"declined": f"the request did not arrive ({error})"})
            return 0
        name = next((word for word in request.argv if not word.startswith("-")), "")
        self._say(f"{os.getpid()}: {name or ' '.join(request.argv[:1])}")
        self.log.close()
        os.setpgid(0, 0)
        *streams, here = fds
        for number, fd in enumerate(streams):
            os.dup2(fd, number)
            os.close(fd)
        os.fchdir(here)
        os.close(here)
        os.umask(request.umask)
        os.environ.clear()
        os.environ.update(request.env)
        sys.argv = ["cloister", *request.argv]
        self._streams(request)
        threading.Thread(target=self._listen, name="caller", daemon=True).start()
        terminal.serve_from(self._run_in_terminal)
        return entry()

    def _say(self, line: str) -> None:
        say(self.log, line)

    def _streams(self, request: Request) -> None:
        """Python's standard streams over the caller's, as its interpreter made them:
        stdout buffered by blocks unless it is a terminal, stderr by lines."""
        made = []
        for number, (encoding, errors) in enumerate(request.streams):
            by_line = number == 2 or (number == 1 and os.isatty(number))
            mode = "r" if number == 0 else "w"
            buffering = 1 if by_line else -1
            made.append(
                open(  # noqa: SIM115 - the process's streams until it ends
                    number, mode, buffering, encoding, errors, closefd=False
                )
            )
        sys.stdin, sys.stdout, sys.stderr = made
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = made  # type: ignore[misc,assignment]

    def _listen(self) -> None:
        """The caller's answers; when it goes away, end as a command whose terminal closed."""
        try:
            while (message := self.channel.receive()) is not None:
                self.replies.put(int(message["returncode"]))
        except (OSError, wire.WireError, KeyError, TypeError, ValueError):
            pass
        self.replies.put(None)
        os.killpg(0, signal.SIGHUP)

    def _run_in_terminal(self, argv: list[str], env: dict[str, str]) -> int:
        self.channel.send({"run": argv, "env": env})
        returncode = self.replies.get()
        if returncode is None:
            raise SystemExit(129)  # the caller went away; SIGHUP is on its way
        return returncode


def same_mount_namespace(pid: int) -> bool:
    """Whether process *pid* sees the files this server sees: a host process, not one in
    a container (whose mount namespace is its own). Unknown (no pid, no access): no."""
    if pid <= 0:
        return False
    try:
        theirs = Path(f"/proc/{pid}/ns/mnt").stat()
        ours = Path("/proc/self/ns/mnt").stat()
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def say(log: io.TextIOBase, line: str) -> None:
    """One line of the log (a log that cannot be written stops nothing)."""
    with contextlib.suppress(OSError, ValueError):
        log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
        log.flush()


def open_log(path: Path) -> io.TextIOBase:
    """The server's log, appended to (emptied first once over :data:`LOG_LIMIT`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    if os.fstat(fd).st_size > LOG_LIMIT:
        os.ftruncate(fd, 0)  # the server holds the lock: no other server writes it
    return open(fd, "a", encoding="utf-8")  # noqa: PTH123 - a descriptor, not a path


def lock(path: Path) -> int | None:
    """The server's lock beside *path* (kept open while it runs); None when another
    server holds it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(path.with_suffix(".lock"), flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def listen(path: Path) -> socket.socket:
    """A socket listening at *path*: bound beside it and renamed once it listens, so a
    caller never finds a socket that refuses it."""
    beside = path.with_name(f"{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        beside.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(beside))  # in the user's 0700 directory
    listener.listen(64)
    beside.replace(path)
    return listener


def main(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("socket", type=Path)
    parser.add_argument("--entry", default=ENTRY, help="module:function a command runs")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="seconds until it stops")
    options = parser.parse_args(argv)
    path: Path = options.socket
    lock_fd = lock(path)
    if lock_fd is None:
        print(f"cloister: another server holds {str(path)!r}", file=sys.stderr)
        return 0  # another server for this socket is running or starting
    entry = warm(options.entry)
    if threading.active_count() != 1:  # a fork has only the thread that forked
        names = [thread.name for thread in threading.enumerate()]
        print(f"cloister: not serving: importing started threads {names}", file=sys.stderr)
        return 1
    own = credentials(os.getpid())
    if own is None or own.sandboxed:
        print(
            "cloister: not serving: this process runs under seccomp or no_new_privs",
            file=sys.stderr,
        )
        return 1
    gc.collect()
    gc.freeze()  # what the warm-up made lives on in every fork: never walked again
    log = open_log(path.with_suffix(".log"))
    server = Server(path, lock_fd, log, options.idle)
    server._say(f"listening (pid {os.getpid()}, {len(server.fingerprint.files)} files)")
    command = server.serve()
    if command is None:
        server._say("stopped")
        return 0
    try:
        status = command.run(entry)
    except SystemExit as stop:
        status = stop.code
    except KeyboardInterrupt:
        finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # ends as Python ends on an uncaught Ctrl-C
        status = 130
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    if status is not None and not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    finish()
    os._exit(status or 0)


def finish() -> None:
    """What the interpreter does at exit that a command relies on, without the rest.

    A fork's exit is its own: tearing down the modules and objects it shares with the
    server would touch, and so copy, every page of them (tens of milliseconds). So, as
    :mod:`multiprocessing` ends a forked process, it waits for the threads (and lets
    ``concurrent.futures`` end its workers), runs the ``atexit`` functions, flushes the
    streams, and then ends at once.
    """
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


if __name__ == "__main__":
    sys.exit(main())
