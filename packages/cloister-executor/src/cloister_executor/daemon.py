"""``cloister-executor serve``: the host daemon that runs approved commands.

It listens on a Unix socket under ``<data>/run/`` (mode 0600, in a 0700 directory):
that directory is bind-mounted into the hostexec gateway's container and nowhere
else, and there is no TCP listener on Linux, so nothing on a cloister's network (nor a host
service reachable through a bridge) can talk to it. ``--tcp 127.0.0.1:PORT`` exists
only for Docker Desktop, where a socket cannot cross into the engine's VM; it is
refused for any non-loopback address.

Every request must carry the stack's secret (``<data>/run/executor.secret``, 0600,
compared in constant time, never logged) and a cloister token; the command runs in
that cloister's host directory as recorded in ``<config>/tokens`` on this host —
never a directory from the request — with a minimal environment, a timeout that kills
its process group, and capped output. Requests are served concurrently. In a git
project the rules of :mod:`cloister_executor.hostgit` apply (hardened git, the agent's
branches pushed, protected paths kept), and the watch of
:mod:`cloister_executor.syncwatch` brings running cloisters' commits back for as long
as the daemon runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import Field, ValidationError
from pydantic_settings import SettingsConfigDict

from cloister_core.audit import AuditLog
from cloister_core.config import load_global_config
from cloister_core.config.models import Duration, GlobalConfig, HostexecConfig
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.settings import CloisterSettings
from cloister_core.tokens import TokenRecord
from cloister_core.watch import TokenDirectory, file_signature
from cloister_executor.engine import Engine
from cloister_executor.environment import command_environment
from cloister_executor.gitsync import Syncer
from cloister_executor.hostgit import GitProjects
from cloister_executor.locations import secret_path, socket_path
from cloister_executor.protocol import (
    MAX_REQUEST_BYTES,
    MIN_SECRET_LENGTH,
    ExecRefusal,
    ExecRequest,
    ExecResult,
    ExecutorState,
)
from cloister_executor.runner import run_command
from cloister_executor.syncwatch import SyncWatch

READ_TIMEOUT = 10.0


class ExecutorSettings(CloisterSettings):
    """Settings of ``cloister-executor serve``."""

    model_config = SettingsConfigDict(
        env_prefix="CLOISTER_EXECUTOR_", cli_prog_name="cloister-executor serve"
    )
    tcp: str | None = Field(
        default=None,
        description="also listen on this loopback HOST:PORT (Docker Desktop only, where a"
        " Unix socket cannot reach the engine)",
    )
    max_timeout: Duration = Field(
        default=timedelta(hours=1), description="no command runs longer, whatever is asked"
    )
    watch: bool = Field(
        default=True,
        description="bring running cloisters' commits back as they are made (cloister sync)",
    )
    docker_host: str | None = Field(
        default=None,
        description="the Docker engine syncs run their containers on (default: the"
        " DOCKER_HOST of the environment, else unix:///var/run/docker.sock)",
    )
    background: bool = Field(
        default=False,
        description="start the daemon in its own session, print its pid and return at once"
        " (it is then no child of the caller: nothing has to reap it)",
    )


def ensure_secret(path: Path) -> str:
    """The stack's executor secret, created (0600) on first use.

    A secret file that exists but is empty or short is refused: an empty secret would
    let any request through.
    """
    try:
        secret = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            atomic_write(
                path, secrets.token_hex(32) + "\n", mode=0o600, exclusive=True, dir_mode=0o700
            )
        secret = path.read_text(encoding="ascii").strip()
    except (UnicodeDecodeError, ValueError):
        secret = ""
    if len(secret) < MIN_SECRET_LENGTH:
        raise ValueError(
            f"the executor secret in {path} is empty, short or not ASCII; delete the file"
            " to have a new one made"
        )
    return secret


def _loopback_address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(
            f"the executor's TCP listener must be on a loopback address, not {value!r}"
        )
    return host, int(port)


class ExecutorDaemon:
    """The executor: accept, authenticate, run, answer."""

    def __init__(
        self,
        settings: ExecutorSettings,
        report: Callable[[str], None],
        host_environment: dict[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._paths = settings.paths
        self._report = report
        self._host_env = dict(os.environ if host_environment is None else host_environment)
        self._tokens = TokenDirectory(self._paths.tokens_dir, report)
        self._config: tuple[object, GlobalConfig] | None = None
        self._config_error: str | None = None
        self._secret = ""
        self.socket_path = socket_path(self._paths)
        self.tcp_address: tuple[str, int] | None = None
        # What a sync does goes to the audit log and the cloister's own log, as the
        # services' lines do (links there are refused: cloister_core.audit).
        self._audit = AuditLog(
            self._paths.audit_log, cloister_dir=self._paths.logs_dir, report=report
        )
        self.syncer = Syncer(
            self._paths, Engine(settings.docker_host or self._host_env.get("DOCKER_HOST"))
        )
        self.watch = (
            SyncWatch(self._paths, self.syncer, report, self._audit) if settings.watch else None
        )
        self._projects = GitProjects(self._paths, self.syncer, report)

    def _global_config(self) -> GlobalConfig:
        signature = file_signature(self._paths.config_file)
        if self._config is None or self._config[0] != signature:
            try:
                config = load_global_config(self._paths, create=False)
            except CloisterError as error:
                if str(error) != self._config_error:  # once per change, not per request
                    self._config_error = str(error)
                    self._report(f"configuration error, using the last good one: {error}")
                return self._config[1] if self._config else GlobalConfig()
            self._config = (signature, config)
            self._config_error = None
            self.syncer.fast_forward = config.git.fast_forward
        return self._config[1]

    def _hostexec_config(self) -> HostexecConfig:
        return self._global_config().hostexec

    async def execute(self, raw: bytes) -> ExecResult | ExecRefusal:
        """One request line in, one answer out (pure apart from running the command)."""
        try:
            request = ExecRequest.model_validate_json(raw)
        except ValidationError as error:
            return ExecRefusal(reason=f"invalid request: {error.error_count()} problem(s)")
        if not self._secret or not hmac.compare_digest(
            request.secret.encode(), self._secret.encode()
        ):
            self._report("refused a request with a wrong secret")
            return ExecRefusal(reason="wrong secret")
        found = self._record(request)
        if isinstance(found, ExecRefusal):
            return found
        record, _ = found
        config = self._hostexec_config()
        env = command_environment(self._host_env, config.env_passthrough, record)
        prepared = await self._projects.before(record, request.argv, env, config)
        if isinstance(prepared, ExecRefusal):
            return prepared
        timeout = min(request.timeout_seconds, self._settings.max_timeout.total_seconds())
        return await run_command(
            prepared.argv, cwd=prepared.cwd, env=prepared.env, timeout_seconds=timeout
        )

    def _record(self, request: ExecRequest) -> tuple[TokenRecord, Path] | ExecRefusal:
        """The cloister and its directory (from its token file, never the request)."""
        self._tokens.refresh()
        record = self._tokens.registry.lookup(request.token)
        if record is None:
            return ExecRefusal(reason="unknown cloister token")
        cwd = Path(record.path)
        if not cwd.is_dir():
            return ExecRefusal(reason=f"the cloister's directory {str(cwd)!r} does not exist")
        return record, cwd

    async def _handle(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_REQUEST_BYTES)
        except OSError:
            conn.close()
            return
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT):
                    line = await reader.readline()
            except (TimeoutError, ValueError, OSError):  # slow, oversized or broken
                answer: ExecResult | ExecRefusal = ExecRefusal(reason="no complete request")
            else:
                answer = await self.execute(line)
            writer.write(answer.model_dump_json().encode() + b"\n")
            await writer.drain()
        except Exception as error:  # a broken connection must not stop the daemon
            self._report(f"request failed: {type(error).__name__}: {error}")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _unix_listener(self) -> socket.socket:
        directory = self.socket_path.parent
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        self.socket_path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Created 0600 from the start (umask), not chmod'ed after a window.
        old_umask = os.umask(0o177)
        try:
            listener.bind(str(self.socket_path))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        finally:
            os.umask(old_umask)
        listener.setblocking(False)
        return listener

    def _tcp_listener(self, address: tuple[str, int]) -> socket.socket:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, port))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        listener.setblocking(False)
        self.tcp_address = listener.getsockname()[:2]
        return listener

    async def _accept(self, listener: socket.socket, tasks: asyncio.TaskGroup) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            tasks.create_task(self._handle(conn))

    def _write_state(self) -> None:
        state = ExecutorState(
            pid=os.getpid(),
            socket=self.socket_path,
            tcp=f"{self.tcp_address[0]}:{self.tcp_address[1]}" if self.tcp_address else None,
            secret_file=secret_path(self._paths),
            started_at=datetime.now(UTC),
        )
        atomic_write(self._paths.executor_state, state.model_dump_json(indent=2) + "\n", mode=0o600)

    async def serve(self, ready: Callable[[], None] | None = None) -> None:
        self._secret = ensure_secret(secret_path(self._paths))
        tcp = _loopback_address(self._settings.tcp) if self._settings.tcp else None
        self._tokens.refresh(force=True)
        listeners: list[socket.socket] = []
        try:
            listeners.append(self._unix_listener())
            if tcp is not None:
                listeners.append(self._tcp_listener(tcp))
            async with asyncio.TaskGroup() as tasks:
                for listener in listeners:
                    tasks.create_task(self._accept(listener, tasks))
                if self.watch is not None:
                    tasks.create_task(self.watch.run())
                # The line first: whoever waits for the state file then finds it in the log.
                self._report(f"listening on {self.socket_path}")
                self._write_state()
                if ready is not None:
                    ready()
        finally:
            for listener in listeners:
                listener.close()
            self._audit.close()
            self.socket_path.unlink(missing_ok=True)
            with contextlib.suppress(FileNotFoundError, ValueError):
                state = ExecutorState.model_validate_json(self._paths.executor_state.read_bytes())
                if state.pid == os.getpid():
                    self._paths.executor_state.unlink()


def _report(message: str) -> None:
    print(f"cloister-executor: {message}", file=sys.stderr, flush=True)


async def run(settings: ExecutorSettings) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    daemon = ExecutorDaemon(settings, _report)
    async with asyncio.TaskGroup() as tasks:
        serving = tasks.create_task(daemon.serve())
        await stop.wait()
        serving.cancel()


def _start_in_background(argv: list[str]) -> int:
    """Run ``serve`` again, without ``--background``, detached; print its pid."""
    foreground = [arg for arg in argv if arg != "--background"]
    # -P and "/": the working directory is never on sys.path (it may be a project)
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "cloister_executor.main", "serve", *foreground],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr,
        stderr=sys.stderr,
        start_new_session=True,
    )
    print(process.pid, flush=True)
    process.returncode = 0  # it outlives us on purpose; this process exits now
    return 0


def main(argv: list[str]) -> int:
    settings = ExecutorSettings(_cli_parse_args=argv)
    if settings.tcp:
        _loopback_address(settings.tcp)  # refuse a non-loopback address before starting
    if settings.background:
        return _start_in_background(argv)
    asyncio.run(run(settings))
    return 0
