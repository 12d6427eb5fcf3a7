"""What the host side of ``cloister sync`` asks of the Docker engine.

Two things: run a throwaway container to its end (the export of a cloister's commits),
and run a command in a cloister (to move its branches to the human's commits). The
engine is reached over its Unix socket (``DOCKER_HOST=unix://...``, the default); other
transports are reported as unsupported rather than guessed at.

Its API is asked with the standard library's :mod:`http.client`, one connection a
request: ``cloister stop`` syncs through this module, and an HTTP client package (httpx
loads its command-line tool's rich and pygments too) would cost it about 0.25 s of
imports for a handful of calls.
"""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from cloister_core.errors import CloisterError

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
REQUEST_TIMEOUT = 30.0
EXEC_POLL_SECONDS = 0.02
LOG_TAIL = 20


class EngineError(CloisterError):
    """The engine refused or failed a request; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Bind:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """A throwaway container: no network, no capabilities, a read-only root."""

    image: str
    name_prefix: str
    user: str
    binds: Sequence[Bind]
    labels: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    memory_bytes: int = 1024**3
    pids: int = 64

    def body(self) -> dict[str, Any]:
        return {
            "Image": self.image,
            "User": self.user,
            "Env": [f"{key}={value}" for key, value in self.environment.items()],
            "Labels": dict(self.labels),
            "NetworkDisabled": True,
            "HostConfig": {
                "NetworkMode": "none",
                "CapDrop": ["ALL"],
                "SecurityOpt": ["no-new-privileges:true"],
                "ReadonlyRootfs": True,
                "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=64m"},  # noqa: S108 - its own
                "Memory": self.memory_bytes,
                "PidsLimit": self.pids,
                "Mounts": [
                    {
                        "Type": "bind",
                        "Source": bind.source,
                        "Target": bind.target,
                        "ReadOnly": bind.read_only,
                    }
                    for bind in self.binds
                ],
            },
        }


@dataclass(frozen=True, slots=True)
class Finished:
    exit_code: int
    log: str  # the last lines it wrote (stdout and stderr), for an error message


def _demultiplex(data: bytes) -> str:
    """The text of a non-TTY container's log stream (8-byte frame headers)."""
    chunks: list[bytes] = []
    position = 0
    while position + 8 <= len(data):
        size = int.from_bytes(data[position + 4 : position + 8], "big")
        chunks.append(data[position + 8 : position + 8 + size])
        position += 8 + size
    return b"".join(chunks).decode("utf-8", "replace")


def _in_path(value: str) -> str:
    """*value* (an image or container name) as one part of a request's path."""
    return quote(value, safe="/:@")


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket; *timeout* bounds the connect and each read and write (also
    the CLI's light engine reader's: one such connection for Cloister's two stdlib clients)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("docker", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


# What a request that did not get its answer raises: the socket's errors (a timeout
# among them: TimeoutError is an OSError) and the HTTP parser's (a malformed or cut answer).
_UNREACHED = (OSError, http.client.HTTPException)


class Engine:
    """A minimal Docker engine client over its Unix socket."""

    def __init__(self, docker_host: str | None) -> None:
        self._host = docker_host or DEFAULT_DOCKER_HOST

    @property
    def socket(self) -> str | None:
        return self._host.removeprefix("unix://") if self._host.startswith("unix://") else None

    def _socket_path(self) -> str:
        if self.socket is None:
            raise EngineError(
                f"DOCKER_HOST={self._host!r} is not a Unix socket; Cloister reaches the"
                " engine through one"
            )
        return self.socket

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> _Response:
        """``METHOD path`` on a connection of its own, its whole answer read; raises what
        :data:`_UNREACHED` names when it is not answered."""
        target = f"{path}?{urlencode(query)}" if query else path
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        connection = UnixConnection(self._socket_path(), timeout)
        try:
            connection.request(method, target, body=payload, headers=headers)
            response = connection.getresponse()
            return _Response(response.status, response.read())
        finally:
            connection.close()

    @staticmethod
    def _check(response: _Response, what: str) -> _Response:
        if response.status >= 400:
            try:
                message = str(response.json().get("message", response.text))
            except (ValueError, AttributeError):
                message = response.text
            raise EngineError(f"{what}: {response.status} {message.strip()}")
        return response

    def image_exists(self, image: str) -> bool:
        try:
            return self._request("GET", f"/images/{_in_path(image)}/json").status == 200
        except _UNREACHED as error:
            raise EngineError(f"cannot reach the Docker engine: {error}") from None

    def run(self, spec: ContainerSpec, *, timeout: float) -> Finished:
        """Create, start and wait for a container; it is removed whatever happens."""
        name = f"{spec.name_prefix}-{secrets.token_hex(4)}"
        self._socket_path()
        try:
            created = self._check(
                self._request("POST", "/containers/create", query={"name": name}, body=spec.body()),
                f"cannot create {name}",
            ).json()
            identifier = _in_path(str(created["Id"]))
            try:
                self._check(
                    self._request("POST", f"/containers/{identifier}/start"),
                    f"cannot start {name}",
                )
                waited = self._check(
                    self._request("POST", f"/containers/{identifier}/wait", timeout=timeout),
                    f"{name} did not finish",
                ).json()
                logs = self._request(
                    "GET",
                    f"/containers/{identifier}/logs",
                    query={"stdout": 1, "stderr": 1, "tail": LOG_TAIL},
                )
                return Finished(int(waited.get("StatusCode", -1)), _demultiplex(logs.content))
            finally:
                self._request("DELETE", f"/containers/{identifier}", query={"force": 1})
        except TimeoutError:
            raise EngineError(f"{name} took over {timeout:g}s and was removed") from None
        except _UNREACHED as error:
            raise EngineError(f"cannot reach the Docker engine: {error}") from None

    def exec(
        self, container: str, argv: Sequence[str], *, timeout: float, workdir: str = "/work"
    ) -> int | None:
        """Run *argv* in the running *container* as its user; the exit code, or None
        when it is still running after *timeout* (it is left running: the container is
        the agent's, and what runs there can only change the agent's own state)."""
        self._socket_path()
        try:
            created = self._check(
                self._request(
                    "POST",
                    f"/containers/{_in_path(container)}/exec",
                    body={
                        "Cmd": list(argv),
                        "AttachStdout": False,
                        "AttachStderr": False,
                        "WorkingDir": workdir,
                    },
                ),
                f"cannot run a command in {container}",
            ).json()
            identifier = _in_path(str(created["Id"]))
            self._check(
                self._request(
                    "POST", f"/exec/{identifier}/start", body={"Detach": True, "Tty": False}
                ),
                f"cannot run a command in {container}",
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                state = self._check(
                    self._request("GET", f"/exec/{identifier}/json"),
                    f"lost a command in {container}",
                ).json()
                if not state.get("Running"):
                    code = state.get("ExitCode")
                    return int(code) if code is not None else None
                time.sleep(EXEC_POLL_SECONDS)
        except _UNREACHED as error:
            raise EngineError(f"cannot reach the Docker engine: {error}") from None
        return None
