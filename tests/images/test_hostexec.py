"""``images/hostexec/hostexec`` puts no secret in any program's arguments (issue 19).

A cloister's processes are host processes: their arguments are in /proc/PID/cmdline,
which every user of the host can read. So the client must hand the token to curl some
other way than its arguments, and never copy a proxy URL (``http://cloister:TOKEN@…``)
into a command line. Checked twice, without Docker:

* statically: every place the script names the token is a shell builtin's (a test, a
  here-string bash writes itself), and it names no proxy variable and no proxy option;
* by running it against a local stand-in for the gateway, with PATH holding only
  stand-ins for the programs it runs, which write down their arguments and run the
  real ones: the gateway gets the token, no program's arguments hold it.

The whole round trip inside a real cloister, with the host's process list scanned, is
``tests/cli/test_acceptance_argv.py``.
"""

from __future__ import annotations

import base64
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "images" / "hostexec" / "hostexec"
TOKEN = "7f3c" * 16  # the shape of a real one: hex
PROXY_URL = f"http://cloister:{TOKEN}@cloister-guardian-proxy:3128"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")
# What the script runs besides bash's builtins; PATH holds nothing else, so a program
# added to the script without a stand-in here makes these tests fail, not pass blind.
PROGRAMS = ("curl", "base64", "mktemp", "rm")
RUN_TIMEOUT = 30.0

# --- the script's text --------------------------------------------------------------------

TOKEN_USE = re.compile(r"\$\{?CLOISTER_TOKEN\b")
# Where the token may be named: the builtin test that it is set, and a here-string on a
# descriptor of its own (bash writes it; curl reads that descriptor, -H @/dev/fd/N).
ALLOWED_TOKEN_USES = (
    re.compile(r'\[ -n "\$\{CLOISTER_TOKEN:-\}" \]'),
    re.compile(r'(?<![<\w])\d<<<"X-Cloister-Token: \$\{CLOISTER_TOKEN\}"'),
)
PROXY_USE = re.compile(r"\$\{?(?:" + "|".join(PROXY_VARIABLES) + r"|all_proxy)\b")
PROXY_OPTION = re.compile(r"(?<!\S)(?:-x|--proxy|--proxy-user|-U|--socks5\S*)(?!\S)")


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """The script's lines without comments, backslash continuations joined."""
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not parts:
            start = number
            if line.lstrip().startswith("#"):
                continue
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield start, " ".join(part.strip() for part in parts)
        parts = []


def test_the_token_is_named_only_where_bash_keeps_it_to_itself() -> None:
    uses: list[tuple[int, str]] = []
    for number, line in logical_lines(CLIENT.read_text(encoding="utf-8")):
        if not TOKEN_USE.search(line):
            continue
        uses.append((number, line))
        rest = line
        for allowed in ALLOWED_TOKEN_USES:
            rest = allowed.sub("", rest)
        assert not TOKEN_USE.search(rest), f"line {number} names the token elsewhere: {line}"
    # Checked it is set, and handed to curl once.
    assert len(uses) == 2, uses
    (_, request) = uses[1]
    assert request.startswith("curl "), request
    assert " -H @/dev/fd/3 " in request, request


def test_no_proxy_url_reaches_a_command_line() -> None:
    for number, line in logical_lines(CLIENT.read_text(encoding="utf-8")):
        assert not PROXY_USE.search(line), f"line {number} reads a proxy variable: {line}"
        assert not PROXY_OPTION.search(line), f"line {number} passes a proxy option: {line}"
        if line.startswith("curl "):
            assert "--noproxy '*'" in line, line  # never through the proxy's URL either


# --- the script at work -------------------------------------------------------------------


@dataclass
class Gateway:
    """A stand-in for the hostexec gateway: records each request, sends *reply*."""

    reply: bytes
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


def serve(gateway: Gateway) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            gateway.requests.append((dict(self.headers.items()), body))
            self.send_response(200)
            self.send_header("Content-Type", "text/x-hostexec")
            self.send_header("Content-Length", str(len(gateway.reply)))
            self.end_headers()
            self.wfile.write(gateway.reply)

        def log_message(self, format: str, *args: object) -> None:
            del format, args  # quiet

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@dataclass(frozen=True)
class Run:
    result: subprocess.CompletedProcess[bytes]
    argvs: list[list[bytes]]  # every program the client ran, as it was started
    requests: list[tuple[dict[str, str], bytes]]


def stand_ins(directory: Path, log: Path) -> None:
    """A program per name in PROGRAMS that appends its argv (NUL-separated, one record a
    line) to *log*, then runs the real one."""
    directory.mkdir()
    for name in PROGRAMS:
        real = shutil.which(name)
        if real is None:
            pytest.fail(f"{name} is not installed; the hostexec client needs it")
        script = directory / name
        script.write_text(
            "#!/bin/sh\n"
            f"{{ printf '%s\\0' \"$0\" \"$@\"; printf '\\n'; }} >>'{log}'\n"
            f"exec '{real}' \"$@\"\n",
            encoding="utf-8",
        )
        script.chmod(0o755)


def run_client(tmp_path: Path, reply: bytes, *args: str) -> Run:
    bash = shutil.which("bash")
    assert bash is not None, "bash is not installed"
    log = tmp_path / "argv.log"
    log.touch()
    programs = tmp_path / "bin"
    stand_ins(programs, log)
    gateway = Gateway(reply)
    server = serve(gateway)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        env = {
            "PATH": str(programs),
            "TMPDIR": str(tmp_path),
            "CLOISTER_GUARDIAN_HOST": "127.0.0.1",
            "CLOISTER_REQUEST_PORT": str(server.server_address[1]),
            "CLOISTER_TOKEN": TOKEN,
            "CLOISTER_HOSTEXEC_MAX_TIME": "20",
            **dict.fromkeys(PROXY_VARIABLES, PROXY_URL),
        }
        result = subprocess.run(
            [bash, str(CLIENT), *args],
            env=env,
            capture_output=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
        serving.join()
    records = log.read_bytes().split(b"\0\n")
    argvs = [record.split(b"\0") for record in records if record]
    return Run(result, argvs, gateway.requests)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def assert_no_secret(run: Run) -> None:
    for argv in run.argvs:
        for arg in argv:
            assert TOKEN.encode() not in arg, argv
            assert b"cloister:" not in arg, argv  # the proxy URL's user, before its token


def test_an_approved_command_sends_the_token_in_a_header_and_no_argument(
    tmp_path: Path,
) -> None:
    out, err = b64(b"out\n"), b64(b"err\n")
    reply = f"status approved\nexit_code 3\nstdout {out}\nstderr {err}\n".encode()
    run = run_client(tmp_path, reply, "git", "push", "origin", "main")

    assert run.result.returncode == 3, run.result
    assert run.result.stdout == b"out\n"
    assert run.result.stderr == b"err\n"
    ((headers, body),) = run.requests
    assert headers["X-Cloister-Token"] == TOKEN
    assert headers["Accept"] == "text/x-hostexec"
    assert body == b'{"args":["git","push","origin","main"]}\n'
    started = [Path(argv[0].decode()).name for argv in run.argvs]
    assert started.count("curl") == 1, started
    assert "base64" in started, started  # the decoding went through a stand-in too
    assert_no_secret(run)


def test_a_denied_command_puts_no_secret_in_an_argument_either(tmp_path: Path) -> None:
    reply = f"status denied\nexit_code 1\nreason {b64(b'not on a Friday')}\n".encode()
    run = run_client(tmp_path, reply, "rm", "-rf", "/")

    assert run.result.returncode == 1, run.result
    assert run.result.stderr == b"hostexec: denied: not on a Friday\n"
    ((headers, _),) = run.requests
    assert headers["X-Cloister-Token"] == TOKEN
    assert_no_secret(run)


# --- a signal ending the client ends its question too -------------------------------------


def with_default_signals() -> list[str]:
    """A prefix that runs a program with SIGINT and SIGHUP at their default, as from a
    terminal: a runner that started the tests in the background (``&``, ``nohup``) has
    them ignored, and an ignored signal stays ignored across exec, even for bash's trap."""
    reset = (
        "import os, signal, sys;"
        " signal.signal(signal.SIGINT, signal.SIG_DFL);"
        " signal.signal(signal.SIGHUP, signal.SIG_DFL);"
        " os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", reset]


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_client_closes_its_connection(
    tmp_path: Path, signal_number: signal.Signals
) -> None:
    """Issue 19: a command waiting for the human is withdrawn when its client's
    connection closes; killing the script must close it (not leave curl waiting)."""
    bash = shutil.which("bash")
    if bash is None or shutil.which("curl") is None:
        pytest.skip("bash and curl are needed")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(RUN_TIMEOUT)
        port = listener.getsockname()[1]
        environment = {
            "PATH": "/usr/bin:/bin",
            "CLOISTER_GUARDIAN_HOST": "127.0.0.1",
            "CLOISTER_REQUEST_PORT": str(port),
            "CLOISTER_TOKEN": TOKEN,
        }
        client = subprocess.Popen(
            [*with_default_signals(), bash, str(CLIENT), "sleep", "1"],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            connection, _ = listener.accept()  # curl asked; the gateway never answers
            with connection:
                connection.settimeout(RUN_TIMEOUT)
                request = b""
                while b"\r\n\r\n" not in request:
                    request += connection.recv(65536)
                client.send_signal(signal_number)
                assert client.wait(RUN_TIMEOUT) != 0
                while connection.recv(65536):  # drains the body; b"": curl closed it
                    pass
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
            for stream in (client.stdout, client.stderr):
                if stream is not None:
                    stream.close()
