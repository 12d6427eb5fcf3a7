"""Which cloisters exist: asked of the Docker engine without the docker SDK.

``cloister list`` and shell completion only need the containers with Cloister's
label, and they answer while a person waits. Importing the docker SDK (requests,
urllib3) alone costs about 0.2 s, more than all the rest of such a command, so on a
Unix socket (``DOCKER_HOST=unix://...``, the default) they ask the engine's API with
the standard library; any other transport (tcp, ssh) goes through the SDK as before.

Both answer with objects shaped like the SDK's (``containers.list(...)`` and
containers with ``labels``, ``status`` and ``attrs``), so :func:`list_cloisters`
takes either, and the tests' fake engines too.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from cloister_core import stack
from cloister_core.errors import CloisterError

LABEL = stack.LABEL_CLOISTER
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
TIMEOUT = 60.0  # the docker SDK's default

Filters = dict[str, str | list[str] | bool]


class DockerUnavailableError(CloisterError):
    """No Docker engine answers."""


class EngineError(CloisterError):
    """The engine answered, but not with what was asked."""


class ContainerLike(Protocol):
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def status(self) -> str: ...
    @property
    def attrs(self) -> dict[str, Any]: ...


class ContainerLister(Protocol):
    def list(
        self, *, all: bool = ..., filters: Filters | None = ...
    ) -> Sequence[ContainerLike]: ...


class Engine(Protocol):
    """What listing needs of an engine client: the docker SDK's, or :class:`UnixEngine`."""

    @property
    def containers(self) -> ContainerLister: ...


# -- the cloisters -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CloisterInfo:
    name: str
    project: str
    branch: str | None
    path: str
    status: str
    image: str
    created: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "branch": self.branch,
            "path": self.path,
            "status": self.status,
            "image": self.image,
            "created": self.created,
        }


def _info(container: ContainerLike) -> CloisterInfo:
    labels = container.labels
    image = container.attrs.get("Config", {}).get("Image", "")
    return CloisterInfo(
        name=labels[LABEL],
        project=labels.get(stack.LABEL_PROJECT, ""),
        branch=labels.get(stack.LABEL_BRANCH) or None,
        path=labels.get(stack.LABEL_PATH, ""),
        status=container.status,
        image=str(image),
        created=str(container.attrs.get("Created", ""))[:19],
    )


def list_cloisters(client: Engine, instance: stack.Instance) -> list[CloisterInfo]:
    """The cloisters of *instance* (another user's, or another data directory's, are not)."""
    containers = client.containers.list(all=True, filters={"label": [LABEL, instance.label_filter]})
    return sorted((_info(container) for container in containers), key=lambda info: info.name)


def name_for_directory(client: Engine, instance: stack.Instance, directory: Path) -> str:
    """The cloister of *instance* whose working tree contains *directory* (the deepest)."""
    resolved = directory.resolve()
    best: tuple[int, str] | None = None
    for info in list_cloisters(client, instance):
        path = Path(info.path)
        if resolved == path or path in resolved.parents:
            depth = len(path.parts)
            if best is None or depth > best[0]:
                best = (depth, info.name)
    if best is None:
        raise CloisterError(f"no cloister works in {directory}; name one (`cloister list`)")
    return best[1]


def age(created: str) -> str:
    try:
        started = datetime.fromisoformat(created).replace(tzinfo=UTC)
    except ValueError:
        return created
    minutes = int((datetime.now(UTC) - started).total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


# -- reaching the engine -------------------------------------------------------------------


def docker_host() -> str:
    """``$DOCKER_HOST``, else the default socket (an empty value means the default too)."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def check_engine_socket(host: str) -> None:
    """Fail early, and cleanly, when a Unix-socket engine is not there.

    The docker SDK would find out too, but leaks its socket when the connection fails.
    """
    if not host.startswith("unix://"):
        return
    path = host.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(path)
        except OSError as error:
            raise DockerUnavailableError(
                f"no Docker engine is reachable ({host}: {error.strerror or error});"
                " start Docker and try again"
            ) from None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
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
class EngineContainer:
    """A container as the engine's inspect answer describes it (the SDK's shape)."""

    attrs: dict[str, Any]

    @property
    def labels(self) -> dict[str, str]:
        labels: dict[str, str] = (self.attrs.get("Config") or {}).get("Labels") or {}
        return labels

    @property
    def status(self) -> str:
        state = self.attrs.get("State")
        return str(state.get("Status", "") if isinstance(state, dict) else state)


def _values(value: str | list[str] | bool) -> list[str]:
    """A filter's values as the API wants them (the SDK's ``convert_filters``)."""
    if isinstance(value, bool):
        return ["true" if value else "false"]
    return value if isinstance(value, list) else [value]


class UnixEngine:
    """The engine's read-only container API over its Unix socket, with the standard library."""

    def __init__(self, path: str, timeout: float = TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout

    @property
    def containers(self) -> UnixEngine:
        return self

    def get(self, path: str) -> Any | None:
        """The JSON answer to ``GET path``; None when the engine says 404."""
        connection = _UnixConnection(self.path, self.timeout)
        try:
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            body = response.read()
        except OSError as error:
            raise DockerUnavailableError(
                f"no Docker engine is reachable (unix://{self.path}: {error});"
                " start Docker and try again"
            ) from None
        finally:
            connection.close()
        if response.status == 404:
            return None
        try:
            if response.status == 200:
                return json.loads(body)
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = body.decode(errors="replace").strip()
        raise EngineError(f"the Docker engine answered {response.status} to GET {path}: {message}")

    def list(self, *, all: bool = False, filters: Filters | None = None) -> list[EngineContainer]:
        """Like the SDK's ``containers.list``: each container inspected (vanished ones skipped)."""
        query: dict[str, str] = {"all": "1" if all else "0"}
        if filters:
            query["filters"] = json.dumps({key: _values(value) for key, value in filters.items()})
        found = []
        for summary in self.get(f"/containers/json?{urlencode(query)}") or []:
            attrs = self.get(f"/containers/{quote(str(summary['Id']), safe='')}/json")
            if attrs is not None:  # removed since it was listed
                found.append(EngineContainer(attrs))
        return found


def connect(timeout: float = TIMEOUT) -> Engine:
    """An engine client for listing: :class:`UnixEngine`, else the docker SDK's."""
    host = docker_host()
    if host.startswith("unix://"):
        check_engine_socket(host)
        return UnixEngine(host.removeprefix("unix://"), timeout)
    import docker  # noqa: PLC0415 - only for the transports the standard library does not speak
    import docker.errors  # noqa: PLC0415

    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except docker.errors.DockerException as error:
        raise DockerUnavailableError(
            f"no Docker engine is reachable ({error}); start Docker and try again"
        ) from None
    return client
