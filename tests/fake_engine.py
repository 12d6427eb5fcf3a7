"""The one fake of the engine the CLI library is given: its port
(:class:`cloister_cli.container.engine.Engine`), whose one real implementation is the
docker SDK's ``DockerClient``; tests/cli/container/test_engine.py checks the fake has
every name of the port, and mypy that it has them with the port's signatures.

It keeps containers, networks and images by name, shaped like the SDK's objects: a
container's ``attrs`` is its inspect document, and its name, labels and status are read
from it, as the SDK's are. Listing answers as the engine does (``all`` and the label
filter), removing what is in use is refused as the engine refuses it.

Two records let tests check what the code did: ``log``, each change as the ``docker``
command that makes it (``rm NAME``, ``network create NAME SUBNET``, ``rmi TAG``), and
``calls``, each call with its arguments (:meth:`FakeEngine.called`).
"""

from __future__ import annotations

import io
import ipaddress
import os
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO, Any, Literal, overload

import docker
import docker.errors

from cloister_cli.container.engine import Engine

FIRST_FREE_PORT = 49153  # what the engine picks for a published port of 0 (the first)
AUTO_SUBNETS = 30  # a network made without IPAM config gets 172.30.0.0/16, then 172.31...


def new_id() -> str:
    return os.urandom(32).hex()


def label_filter(filters: Mapping[str, Any] | None) -> list[str]:
    """The ``label`` filter's ``key`` and ``key=value`` items (the only filter faked)."""
    unknown = sorted(set(filters or {}) - {"label"})
    if unknown:
        raise NotImplementedError(f"the fake engine filters by label only, not by {unknown!r}")
    wanted = (filters or {}).get("label", [])
    return [wanted] if isinstance(wanted, str) else list(wanted)


def has_labels(labels: Mapping[str, str], wanted: Sequence[str]) -> bool:
    """Whether *labels* hold each ``key`` (any value) and ``key=value`` of *wanted*."""
    for item in wanted:
        key, equals, value = item.partition("=")
        if key not in labels or (equals and labels[key] != value):
            return False
    return True


def inspect_document(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    status: str = "running",
    image: str = "cloister:latest",
    created: str = "",
    id: str | None = None,
    health: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """A container's inspect document as the engine writes it; *health* is its
    healthcheck's verdict (none: it has no healthcheck); *more* are further keys
    (``NetworkSettings``, ``HostConfig``)."""
    state: dict[str, Any] = {"Status": status, "Running": status == "running"}
    if health is not None:
        state["Health"] = {"Status": health}
    return {
        "Id": id or new_id(),
        "Name": f"/{name}",
        "Created": created,
        "Image": image,
        "State": state,
        "Config": {"Image": image, "Labels": dict(labels or {})},
        **more,
    }


def _bindings(ports: Mapping[str, Any], taken: set[int]) -> dict[str, list[dict[str, str]]]:
    """``containers.create(ports=...)`` as the engine publishes it: 0 or None picks a port."""
    published = {}
    for key, where in ports.items():
        host_ip, host_port = where if isinstance(where, tuple) else ("0.0.0.0", where)
        if not host_port:
            host_port = next(port for port in range(FIRST_FREE_PORT, 65536) if port not in taken)
        taken.add(int(host_port))
        published[key] = [{"HostIp": host_ip, "HostPort": str(host_port)}]
    return published


class FakeContainer:
    """A container: its inspect document, and what it does when it is started."""

    def __init__(
        self,
        attrs: dict[str, Any],
        engine: FakeEngine | None = None,
        *,
        logs: bytes = b"",
        start_error: str | None = None,
        exits: bool = False,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        self.attrs = attrs
        self.engine = engine
        self.logs_text = logs
        self.start_error = start_error  # the engine's refusal of its start
        self.exits = exits  # at once, once started
        self.files = dict(files or {})  # path → content: what ``get_archive`` finds

    @classmethod
    def of(
        cls, name: str, labels: Mapping[str, str] | None = None, **document: Any
    ) -> FakeContainer:
        """A container on no engine yet (:meth:`FakeEngine.add` puts it on one)."""
        return cls(inspect_document(name, labels, **document))

    def __repr__(self) -> str:
        return f"FakeContainer({self.name!r}, {self.status!r})"

    @property
    def id(self) -> str:
        return str(self.attrs["Id"])

    @property
    def short_id(self) -> str:
        return self.id[:12]

    @property
    def name(self) -> str:
        return str(self.attrs["Name"]).removeprefix("/")

    @property
    def labels(self) -> dict[str, str]:
        labels: dict[str, str] = self.attrs["Config"]["Labels"]
        return labels

    @property
    def status(self) -> str:
        return str(self.attrs["State"]["Status"])

    @status.setter
    def status(self, status: str) -> None:
        self.attrs["State"] = {"Status": status, "Running": status == "running"}

    def _engine(self) -> FakeEngine:
        if self.engine is None or self.engine.containers.by_name.get(self.name) is not self:
            raise docker.errors.NotFound(f"No such container: {self.name}")
        return self.engine

    def reload(self) -> None:
        self._engine()  # the document is the engine's own, always current

    @overload
    def logs(self, *, stream: Literal[True], **kwargs: Any) -> Iterator[bytes]: ...
    @overload
    def logs(self, *, stream: Literal[False] = False, **kwargs: Any) -> bytes: ...
    def logs(self, *, stream: bool = False, **kwargs: Any) -> bytes | Iterator[bytes]:
        return iter(self.logs_text.splitlines(keepends=True)) if stream else self.logs_text

    def get_archive(self, path: str) -> tuple[Iterator[bytes], dict[str, Any] | None]:
        """*path* of :attr:`files` as the engine sends it: a tar of that one file."""
        self._engine()
        if path not in self.files:
            raise docker.errors.NotFound(f"Could not find the file {path} in container {self.name}")
        data, name = self.files[path], PurePosixPath(path).name
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        return iter([archive.getvalue()]), {"name": name, "size": len(data)}

    def kill(self, signal: str) -> None:
        engine = self._engine()
        if self.status != "running":
            raise docker.errors.APIError("409", explanation=f"container {self.name} is not running")
        engine.log.append(f"kill -s {signal} {self.name}")
        if signal == "SIGKILL":  # the engine answers once it is not running
            self.status = "exited"

    def start(self) -> None:
        engine = self._engine()
        if self.start_error is not None:
            raise docker.errors.APIError("500", explanation=self.start_error)
        self.status = "exited" if self.exits else "running"
        engine.log.append(f"start {self.name}")

    def remove(self, force: bool = False, v: bool = False) -> None:
        assert force  # Cloister never waits for a container to stop before removing it
        engine = self._engine()
        del engine.containers.by_name[self.name]
        for network in engine.networks.by_name.values():  # it leaves them as it goes
            network.members.pop(self.id, None)
        engine.log.append(f"rm {self.name}")


class FakeNetwork:
    """A network: its inspect document and the containers on it (id: name)."""

    def __init__(self, attrs: dict[str, Any], engine: FakeEngine) -> None:
        self.attrs = attrs
        self.engine = engine
        self.members: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"FakeNetwork({self.name!r})"

    @property
    def id(self) -> str:
        return str(self.attrs["Id"])

    @property
    def name(self) -> str:
        return str(self.attrs["Name"])

    def _present(self) -> None:
        if self.engine.networks.by_name.get(self.name) is not self:
            raise docker.errors.NotFound(f"network {self.name} not found")

    def reload(self) -> None:
        self._present()
        self.attrs["Containers"] = {key: {"Name": name} for key, name in self.members.items()}

    def connect(self, container: str | FakeContainer, aliases: list[str] | None = None) -> None:
        self._present()
        if isinstance(container, str):  # its name or id, as the engine takes it
            container = self.engine.containers.find(container)
        if container.id in self.members:
            raise docker.errors.APIError(
                "403",
                explanation=f"endpoint with name {container.name} already exists in network"
                f" {self.name}",
            )
        self.members[container.id] = container.name
        alias = f" --alias {aliases[0]}" if aliases else ""
        self.engine.log.append(f"network connect {self.name} {container.name}{alias}")

    def disconnect(self, container: str | FakeContainer, force: bool = False) -> None:
        self._present()
        key = container if isinstance(container, str) else container.id
        if key not in self.members:
            raise docker.errors.APIError(
                "500", explanation=f"container {key} is not connected to network {self.name}"
            )
        self.engine.log.append(f"network disconnect {self.name} {self.members.pop(key)}")

    def remove(self) -> None:
        self._present()
        if self.members:
            raise docker.errors.APIError(
                "403",
                explanation=f"error while removing network: network {self.name} id {self.id}"
                f" has active endpoints ({', '.join(sorted(self.members.values()))})",
            )
        del self.engine.networks.by_name[self.name]
        self.engine.log.append(f"network rm {self.name}")


@dataclass
class FakeImage:
    id: str
    tags: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Build:
    """One ``api.build`` of a context sent as a tar, as the builder received it."""

    dockerfile: str
    files: dict[str, bytes]  # name → content (b"" for directories and links)
    modes: dict[str, int]
    args: dict[str, str]
    target: str | None
    tag: str | None
    labels: dict[str, str] | None
    nocache: bool
    pull: bool


class FakeContainers:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.by_name: dict[str, FakeContainer] = {}
        # What the next container made does: logs, fails to start, or exits at once.
        self.next_logs = b""
        self.next_start_error: str | None = None
        self.next_exits = False

    def find(self, key: str) -> FakeContainer:
        """The container named *key*, or whose id it is, as the engine finds one (no call
        recorded: a call that names a container makes the engine do this)."""
        for container in self.by_name.values():
            if key in (container.name, container.id):
                return container
        raise docker.errors.NotFound(f"No such container: {key}")

    def get(self, container_id: str) -> FakeContainer:
        self.engine.calls.append(("containers.get", {"container_id": container_id}))
        for container in self.by_name.values():
            if container_id in (container.name, container.id):
                return container
        raise docker.errors.NotFound(f"No such container: {container_id}")

    def list(
        self,
        all: bool = False,
        filters: dict[str, Any] | None = None,
        ignore_removed: bool = False,  # nothing is removed while the fake lists
    ) -> list[FakeContainer]:
        self.engine.calls.append(("containers.list", {"all": all, "filters": filters}))
        wanted = label_filter(filters)
        return [
            container
            for container in self.by_name.values()
            if (all or container.status == "running") and has_labels(container.labels, wanted)
        ]

    def create(self, image: str, **kwargs: Any) -> FakeContainer:
        self.engine.calls.append(("containers.create", {"image": image, **kwargs}))
        name = kwargs.get("name") or f"fake-{new_id()[:8]}"
        if name in self.by_name:
            raise docker.errors.APIError(
                "409", explanation=f'Conflict. The container name "/{name}" is already in use'
            )
        taken = {  # what running containers publish: a stopped one holds no port
            int(binding["HostPort"])
            for container in self.by_name.values()
            if container.status == "running"
            for bindings in (container.attrs.get("NetworkSettings") or {}).get("Ports", {}).values()
            for binding in bindings or []
        }
        bindings = _bindings(kwargs.get("ports") or {}, taken)
        made = self.engine.add(
            FakeContainer(
                inspect_document(
                    name,
                    kwargs.get("labels"),
                    status="created",
                    image=image,
                    NetworkSettings={"Ports": bindings, "Networks": {}},
                    HostConfig={"PortBindings": bindings},
                ),
                logs=self.next_logs,
                start_error=self.next_start_error,
                exits=self.next_exits,
            )
        )
        network = self.engine.networks.by_name.get(kwargs.get("network") or "")
        if network is not None:
            network.members[made.id] = made.name
        self.engine.log.append(f"create {name}")
        return made

    def run(self, image: str, **kwargs: Any) -> FakeContainer:
        """``create`` then ``start`` (what ``detach=True`` does)."""
        self.engine.calls.append(("containers.run", {"image": image, **kwargs}))
        made = self.create(image, **kwargs)
        made.start()
        return made


class FakeNetworks:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.by_name: dict[str, FakeNetwork] = {}
        self.refused: list[str] = []  # subnets another start takes meanwhile: they overlap
        self.made = 0  # networks given the engine's own subnet

    def get(self, network_id: str) -> FakeNetwork:
        self.engine.calls.append(("networks.get", {"network_id": network_id}))
        for network in self.by_name.values():
            if network_id in (network.name, network.id):
                network.reload()  # an inspect: what is on it now
                return network
        raise docker.errors.NotFound(f"network {network_id} not found")

    def list(
        self, names: list[str] | None = None, filters: dict[str, Any] | None = None
    ) -> list[FakeNetwork]:
        self.engine.calls.append(("networks.list", {"names": names, "filters": filters}))
        wanted = label_filter(filters)
        return [
            network
            for network in self.by_name.values()
            # the engine's name filter matches a part of the name too
            if (names is None or any(name in network.name for name in names))
            and has_labels(network.attrs.get("Labels") or {}, wanted)
        ]

    def create(self, name: str, **kwargs: Any) -> FakeNetwork:
        self.engine.calls.append(("networks.create", {"name": name, **kwargs}))
        if kwargs.get("check_duplicate") and name in self.by_name:
            raise docker.errors.APIError("409", explanation=f"network with name {name} exists")
        pools = (kwargs.get("ipam") or {}).get("Config") or []
        subnet = pools[0]["Subnet"] if pools else None
        if subnet in self.refused:
            raise docker.errors.APIError(
                "500", explanation="Pool overlaps with other one on this address space"
            )
        made = self.engine.add_network(
            name,
            subnet=subnet,
            labels=kwargs.get("labels"),
            Driver=kwargs.get("driver", "bridge"),
            Internal=kwargs.get("internal", False),
            EnableIPv6=kwargs.get("enable_ipv6", False),
            Options=dict(kwargs.get("options") or {}),
        )
        self.engine.log.append(f"network create {name} {made.attrs['IPAM']['Config'][0]['Subnet']}")
        return made


class FakeImages:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.by_id: dict[str, FakeImage] = {}

    def tags(self) -> set[str]:
        return {tag for image in self.by_id.values() for tag in image.tags}

    def _find(self, name: str) -> FakeImage:
        for image in self.by_id.values():
            if name in image.tags or name == image.id:
                return image
        raise docker.errors.ImageNotFound(f"No such image: {name}")

    def get(self, name: str) -> FakeImage:
        self.engine.calls.append(("images.get", {"name": name}))
        return self._find(name)

    def list(self, filters: dict[str, Any] | None = None) -> list[FakeImage]:
        self.engine.calls.append(("images.list", {"filters": filters}))
        wanted = label_filter(filters)
        return [image for image in self.by_id.values() if has_labels(image.labels, wanted)]

    def remove(self, image: str, force: bool = False) -> None:
        self.engine.calls.append(("images.remove", {"image": image, "force": force}))
        found = self._find(image)
        if image in found.tags and len(found.tags) > 1:
            found.tags.remove(image)  # another tag keeps the image
        else:
            user = next(
                (
                    c
                    for c in self.engine.containers.by_name.values()
                    if c.attrs["Image"] == found.id
                ),
                None,
            )
            if user is not None and not force:
                raise docker.errors.APIError(
                    "409", explanation=f"{image} is used by container {user.name}"
                )
            del self.by_id[found.id]
        self.engine.log.append(f"rmi {image}")


class FakeApi:
    """The low-level ``APIClient`` calls the CLI makes (``client.api``)."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def create_endpoint_config(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def create_host_config(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def create_container(
        self, image: str, command: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """A container made, not started (its options recorded, as ``containers.create``'s)."""
        self.engine.calls.append(
            ("api.create_container", {"image": image, "command": command, **kwargs})
        )
        made = self.engine.add(
            FakeContainer(
                inspect_document(
                    kwargs.get("name") or f"fake-{new_id()[:8]}",
                    kwargs.get("labels"),
                    status="created",
                    image=image,
                )
            )
        )
        self.engine.log.append(f"create {made.name}")
        return {"Id": made.id, "Warnings": []}

    def remove_container(self, container: str, force: bool = False) -> None:
        self.engine.calls.append(("api.remove_container", {"container": container, "force": force}))
        self.engine.containers.find(container).remove(force=force)

    def exec_create(self, container: str, cmd: list[str], **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError(f"the fake engine runs no command ({cmd!r} in {container!r})")

    def exec_start(self, exec_id: str, *, stream: Literal[True]) -> Iterator[bytes]:
        raise NotImplementedError(f"the fake engine runs no command (exec {exec_id!r})")

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        raise NotImplementedError(f"the fake engine runs no command (exec {exec_id!r})")

    def networks(self) -> list[dict[str, Any]]:
        self.engine.calls.append(("api.networks", {}))
        return [dict(network.attrs) for network in self.engine.networks.by_name.values()]

    def containers(self, all: bool = False) -> list[dict[str, Any]]:
        self.engine.calls.append(("api.containers", {"all": all}))
        return [
            {
                "Id": container.id,
                "Names": [f"/{container.name}"],
                "Image": container.attrs["Config"]["Image"],
                "ImageID": container.attrs["Image"],
                "Labels": container.labels,
                "State": container.status,
            }
            for container in self.engine.containers.by_name.values()
            if all or container.status == "running"
        ]

    def build(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """A build of a context sent as a tar (``custom_context``): recorded in
        ``engine.builds``, and an image made of it, tagged and labelled as asked."""
        self.engine.calls.append(("api.build", kwargs))
        if not kwargs.get("custom_context"):
            raise NotImplementedError("the fake engine builds only a context sent as a tar")
        files, modes = _read_context(kwargs["fileobj"])
        number = len(self.engine.builds) + 1
        self.engine.builds.append(
            Build(
                files.pop(kwargs.get("dockerfile") or "Dockerfile").decode(),
                files,
                modes,
                dict(kwargs.get("buildargs") or {}),
                kwargs.get("target"),
                kwargs.get("tag"),
                kwargs.get("labels"),
                bool(kwargs.get("nocache")),
                bool(kwargs.get("pull")),
            )
        )
        image = self.engine.add_image(
            kwargs.get("tag"),
            id=f"sha256:built{number}",
            labels=kwargs.get("labels"),
            attrs={"Created": f"2025-01-0{number}T00:00:00Z", "Size": 1000 * number},
        )
        self.engine.log.append(f"build {kwargs.get('tag') or image.id}")
        yield {"stream": "Step 1/1 : FROM x\n"}
        yield {"aux": {"ID": image.id}}
        yield {"stream": f"Successfully built {image.id[7:19]}\n"}


def _read_context(fileobj: IO[bytes]) -> tuple[dict[str, bytes], dict[str, int]]:
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    with tarfile.open(fileobj=fileobj) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            files[member.name] = handle.read() if handle else b""
            modes[member.name] = member.mode
    return files, modes


class FakeEngine:
    """The engine port: ``containers``, ``networks``, ``images``, the low-level ``api``,
    ``info`` and ``ping``; :attr:`client` is it typed as the SDK's client, for the
    modules that still take that rather than the port."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.builds: list[Build] = []
        self.containers = FakeContainers(self)
        self.networks = FakeNetworks(self)
        self.images = FakeImages(self)
        self.api = FakeApi(self)
        self.info_document: dict[str, Any] = {"ID": "fake-engine", "Architecture": "x86_64"}

    @property
    def client(self) -> Engine:
        """The fake as the library's engine port (checked by mypy where it is passed)."""
        return self

    def info(self) -> dict[str, Any]:
        """What ``docker info`` tells of the engine (the keys the CLI reads)."""
        return dict(self.info_document)

    def ping(self) -> bool:
        return True

    def called(self, method: str) -> list[dict[str, Any]]:
        """The arguments of each call of *method* (``"containers.list"``), in order."""
        return [arguments for name, arguments in self.calls if name == method]

    def add(self, container: FakeContainer) -> FakeContainer:
        """*container* on this engine (as if it had been made and started before)."""
        container.engine = self
        self.containers.by_name[container.name] = container
        return container

    def add_container(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        *,
        image: str = "cloister:latest",
        **document: Any,
    ) -> FakeContainer:
        """A container made before the test: *document* as :func:`inspect_document`'s."""
        container = self.add(FakeContainer.of(name, labels, image=image, **document))
        known = next((each for each in self.images.by_id.values() if image in each.tags), None)
        if known is not None:
            container.attrs["Image"] = known.id
        return container

    def add_network(
        self,
        name: str,
        *,
        subnet: str | None = None,
        labels: Mapping[str, str] | None = None,
        **attrs: Any,
    ) -> FakeNetwork:
        """A network made before the test (no subnet: the engine's next one); *attrs* are
        inspect keys (``Internal``, ``Options``, ``Created``)."""
        if subnet is None:
            subnet = f"172.{AUTO_SUBNETS + self.networks.made}.0.0/16"
            self.networks.made += 1
        gateway = str(next(ipaddress.IPv4Network(subnet).hosts()))
        network = FakeNetwork(
            {
                "Name": name,
                "Id": new_id(),
                "Driver": "bridge",
                "Internal": False,
                "EnableIPv6": False,
                "Options": {},
                "Labels": dict(labels or {}),
                "IPAM": {"Config": [{"Subnet": subnet, "Gateway": gateway}]},
                "Containers": {},
                **attrs,
            },
            self,
        )
        self.networks.by_name[name] = network
        return network

    def add_image(
        self,
        tag: str | None = None,
        *,
        id: str | None = None,
        labels: Mapping[str, str] | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> FakeImage:
        """An image, *tag* moved to it from the image that had it."""
        image = FakeImage(id or f"sha256:{new_id()}", [], dict(labels or {}), attrs or {})
        if tag is not None:
            for other in self.images.by_id.values():
                if tag in other.tags:
                    other.tags.remove(tag)
            image.tags.append(tag)
        self.images.by_id[image.id] = image
        return image
