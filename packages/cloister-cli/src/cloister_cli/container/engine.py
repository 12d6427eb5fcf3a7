"""The Docker engine as the CLI library sees it: one port, and the ways to reach it.

The port names exactly what the library asks of an engine: :class:`Engine` (its
``containers``, ``networks``, ``images``, the low-level ``api`` calls, ``info`` and
``ping``), and the containers, networks and images it answers with, with the arguments
Cloister passes. The docker SDK's ``DockerClient`` is its one implementation
(:func:`connect`); the tests' ``FakeEngine`` is checked against it, so a call the
library starts making is a call both must have.

:class:`Reader` is the read-only part ``cloister list`` and shell completion need: the
containers with Cloister's label. They answer while a person waits, and importing the
docker SDK (requests, urllib3) alone costs about 0.2 s, more than all the rest of such
a command; so on a Unix socket (``DOCKER_HOST=unix://...``, the default) they read
through :class:`UnixEngine`, which asks the engine's API with the standard library
(:func:`cloister_cli.container.listing.connect` chooses), and over any other transport
(tcp, ssh) through the SDK's client, as before.

The engine's refusals are the SDK's exceptions (``docker.errors``: ``NotFound``,
``APIError``...), which the fake raises too; this module imports neither the SDK nor
anything heavy until :func:`connect` is called.

The executor keeps its own client of the engine (``cloister_executor.engine``, the
standard library's HTTP over the Unix socket): it is a service of its own package, which
depends on cloister-core and not on this one nor on the docker SDK, and its asyncio
daemon needs only a few calls (whether an image exists, run a throwaway container to its
end, exec in a cloister), made from worker threads. The CLI needs far more of the engine
(builds, networks, images, forwarders), which the SDK does; it reaches the executor's
client only through the executor's ``Syncer`` (``Context.syncer``: ``sync`` and
``stop``). The two standard-library readers share one connection,
``cloister_executor.engine.UnixConnection`` (the CLI depends on the executor's package,
never the other way round).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Unpack, overload
from urllib.parse import quote, urlencode

from cloister_core.errors import CloisterError
from cloister_executor.engine import UnixConnection

if TYPE_CHECKING:
    import docker
    from docker.types import EndpointConfig, IPAMConfig, LogConfig, Mount

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
TIMEOUT = 60.0  # the docker SDK's default

Filters = dict[str, str | list[str] | bool]


class DockerUnavailableError(CloisterError):
    """No Docker engine answers."""


class EngineError(CloisterError):
    """The engine answered, but not with what was asked."""


# -- the port ------------------------------------------------------------------------------


class ContainerView(Protocol):
    """A container as listing reads it: its inspect document, labels and status."""

    @property
    def attrs(self) -> dict[str, Any]: ...
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def status(self) -> str: ...


class Container(ContainerView, Protocol):
    """A container, and what the library does to it."""

    @property
    def id(self) -> str | None: ...
    @property
    def short_id(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    def reload(self) -> None: ...
    def start(self) -> None: ...
    def kill(self, signal: str) -> None: ...
    def remove(self, *, force: bool = ..., v: bool = ...) -> None: ...
    def get_archive(self, path: str) -> tuple[Iterator[bytes], dict[str, Any] | None]: ...
    @overload
    def logs(
        self,
        *,
        stdout: bool = ...,
        stderr: bool = ...,
        stream: Literal[True],
        tail: int | Literal["all"] = ...,
        since: float | None = ...,
        follow: bool,
    ) -> Iterator[bytes]: ...
    @overload
    def logs(
        self,
        *,
        stdout: bool = ...,
        stderr: bool = ...,
        stream: Literal[False] = ...,
        tail: int | Literal["all"] = ...,
        since: float | None = ...,
    ) -> bytes: ...


class Network(Protocol):
    """A network: its inspect document, and the containers the library joins to it."""

    @property
    def id(self) -> str | None: ...
    @property
    def name(self) -> str | None: ...
    @property
    def attrs(self) -> dict[str, Any]: ...
    def reload(self) -> None: ...
    def connect(self, container: str, *, aliases: list[str] | None = ...) -> None: ...
    def disconnect(self, container: str, *, force: bool = ...) -> None: ...
    def remove(self) -> None: ...


class Image(Protocol):
    @property
    def id(self) -> str | None: ...
    @property
    def tags(self) -> list[str]: ...
    @property
    def labels(self) -> Mapping[str, Any]: ...
    @property
    def attrs(self) -> dict[str, Any]: ...


# Only mypy needs it: made at import, a TypedDict compiles each key's annotation, a few
# milliseconds that ``cloister list`` (which imports this module) would pay.
if TYPE_CHECKING:

    class ContainerOptions(TypedDict, total=False):
        """The options of ``containers.create`` and ``run`` that Cloister sets."""

        command: list[str]
        entrypoint: list[str]
        name: str
        hostname: str
        user: str
        working_dir: str
        environment: dict[str, str]
        labels: dict[str, str]
        mounts: list[Mount]
        tmpfs: dict[str, str]
        network: str
        network_mode: str
        network_disabled: bool
        networking_config: dict[str, EndpointConfig]
        ports: Mapping[str, tuple[str, int] | None]
        extra_hosts: dict[str, str]
        cap_drop: list[str]
        cap_add: list[str]
        security_opt: list[str]
        read_only: bool
        init: bool
        mem_limit: str | int
        nano_cpus: int
        pids_limit: int
        shm_size: str
        storage_opt: dict[str, str]
        sysctls: dict[str, str]
        healthcheck: dict[str, Any]
        log_config: LogConfig


class ContainerReader(Protocol):
    def list(
        self, *, all: bool = ..., filters: Filters | None = ...
    ) -> Sequence[ContainerView]: ...


class Containers(ContainerReader, Protocol):
    def get(self, container_id: str) -> Container: ...
    def list(
        self, *, all: bool = ..., filters: Filters | None = ..., ignore_removed: bool = ...
    ) -> Sequence[Container]: ...
    def create(self, image: str, **options: Unpack[ContainerOptions]) -> Container: ...
    def run(
        self, image: str, *, detach: Literal[True], **options: Unpack[ContainerOptions]
    ) -> Container: ...


class Networks(Protocol):
    def get(self, network_id: str) -> Network: ...
    def list(
        self, names: list[str] | None = ..., *, filters: dict[str, Any] | None = ...
    ) -> Sequence[Network]: ...
    def create(
        self,
        name: str,
        *,
        driver: str | None = ...,
        options: dict[str, Any] | None = ...,
        ipam: IPAMConfig | None = ...,
        check_duplicate: bool | None = ...,
        internal: bool = ...,
        labels: dict[str, Any] | None = ...,
        enable_ipv6: bool = ...,
    ) -> Network: ...


class Images(Protocol):
    def get(self, name: str) -> Image: ...
    def list(self, *, filters: dict[str, Any] | None = ...) -> Sequence[Image]: ...
    def remove(self, image: str, force: bool = ...) -> None: ...


class Api(Protocol):
    """The low-level calls (the SDK's ``APIClient``) the library makes."""

    def build(
        self,
        *,
        path: str | None = ...,
        fileobj: IO[bytes] | None = ...,
        custom_context: bool = ...,
        dockerfile: str | None = ...,
        buildargs: dict[str, Any] | None = ...,
        target: str | None = ...,
        tag: str | None = ...,
        labels: dict[str, Any] | None = ...,
        nocache: bool = ...,
        rm: bool = ...,
        forcerm: bool = ...,
        pull: bool = ...,
        decode: bool = ...,
    ) -> Iterator[Any]: ...
    def networks(self) -> list[dict[str, Any]]: ...
    def containers(self, *, all: bool = ...) -> list[dict[str, Any]]: ...
    def create_endpoint_config(
        self, *, aliases: list[str] | None = ..., ipv4_address: str | None = ...
    ) -> dict[str, Any]: ...
    def create_host_config(
        self,
        *,
        network_mode: str | None = ...,
        cap_drop: list[str] | None = ...,
        security_opt: list[str] | None = ...,
        read_only: bool | None = ...,
        pids_limit: int | None = ...,
        mem_limit: str | int | None = ...,
    ) -> dict[str, Any]: ...
    def create_container(
        self,
        image: str,
        command: list[str] | None = ...,
        *,
        user: str | None = ...,
        stdin_open: bool = ...,
        network_disabled: bool = ...,
        labels: dict[str, str] | None = ...,
        host_config: dict[str, Any] | None = ...,
    ) -> dict[str, Any]: ...
    def remove_container(self, container: str, *, force: bool = ...) -> None: ...
    def exec_create(
        self,
        container: str,
        cmd: list[str],
        *,
        stdout: bool = ...,
        stderr: bool = ...,
        user: str = ...,
        workdir: str | None = ...,
    ) -> dict[str, Any]: ...
    def exec_start(self, exec_id: str, *, stream: Literal[True]) -> Iterator[bytes]: ...
    def exec_inspect(self, exec_id: str) -> dict[str, Any]: ...


class Reader(Protocol):
    """What ``cloister list`` and completion ask: the docker SDK's, or :class:`UnixEngine`."""

    @property
    def containers(self) -> ContainerReader: ...


class Engine(Reader, Protocol):
    """What the library asks of the Docker engine."""

    @property
    def containers(self) -> Containers: ...
    @property
    def networks(self) -> Networks: ...
    @property
    def images(self) -> Images: ...
    @property
    def api(self) -> Api: ...
    def info(self) -> dict[str, Any]: ...
    def ping(self) -> bool: ...


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


def connect(timeout: float = TIMEOUT) -> docker.DockerClient:
    """The docker SDK's client of ``$DOCKER_HOST``, once the engine has answered."""
    import docker  # noqa: PLC0415 - the SDK is slow to import: only a command that needs it
    import docker.errors  # noqa: PLC0415

    check_engine_socket(docker_host())
    try:
        # The API version is asked of the engine (GET /version): its answer is the
        # proof it is there, so no ping follows.
        client = docker.from_env(timeout=int(timeout), version="auto")
    except docker.errors.DockerException as error:
        raise DockerUnavailableError(
            f"no Docker engine is reachable ({error}); start Docker and try again"
        ) from None
    return client


# -- the light reader ----------------------------------------------------------------------


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
        connection = UnixConnection(self.path, self.timeout)
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
