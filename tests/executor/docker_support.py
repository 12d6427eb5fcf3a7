"""A miniature guardian stack for the hostexec path, on the session's Docker engine.

Used by ``tests/executor/test_end_to_end.py`` and ``benchmarks/bench_hostexec.py``, so it
does not depend on pytest: problems raise :class:`StackError`. The stack is the one
docs/architecture.md draws for hostexec, reduced to what that path needs:

* a config dir (``config.yaml`` with hostexec patterns, ``tokens/<cloister>``), a data
  dir, and the cloister's project directory, all on the host;
* the executor daemon on the host (``python -m cloister_executor.main serve``), its
  socket and secret under ``<data>/run``;
* ``cloisternet`` (``--internal`` with ``inhibit_ipv4``: the recipe of a cloister's network) and
  ``control`` (a plain bridge);
* the approval hub on ``control`` (alias ``approval``), published on 127.0.0.1 only;
* the hostexec gateway on both networks (alias ``cloister-guardian`` on cloisternet), as
  the host user, with ``<data>/run`` at ``/run/cloister`` and the config dir read-only;
* the cloister: the slim agent image on cloisternet only, with its token, kept running.

Every object gets a unique name and the test's labels, and :meth:`GuardianStack.close`
removes all of them (and stops the daemon), whatever state the setup reached.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
from docker.models.containers import Container
from docker.models.networks import Network

from cloister_cli.images.builds import (
    APPROVAL_IMAGE,
    GATEWAY_IMAGE,
    SLIM_AGENT_IMAGE,
    ImageSpec,
    assemble_context,
    build_image,
)
from cloister_cli.images.sourcetree import find_workspace
from cloister_core.tokens import TokenRecord, write_token_file
from tests.waiting import free_port

GUARDIAN_ALIAS = "cloister-guardian"
HUB_ALIAS = "approval"
REQUEST_PORT = 9998
HUB_PORT = 9999
INHIBIT_IPV4 = {"com.docker.network.bridge.inhibit_ipv4": "true"}
START_DEADLINE = 60.0  # seconds for a service to come up (a cold engine can be slow)
DEFAULT_EXEC_LIMIT = 60  # seconds; hostexec runs under `timeout` so a hang cannot stall a run

CLOISTER = "e2e-main"
PROJECT = "e2e"

CONFIG_TEMPLATE = """\
hostexec:
  auto_approve:
    - pattern: "^(echo|pwd|true|sh|head)( .*)?$"
    # RE2 only (Python's re refuses \\z and \\p), against a quote rendered as '\\''.
    - pattern: ^printf '[[:alpha:]]+'\\\\''[[:alpha:]]+ \\p{{L}}+'\\z
  manual_approve:
    - pattern: "^git push( .*)?$"
  timeout: {timeout}
"""


class StackError(Exception):
    """The stack could not be set up (or torn down); the message says what and why."""


# --- images -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StackImages:
    gateway: str
    approval: str
    slim: str


def build_images(
    client: docker.DockerClient,
    workdir: Path,
    *,
    suffix: str = "test",
    on_line: Callable[[str], None] = lambda line: None,
) -> StackImages:
    """Build the gateway, approval and slim images from this tree as ``<name>:<suffix>``.

    *workdir* must be an empty (or new) scratch directory for the build contexts. The
    engine's layer cache makes a rebuild of an unchanged tree take seconds.
    """
    workspace = find_workspace(Path(__file__).resolve().parent)
    architecture = client.info()["Architecture"]
    tags: dict[str, str] = {}
    specs: dict[str, ImageSpec] = {
        "gateway": GATEWAY_IMAGE,
        "approval": APPROVAL_IMAGE,
        "slim": SLIM_AGENT_IMAGE,
    }
    for name, spec in specs.items():
        tag = spec.tag.rpartition(":")[0] + f":{suffix}"
        context = assemble_context(workspace, spec, workdir / name, architecture)
        build_image(client, context, tag, on_line=on_line)
        tags[name] = tag
    return StackImages(**tags)


# --- small helpers ----------------------------------------------------------------------


@dataclass(frozen=True)
class ExecResult:
    """One command run in a container: exit code, both streams, and the wall time."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def __str__(self) -> str:
        return f"exit {self.exit_code}, stdout {self.stdout[:300]!r}, stderr {self.stderr[:600]!r}"


def run_in(container: Container, argv: list[str], **kwargs: Any) -> ExecResult:
    """``exec_run`` with ``demux=True``, both streams as bytes (never None)."""
    started = time.monotonic()
    result = container.exec_run(argv, demux=True, **kwargs)
    seconds = time.monotonic() - started
    # demux=True: output is (stdout, stderr), either None when the stream was empty.
    output: Any = result.output  # the SDK's stubs do not know the demuxed form
    stdout, stderr = output if isinstance(output, tuple) else (None, None)
    if result.exit_code is None:
        raise StackError(f"{argv!r} has no exit code (still running?)")
    return ExecResult(result.exit_code, stdout or b"", stderr or b"", seconds)


def wait_healthy(container: Container, what: str, deadline_seconds: float = START_DEADLINE) -> None:
    """Poll the image's own health check (exec'd) until it passes, or fail with the logs."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        container.reload()
        if container.status != "running":
            raise StackError(f"{what} exited ({container.status}): {logs_of(container)}")
        with contextlib.suppress(docker.errors.APIError):  # it stopped in between
            image = container.image
            check = image.attrs["Config"]["Healthcheck"]["Test"][1:] if image else []
            if check and run_in(container, check).exit_code == 0:
                return
        if time.monotonic() > deadline:
            raise StackError(
                f"{what} not healthy after {deadline_seconds:g}s: {logs_of(container)}"
            )
        time.sleep(0.1)


def logs_of(container: Container, *, stdout: bool = True, stderr: bool = True) -> str:
    with contextlib.suppress(docker.errors.APIError):
        raw: bytes = container.logs(stdout=stdout, stderr=stderr)
        return raw.decode("utf-8", "replace")
    return "(no logs)"


# --- the executor daemon ----------------------------------------------------------------


class ExecutorProcess:
    """``cloister-executor serve`` on the host, as a child process of this one."""

    def __init__(self, config_dir: Path, data_dir: Path) -> None:
        self.config_dir = config_dir
        self.data_dir = data_dir
        self._process: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"

    @property
    def socket_path(self) -> Path:
        return self.run_dir / "executor.sock"

    @property
    def secret_path(self) -> Path:
        return self.run_dir / "executor.secret"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise StackError("the executor is not running")
        return self._process.pid

    @property
    def stderr_text(self) -> str:
        return "".join(self._lines)

    def _read(self, stream: Any) -> None:
        for line in stream:
            self._lines.append(line)
            if "listening on" in line:
                self._ready.set()

    def start(self, deadline_seconds: float = START_DEADLINE) -> None:
        env = dict(os.environ)
        # The daemon's own settings come from its options only, not a stray variable.
        for name in [name for name in env if name.startswith("CLOISTER_")]:
            del env[name]
        self._process = subprocess.Popen(
            [
                sys.executable, "-m", "cloister_executor.main", "serve",
                "--config-dir", str(self.config_dir), "--data-dir", str(self.data_dir),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        self._reader = threading.Thread(
            target=self._read, args=(self._process.stderr,), name="executor-stderr", daemon=True
        )
        self._reader.start()
        deadline = time.monotonic() + deadline_seconds
        while not self._ready.wait(0.05):
            if self._process.poll() is not None:
                raise StackError(
                    f"the executor exited ({self._process.returncode}): {self.stderr_text}"
                )
            if time.monotonic() > deadline:
                raise StackError(f"the executor did not listen in time: {self.stderr_text}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if process.stderr is not None:
            process.stderr.close()


# --- the stack --------------------------------------------------------------------------


@dataclass
class StackOptions:
    """What differs between stacks: the command timeout and the approval wait."""

    hostexec_timeout: str = "60s"
    approval_timeout: str = "30s"
    labels: Mapping[str, str] = field(default_factory=dict)
    name_prefix: str = "cloister-e2e"


class GuardianStack:
    """The hostexec path, end to end. Use as a context manager, or call start/close."""

    def __init__(
        self,
        client: docker.DockerClient,
        images: StackImages,
        root: Path,
        options: StackOptions | None = None,
    ) -> None:
        self.client = client
        self.images = images
        self.options = options or StackOptions()
        self.suffix = secrets.token_hex(4)
        self.config_dir = root / "config"
        self.data_dir = root / "data"
        # resolve(): the executor's `pwd` prints the physical directory.
        self.project_dir = (root / "project").resolve()
        self.credential = secrets.token_hex(32)
        self.hub_secret = secrets.token_hex(32)  # the human's: only the test's client has it
        self.hub_port = 0
        self.record: TokenRecord | None = None
        self.executor = ExecutorProcess(self.config_dir, self.data_dir)
        self.cloisternet: Network | None = None
        self.control: Network | None = None
        self.hub: Container | None = None
        self.gateway: Container | None = None
        self.cloister: Container | None = None
        self._containers: list[Container] = []
        self._networks: list[Network] = []
        self._background = ThreadPoolExecutor(max_workers=8, thread_name_prefix="in-cloister")

    # -- setup -------------------------------------------------------------------------

    def __enter__(self) -> GuardianStack:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        problems = self.close()
        if problems and exc[0] is None:
            raise StackError("cleanup failed: " + "; ".join(problems))

    def _name(self, purpose: str) -> str:
        return f"{self.options.name_prefix}-{purpose}-{self.suffix}"

    def _write_files(self) -> None:
        self.project_dir.mkdir(parents=True)
        self.config_dir.mkdir(parents=True)
        self.data_dir.mkdir(parents=True)
        (self.config_dir / "config.yaml").write_text(
            CONFIG_TEMPLATE.format(timeout=self.options.hostexec_timeout), encoding="utf-8"
        )
        # The token file is written once the cloister has its address (see start()).
        self.record = TokenRecord.create(cloister=CLOISTER, project=PROJECT, path=self.project_dir)
        tokens = self.config_dir / "tokens"
        tokens.mkdir()
        # The hub (uid 10001) writes decisions below the config dir, and reads tokens/ at
        # startup: it exits with PermissionError on the 0700 directory write_token_file
        # makes, so (as the proxy's image test does) the test opens tokens/ to it.
        self.config_dir.chmod(0o777)
        tokens.chmod(0o755)

    def _bind_token(self, container: Container) -> None:
        """The token file, bound to *container*'s address on its network (as the CLI does)."""
        assert self.record is not None
        assert self.cloisternet is not None
        container.reload()
        address = container.attrs["NetworkSettings"]["Networks"][self.cloisternet.name]["IPAddress"]
        self.record = self.record.bound_to(address)
        write_token_file(self.config_dir / "tokens", self.record).chmod(0o644)

    def _network(self, purpose: str, *, internal: bool, options: dict[str, str]) -> Network:
        network = self.client.networks.create(
            self._name(purpose),
            driver="bridge",
            internal=internal,
            options=options,
            labels=dict(self.options.labels),
        )
        self._networks.append(network)
        network.reload()
        return network

    def _run(self, image: str, purpose: str, **kwargs: Any) -> Container:
        container = self.client.containers.create(
            image, name=self._name(purpose), labels=dict(self.options.labels), **kwargs
        )
        self._containers.append(container)
        container.start()
        return container

    def start(self) -> None:
        self._write_files()
        self.executor.start()
        self.cloisternet = self._network("cloisternet", internal=True, options=INHIBIT_IPV4)
        self.control = self._network("control", internal=False, options={})
        self.hub_port = free_port()
        self.hub = self._run(
            self.images.approval,
            "approval",
            detach=True,
            network=self.control.name,
            networking_config={
                self.control.name: self.client.api.create_endpoint_config(aliases=[HUB_ALIAS])
            },
            volumes={str(self.config_dir): {"bind": "/config", "mode": "rw"}},
            ports={f"{HUB_PORT}/tcp": ("127.0.0.1", self.hub_port)},
            environment={
                "CLOISTER_APPROVAL_SERVICE_CREDENTIAL": self.credential,
                "CLOISTER_APPROVAL_HUB_SECRET": self.hub_secret,
                "CLOISTER_APPROVAL_PUBLIC_HOSTS": json.dumps([f"127.0.0.1:{self.hub_port}"]),
            },
        )
        self.gateway = self._run(
            self.images.gateway,
            "gateway",
            detach=True,
            user=f"{os.getuid()}:{os.getgid()}",  # the executor's socket is 0600
            network=self.cloisternet.name,
            networking_config={
                self.cloisternet.name: self.client.api.create_endpoint_config(
                    aliases=[GUARDIAN_ALIAS]
                )
            },
            volumes={
                str(self.executor.run_dir): {"bind": "/run/cloister", "mode": "rw"},
                str(self.config_dir): {"bind": "/config", "mode": "ro"},
            },
            environment={
                "CLOISTER_GATEWAY_APPROVAL_URL": f"http://{HUB_ALIAS}:{HUB_PORT}",
                "CLOISTER_GATEWAY_APPROVAL_CREDENTIAL": self.credential,
                "CLOISTER_GATEWAY_APPROVAL_TIMEOUT": self.options.approval_timeout,
            },
        )
        self.control.connect(self.gateway)
        assert self.record is not None
        self.cloister = self._run(
            self.images.slim,
            "cloister",
            command=["sleep", "infinity"],
            detach=True,
            user="cloister",  # as a cloister runs: never root by the image's default
            network=self.cloisternet.name,
            environment={
                "CLOISTER_TOKEN": self.record.secret,
                "CLOISTER_GUARDIAN_HOST": GUARDIAN_ALIAS,
                "CLOISTER_REQUEST_PORT": str(REQUEST_PORT),
            },
        )
        self._bind_token(self.cloister)
        wait_healthy(self.hub, "the approval hub")
        wait_healthy(self.gateway, "the gateway")
        self.cloister.reload()
        if self.cloister.status != "running":
            raise StackError(f"the cloister exited: {logs_of(self.cloister)}")

    # -- teardown ----------------------------------------------------------------------

    def close(self) -> list[str]:
        """Remove every container and network and stop the daemon; returns what stuck."""
        problems: list[str] = []
        self._background.shutdown(wait=False, cancel_futures=True)
        for container in reversed(self._containers):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as error:
                problems.append(f"container {container.name}: {error}")
        self._containers.clear()
        for network in reversed(self._networks):
            try:
                network.remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as error:
                problems.append(f"network {network.name}: {error}")
        self._networks.clear()
        try:
            self.executor.stop()
        except (OSError, subprocess.SubprocessError) as error:
            problems.append(f"executor: {error}")
        return problems

    # -- use ---------------------------------------------------------------------------

    @property
    def token(self) -> str:
        assert self.record is not None
        return self.record.secret

    def _cloister(self) -> Container:
        if self.cloister is None:
            raise StackError("the stack is not started")
        return self.cloister

    def hostexec(self, *args: str, limit: int = DEFAULT_EXEC_LIMIT) -> ExecResult:
        """``hostexec ARGS...`` in the cloister (under ``timeout``, so it cannot hang)."""
        return run_in(self._cloister(), ["timeout", "-k", "5", str(limit), "hostexec", *args])

    def _in_background(self, argv: list[str]) -> Future[ExecResult]:
        container_id = self._cloister().id
        assert container_id is not None

        def call() -> ExecResult:
            client = docker.from_env()  # its own engine client: one per thread
            try:
                return run_in(client.containers.get(container_id), argv)
            finally:
                client.close()

        return self._background.submit(call)

    def hostexec_background(
        self, *args: str, limit: int = DEFAULT_EXEC_LIMIT
    ) -> Future[ExecResult]:
        """:meth:`hostexec` in a thread, for a call that waits (a manual approval)."""
        return self._in_background(["timeout", "-k", "5", str(limit), "hostexec", *args])

    def in_cloister(self, script: str) -> ExecResult:
        """``bash -c script`` in the cloister."""
        return run_in(self._cloister(), ["bash", "-c", script])

    def in_cloister_background(self, script: str) -> Future[ExecResult]:
        """:meth:`in_cloister` in a thread (probes that may each wait for a timeout)."""
        return self._in_background(["bash", "-c", script])

    @contextlib.contextmanager
    def human(self) -> Iterator[httpx.Client]:
        """The human's HTTP client for the hub's API (Host: 127.0.0.1:<port>, the secret)."""
        with httpx.Client(
            base_url=f"http://127.0.0.1:{self.hub_port}",
            headers={"Authorization": f"Bearer {self.hub_secret}"},
            timeout=10,
        ) as client:
            yield client

    def gateway_audit(self) -> list[dict[str, Any]]:
        """The gateway's audit records (its stdout, one JSON object a line)."""
        if self.gateway is None:
            raise StackError("the stack is not started")
        lines = logs_of(self.gateway, stderr=False).splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def gateway_address(self, network: Network) -> str:
        if self.gateway is None:
            raise StackError("the stack is not started")
        self.gateway.reload()
        address: str = self.gateway.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        return address
