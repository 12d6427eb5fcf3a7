"""``cloister port``: a cloister's port on the host's 127.0.0.1, and no route out.

A cloister is on its own network only (:mod:`cloister_cli.container.networks`), which is
internal: Docker publishes no port from it. A port is published through a
*forwarder*: a container of its own (:meth:`cloister_core.stack.Instance.forwarder`)
running :mod:`cloister_proxy.forwarder` in the proxy's image, attached to the
cloister's network and to its instance's ports network
(:attr:`~cloister_core.stack.Instance.ports_net`: a bridge that is not internal,
without IPv6 and without traffic between its containers), whose port Docker publishes
on the host's 127.0.0.1 only. The forwarder listens on its ports-network address alone
and joins each connection to the cloister's address on the cloister's network (taken
from the engine when the port is published, never a name the agent could answer for)
and that port.

So the cloister gains no route: it has no way onto the ports network (its network
gives it no gateway, and it holds no capability to add a route or forge a frame), and
the forwarder does not listen on the cloister's network. No other cloister is on that
network, and the forwarders of two cloisters cannot talk on the ports network. The
forwarder is hardened
like the guardian's services: read-only, every capability dropped, no-new-privileges,
the host user's uid, an init, small pid and memory limits, a bounded log.

No forwarder goes on the approval UI's port (:func:`hub_ports`): this instance's
``guardian.ui_port``, whether the guardian runs or not, nor the port any guardian's hub
on the engine publishes. A page there would be in the hub's origin (scheme, host and
port) and could read the browser's login to the hub from its storage. Nor does the hub
go where an agent's page was: a browser keeps what a page left in its origin (cached
answers, a service worker) for the hub to find later, so every host port a forward had
is remembered (:func:`remember`, ``<data>/guardian/agent-ports``) and ``guardian
start`` refuses a ``guardian.ui_port`` among them (:func:`served_agents`).

A compose devcontainer's service (:mod:`cloister_cli.container.services`) is on the cloister's
network too: ``--service SVC`` joins the forwarder to that service's address there (to
the cloister's, for a service in the cloister's network namespace), taken from the engine
as the cloister's is.

``cloister stop`` removes a cloister's forwarders (:func:`remove_all`), and so does
``cloister uninstall``. One whose cloister went without ``cloister stop`` is listed as
stale and replaced when that cloister's port is published again.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import LogConfig

from cloister_cli.container import cloisters, networks
from cloister_cli.container.engine import Container, Engine
from cloister_core import stack
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write, locked
from cloister_core.paths import CloisterPaths

HOST_ADDRESS = "127.0.0.1"
MODULE = "cloister_proxy.forwarder"
PORTS_OPTIONS = {"com.docker.network.bridge.enable_icc": "false"}
READY_TIMEOUT = 15.0
READY_MARKER = b"listening on"
MEMORY = "64m"
PIDS = 16
NANO_CPUS = 1_000_000_000
LOG = LogConfig(type=LogConfig.types.JSON, config={"max-size": "1m", "max-file": "1"})
_TAKEN = ("port is already allocated", "address already in use")
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"


class PortError(CloisterError):
    """A port cannot be published, listed or removed as asked."""


# -- PORT[:HOSTPORT] -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PortSpec:
    port: int  # in the cloister
    given: int | None = None  # HOSTPORT as given; 0: a free one, chosen by the engine

    @property
    def host_port(self) -> int:
        """Where a new forward goes: HOSTPORT, else PORT."""
        return self.port if self.given is None else self.given

    def accepts(self, host_port: int) -> bool:
        """Whether a forward already on *host_port* is what was asked for."""
        return self.given in (None, 0, host_port)


def _number(text: str, what: str, low: int) -> int:
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= 65535:
        raise PortError(f"{what} must be a number from {low} to 65535, not {text!r}")
    return int(text)


def parse_port(text: str) -> int:
    return _number(text, "PORT", 1)


def parse_spec(text: str) -> PortSpec:
    """``8000`` → 8000 on 8000; ``8000:3000`` → 8000 on 3000; ``8000:0`` → any free one."""
    port, separator, host_port = text.partition(":")
    return PortSpec(parse_port(port), _number(host_port, "HOSTPORT", 0) if separator else None)


# -- what a forwarder is ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ForwarderPlan:
    """Everything ``docker create`` gets for one forwarder (pure data, easy to inspect)."""

    instance: stack.Instance
    cloister: str
    cloister_id: str  # the cloister's container: a later one of that name is another
    address: str  # the cloister's address on its network
    spec: PortSpec
    gateway: str  # the ports network's: the forwarder listens on its address toward it
    image: str
    user: str
    service: str | None = (
        None  # a compose service's port (cloister_cli.container.services), not the cloister's
    )

    @property
    def container(self) -> str:
        return self.instance.forwarder(self.cloister, self.spec.port, self.service)

    @property
    def target(self) -> str:
        return f"{self.address}:{self.spec.port}"

    @property
    def labels(self) -> dict[str, str]:
        service = {stack.LABEL_FORWARD_SERVICE: self.service} if self.service else {}
        return {
            **self.instance.labels,
            stack.LABEL_FORWARD: self.cloister,
            stack.LABEL_FORWARD_PORT: str(self.spec.port),
            stack.LABEL_FORWARD_TARGET: self.target,
            stack.LABEL_FORWARD_CONTAINER: self.cloister_id,
            **service,
        }

    def create_kwargs(self) -> dict[str, Any]:
        listen = str(stack.FORWARDER_PORT)
        return {
            "image": self.image,
            "entrypoint": ["python3", "-m", MODULE],
            "command": ["--target", self.target, "--via", self.gateway, "--listen-port", listen],
            "name": self.container,
            "user": self.user,
            "labels": self.labels,
            # Created here; the cloister's network is connected before it starts (see publish).
            "network": self.instance.ports_net,
            "ports": {f"{listen}/tcp": (HOST_ADDRESS, self.spec.host_port or None)},
            "read_only": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"],
            "init": True,
            "mem_limit": MEMORY,
            "pids_limit": PIDS,
            "nano_cpus": NANO_CPUS,
            # A second network makes it a router by default: it forwards sockets, not packets.
            "sysctls": {"net.ipv4.ip_forward": "0"},
            "healthcheck": {"test": ["NONE"]},  # the image's own is the proxy's
            "log_config": LOG,
        }


def plan(
    instance: stack.Instance,
    cloister: Container,
    name: str,
    spec: PortSpec,
    *,
    gateway: str,
    image: str,
    service: Container | None = None,
) -> ForwarderPlan:
    """The forwarder of *spec* for the running container *cloister* of cloister *name*
    (for its compose *service*'s container, when given)."""
    address = networks.cloister_address(cloister.attrs, instance.cloister(name))
    service_name = None
    if service is not None:
        service_name = service.labels.get(stack.LABEL_SERVICE)
        mode = str((service.attrs.get("HostConfig") or {}).get("NetworkMode") or "")
        if not mode.startswith("container:"):  # else: in the cloister's own namespace
            address = networks.cloister_address(service.attrs, instance.cloister(name))
    if address is None:
        who = f"service {service_name!r} of cloister {name!r}" if service else f"cloister {name!r}"
        raise PortError(f"{who} has no address on its network {instance.cloister(name)!r}")
    return ForwarderPlan(
        instance=instance,
        cloister=name,
        cloister_id=str(cloister.id),
        address=address,
        spec=spec,
        gateway=gateway,
        image=image,
        user=f"{os.getuid()}:{os.getgid()}",
        service=service_name,
    )


# -- what is published -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Forward:
    """One published port, as ``port --list`` shows it."""

    cloister: str
    port: int
    host_port: int | None  # None: not published now (the forwarder does not run)
    status: str  # the forwarder's (running, exited, …), or stale: its cloister is gone
    container: str
    service: str | None = None  # the compose service whose port it is; None: the cloister's

    @property
    def host(self) -> str | None:
        return f"{HOST_ADDRESS}:{self.host_port}" if self.host_port is not None else None

    @property
    def url(self) -> str | None:
        """What a browser should open: ``localhost``, a host name of its own, so that no
        cookie another local app set for 127.0.0.1 goes to the agent's page (the
        approval UI sets none: its session is bound to its own origin)."""
        return f"http://localhost:{self.host_port}/" if self.host_port is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "cloister": self.cloister,
            "port": self.port,
            "host": self.host,
            "host_port": self.host_port,
            "url": self.url,
            "status": self.status,
            "container": self.container,
            "service": self.service,
        }


def _host_port(container: Container) -> int | None:
    bindings = (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(
        f"{stack.FORWARDER_PORT}/tcp"
    ) or []
    for binding in bindings:
        if binding.get("HostIp") == HOST_ADDRESS and str(binding.get("HostPort", "")).isdigit():
            return int(binding["HostPort"])
    return None


def _is_current(forwarder: Container, cloister: Container | None) -> bool:
    """Whether *forwarder* still serves *cloister* (the container of its name now)."""
    return (
        cloister is not None and forwarder.labels.get(stack.LABEL_FORWARD_CONTAINER) == cloister.id
    )


def _forward(forwarder: Container, cloister: Container | None) -> Forward:
    labels = forwarder.labels
    running = forwarder.status == "running"
    return Forward(
        cloister=labels.get(stack.LABEL_FORWARD, ""),
        port=int(labels.get(stack.LABEL_FORWARD_PORT, "0")),
        host_port=_host_port(forwarder) if running else None,
        status=forwarder.status if _is_current(forwarder, cloister) else "stale",
        container=forwarder.name or forwarder.short_id,
        service=labels.get(stack.LABEL_FORWARD_SERVICE),
    )


def _forwarders(client: Engine, instance: stack.Instance, name: str | None) -> list[Container]:
    label = stack.LABEL_FORWARD if name is None else f"{stack.LABEL_FORWARD}={name}"
    return list(client.containers.list(all=True, filters={"label": [instance.label_filter, label]}))


def forwards(client: Engine, instance: stack.Instance, name: str | None = None) -> list[Forward]:
    """The ports published for cloister *name* (None: for every cloister of *instance*)."""
    found: dict[str, Container | None] = {}
    listed = []
    for forwarder in _forwarders(client, instance, name):
        owner = forwarder.labels.get(stack.LABEL_FORWARD, "")
        if owner not in found:
            found[owner] = cloisters.find(client, instance, owner)
        listed.append(_forward(forwarder, found[owner]))
    return sorted(
        listed, key=lambda forward: (forward.cloister, forward.service or "", forward.port)
    )


# -- the approval UI's port --------------------------------------------------------------------


def _bound_ports(attrs: dict[str, Any], key: str) -> set[int]:
    """The host ports bound to *key* (``9999/tcp``): published now, or configured (a
    stopped container publishes nothing but gets its port back when it starts)."""
    published = (attrs.get("NetworkSettings") or {}).get("Ports") or {}
    configured = (attrs.get("HostConfig") or {}).get("PortBindings") or {}
    bindings = [*(published.get(key) or []), *(configured.get(key) or [])]
    return {
        int(binding["HostPort"])
        for binding in bindings
        if str(binding.get("HostPort", "")).isdigit()
    }


def hub_ports(client: Engine, instance: stack.Instance, ui_port: int) -> dict[int, str]:
    """The host ports that are an approval UI's, and whose: *ui_port* (this instance's
    ``guardian.ui_port``) and the port of every guardian's hub container on the engine,
    this instance's or another's, running or stopped."""
    found: dict[int, str] = {ui_port: "guardian.ui_port in this machine's config"}
    hubs = client.containers.list(
        all=True, filters={"label": [stack.LABEL_GUARDIAN, f"{COMPOSE_SERVICE_LABEL}=approval"]}
    )
    for container in hubs:
        labels = container.labels
        if labels.get(stack.LABEL_INSTANCE) == instance.id:
            who = f"{container.name}, this guardian's approval hub"
        elif stack.LABEL_INSTANCE not in labels:
            who = f"{container.name}, the approval hub of an older Cloister's guardian"
        else:
            from cloister_cli.stack.guardian import whose  # noqa: PLC0415 - it imports this module

            who = f"{container.name}, the approval hub of {whose(labels)} guardian"
        for port in _bound_ports(container.attrs, f"{stack.APPROVAL_PORT}/tcp"):
            found.setdefault(port, who)
    return found


def forwarder_on(client: Engine, host_port: int) -> Container | None:
    """The running forwarder, of any instance, that publishes *host_port*, if one does."""
    running = client.containers.list(filters={"label": [stack.LABEL_FORWARD]})
    return next((each for each in running if _host_port(each) == host_port), None)


def _refuse_hub_port(
    hubs: dict[int, str], name: str, spec: PortSpec, host_port: int | None
) -> None:
    if host_port not in hubs:
        return
    raise PortError(
        f"port {host_port} on {HOST_ADDRESS} is the approval UI's ({hubs[host_port]}): a page"
        " there would be in the hub's origin and could read its login; choose another:"
        f" `cloister port {name} {spec.port}:HOSTPORT` (`{spec.port}:0` picks a free one)"
    )


# -- publishing --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    forward: Forward
    created: bool  # False: it was published already


def is_ports_network(attrs: dict[str, Any]) -> bool:
    """The ports network as Cloister makes it (see :attr:`stack.Instance.ports_net`)."""
    options = attrs.get("Options") or {}
    return (
        attrs.get("Driver") == "bridge"
        and not attrs.get("Internal")
        and not attrs.get("EnableIPv6")
        and options.get("com.docker.network.bridge.enable_icc") == "false"
    )


def _gateway(attrs: dict[str, Any]) -> str | None:
    for pool in (attrs.get("IPAM") or {}).get("Config") or []:
        with contextlib.suppress(ValueError):
            return str(ipaddress.IPv4Address(pool.get("Gateway") or ""))
    return None


def ensure_network(client: Engine, instance: stack.Instance) -> str:
    """Create the instance's ports network if it is missing; its gateway's address."""
    name = instance.ports_net
    try:
        network = client.networks.get(name)
    except docker.errors.NotFound:
        try:
            client.networks.create(
                name,
                driver="bridge",
                internal=False,
                options=PORTS_OPTIONS,
                enable_ipv6=False,
                check_duplicate=True,
                labels={stack.LABEL_GUARDIAN: "true", **instance.labels},
            )
        except docker.errors.APIError as error:
            problem = str(error.explanation or error)  # a concurrent `cloister port` made it?
        else:
            problem = "it is gone again"
        try:
            network = client.networks.get(name)
        except docker.errors.NotFound:
            raise PortError(f"cannot create network {name!r}: {problem}") from None
    gateway = _gateway(network.attrs)
    if not is_ports_network(network.attrs) or gateway is None:
        raise PortError(
            f"network {name!r} exists but is not Cloister's (a bridge, not internal,"
            " without IPv6 or traffic between its containers, with an IPv4 gateway); remove it"
            f" (`docker network rm {name}`) and try again"
        )
    return gateway


def _existing(
    client: Engine,
    instance: stack.Instance,
    name: str,
    port: int,
    service: str | None = None,
) -> Container | None:
    try:
        container: Container = client.containers.get(instance.forwarder(name, port, service))
    except docker.errors.NotFound:
        return None
    labels = container.labels
    if (
        labels.get(stack.LABEL_FORWARD) != name
        or labels.get(stack.LABEL_INSTANCE) != instance.id
        or labels.get(stack.LABEL_FORWARD_SERVICE) != service
    ):
        raise PortError(f"container {container.name} exists and is not this port's forwarder")
    return container


def _remove_quietly(container: Container) -> None:
    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True)


def _taken(client: Engine, instance: stack.Instance, name: str, spec: PortSpec) -> PortError:
    holder = next(
        (each for each in forwards(client, instance) if each.host_port == spec.host_port),
        None,
    )
    who = (
        f"port {holder.port} of cloister {holder.cloister}"
        if holder is not None
        else "another program"
    )
    return PortError(
        f"port {spec.host_port} on {HOST_ADDRESS} is taken by {who}; choose another:"
        f" `cloister port {name} {spec.port}:HOSTPORT` (`{spec.port}:0` picks a free one)"
    )


def _wait_ready(container: Container, image: str) -> None:
    """Until the forwarder says it listens; a clear error if it exits instead."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        container.reload()
        logs: bytes = container.logs(stdout=True, stderr=True, tail=20)
        if READY_MARKER in logs:
            return
        if container.status in ("exited", "dead"):
            text = logs.decode(errors="replace").strip()
            if "No module named" in text and MODULE in text:
                raise PortError(
                    f"the image {image} was built before `cloister port` existed;"
                    " `cloister guardian start --build` rebuilds it"
                )
            raise PortError(f"the forwarder {container.name} exited: {text}")
        if time.monotonic() > deadline:
            raise PortError(
                f"the forwarder {container.name} did not start within {READY_TIMEOUT:g}s;"
                f" `docker logs {container.name}` says why"
            )
        time.sleep(0.05)


def publish(
    client: Engine,
    instance: stack.Instance,
    name: str,
    spec: PortSpec,
    *,
    image: str,
    ui_port: int,
    service: str | None = None,
) -> Published:
    """Publish port *spec.port* of the running cloister *name* (of its compose service
    *service*, when given) on the host's 127.0.0.1.

    Publishing a port again answers with the forward there is, unless another HOSTPORT
    was given (0 is any); then it is an error. An approval UI's port (*ui_port*, this
    instance's ``guardian.ui_port``, or any hub's on the engine) is refused.
    """
    cloister = cloisters.running(client, instance, name, error=PortError)
    beside = _running_service(client, instance, name, service) if service is not None else None
    for forwarder in _forwarders(client, instance, name):
        if not _is_current(forwarder, cloister):  # left by an earlier cloister of this name
            _remove_quietly(forwarder)
    current = _existing(client, instance, name, spec.port, service)
    if current is not None:
        existing = _forward(current, cloister)
        if existing.status != "running" or existing.host_port is None:
            _remove_quietly(current)  # exited (the engine restarted, say): made anew
        elif spec.accepts(existing.host_port):
            return Published(existing, created=False)
        else:
            raise PortError(
                f"port {spec.port} of cloister {name!r} is already published on {existing.host};"
                f" `cloister port {name} {spec.port} --remove` first"
            )
    hubs = hub_ports(client, instance, ui_port)
    _refuse_hub_port(hubs, name, spec, spec.host_port)
    forwarder_plan = plan(
        instance,
        cloister,
        name,
        spec,
        gateway=ensure_network(client, instance),
        image=image,
        service=beside,
    )
    try:
        container: Container = client.containers.create(**forwarder_plan.create_kwargs())
    except docker.errors.ImageNotFound:
        raise PortError(
            f"the image {image} is not on this machine; `cloister guardian start` builds it"
        ) from None
    except docker.errors.APIError as error:  # a concurrent `cloister port` of this port?
        raise PortError(
            f"cannot create {forwarder_plan.container}: {error.explanation or error}"
        ) from None
    try:
        client.networks.get(instance.cloister(name)).connect(forwarder_plan.container)
        container.start()
        _wait_ready(container, image)
        # HOSTPORT 0: the engine may have chosen the port of a hub that is stopped.
        _refuse_hub_port(hubs, name, spec, _host_port(container))
    except docker.errors.APIError as error:
        _remove_quietly(container)
        detail = str(error.explanation or error)
        if any(marker in detail for marker in _TAKEN):
            raise _taken(client, instance, name, spec) from None
        raise PortError(f"cannot start {forwarder_plan.container}: {detail}") from None
    except BaseException:
        _remove_quietly(container)
        raise
    return Published(_forward(container, cloister), created=True)


# -- the host ports agents' pages had ---------------------------------------------------------


def _agent_ports_file(paths: CloisterPaths) -> Path:
    return paths.guardian_dir / "agent-ports"


def served_agents(paths: CloisterPaths) -> frozenset[int]:
    """Every host port a forward of this instance has had (one number per line)."""
    try:
        text = _agent_ports_file(paths).read_text(encoding="ascii")
    except FileNotFoundError:
        return frozenset()
    return frozenset(int(line) for line in text.split() if line.isdigit())


def remember(paths: CloisterPaths, host_port: int) -> None:
    """Note that an agent's page was served on *host_port* (kept for good: what it left
    in a browser has no end the CLI could know)."""
    record = _agent_ports_file(paths)
    with locked(record):
        known = served_agents(paths)
        if host_port not in known:
            lines = "".join(f"{port}\n" for port in sorted(known | {host_port}))
            atomic_write(record, lines, mode=0o644)


# -- removing ----------------------------------------------------------------------------------


def _running_service(
    client: Engine, instance: stack.Instance, name: str, service: str
) -> Container:
    from cloister_cli.container import services  # noqa: PLC0415 - only for a service's port

    container = services.find_one(client, instance, name, service)
    if container is None or container.status != "running":
        state = "runs no" if container is None else f"has a {container.status}"
        raise PortError(
            f"cloister {name!r} {state} compose service {service!r} (`cloister logs {name}"
            f" --service {service}` shows what it said)"
        )
    return container


def remove(
    client: Engine,
    instance: stack.Instance,
    name: str,
    port: int,
    service: str | None = None,
) -> Forward:
    """Stop publishing port *port* of cloister *name* (of its compose *service*, when
    given); what was published."""
    for forwarder in _forwarders(client, instance, name):
        labels = forwarder.labels
        if (
            labels.get(stack.LABEL_FORWARD_PORT) == str(port)
            and labels.get(stack.LABEL_FORWARD_SERVICE) == service
        ):
            forward = _forward(forwarder, cloisters.find(client, instance, name))
            _remove_quietly(forwarder)
            return forward
    whose = f"cloister {name!r}" if service is None else f"service {service!r} of cloister {name!r}"
    raise PortError(f"{whose} publishes no port {port} (`cloister port {name} --list`)")


def remove_all(client: Engine, instance: stack.Instance, name: str | None) -> list[str]:
    """Remove the forwarders of cloister *name* (None: every one); their names.

    Never raises for one that cannot be removed: ``cloister stop`` must go on. What
    stays is listed as stale, and replaced when that port is published again.
    """
    removed = []
    for forwarder in _forwarders(client, instance, name):
        with contextlib.suppress(docker.errors.APIError):  # NotFound too
            forwarder.remove(force=True)
            removed.append(forwarder.name or forwarder.short_id)
    return removed


def remove_stale(client: Engine, instance: stack.Instance) -> list[str]:
    """Remove the forwarders whose cloister is gone (or is another container now); their
    names. For ``cloister gc``: the address they join may be another cloister's by now."""
    found: dict[str, Container | None] = {}
    removed = []
    for forwarder in _forwarders(client, instance, None):
        owner = forwarder.labels.get(stack.LABEL_FORWARD, "")
        if owner not in found:
            found[owner] = cloisters.find(client, instance, owner)
        if not _is_current(forwarder, found[owner]):
            with contextlib.suppress(docker.errors.APIError):
                forwarder.remove(force=True)
                removed.append(forwarder.name or forwarder.short_id)
    return removed
