"""The ``cloister`` console script: hand the command to the warm server, or run it here.

The command runs here (as it always did) when ``CLOISTER_NO_SERVER`` is set, for the
commands in :data:`IN_PROCESS`, with a library preloaded (:data:`PRELOADS`), when there
is no private place for the server's socket,
when the server is not there (one is started in the background for the next command),
when it is not one this process trusts (another user's, in another mount namespace, or
not this interpreter), when it declines (this process's privileges or limits are not
its own), when it says its code changed since it started (it stops; a new one is
started), or when it does not answer within :data:`ANSWER_TIMEOUT_SECONDS`.

Nothing runs twice: the server's fork says who it is and waits for this process's go
before it runs the command; from then on that process is the command. This one passes
it the signals the terminal sends (to its process group, as a terminal would), runs the
programs it asks for in the terminal (:func:`cloister_cli.launch.run_in_terminal`), and
exits with its status, or by its signal.

Like :mod:`cloister_cli.launch.wire`, it imports only what costs next to nothing.
"""

from __future__ import annotations

import _socket
import os
import signal
import sys

from cloister_cli.launch import wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

# The signals a terminal or a supervisor sends a command, passed on to the served one.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
# Commands that always run in their own process: `setup` reads a secret with the echo off,
# which takes the terminal a served command does not have (getpass opens /dev/tty).
IN_PROCESS = frozenset({"setup"})
SERVER_MODULE = "cloister_cli.launch.server"
# Libraries the dynamic loader puts in this process (torsocks, proxychains): a served
# command would run without them.
PRELOADS = ("LD_PRELOAD", "LD_AUDIT")
# Until the fork says who it is; past it, nothing has run and this process runs the command.
ANSWER_TIMEOUT_SECONDS = 10.0


def main() -> int | None:
    """Run the command in ``sys.argv``; its exit status."""
    words = [word for word in sys.argv[1:] if not word.startswith("-")]
    if os.environ.get(wire.DISABLE_VARIABLE) or (words and words[0] in IN_PROCESS):
        in_process()
    if any(os.environ.get(name) for name in PRELOADS):  # they would not be in the server
        in_process()
    path = wire.socket_path(os.environ)
    if path is None:
        in_process()
    try:
        connection = connect(path)
    except OSError:
        start_server(path)
        in_process()
    try:
        outcome = served(wire.Channel(connection))
    except (OSError, wire.WireError) as error:
        outcome = f"the command server failed before the command ran ({error})"
    finally:
        connection.close()
    if isinstance(outcome, int):
        return outcome
    if outcome == "stale":
        start_server(path)
    return in_process()


def in_process() -> NoReturn:
    from cloister_cli.commands.main import main as run  # noqa: PLC0415 - the slow import

    run()
    raise SystemExit(0)  # click's standalone mode always exits; this is for the type


def connect(path: str) -> _socket.socket:
    """A connection to the server at *path*; OSError when it is not there or not one to
    trust: this user's, in this mount namespace, running this interpreter."""
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        connection.settimeout(ANSWER_TIMEOUT_SECONDS)  # a full backlog blocks a connect
        connection.connect(path)
        pid, uid = wire.peer(connection)
        if pid == os.getpid():  # the pid a listener had, now this process's
            raise PermissionError(f"the server at {path!r} is gone")
        if uid != os.getuid():
            raise PermissionError(f"the server at {path!r} is another user's")
        if not wire.same_mount_namespace(pid):
            raise PermissionError(f"the server at {path!r} sees other files (a container?)")
        if os.path.realpath(f"/proc/{pid}/exe") != os.path.realpath(sys.executable):
            raise PermissionError(f"the server at {path!r} runs another program")
    except BaseException:
        connection.close()
        raise
    return connection


def served(channel: wire.Channel) -> int | str:
    """Have the server run the command: its exit status, or why it did not run
    (``"stale"``, or a reason); nothing has run when this returns a string."""
    streams = (sys.stdin, sys.stdout, sys.stderr)
    if None in streams:
        return "a standard stream is closed"
    umask = os.umask(0o022)
    os.umask(umask)
    request = {
        "argv": sys.argv[1:],
        "env": dict(os.environ),
        "umask": umask,
        "streams": [[stream.encoding, stream.errors] for stream in streams],
    }
    # The working directory as a descriptor: its path could name another directory by
    # the time the command is there (a rename, a symlink swapped in by an agent).
    here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        channel.connection.settimeout(ANSWER_TIMEOUT_SECONDS)
        channel.send(request, fds=(0, 1, 2, here))
    finally:
        os.close(here)
    first = channel.receive()
    if first is None:
        return "the command server went away"
    if first.get("stale"):
        return "stale"
    if "declined" in first:
        return str(first["declined"])
    command = first.get("pid")
    if not isinstance(command, int) or command <= 1:
        raise wire.WireError(f"expected the command's pid, got {first!r:.200}")
    channel.connection.settimeout(None)
    follower = Follower(channel, command)  # its signal handlers are set before the go
    channel.send({"go": True})
    return follower.follow()


class Follower:
    """This process's part once the server has forked the command (*pid*)."""

    def __init__(self, channel: wire.Channel, pid: int) -> None:
        self.channel = channel
        self.pid = pid
        for number in FORWARDED:
            signal.signal(number, self.forward)

    def follow(self) -> int:
        try:
            return self.messages()
        except (OSError, wire.WireError) as error:  # the command may have run: never again
            print(f"cloister: lost the command server ({error})", file=sys.stderr)
            return 1

    def messages(self) -> int:
        while True:
            message = self.channel.receive()
            if message is None:
                print("cloister: the command server went away", file=sys.stderr)
                return 1
            if "run" in message:
                self.run(message)
            elif "exit" in message:
                return int(message["exit"])
            elif "signal" in message:
                killed_by(int(message["signal"]))
            else:
                raise wire.WireError(f"unexpected {message!r:.200}")

    def forward(self, number: int, _frame: object) -> None:
        try:  # noqa: SIM105 - contextlib is one import more at every command
            os.killpg(self.pid, number)
        except ProcessLookupError:
            pass  # it has just ended; its status is on its way

    def run(self, message: dict[str, Any]) -> None:
        """Run the program the command asks for, here in the terminal and this process's
        directory, with the command's environment."""
        import subprocess  # noqa: PLC0415 - seldom: a shell to attach

        argv, env = message["run"], message["env"]
        try:
            returncode = subprocess.run(argv, env=env, check=False).returncode
        except OSError as error:
            print(f"cloister: cannot run {argv[0]!r}: {error}", file=sys.stderr)
            returncode = 127
        self.channel.send({"returncode": returncode})


def killed_by(number: int) -> NoReturn:
    """End as the command did: by the same signal."""
    if number not in (signal.SIGKILL, signal.SIGSTOP):  # which no handler can take
        signal.signal(number, signal.SIG_DFL)
    sys.stdout.flush()
    os.kill(os.getpid(), number)
    raise SystemExit(128 + number)  # a signal whose default is not to end a process


def server_environment() -> dict[str, str]:
    """What of this command's environment the server gets: what its interpreter reads
    (each command brings its own environment; none of its secrets stay in the server)."""
    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith(("PYTHON", "LC_")) or name == "LANG"
    }


def start_server(path: str) -> None:
    """Start a server at *path* in the background, detached from this process and its
    terminal (a session of its own, ``/`` as its directory); it outlives this command."""
    log = path.removesuffix(".sock") + ".log"
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:  # the first child: only makes the server's process, then ends
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
            errors = os.open(log, flags, 0o600)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(errors, 2)
            os.closerange(3, 1 << 16)
            os.chdir("/")
            # -P: "/" is not put on its sys.path
            argv = [sys.executable, "-P", "-m", SERVER_MODULE, path]
            os.execve(sys.executable, argv, server_environment())  # noqa: S606 - no shell
    finally:
        os._exit(0)
