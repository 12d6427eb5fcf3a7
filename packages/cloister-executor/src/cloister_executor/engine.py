"""What the host side of ``cloister sync`` asks of the Docker engine.

Two things: run a throwaway container to its end (the export of a cloister's commits),
and run a command in a cloister (to move its branches to the human's commits). The
engine is reached over its Unix socket (``DOCKER_HOST=unix://...``, the default); other
transports are reported as unsupported rather than guessed at.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

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


class Engine:
    """A minimal Docker engine client over its Unix socket."""

    def __init__(self, docker_host: str | None) -> None:
        self._host = docker_host or DEFAULT_DOCKER_HOST

    @property
    def socket(self) -> str | None:
        return self._host.removeprefix("unix://") if self._host.startswith("unix://") else None

    def _client(self, timeout: float) -> httpx.Client:
        if self.socket is None:
            raise EngineError(
                f"DOCKER_HOST={self._host!r} is not a Unix socket; Cloister reaches the"
                " engine through one"
            )
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=self.socket),
            base_url="http://docker",
            timeout=timeout,
        )

    @staticmethod
    def _check(response: httpx.Response, what: str) -> httpx.Response:
        if response.status_code >= 400:
            try:
                message = str(response.json().get("message", response.text))
            except ValueError:
                message = response.text
            raise EngineError(f"{what}: {response.status_code} {message.strip()}")
        return response

    def image_exists(self, image: str) -> bool:
        with self._client(REQUEST_TIMEOUT) as client:
            try:
                return client.get(f"/images/{image}/json").status_code == 200
            except httpx.HTTPError as error:
                raise EngineError(f"cannot reach the Docker engine: {error}") from None

    def run(self, spec: ContainerSpec, *, timeout: float) -> Finished:
        """Create, start and wait for a container; it is removed whatever happens."""
        name = f"{spec.name_prefix}-{secrets.token_hex(4)}"
        with self._client(REQUEST_TIMEOUT) as client:
            try:
                created = self._check(
                    client.post("/containers/create", params={"name": name}, json=spec.body()),
                    f"cannot create {name}",
                ).json()
                identifier = str(created["Id"])
                try:
                    self._check(
                        client.post(f"/containers/{identifier}/start"), f"cannot start {name}"
                    )
                    waited = self._check(
                        client.post(f"/containers/{identifier}/wait", timeout=timeout),
                        f"{name} did not finish",
                    ).json()
                    logs = client.get(
                        f"/containers/{identifier}/logs",
                        params={"stdout": 1, "stderr": 1, "tail": LOG_TAIL},
                    )
                    return Finished(int(waited.get("StatusCode", -1)), _demultiplex(logs.content))
                finally:
                    client.delete(f"/containers/{identifier}", params={"force": 1})
            except httpx.TimeoutException:
                raise EngineError(f"{name} took over {timeout:g}s and was removed") from None
            except httpx.HTTPError as error:
                raise EngineError(f"cannot reach the Docker engine: {error}") from None

    def exec(
        self, container: str, argv: Sequence[str], *, timeout: float, workdir: str = "/work"
    ) -> int | None:
        """Run *argv* in the running *container* as its user; the exit code, or None
        when it is still running after *timeout* (it is left running: the container is
        the agent's, and what runs there can only change the agent's own state)."""
        with self._client(REQUEST_TIMEOUT) as client:
            try:
                created = self._check(
                    client.post(
                        f"/containers/{container}/exec",
                        json={
                            "Cmd": list(argv),
                            "AttachStdout": False,
                            "AttachStderr": False,
                            "WorkingDir": workdir,
                        },
                    ),
                    f"cannot run a command in {container}",
                ).json()
                identifier = str(created["Id"])
                self._check(
                    client.post(f"/exec/{identifier}/start", json={"Detach": True, "Tty": False}),
                    f"cannot run a command in {container}",
                )
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    state = self._check(
                        client.get(f"/exec/{identifier}/json"), f"lost a command in {container}"
                    ).json()
                    if not state.get("Running"):
                        code = state.get("ExitCode")
                        return int(code) if code is not None else None
                    time.sleep(EXEC_POLL_SECONDS)
            except httpx.HTTPError as error:
                raise EngineError(f"cannot reach the Docker engine: {error}") from None
        return None
