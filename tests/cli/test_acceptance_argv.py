"""Issue 19: no secret in any host process's arguments, against a real Docker engine.

A cloister's processes are host processes, and a process's arguments are in
/proc/PID/cmdline, which every user of the host can read. An attack once found a
cloister's token in the host's process list while a ``hostexec`` command waited for its
human (the client passed it to curl as ``-H "X-Cloister-Token: …"``).

Here the real ``cloister`` starts a guardian and a cloister, and ``cloister exec NAME
-- hostexec git push …`` asks for a command the config leaves to the human, so it waits.
While it waits every process of the host is read: the hostexec client's curl is among
them (the scan sees into the cloister), and no command line holds the cloister's token,
the hub secret, the service credential or the host executor's secret. Meanwhile a
background scan of every process, over and over, covers ``cloister start``, that
``cloister exec`` and ``cloister sync`` (a short-lived process may fall between two
scans: that part is best effort). The command is then denied through the hub's API,
in this process (the hub secret read from its file, sent in a header), and the client
reports the denial.

Once as the user running the tests and once as the non-root user of
:func:`tests.cli.cli_support.host_user` (its own guardian). The guardian is the
module's: one already on the engine is waited for, never taken over.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import pytest

from cloister_cli.stack.hub_client import HubClient, hub_secret_path
from cloister_core.paths import CloisterPaths
from cloister_executor.locations import secret_path
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    HostUser,
    guardian,
    host_user,
    make_repo,
    squash,
    unique,
)
from tests.waiting import free_port, wait_until

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

PUSH = ("git", "push", "origin", "main")
PENDING_WAIT = 60.0  # for the command to reach the hub
DENIED_WAIT = 60.0  # for the client to report the denial
REASON = "argv test"
MIN_SECRET = 32  # characters: every secret here is at least 128 bits in hex or base64


def config(ui_port: int) -> str:
    return (
        "# Written by tests/cli/test_acceptance_argv.py\n"
        f"defaults:\n  image: {SLIM_IMAGE}\n"
        f"guardian:\n  ui_port: {ui_port}\n"
        "hostexec:\n"
        "  auto_approve: []\n"
        '  manual_approve:\n    - pattern: "^git push( .*)?$"\n'
    )


# --- the host's processes ------------------------------------------------------------------


def command_lines() -> dict[int, bytes]:
    """Every process's arguments (NUL-separated, as the kernel keeps them), by pid."""
    lines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            lines[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or a kernel thread's
            continue
    return lines


@dataclass(frozen=True)
class Found:
    pid: int
    secret: str  # which one (never its value)
    cmdline: bytes


def secrets_in(lines: dict[int, bytes], secrets: dict[str, str]) -> list[Found]:
    return [
        Found(pid, which, line)
        for pid, line in lines.items()
        for which, value in secrets.items()
        if value.encode() in line
    ]


@dataclass
class Scanner:
    """Reads every process's arguments over and over, in a thread, until stopped."""

    secrets: dict[str, str]
    scans: int = 0
    found: dict[tuple[int, str], Found] = field(default_factory=dict)  # once per process
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            for item in secrets_in(command_lines(), self.secrets):
                self.found.setdefault((item.pid, item.secret), item)
            self.scans += 1
            self._stop.wait(0.005)

    def __enter__(self) -> Scanner:
        self._thread = threading.Thread(target=self._run, name="argv-scanner")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()


# --- fixtures ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    cli: CloisterCli
    user: HostUser | None


@pytest.fixture(scope="module", params=["caller", "non-root"])
def setup(
    request: pytest.FixtureRequest,
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[Setup]:
    """A guardian of the module's own, run as the caller or as the non-root user."""
    text = config(free_port())
    if request.param == "caller":
        root = tmp_path_factory.mktemp("argv")
        with guardian(docker_client, root, text, skip_or_fail) as tool:
            yield Setup(tool, None)
        return
    with (
        host_user(skip_or_fail) as user,
        guardian(docker_client, user.mktemp("argv"), text, skip_or_fail, user=user) as tool,
    ):
        yield Setup(tool, user)


def read_secret(path: Path) -> str:
    secret = path.read_text(encoding="utf-8").strip()
    assert len(secret) >= MIN_SECRET, f"{path} holds no secret of the expected length"
    return secret


def the_secrets(cli: CloisterCli, name: str) -> dict[str, str]:
    """What must never be in a command line: the cloister's token and the guardian's
    own secrets, read from the files the CLI wrote."""
    paths = CloisterPaths(config_dir=cli.config_dir, data_dir=cli.data_dir)
    return {
        "the cloister's token": cli.token(name),
        "the hub secret": read_secret(hub_secret_path(paths)),
        "the service credential": read_secret(paths.guardian_dir / "service.credential"),
        "the executor's secret": read_secret(secret_path(paths)),
    }


def hub_of(cli: CloisterCli) -> HubClient:
    """The hub's API, as the CLI reaches it: its URL from `guardian status`, the secret
    from its file (in this process: no argument of any program carries it)."""
    paths = CloisterPaths(config_dir=cli.config_dir, data_dir=cli.data_dir)
    status = cli.json("guardian", "status", "--json")
    return HubClient(str(status["ui"]), read_secret(hub_secret_path(paths)), timeout=10)


def pending_push(hub: HubClient, name: str) -> dict[str, Any] | None:
    for item in hub.pending()["commands"]:
        if item["cloister"] == name and tuple(item["argv"]) == PUSH:
            return item
    return None


def describe(found: list[Found]) -> str:
    return "\n".join(f"pid {item.pid}: {item.secret} in {item.cmdline!r}" for item in found)


# --- the test ------------------------------------------------------------------------------


def test_no_secret_is_in_a_host_process_while_hostexec_waits(setup: Setup) -> None:
    cli, user = setup.cli, setup.user
    name = unique("argv")
    repo = make_repo(cli.root / name, user=user)
    started = cli.ok("start", "-d", cwd=repo)
    assert f"cloister {name} " in squash(started.stderr), started.describe()
    secrets = the_secrets(cli, name)
    hub = hub_of(cli)

    waiting: subprocess.Popen[str] | None = None
    with Scanner(secrets) as scanner:
        try:
            # An agent's commit, for the sync below to bring out.
            cli.ok(
                "exec", name, "--", "git", "-c", "user.name=Agent", "-c",
                "user.email=agent@cloister.invalid", "commit", "--allow-empty", "-qm", "inside",
                cwd=repo,
            )  # fmt: skip
            waiting = subprocess.Popen(
                cli.command("exec", name, "--", "hostexec", *PUSH),
                cwd=repo,
                env=cli.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            item = wait_until(
                lambda: pending_push(hub, name), PENDING_WAIT, "the push to wait for its human"
            )

            # It waits: read every process now, the cloister's among them.
            lines = command_lines()
            found = secrets_in(lines, secrets)
            assert not found, describe(found)
            request = [line for line in lines.values() if b"curl" in line and b"/request" in line]
            assert request, "the hostexec client's curl is not among the host's processes"
            assert all(b"X-Cloister-Token" not in line for line in request), request
            # bash running the script by its path (the CLI and docker name it bare).
            asking = [line for line in lines.values() if b"/hostexec\0git\0push" in line]
            assert asking, "the hostexec client is not among the host's processes"

            # A sync while it waits: another cloister command, another container.
            cli.ok("sync", name, cwd=repo, timeout=180)

            hub.decide(item["id"], allow=False, scope="once", wildcard=False, reason=REASON)
            out, err = waiting.communicate(timeout=DENIED_WAIT)
            assert waiting.returncode == 1, (out, err)
            assert f"hostexec: denied: {REASON}" in err, err
        finally:
            if waiting is not None and waiting.poll() is None:
                waiting.kill()
                waiting.communicate()
            stopped = cli.run("stop", name)
    assert stopped.returncode == 0, stopped.describe()
    assert scanner.scans > 0
    assert not scanner.found, describe(list(scanner.found.values()))
