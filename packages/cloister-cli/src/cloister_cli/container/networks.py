"""A network per cloister: made at its start, removed at its stop.

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
second, which takes the next.

The cloister's own address on it is fixed: the subnet's last host address (the services
take the lowest free ones). Its token is bound to that address, so a container the engine
starts again (after a restart of the engine, or ``docker restart`` while the guardian
was down) comes back with the address its token names, rather than one a service held
meanwhile.

The engine does one network change at a time, so the work is laid out to wait on it as
little as possible: the services join while the cloister's container is made
(:func:`run_with_services`), and leave while it is removed (:func:`remove`).
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
    """The network of *cloister*, made on the first free subnet of the pool.

    One left by a start that was killed is taken as it is when it is the instance's own
    and holds nothing but the instance's services; any other network of that name
    refuses the start.
    """
    name = instance.cloister(cloister)
    # One list answer tells both whether it exists and which subnets are taken: it holds
    # each network's name, labels, options and IPAM config (no inspect per network).
    listed: list[dict[str, Any]] = client.api.networks()
    existing = next((attrs for attrs in listed if attrs.get("Name") == name), None)
    if existing is not None:
        if _owned(existing, instance, cloister):
            found: Network = client.networks.get(existing["Id"])
            found.reload()
            strangers = _strangers(found, instance)
            if strangers:
                # Labels are anyone's to set: what is on it decides (a container left on it
                # would be alone with the cloister, past the proxy).
                raise NetworkError(
                    f"network {name!r} has containers on it that are not the guardian's"
                    f" ({', '.join(strangers)}); remove them (`docker rm -f ...`) or the"
                    f" network (`docker network rm {name}`) and start again"
                )
            return found
        raise NetworkError(
            f"network {name!r} exists and is not cloister {cloister!r}'s own internal network;"
            f" remove it (`docker network rm {name}`) and start again"
        )
    tried: list[ipaddress.IPv4Network] = []
    while True:
        subnet = next(candidates(config, [*taken_subnets(listed), *tried]), None)
        if subnet is None:
            raise NetworkError(
                f"no /{config.network_prefix} of guardian.network_pool {config.network_pool!r}"
                " is free on this engine; stop cloisters (`cloister gc` removes networks whose"
                " cloister is gone), or set a larger guardian.network_pool"
            )
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


def _strangers(network: Network, instance: stack.Instance) -> list[str]:
    """What is on *network* besides the instance's services, by name."""
    services = {instance.service(service) for service, _ in stack.CLOISTER_SERVICES}
    endpoints = (network.attrs.get("Containers") or {}).values()
    return sorted(
        str(endpoint.get("Name")) for endpoint in endpoints if endpoint.get("Name") not in services
    )


def _connected(network: Network) -> set[str]:
    return {str(key) for key in (network.attrs.get("Containers") or {})}


def connect_services(client: Engine, instance: stack.Instance, network: Network) -> None:
    """Put the instance's proxy, hostexec gateway and credential gateway on *network*,
    each under its alias (those already on it stay)."""
    network.reload()
    present = _connected(network)
    for service, alias in stack.CLOISTER_SERVICES:
        try:
            container = client.containers.get(instance.service(service))
        except docker.errors.NotFound:
            raise NetworkError(
                f"the guardian's {service} ({instance.service(service)}) is not there;"
                " `cloister guardian start`"
            ) from None
        if container.id in present:
            continue
        try:
            network.connect(instance.service(service), aliases=[alias])
        except docker.errors.APIError as error:
            detail = str(error.explanation or error)
            if "already exists" not in detail:
                raise NetworkError(
                    f"cannot connect {container.name} to network {network.name!r}: {detail}"
                ) from None


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

    :meth:`start` makes it (as :func:`create`), :meth:`join_services` has the services
    join it once they run (as :func:`connect_services`; a failure removes the network
    again, unless a container other than the services is on it), :meth:`network` waits
    for both and raises what they raised. :meth:`discard` is a failed start's undo:
    it waits, then removes the network as :func:`remove_unused` does. Each thread is
    waited for by one of these two; nothing is left running.
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
            connect_services(self._client, self._instance, network)
        except BaseException:
            remove_unused(self._client, self._instance, self._cloister)
            raise
        return network

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
    """After ``compose up`` recreated the services: back on every cloister network."""
    for network in instance_networks(client, instance):
        with contextlib.suppress(docker.errors.NotFound):  # removed by a stop meanwhile
            connect_services(client, instance, network)


def remove(
    client: Engine,
    instance: stack.Instance,
    cloister: str,
    *,
    container: Container | None = None,
) -> bool:
    """Remove cloister *cloister*'s network, disconnecting what is still on it (the
    services, a forwarder), and *container* (the cloister's, on it) with it; whether there
    was a network."""
    network = find_own(client, instance, cloister)
    if network is None:
        if container is not None:
            container.remove(force=True)
        return False
    remove_network(network, container=container)
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


def remove_network(network: Network, *, container: Container | None = None) -> None:
    """Remove *network* once *container* is removed and the rest disconnected.

    The rest are disconnected on threads while *container* goes: the engine still makes
    one change at a time, but without a round trip between them (measured: about a tenth
    of a second less at a stop).
    """
    others = sorted(_connected(network) - {container.id if container is not None else ""})
    with ThreadPoolExecutor(
        max_workers=len(others) + 1, thread_name_prefix="cloister-leave"
    ) as pool:
        leaving = [pool.submit(_disconnect, network, container_id) for container_id in others]
        if container is not None:
            container.remove(force=True)
        for done in leaving:
            done.result()
    with contextlib.suppress(docker.errors.NotFound):
        network.remove()


def remove_left(network: Network) -> None:
    """Remove *network* once its cloister's container is gone (``stop`` on a pool): what
    is still on it now (the services, a forwarder) is disconnected first."""
    try:
        network.reload()
    except docker.errors.NotFound:
        return
    remove_network(network)


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
