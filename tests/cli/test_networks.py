"""A cloister's own network against a fake engine: what is made, joined and removed.

The real engine's answers (isolation, the refusal of an overlapping subnet) are the
acceptance tests' (test_acceptance_apart.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import docker.errors
import pytest

from cloister_cli import networks
from cloister_core import stack
from cloister_core.config.models import GuardianConfig
from tests.cli.engine_support import INSTANCE

GUARDED = {"Internal": True, "Options": dict(networks.INHIBIT_IPV4), "EnableIPv6": False}


@dataclass
class FakeContainer:
    id: str
    name: str
    engine: FakeEngine

    def remove(self, force: bool = False) -> None:
        assert force
        self.engine.log.append(f"remove {self.name}")
        self.engine.containers_by_name.pop(self.name)
        for network in self.engine.networks_by_name.values():  # it leaves them as it goes
            network.members.pop(self.id, None)


@dataclass
class FakeNetwork:
    name: str
    engine: FakeEngine
    attrs: dict[str, Any] = field(default_factory=dict)
    members: dict[str, str] = field(default_factory=dict)  # id: name

    def reload(self) -> None:
        self.attrs["Containers"] = {key: {"Name": name} for key, name in self.members.items()}

    def connect(self, container: FakeContainer, aliases: list[str]) -> None:
        self.engine.log.append(f"connect {container.name} as {aliases[0]}")
        self.members[container.id] = container.name

    def disconnect(self, container_id: str, force: bool = False) -> None:
        self.engine.log.append(f"disconnect {self.members.pop(container_id)}")

    def remove(self) -> None:
        assert not self.members, f"{self.name} still has {self.members}"
        self.engine.log.append(f"remove network {self.name}")
        del self.engine.networks_by_name[self.name]


@dataclass
class FakeEngine:
    """The calls of the docker SDK that cloister_cli.networks makes."""

    networks_by_name: dict[str, FakeNetwork] = field(default_factory=dict)
    containers_by_name: dict[str, FakeContainer] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # subnets another start took meanwhile
    log: list[str] = field(default_factory=list)
    lists: int = 0

    def __post_init__(self) -> None:
        for service, _ in stack.CLOISTER_SERVICES:
            self.add_container(INSTANCE.service(service))

    def add_container(self, name: str) -> FakeContainer:
        container = FakeContainer(f"id-{name}", name, self)
        self.containers_by_name[name] = container
        return container

    def add_network(self, name: str, subnet: str, **attrs: Any) -> FakeNetwork:
        network = FakeNetwork(name, self, {"Name": name, "Id": f"id-{name}", **attrs})
        network.attrs["IPAM"] = {"Config": [{"Subnet": subnet}]}
        self.networks_by_name[name] = network
        return network

    @property
    def api(self) -> _Api:
        return _Api(self)

    @property
    def networks(self) -> _Networks:
        return _Networks(self)

    @property
    def containers(self) -> _Containers:
        return _Containers(self)


@dataclass
class _Api:
    engine: FakeEngine

    def networks(self) -> list[dict[str, Any]]:
        self.engine.lists += 1
        return [dict(network.attrs) for network in self.engine.networks_by_name.values()]


@dataclass
class _Containers:
    engine: FakeEngine

    def get(self, name: str) -> FakeContainer:
        if name not in self.engine.containers_by_name:
            raise docker.errors.NotFound(f"no container {name}")
        return self.engine.containers_by_name[name]


@dataclass
class _Networks:
    engine: FakeEngine

    def get(self, network_id: str) -> FakeNetwork:
        return next(n for n in self.engine.networks_by_name.values() if n.attrs["Id"] == network_id)

    def list(self, names: list[str]) -> list[FakeNetwork]:
        found = self.engine.networks_by_name
        return [found[name] for name in names if name in found]

    def create(self, name: str, **kwargs: Any) -> FakeNetwork:
        subnet = kwargs["ipam"]["Config"][0]["Subnet"]
        if subnet in self.engine.refused:
            raise docker.errors.APIError(
                "500", explanation="Pool overlaps with other one on this address space"
            )
        self.engine.log.append(f"create {name} {subnet}")
        return self.engine.add_network(name, subnet, Labels=kwargs["labels"], **GUARDED)


def engine_with_networks() -> Any:
    """A FakeEngine, typed as the client the module is given."""
    return FakeEngine()


def test_the_first_free_subnet_is_taken_with_one_listing() -> None:
    engine = engine_with_networks()
    engine.add_network("someone-else", "10.213.0.0/27")
    network: Any = networks.create(engine, INSTANCE, "api", GuardianConfig())
    assert engine.log == [f"create {INSTANCE.cloister('api')} 10.213.0.32/27"]
    assert network.attrs["Labels"][stack.LABEL_CLOISTER] == "api"
    assert engine.lists == 1


def test_a_subnet_another_start_took_meanwhile_gives_the_next() -> None:
    engine = engine_with_networks()
    engine.refused.append("10.213.0.0/27")
    networks.create(engine, INSTANCE, "api", GuardianConfig())
    assert engine.log == [f"create {INSTANCE.cloister('api')} 10.213.0.32/27"]


def test_the_network_a_killed_start_left_is_taken_as_it_is() -> None:
    engine = engine_with_networks()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    left = engine.add_network(INSTANCE.cloister("api"), "10.213.0.0/27", Labels=labels, **GUARDED)
    assert networks.create(engine, INSTANCE, "api", GuardianConfig()) is left
    assert engine.log == []


def test_a_left_network_with_a_stranger_on_it_refuses_the_start() -> None:
    """Labels are anyone's to set: a container someone put on a network with the right
    ones would be alone with the cloister."""
    engine = engine_with_networks()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    left = engine.add_network(INSTANCE.cloister("api"), "10.213.0.0/27", Labels=labels, **GUARDED)
    left.members["id-proxy"] = INSTANCE.service("proxy")  # the guardian's own may stay
    left.members["id-evil"] = "attack-evil"
    with pytest.raises(networks.NetworkError, match=r"not the guardian's \(attack-evil\)"):
        networks.create(engine, INSTANCE, "api", GuardianConfig())


def test_a_network_labelled_for_another_user_is_not_taken() -> None:
    engine = engine_with_networks()
    labels = {**INSTANCE.labels, stack.LABEL_OWNER: "65534", stack.LABEL_CLOISTER: "api"}
    engine.add_network(INSTANCE.cloister("api"), "10.213.0.0/27", Labels=labels, **GUARDED)
    with pytest.raises(networks.NetworkError, match="is not cloister 'api'"):
        networks.create(engine, INSTANCE, "api", GuardianConfig())


def test_a_network_of_that_name_not_its_own_refuses_the_start() -> None:
    engine = engine_with_networks()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    engine.add_network(INSTANCE.cloister("api"), "10.213.0.0/27", Labels=labels, Internal=False)
    with pytest.raises(networks.NetworkError, match="is not cloister 'api'"):
        networks.create(engine, INSTANCE, "api", GuardianConfig())


def test_the_services_join_while_the_container_is_made() -> None:
    engine = engine_with_networks()
    network: Any = networks.create(engine, INSTANCE, "api", GuardianConfig())
    joined = threading.Event()
    original = network.connect

    def connect(container: FakeContainer, aliases: list[str]) -> None:
        original(container, aliases)
        if len(network.members) == len(stack.CLOISTER_SERVICES):
            joined.set()

    network.connect = connect

    def run() -> Any:
        # The joining goes on on its own thread: run() can wait for it to end.
        assert joined.wait(timeout=10)
        box = engine.add_container(INSTANCE.cloister("api"))
        network.members[box.id] = box.name
        return box

    box = networks.run_with_services(engine, INSTANCE, network, run)
    assert box.name == INSTANCE.cloister("api")
    assert sorted(network.members.values()) == sorted(
        [box.name, *(INSTANCE.service(service) for service, _ in stack.CLOISTER_SERVICES)]
    )
    aliases = [line.rpartition(" as ")[2] for line in engine.log if line.startswith("connect")]
    assert aliases == [alias for _, alias in stack.CLOISTER_SERVICES]


def test_services_that_cannot_join_remove_the_container_made_meanwhile() -> None:
    engine = engine_with_networks()
    del engine.containers_by_name[INSTANCE.service("gateway")]
    network: Any = networks.create(engine, INSTANCE, "api", GuardianConfig())
    with pytest.raises(networks.NetworkError, match=r"gateway .* is not there"):
        networks.run_with_services(
            engine, INSTANCE, network, lambda: engine.add_container(INSTANCE.cloister("api"))
        )
    assert INSTANCE.cloister("api") not in engine.containers_by_name
    assert f"remove {INSTANCE.cloister('api')}" in engine.log


def test_a_failed_run_is_raised_once_the_services_joined() -> None:
    engine = engine_with_networks()
    network: Any = networks.create(engine, INSTANCE, "api", GuardianConfig())

    def run() -> Any:
        raise docker.errors.APIError("no such image")

    with pytest.raises(docker.errors.APIError, match="no such image"):
        networks.run_with_services(engine, INSTANCE, network, run)
    # Nothing joins any more once it returned: the caller removes the network now.
    assert len(network.members) == len(stack.CLOISTER_SERVICES)


def test_stop_removes_the_container_and_the_network_the_services_leave() -> None:
    engine = engine_with_networks()
    network: Any = networks.create(engine, INSTANCE, "api", GuardianConfig())
    box = networks.run_with_services(
        engine, INSTANCE, network, lambda: engine.add_container(INSTANCE.cloister("api"))
    )
    network.members[box.id] = box.name
    engine.log.clear()
    assert networks.remove(engine, INSTANCE, "api", container=box)
    assert INSTANCE.cloister("api") not in engine.networks_by_name
    assert INSTANCE.cloister("api") not in engine.containers_by_name
    # The container went by its removal, not disconnected first; the network last.
    assert f"disconnect {box.name}" not in engine.log
    assert sorted(line for line in engine.log if line.startswith("disconnect")) == sorted(
        f"disconnect {INSTANCE.service(service)}" for service, _ in stack.CLOISTER_SERVICES
    )
    assert engine.log[-1] == f"remove network {INSTANCE.cloister('api')}"


def test_a_failed_start_leaves_a_network_another_start_of_the_name_runs_on() -> None:
    """Two starts of one name at once: the second's failure (the name is taken) must
    not take the first's network from under its running cloister."""
    engine = engine_with_networks()
    network: Any = networks.create(engine, INSTANCE, "api", GuardianConfig())
    first = networks.run_with_services(
        engine, INSTANCE, network, lambda: engine.add_container(INSTANCE.cloister("api"))
    )
    network.members[first.id] = first.name
    engine.log.clear()
    networks.remove_unused(engine, INSTANCE, "api")
    assert INSTANCE.cloister("api") in engine.networks_by_name
    assert engine.log == []
    del network.members[first.id]  # a failed first start: only the services are on it
    networks.remove_unused(engine, INSTANCE, "api")
    assert INSTANCE.cloister("api") not in engine.networks_by_name


def test_without_a_network_the_container_still_goes() -> None:
    engine = engine_with_networks()
    box = engine.add_container(INSTANCE.cloister("api"))
    assert not networks.remove(engine, INSTANCE, "api", container=box)
    assert engine.log == [f"remove {box.name}"]


def test_another_instances_network_is_left_but_the_container_goes() -> None:
    engine = engine_with_networks()
    theirs = engine.add_network(INSTANCE.cloister("api"), "10.213.0.0/27", Labels={})
    box = engine.add_container(INSTANCE.cloister("api"))
    assert not networks.remove(engine, INSTANCE, "api", container=box)
    assert engine.networks_by_name[INSTANCE.cloister("api")] is theirs
    assert engine.log == [f"remove {box.name}"]
