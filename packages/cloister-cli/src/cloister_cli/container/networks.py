"""A network per cloister: made at its first start, kept from one session to the next.

A cloister is alone on an internal network of its own, named like its container
(``cloister-<id>-<name>``), created ``internal`` with
``com.docker.network.bridge.inhibit_ipv4`` and without IPv6: checked on this engine, a
plain internal network still lets a container reach every host service bound to
0.0.0.0, through its gateway or the host's own addresses; with the option the host is
unreachable. Its instance's proxy, hostexec gateway and credential gateway are
connected to it under their fixed aliases (:data:`cloister_core.stack.CLOISTER_SERVICES`),
so nothing else, another cloister least of all, is on it: cloisters neither resolve nor
reach each other.

Its subnet is explicit: the first ``/guardian.network_prefix`` of
``guardian.network_pool`` that overlaps no network on the engine (another instance's
included). Two starts at once may pick the same one; the engine then refuses the
second, which takes the next. When none is free, a start takes back (removes) the
instance's kept networks of cloisters that are not running, oldest first.

The cloister's own address on it is fixed: the subnet's last host address (the services
take the lowest free ones). Its token is bound to that address, so a container the engine
starts again (after a restart of the engine, or ``docker restart`` while the guardian
was down) comes back with the address its token names, rather than one a service held
meanwhile.

A stop leaves the network, with the services on it, and the next start of that cloister
takes it (:func:`create`; one inspect, nothing made nor joined): the network's creation
and the services' joins are about 0.2 s of the engine's time that a start waits for, and
their removal slowed the stop. Keeping it is safe: it holds nothing but the services,
which are on it while the cloister runs too, and they refuse the address it had (its
token goes at its stop; the next cloister there gets a new one); no other cloister can
join it or route to it (each is on its own internal network, and the proxy and the
credential gateway never dial the pool). A start takes it only as Cloister made it: the
instance's labels, internal with ``inhibit_ipv4`` and no IPv6, nothing but the services
on it (anything else refuses the start), a subnet of the current pool and prefix (else
it is made anew). ``cloister gc`` removes those of cloisters that no longer exist,
``cloister uninstall`` all.

The engine does one network change at a time, so the work is laid out to wait on it as
little as possible: the services join while the cloister's container is made
(:func:`run_with_services`) or, at a start, while the rest of it runs (:class:`Ahead`).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

import docker
import docker.errors
from docker.types import IPAMConfig, IPAMPool

from cloister_cli.container.engine import Container, Engine, Network
from cloister_core import stack
from cloister_core.config.models import GuardianConfig
from cloister_core.errors import CloisterError

_T = TypeVar("_T")

INHIBIT_IPV4 = {"com.docker.network.bridge.inhibit_ipv4": "true"}
_OVERLAP = ("overlaps", "overlap")


class NetworkError(CloisterError):
    """A cloister's network cannot be made, joined or removed."""


def is_guarded(attrs: dict[str, Any]) -> bool:
    """A cloister's network as Cloister makes it: internal, inhibit_ipv4, no IPv6.

    An IPv6 gateway would be a route to the host that inhibit_ipv4 does not close.
    """
    options = attrs.get("Options") or {}
    return (
        attrs.get("Internal") is True
        and options.get("com.docker.network.bridge.inhibit_ipv4") == "true"
        and not attrs.get("EnableIPv6")
    )


def subnets(attrs: dict[str, Any]) -> list[ipaddress.IPv4Network]:
    """The IPv4 subnets of a network, as the engine describes it."""
    found = []
    for pool in (attrs.get("IPAM") or {}).get("Config") or []:
        with contextlib.suppress(ValueError, TypeError):
            network = ipaddress.ip_network(pool.get("Subnet") or "", strict=False)
            if isinstance(network, ipaddress.IPv4Network):
                found.append(network)
    return found


def cloister_address_on(network: Network) -> str:
    """The address the cloister has on its *network*: the subnet's last host address."""
    found = subnets(network.attrs)
    if not found:
        raise NetworkError(f"network {network.name!r} has no IPv4 subnet")
    return str(found[0].broadcast_address - 1)


def endpoint_config(client: Engine, network: Network) -> dict[str, Any]:
    """``networking_config`` for the cloister's container: its fixed address on *network*."""
    config = client.api.create_endpoint_config(ipv4_address=cloister_address_on(network))
    return {str(network.name): config}


def taken_subnets(listed: list[dict[str, Any]]) -> list[ipaddress.IPv4Network]:
    """Every IPv4 subnet of every network in *listed* (the engine's list answer)."""
    return [subnet for attrs in listed for subnet in subnets(attrs)]


def candidates(
    config: GuardianConfig, taken: Iterable[ipaddress.IPv4Network]
) -> Iterator[ipaddress.IPv4Network]:
    """The subnets of the pool that overlap none of *taken*, lowest first."""
    pool = ipaddress.IPv4Network(config.network_pool)
    used = sorted(
        (network for network in taken if network.overlaps(pool)),
        key=lambda network: int(network.network_address),
    )
    for subnet in pool.subnets(new_prefix=config.network_prefix):
        if not any(subnet.overlaps(network) for network in used):
            yield subnet


def _find(client: Engine, name: str) -> Network | None:
    # By name exactly: networks.get() also matches an id prefix and a name's prefix.
    for network in client.networks.list(names=[name]):
        if network.name == name:
            network.reload()
            return network
    return None


def _owned(attrs: dict[str, Any], instance: stack.Instance, cloister: str) -> bool:
    labels = attrs.get("Labels") or {}
    return (
        labels.get(stack.LABEL_INSTANCE) == instance.id
        and labels.get(stack.LABEL_OWNER) == str(instance.uid)
        and labels.get(stack.LABEL_CLOISTER) == cloister
        and is_guarded(attrs)
    )


def create(
    client: Engine, instance: stack.Instance, cloister: str, config: GuardianConfig
) -> Network:
    """The network of *cloister*: the one its last session left (or a killed start), or
    one made on the first free subnet of the pool.

    A network of that name is taken as it is when it is the instance's own, guarded, holds
    nothing but the instance's services and has a subnet of the pool; made anew when only
    its subnet is not; any other refuses the start.
    """
    name = instance.cloister(cloister)
    # One list answer tells both whether it exists and which subnets are taken: it holds
    # each network's name, labels, options and IPAM config (no inspect per network).
    listed: list[dict[str, Any]] = client.api.networks()
    existing = next((attrs for attrs in listed if attrs.get("Name") == name), None)
    if existing is not None:
        kept = _take(client, instance, cloister, existing, config)
        if kept is not None:
            return kept
        listed = [attrs for attrs in listed if attrs.get("Id") != existing.get("Id")]
    tried: list[ipaddress.IPv4Network] = []
    while True:
        subnet = next(candidates(config, [*taken_subnets(listed), *tried]), None)
        if subnet is None:
            if not _take_back(client, instance, listed, config):
                raise NetworkError(
                    f"no /{config.network_prefix} of guardian.network_pool"
                    f" {config.network_pool!r} is free on this engine; stop cloisters"
                    " (`cloister gc` removes networks whose cloister is gone), or set a"
                    " larger guardian.network_pool"
                )
            listed = client.api.networks()
            continue
        try:
            return client.networks.create(
                name,
                driver="bridge",
                internal=True,
                options=INHIBIT_IPV4,
                enable_ipv6=False,
                check_duplicate=True,
                ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet))]),
                labels={**instance.labels, stack.LABEL_CLOISTER: cloister},
            )
        except docker.errors.APIError as error:
            detail = str(error.explanation or error)
            if not any(word in detail.lower() for word in _OVERLAP):
                raise NetworkError(f"cannot create network {name!r}: {detail}") from None
            tried.append(subnet)  # another start took it meanwhile: the next one
            listed = client.api.networks()


def _take(
    client: Engine,
    instance: stack.Instance,
    cloister: str,
    existing: dict[str, Any],
    config: GuardianConfig,
) -> Network | None:
    """The network *existing* (the engine's list entry) when it is as :func:`create`
    makes it; None once removed because its subnet is not of the pool any more."""
    name = str(existing.get("Name"))
    if not _owned(existing, instance, cloister):
        raise NetworkError(
            f"network {name!r} exists and is not cloister {cloister!r}'s own internal network;"
            f" remove it (`docker network rm {name}`) and start again"
        )
    found: Network = client.networks.get(existing["Id"])  # its inspect: what is on it
    strangers = _strangers(found, instance)
    if strangers:
        # Labels are anyone's to set: what is on it decides (a container left on it
        # would be alone with the cloister, past the proxy).
        raise NetworkError(
            f"network {name!r} has containers on it that are not the guardian's"
            f" ({', '.join(strangers)}); remove them (`docker rm -f ...`) or the"
            f" network (`docker network rm {name}`) and start again"
        )
    if in_pool(found.attrs, config):
        return found
    remove_network(found)  # guardian.network_pool or _prefix changed since it was made
    return None


def in_pool(attrs: dict[str, Any], config: GuardianConfig) -> bool:
    """Whether a network has one subnet, a ``/network_prefix`` of the ``network_pool``."""
    found = subnets(attrs)
    pool = ipaddress.IPv4Network(config.network_pool)
    return (
        len(found) == 1 and found[0].prefixlen == config.network_prefix and found[0].subnet_of(pool)
    )


def _take_back(
    client: Engine, instance: stack.Instance, listed: list[dict[str, Any]], config: GuardianConfig
) -> bool:
    """Remove the oldest kept network of the instance's cloisters that are not running
    (nothing but the services on it) whose subnet is of the pool; whether one went.

    A start of that cloister taking it at this very moment fails (its container finds no
    network) and says so: only a full pool comes to this.
    """
    kept = sorted(
        (
            attrs
            for attrs in listed
            if _owned(attrs, instance, (attrs.get("Labels") or {}).get(stack.LABEL_CLOISTER, ""))
            and any(
                subnet.subnet_of(ipaddress.IPv4Network(config.network_pool))
                for subnet in subnets(attrs)
            )
        ),
        key=lambda attrs: str(attrs.get("Created") or ""),
    )
    for attrs in kept:
        try:
            network = client.networks.get(attrs["Id"])
        except docker.errors.NotFound:
            continue
        if _strangers(network, instance):
            continue  # its cloister runs there
        try:
            remove_network(network)
        except docker.errors.APIError:
            continue  # a container joined it meanwhile
        return True
    return False


def _strangers(network: Network, instance: stack.Instance) -> list[str]:
    """What is on *network* besides the instance's services, by name."""
    services = {instance.service(service) for service, _ in stack.CLOISTER_SERVICES}
    endpoints = (network.attrs.get("Containers") or {}).values()
    return sorted(
        str(endpoint.get("Name")) for endpoint in endpoints if endpoint.get("Name") not in services
    )


def _connected(network: Network) -> set[str]:
    return {str(key) for key in (network.attrs.get("Containers") or {})}


def connect_services(
    client: Engine, instance: stack.Instance, network: Network, *, fresh: bool = False
) -> None:
    """Put the instance's proxy, hostexec gateway and credential gateway on *network*,
    each under its alias; those on it already stay (on a network kept from the last
    session, all of them: nothing is joined). *fresh*: its ``attrs`` were just read."""
    if not fresh:
        network.reload()
    present = {
        str(endpoint.get("Name")) for endpoint in (network.attrs.get("Containers") or {}).values()
    }
    for service, alias in stack.CLOISTER_SERVICES:
        if instance.service(service) in present:
            continue
        try:
            network.connect(instance.service(service), aliases=[alias])
        except docker.errors.NotFound:
            if _exists(client, instance.service(service)):
                raise  # the network went
            raise NetworkError(
                f"the guardian's {service} ({instance.service(service)}) is not there;"
                " `cloister guardian start`"
            ) from None
        except docker.errors.APIError as error:
            detail = str(error.explanation or error)
            if "already exists" not in detail:
                raise NetworkError(
                    f"cannot connect {instance.service(service)} to network"
                    f" {network.name!r}: {detail}"
                ) from None


def _exists(client: Engine, container: str) -> bool:
    try:
        client.containers.get(container)
    except docker.errors.NotFound:
        return False
    return True


def run_with_services(
    client: Engine,
    instance: stack.Instance,
    network: Network,
    run: Callable[[], Container],
) -> Container:
    """*run* the cloister's container on *network* while the services join it (on a
    thread: the engine makes the container in the meantime); the container once both are
    done.

    When the services cannot join, the container is removed and the error raised; when
    *run* fails, its error is raised once the joining is over (the caller removes the
    network, with whatever is on it). Nothing in the container uses the services before
    its start returns: its token is written after this.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cloister-join") as pool:
        joining = pool.submit(connect_services, client, instance, network)
        container = run()  # on an error, leaving the block waits for the joining first
        try:
            joining.result()
        except BaseException:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
            raise
    return container


class Ahead:
    """A cloister's network made, and its instance's services joined, on a thread while
    the start does its other work, so that its container is the only change the engine
    makes then (measured: the network's creation and the three joins are about 0.2 s of
    the engine's time, and slow the container's start when they overlap it).

    :meth:`start` makes it, or takes the one kept from the cloister's last session (as
    :func:`create`), :meth:`join_services` has the services join it once they run (as
    :func:`connect_services`: on a kept network, they are there already; a failure
    removes the network again, unless a container other than the services is on it),
    :meth:`network` waits for both and raises what they raised. :meth:`discard` is a
    failed start's undo: it waits, then removes the network as :func:`remove_unused`
    does. Each thread is waited for by one of these two; nothing is left running.
    """

    def __init__(
        self,
        client: Engine,
        instance: stack.Instance,
        cloister: str,
        made: Future[Network],
    ) -> None:
        self._client = client
        self._instance = instance
        self._cloister = cloister
        self._made = made
        self._joined: Future[Network] | None = None

    @classmethod
    def start(
        cls,
        client: Engine,
        instance: stack.Instance,
        cloister: str,
        config: GuardianConfig,
    ) -> Ahead:
        return cls(
            client, instance, cloister, _on_thread(create, client, instance, cloister, config)
        )

    def join_services(self) -> None:
        """Have the services join once it is made (they must run by then)."""
        self._joined = _on_thread(self._join)

    def _join(self) -> Network:
        network = self._made.result()
        try:
            # Just made or inspected: a kept network's services are seen on it as they are.
            connect_services(self._client, self._instance, network, fresh=True)
        except BaseException:
            remove_unused(self._client, self._instance, self._cloister)
            raise
        return network

    @property
    def joins(self) -> bool:
        """Whether the services join it here (:meth:`join_services` was called)."""
        return self._joined is not None

    def network(self) -> Network:
        """The network, made and joined (or made, when nobody asked for the joining)."""
        return (self._joined or self._made).result()

    def discard(self) -> None:
        """A failed start's undo: once the threads are done, the network goes unless a
        container other than the services is on it (a concurrent start of the name)."""
        wait([future for future in (self._made, self._joined) if future is not None])
        if self._made.exception() is None:
            remove_unused(self._client, self._instance, self._cloister)


def _on_thread(work: Callable[..., _T], *args: Any) -> Future[_T]:
    """*work* on a thread of its own; the returned future is always waited for (see
    :class:`Ahead`), so shutting the pool down at once leaves nothing unwaited."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cloister-network")
    try:
        return pool.submit(work, *args)
    finally:
        pool.shutdown(wait=False)


def instance_networks(client: Engine, instance: stack.Instance) -> list[Network]:
    """The instance's cloister networks (not the stack's own)."""
    return list(
        client.networks.list(filters={"label": [instance.label_filter, stack.LABEL_CLOISTER]})
    )


def reconnect_all(client: Engine, instance: stack.Instance) -> None:
    """After ``compose up`` recreated the services: back on the network of every cloister
    that has a container. A kept network (its cloister stopped) stays without them; its
    next start has them join."""
    containers = client.containers.list(
        all=True, filters={"label": [instance.label_filter, stack.LABEL_CLOISTER]}
    )
    with_container = {container.name for container in containers}
    for network in instance_networks(client, instance):
        if network.name in with_container:
            with contextlib.suppress(docker.errors.NotFound):  # removed meanwhile
                connect_services(client, instance, network)


def remove(client: Engine, instance: stack.Instance, cloister: str) -> bool:
    """Remove cloister *cloister*'s network, disconnecting what is still on it (the
    services, a forwarder); whether there was a network."""
    network = find_own(client, instance, cloister)
    if network is None:
        return False
    remove_network(network)
    return True


def find_own(client: Engine, instance: stack.Instance, cloister: str) -> Network | None:
    """Cloister *cloister*'s network, if there is one and it is *instance*'s (another's
    is not ours to remove)."""
    network = _find(client, instance.cloister(cloister))
    if (
        network is None
        or (network.attrs.get("Labels") or {}).get(stack.LABEL_INSTANCE) != instance.id
    ):
        return None
    return network


def remove_unused(client: Engine, instance: stack.Instance, cloister: str) -> None:
    """After a start failed: remove the network unless a container other than the
    services is on it (a concurrent start of the same name whose cloister runs there)."""
    network = _find(client, instance.cloister(cloister))
    if network is not None and not _strangers(network, instance):
        remove(client, instance, cloister)


def remove_network(network: Network) -> None:
    """Remove *network* (its ``attrs`` just read) once what is on it is disconnected.

    They are disconnected on threads: the engine still makes one change at a time, but
    without a round trip between them.
    """
    others = sorted(_connected(network))
    if others:
        with ThreadPoolExecutor(
            max_workers=len(others), thread_name_prefix="cloister-leave"
        ) as pool:
            for done in [pool.submit(_disconnect, network, each) for each in others]:
                done.result()
    with contextlib.suppress(docker.errors.NotFound):
        network.remove()


def _disconnect(network: Network, container_id: str) -> None:
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        network.disconnect(container_id, force=True)


def cloister_address(container_attrs: dict[str, Any], network: str) -> str | None:
    """A container's IPv4 address on *network*, from its inspect document."""
    networks = (container_attrs.get("NetworkSettings") or {}).get("Networks") or {}
    address = (networks.get(network) or {}).get("IPAddress")
    try:
        return str(ipaddress.IPv4Address(address or ""))
    except ValueError:
        return None
