"""The command server and the console script, as real processes.

A server runs a probe module instead of Cloister's commands (``--entry``), so each test
sees what the forked command saw (its arguments, directory, environment, umask, standard
streams, parent) and what its caller got back (output, exit status, signals); the
console script is the real one (:func:`cloister_cli.launch.client.main`) in a child
interpreter. Every server a test starts, and one the console script starts, is stopped
at its end.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from docker.types import Mount

from cloister_cli.launch import server, wire
from tests.cli.cli_support import BASE_IMAGE
from tests.waiting import wait_until

PROBE = textwrap.dedent(
    """
    import atexit, os, signal, sys, threading, time
    from pathlib import Path

    def main():
        what = sys.argv[1]
        if what == "echo":
            print(f"argv={sys.argv[1:]}")
            print(f"cwd={os.getcwd()} {os.stat('.').st_ino}")
            print(f"value={os.environ.get('PROBE_VALUE')}")
            print(f"umask={os.umask(0):o}")
            print(f"stdin={sys.stdin.read()!r}")
            print(f"parent={os.getppid()}")
            print("to stderr", file=sys.stderr)
            return int(sys.argv[2])
        if what == "raise":
            raise RuntimeError("the probe failed")
        if what == "message":
            raise SystemExit("a message for the person")
        if what == "wait":
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
            Path(sys.argv[2]).write_text(str(os.getpid()))
            print("ready", flush=True)
            time.sleep(60)
            return 0
        if what == "terminal":
            from cloister_cli.launch import run_in_terminal
            code = run_in_terminal(
                [sys.executable, "-c", "import os, sys; print('ran by', os.getppid()); sys.exit(7)"]
            )
            print(f"code={code}")
            return 0
        if what == "ends":
            atexit.register(lambda: print("atexit ran"))
            threading.Thread(target=lambda: (time.sleep(0.3), print("thread ran"))).start()
            return 0
        return 99
    """
)
CLIENT = "import sys; from cloister_cli.launch.client import main; sys.exit(main())"
SERVER = "cloister_cli.launch.server"
SLEEP = "import time; time.sleep(60)"


@dataclass
class Served:
    """A probe server on the socket the console script finds with :attr:`env`."""

    root: Path
    env: dict[str, str]
    path: Path
    server: subprocess.Popen[bytes] | None = None

    def start(self, *options: str) -> subprocess.Popen[bytes]:
        self.server = start_server(self, *options)
        wait_until(self.path.exists, 30, "the server's socket")
        return self.server

    def run(
        self,
        *args: str,
        stdin: str = "",
        cwd: Path | None = None,
        extra: dict[str, str] | None = None,
        wrapper: tuple[str, ...] = (),
        umask: int = -1,
        preexec_fn: Callable[[], None] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """The console script run with ARGS (under *wrapper*, e.g. ``unshare --net``)."""
        return subprocess.run(
            [*wrapper, sys.executable, "-c", CLIENT, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=cwd or self.root,
            env={**self.env, **(extra or {})},
            umask=umask,
            preexec_fn=preexec_fn,  # one setrlimit before the exec, in a test
            timeout=60,
            check=False,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", CLIENT, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.root,
        )

    @property
    def log(self) -> str:
        log = self.path.with_suffix(".log")
        return log.read_text(encoding="utf-8") if log.exists() else ""


def start_server(served: Served, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "cloister_cli.launch.server", str(served.path), *options],
        env={**served.env, "PYTHONPATH": str(served.root)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd="/",
    )


def servers_on(path: Path) -> list[int]:
    """The pids of the servers of *path* (one the console script started included)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"cloister_cli.launch.server" in argv and os.fsencode(path) in argv:
            found.append(int(entry.name))
    return found


@pytest.fixture
def served(short_tmp: Path) -> Iterator[Served]:
    (short_tmp / "probe.py").write_text(PROBE, encoding="utf-8")
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **{name: value for name, value in os.environ.items() if name.startswith("PYTHON")},
        "PATH": os.environ["PATH"],
        "HOME": str(short_tmp),
        "XDG_RUNTIME_DIR": str(runtime),
        "CLOISTER_CONFIG_DIR": str(short_tmp / "config"),
        "CLOISTER_DATA_DIR": str(short_tmp / "data"),
    }
    # Asked of an interpreter started as the console script will be: its flags (UTF-8
    # mode, with no locale) are in the socket's name.
    where = "import os; from cloister_cli.launch import wire; print(wire.socket_path(os.environ))"
    path = subprocess.run(
        [sys.executable, "-c", where], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert path.startswith(str(runtime))
    served = Served(short_tmp, env, Path(path))
    try:
        yield served
    finally:
        for pid in servers_on(served.path):
            os.kill(pid, signal.SIGTERM)
        if served.server is not None:
            try:
                served.server.wait(timeout=30)
            finally:
                assert served.server.stderr is not None
                served.server.stderr.close()
        wait_until(lambda: not servers_on(served.path), 30, "the servers to stop")


def probe_entry(served: Served) -> subprocess.Popen[bytes]:
    return served.start("--entry", "probe:main")


def lines_of(process: subprocess.Popen[str], count: int) -> list[str]:
    """The first *count* lines *process* writes, within 30 seconds."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while len(lines) < count:
        assert time.monotonic() < deadline, lines
        ready, _, _ = select.select([process.stdout], [], [], 1)
        if ready:
            lines.append(process.stdout.readline().rstrip("\n"))
    return lines


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


# -- a served command is the caller's -------------------------------------------------------


def test_a_served_command_has_the_callers_arguments_streams_and_place(served: Served) -> None:
    server = probe_entry(served)
    work = served.root / "work dir"
    work.mkdir()
    ran = served.run(
        "echo",
        "5",
        stdin="typed by a person",
        cwd=work,
        extra={"PROBE_VALUE": "from the caller"},
        umask=0o027,
    )
    assert ran.returncode == 5
    assert ran.stdout.splitlines() == [
        "argv=['echo', '5']",
        f"cwd={work} {work.stat().st_ino}",
        "value=from the caller",
        "umask=27",
        "stdin='typed by a person'",
        f"parent={server.pid}",  # forked by the server: served, not run in its own process
    ]
    assert ran.stderr == "to stderr\n"
    assert "echo" in served.log


def test_an_uncaught_error_is_shown_and_the_status_is_1(served: Served) -> None:
    probe_entry(served)
    ran = served.run("raise")
    assert ran.returncode == 1
    assert "RuntimeError: the probe failed" in ran.stderr


def test_an_exit_with_a_message_shows_it(served: Served) -> None:
    probe_entry(served)
    ran = served.run("message")
    assert (ran.returncode, ran.stderr) == (1, "a message for the person\n")


def test_non_daemon_threads_and_atexit_run_before_the_command_ends(served: Served) -> None:
    probe_entry(served)
    ran = served.run("ends")
    assert (ran.returncode, ran.stdout) == (0, "thread ran\natexit ran\n")


@pytest.mark.parametrize(
    ("sent", "status"),
    [(signal.SIGTERM, 3), (signal.SIGINT, -signal.SIGINT)],
    ids=["SIGTERM, handled", "SIGINT, Python's KeyboardInterrupt"],
)
def test_the_signals_a_terminal_sends_reach_the_command(
    served: Served, sent: signal.Signals, status: int
) -> None:
    probe_entry(served)
    caller = served.popen("wait", str(served.root / "pid"))
    assert lines_of(caller, 1) == ["ready"]
    caller.send_signal(sent)
    returncode, _, _ = finished(caller)
    assert returncode == status


def test_a_command_whose_caller_is_gone_ends(served: Served) -> None:
    probe_entry(served)
    caller = served.popen("wait", str(served.root / "pid"))
    assert lines_of(caller, 1) == ["ready"]
    command = int((served.root / "pid").read_text(encoding="utf-8"))
    caller.kill()
    finished(caller)
    wait_until(lambda: not Path(f"/proc/{command}").exists(), 30, "the command to end")


def test_a_program_the_command_asks_for_runs_in_the_callers_terminal(served: Served) -> None:
    probe_entry(served)
    caller = served.popen("terminal")
    returncode, out, _ = finished(caller)
    assert returncode == 0
    assert out.splitlines() == [f"ran by {caller.pid}", "code=7"]


# -- when the command runs in the caller's own process --------------------------------------


def test_no_server_variable_runs_the_command_here(served: Served) -> None:
    probe_entry(served)
    ran = served.run("--version", extra={wire.DISABLE_VARIABLE: "1"})
    assert (ran.returncode, ran.stdout) == (0, "cloister, version 0.1.0\n")  # cloister's own
    assert "--version" not in served.log


def test_setup_reads_its_secret_in_its_own_process(served: Served) -> None:
    probe_entry(served)
    ran = served.run("setup", "--list")
    assert ran.returncode == 0, ran.stderr
    assert "claude" in ran.stdout
    assert "setup" not in served.log


def test_changed_code_stops_the_server_and_the_caller_runs_the_command(
    served: Served,
) -> None:
    server = probe_entry(served)
    assert served.run("echo", "0").returncode == 0
    probe = served.root / "probe.py"
    later = probe.stat().st_mtime + 10
    os.utime(probe, (later, later))
    ran = served.run("--version")
    assert (ran.returncode, ran.stdout) == (0, "cloister, version 0.1.0\n")  # run here
    assert server.wait(timeout=30) == 0
    assert "stopping: its code changed since it started" in served.log
    # and it started a new server (Cloister's own) for the next command
    wait_until(lambda: servers_on(served.path), 30, "a new server")


def test_with_no_server_the_console_script_runs_the_command_and_starts_one(
    served: Served,
) -> None:
    ran = served.run("--version")
    assert (ran.returncode, ran.stdout) == (0, "cloister, version 0.1.0\n")
    wait_until(served.path.exists, 60, "the server the console script started")
    config = served.root / "config"
    ran = served.run("config", "path")
    assert ran.returncode == 0, ran.stderr
    assert str(config) in ran.stdout  # the caller's environment
    assert ": config" in served.log  # served
    (pid,) = servers_on(served.path)
    assert Path(f"/proc/{pid}/cwd").readlink() == Path("/")
    environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not [item for item in environment if item.startswith(b"CLOISTER_")]


# -- who may ask ------------------------------------------------------------------------------


@contextlib.contextmanager
def perl_beside_the_socket(
    docker_client: docker.DockerClient, served: Served, script: str
) -> Iterator[Container]:
    """Perl *script* (its argument: the server's socket) running in a container with
    the socket's directory mounted at /reach, as this user, without a network; removed
    at the end."""
    container = docker_client.containers.run(
        BASE_IMAGE,
        ["perl", "-e", script, f"/reach/{served.path.name}"],
        mounts=[Mount("/reach", str(served.path.parent), type="bind")],
        user=f"{os.getuid()}:{os.getgid()}",
        network_mode="none",
        detach=True,
    )
    try:
        yield container
    finally:
        container.remove(force=True)


REACH = """
use IO::Socket::UNIX;
my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect: $!";
print $s "x" x 16;
shutdown($s, 1);
my $got = "";
while (sysread($s, my $chunk, 100)) { $got .= $chunk }
print "answered ", length($got), " bytes\n";
"""


@pytest.mark.docker
def test_a_process_in_a_container_is_refused_even_with_the_socket_in_reach(
    served: Served, docker_client: docker.DockerClient
) -> None:
    """A cloister never has the socket's directory (Forbidden refuses it); were it
    mounted, a process inside, of the same uid, would still get nothing: the server
    serves only its own mount namespace."""
    probe_entry(served)
    with perl_beside_the_socket(docker_client, served, REACH) as reaching:
        assert reaching.wait(timeout=30)["StatusCode"] == 0
        assert reaching.logs() == b"answered 0 bytes\n"
    wait_until(lambda: "a caller in another mount namespace" in served.log, 30, "the refusal")
    assert served.run("echo", "0").returncode == 0  # and it goes on serving its own


FAKE_SERVER = """
use IO::Socket::UNIX;
unlink $ARGV[0];
my $server = IO::Socket::UNIX->new(Local => $ARGV[0], Listen => 5) or die "listen: $!";
print "listening\\n";
STDOUT->flush();
my $caller = $server->accept();
my $got = "";
while (sysread($caller, my $chunk, 65536)) { $got .= $chunk }
print "received ", length($got), " bytes\\n";
"""


@pytest.mark.docker
def test_a_server_in_a_container_is_not_trusted(
    served: Served, docker_client: docker.DockerClient
) -> None:
    """Were the socket's directory writable from a cloister, a server there (of the
    same uid) would get nothing: the console script trusts only a server in its own
    mount namespace, and runs the command itself."""
    with perl_beside_the_socket(docker_client, served, FAKE_SERVER) as fake:
        wait_until(lambda: b"listening" in fake.logs(), 30, "the fake server")
        ran = served.run("--version", extra={"SECRET_OF_THE_CALLER": "x" * 40})
        assert (ran.returncode, ran.stdout) == (0, "cloister, version 0.1.0\n")  # ran here
        assert fake.wait(timeout=30)["StatusCode"] == 0
        assert fake.logs().splitlines()[-1] == b"received 0 bytes"


# -- the server's life ----------------------------------------------------------------------


def test_an_idle_server_stops_and_removes_its_socket(served: Served) -> None:
    server = served.start("--entry", "probe:main", "--idle", "0.5")
    assert server.wait(timeout=30) == 0
    assert not served.path.exists()
    assert "stopping: idle" in served.log


def test_sigterm_stops_listening_and_lets_the_running_command_finish(served: Served) -> None:
    server = probe_entry(served)
    caller = served.popen("wait", str(served.root / "pid"))
    assert lines_of(caller, 1) == ["ready"]
    server.send_signal(signal.SIGTERM)
    wait_until(lambda: not served.path.exists(), 30, "the socket to go")
    assert server.poll() is None  # still reaping its command
    caller.send_signal(signal.SIGTERM)
    assert finished(caller)[0] == 3
    assert server.wait(timeout=30) == 0


def test_a_second_server_for_the_same_socket_leaves_it_to_the_first(served: Served) -> None:
    probe_entry(served)
    second = start_server(served, "--entry", "probe:main")
    try:
        assert second.wait(timeout=30) == 0
    finally:
        assert second.stderr is not None
        second.stderr.close()
    assert served.run("echo", "0").returncode == 0


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00\x00\x00\x05hello", b"\x00\x00\x00\x02{}"],
    ids=["nothing", "garbage", "not a request"],
)
def test_a_request_that_is_not_one_runs_nothing_and_the_server_goes_on(
    served: Served, raw: bytes
) -> None:
    probe_entry(served)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(str(served.path))
        connection.sendall(raw)
        connection.shutdown(socket.SHUT_WR)
        answers = wire.Channel(connection)
        first = answers.receive()
        assert first is not None
        assert "declined" in first  # the fork ran nothing
        assert answers.receive() == {"exit": 0}
    wait_until(lambda: ": ran nothing" in served.log, 30, "the refusal in the log")
    assert served.run("echo", "0").returncode == 0


def test_a_caller_with_other_limits_runs_the_command_itself(served: Served) -> None:
    """A command never gets more than its caller had: a caller whose limits (or
    privileges) are not the server's is declined, and runs the command itself."""
    server = probe_entry(served)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = min(soft, 512) - 1

    def fewer_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))

    ran = served.run("--version", preexec_fn=fewer_files)
    assert (ran.returncode, ran.stdout) == (0, "cloister, version 0.1.0\n")  # cloister's own
    assert "declined pid" in served.log
    assert server.poll() is None  # and it goes on serving those like it
    assert served.run("echo", "0").returncode == 0


@pytest.fixture
def sleeper() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``PREFIX... python -c sleep``: a process to read the credentials of."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*prefix: str) -> subprocess.Popen[bytes]:
        wrapper = [tool(prefix[0]), *prefix[1:]] if prefix else []
        process = subprocess.Popen(
            [*wrapper, sys.executable, "-c", SLEEP],
            stdin=subprocess.DEVNULL,
        )
        started.append(process)
        wait_until(lambda: running_python(process.pid), 30, "the sleeper's Python")
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def running_python(pid: int) -> bool:
    """Whether *pid* runs Python now (a prefix such as ``nice`` has exec'd it)."""
    try:
        return Path(f"/proc/{pid}/exe").resolve() == Path(sys.executable).resolve()
    except OSError:
        return False


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found is not None, f"{name} is not installed"
    return found


def test_a_child_has_its_parents_credentials_and_nice_or_setpriv_change_them(
    sleeper: Callable[..., subprocess.Popen[bytes]],
) -> None:
    own = server.credentials(os.getpid())
    assert own is not None
    assert not own.sandboxed
    assert server.credentials(sleeper().pid) == own
    assert server.credentials(sleeper("nice", "-n", "5").pid) != own
    fenced = server.credentials(sleeper("setpriv", "--no-new-privs").pid)
    assert fenced is not None
    assert fenced.sandboxed
    assert fenced != own
    assert server.credentials(0) is None


def test_a_server_under_no_new_privs_serves_no_one(served: Served) -> None:
    fenced = subprocess.run(
        [
            tool("setpriv"),
            "--no-new-privs",
            sys.executable,
            "-P",
            "-m",
            SERVER,
            str(served.path),
            "--entry",
            "probe:main",
        ],
        env={**served.env, "PYTHONPATH": str(served.root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    assert fenced.returncode == 1
    assert "not serving: this process runs under seccomp or no_new_privs" in fenced.stderr
    assert not served.path.exists()


def test_a_caller_in_another_network_namespace_runs_the_command_itself(
    served: Served,
) -> None:
    """A caller cut off from the network (``unshare --net``) must not get a command
    that has it."""
    if os.getuid() != 0:
        pytest.skip("unshare --net needs root here")
    probe_entry(served)
    ran = served.run("--version", wrapper=(tool("unshare"), "--net"))
    assert (ran.returncode, ran.stdout) == (0, "cloister, version 0.1.0\n")  # cloister's own
    assert "declined pid" in served.log


def test_a_command_killed_by_sigkill_ends_its_caller_so(served: Served) -> None:
    probe_entry(served)
    caller = served.popen("wait", str(served.root / "pid"))
    assert lines_of(caller, 1) == ["ready"]
    os.kill(int((served.root / "pid").read_text(encoding="utf-8")), signal.SIGKILL)
    assert finished(caller)[0] == -signal.SIGKILL


def test_the_server_refuses_to_serve_when_importing_started_a_thread(served: Served) -> None:
    (served.root / "threaded.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "def main():\n    return 0\n",
        encoding="utf-8",
    )
    server = start_server(served, "--entry", "threaded:main")
    served.server = server
    assert server.wait(timeout=30) == 1
    assert server.stderr is not None
    assert b"importing started threads" in server.stderr.read()
    assert not served.path.exists()
