"""A cloister's own network against a fake engine: what is made, joined, kept from one
session to the next, taken back and removed.

The real engine's answers (isolation, the refusal of an overlapping subnet) are the
acceptance tests' (test_acceptance_apart.py).
"""

from __future__ import annotations

import threading
from typing import Any

import docker.errors
import pytest
from docker.models.networks import Network

from cloister_cli.container import networks
from cloister_core import stack
from cloister_core.config.models import GuardianConfig
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeContainer, FakeEngine

GUARDED = {"Internal": True, "Options": dict(networks.INHIBIT_IPV4), "EnableIPv6": False}


def engine_with_services() -> FakeEngine:
    """An engine where the instance's guardian services run."""
    engine = FakeEngine()
    for service, _ in stack.CLOISTER_SERVICES:
        engine.add_container(INSTANCE.service(service))
    return engine


def made(engine: FakeEngine) -> Any:
    """Cloister api's container, made; typed as the SDK's, which the module is given."""
    return engine.add_container(INSTANCE.cloister("api"))


def test_the_first_free_subnet_is_taken_with_one_listing() -> None:
    engine = engine_with_services()
    engine.add_network("someone-else", subnet="10.213.0.0/27")
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())
    assert engine.log == [f"network create {INSTANCE.cloister('api')} 10.213.0.32/27"]
    assert network.attrs["Labels"][stack.LABEL_CLOISTER] == "api"
    assert len(engine.called("api.networks")) == 1


def test_a_subnet_another_start_took_meanwhile_gives_the_next() -> None:
    engine = engine_with_services()
    engine.networks.refused.append("10.213.0.0/27")
    networks.create(engine.client, INSTANCE, "api", GuardianConfig())
    assert engine.log == [f"network create {INSTANCE.cloister('api')} 10.213.0.32/27"]


def test_the_network_a_killed_start_left_is_taken_as_it_is() -> None:
    engine = engine_with_services()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    left: Any = engine.add_network(
        INSTANCE.cloister("api"), subnet="10.213.0.0/27", labels=labels, **GUARDED
    )
    assert networks.create(engine.client, INSTANCE, "api", GuardianConfig()) is left
    assert engine.log == []


def test_a_left_network_with_a_stranger_on_it_refuses_the_start() -> None:
    """Labels are anyone's to set: a container someone put on a network with the right
    ones would be alone with the cloister."""
    engine = engine_with_services()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    left = engine.add_network(
        INSTANCE.cloister("api"), subnet="10.213.0.0/27", labels=labels, **GUARDED
    )
    left.members["id-proxy"] = INSTANCE.service("proxy")  # the guardian's own may stay
    left.members["id-evil"] = "attack-evil"
    with pytest.raises(networks.NetworkError, match=r"not the guardian's \(attack-evil\)"):
        networks.create(engine.client, INSTANCE, "api", GuardianConfig())


def test_a_network_labelled_for_another_user_is_not_taken() -> None:
    engine = engine_with_services()
    labels = {**INSTANCE.labels, stack.LABEL_OWNER: "65534", stack.LABEL_CLOISTER: "api"}
    engine.add_network(INSTANCE.cloister("api"), subnet="10.213.0.0/27", labels=labels, **GUARDED)
    with pytest.raises(networks.NetworkError, match="is not cloister 'api'"):
        networks.create(engine.client, INSTANCE, "api", GuardianConfig())


def test_a_network_of_that_name_not_its_own_refuses_the_start() -> None:
    engine = engine_with_services()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    engine.add_network(
        INSTANCE.cloister("api"), subnet="10.213.0.0/27", labels=labels, Internal=False
    )
    with pytest.raises(networks.NetworkError, match="is not cloister 'api'"):
        networks.create(engine.client, INSTANCE, "api", GuardianConfig())


def test_the_services_join_while_the_container_is_made() -> None:
    engine = engine_with_services()
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())
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
        box = made(engine)
        network.members[box.id] = box.name
        return box

    box = networks.run_with_services(engine.client, INSTANCE, network, run)
    assert box.name == INSTANCE.cloister("api")
    assert sorted(network.members.values()) == sorted(
        [box.name, *(INSTANCE.service(service) for service, _ in stack.CLOISTER_SERVICES)]
    )
    aliases = [
        line.rpartition(" --alias ")[2] for line in engine.log if line.startswith("network connect")
    ]
    assert aliases == [alias for _, alias in stack.CLOISTER_SERVICES]


def test_services_that_cannot_join_remove_the_container_made_meanwhile() -> None:
    engine = engine_with_services()
    del engine.containers.by_name[INSTANCE.service("gateway")]
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())
    with pytest.raises(networks.NetworkError, match=r"gateway .* is not there"):
        networks.run_with_services(engine.client, INSTANCE, network, lambda: made(engine))
    assert INSTANCE.cloister("api") not in engine.containers.by_name
    assert f"rm {INSTANCE.cloister('api')}" in engine.log


def test_a_failed_run_is_raised_once_the_services_joined() -> None:
    engine = engine_with_services()
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())

    def run() -> Any:
        raise docker.errors.APIError("no such image")

    with pytest.raises(docker.errors.APIError, match="no such image"):
        networks.run_with_services(engine.client, INSTANCE, network, run)
    # Nothing joins any more once it returned: the caller removes the network now.
    assert len(network.members) == len(stack.CLOISTER_SERVICES)


def test_a_network_is_removed_once_the_services_left_it() -> None:
    engine = engine_with_services()
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())
    networks.connect_services(engine.client, INSTANCE, network)
    engine.log.clear()
    assert networks.remove(engine.client, INSTANCE, "api")
    assert INSTANCE.cloister("api") not in engine.networks.by_name
    assert sorted(engine.log[:-1]) == sorted(
        f"network disconnect {network.name} {INSTANCE.service(service)}"
        for service, _ in stack.CLOISTER_SERVICES
    )
    assert engine.log[-1] == f"network rm {INSTANCE.cloister('api')}"


def test_a_failed_start_leaves_a_network_another_start_of_the_name_runs_on() -> None:
    """Two starts of one name at once: the second's failure (the name is taken) must
    not take the first's network from under its running cloister."""
    engine = engine_with_services()
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())
    first = networks.run_with_services(engine.client, INSTANCE, network, lambda: made(engine))
    network.members[first.id] = first.name
    engine.log.clear()
    networks.remove_unused(engine.client, INSTANCE, "api")
    assert INSTANCE.cloister("api") in engine.networks.by_name
    assert engine.log == []
    del network.members[first.id]  # a failed first start: only the services are on it
    networks.remove_unused(engine.client, INSTANCE, "api")
    assert INSTANCE.cloister("api") not in engine.networks.by_name


def test_without_a_network_nothing_is_removed() -> None:
    engine = engine_with_services()
    assert not networks.remove(engine.client, INSTANCE, "api")
    assert engine.log == []


def test_another_instances_network_is_left() -> None:
    engine = engine_with_services()
    theirs = engine.add_network(INSTANCE.cloister("api"), subnet="10.213.0.0/27", labels={})
    assert not networks.remove(engine.client, INSTANCE, "api")
    assert engine.networks.by_name[INSTANCE.cloister("api")] is theirs
    assert engine.log == []


def test_the_cloister_address_is_the_last_host_of_its_subnet() -> None:
    """Pinned there, a container started again keeps the address its token names: the
    services take the lowest free addresses."""
    network = Network(attrs={"Name": "n", "IPAM": {"Config": [{"Subnet": "10.213.0.224/27"}]}})
    assert networks.cloister_address_on(network) == "10.213.0.254"
    with pytest.raises(networks.NetworkError, match="no IPv4 subnet"):
        networks.cloister_address_on(Network(attrs={"Name": "n", "IPAM": {"Config": []}}))


# -- made ahead, removed after -------------------------------------------------------------


def test_a_network_made_ahead_is_joined_before_the_container_runs() -> None:
    engine = engine_with_services()
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    network: Any = ahead.network()
    assert network.attrs["Labels"][stack.LABEL_CLOISTER] == "api"
    assert networks.is_guarded(network.attrs)
    assert sorted(network.members.values()) == sorted(
        INSTANCE.service(service) for service, _ in stack.CLOISTER_SERVICES
    )
    assert engine.log[0] == f"network create {INSTANCE.cloister('api')} 10.213.0.0/27"
    # The start then runs its container there: the services are not joined twice.
    box = networks.run_with_services(engine.client, INSTANCE, network, lambda: made(engine))
    assert box.name == INSTANCE.cloister("api")
    assert len([line for line in engine.log if line.startswith("network connect")]) == len(
        stack.CLOISTER_SERVICES
    )


def test_services_that_cannot_join_ahead_take_the_network_away() -> None:
    engine = engine_with_services()
    del engine.containers.by_name[INSTANCE.service("gateway")]
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    with pytest.raises(networks.NetworkError, match=r"gateway .* is not there"):
        ahead.network()
    assert INSTANCE.cloister("api") not in engine.networks.by_name


def test_a_network_that_cannot_be_made_ahead_is_raised_by_the_start() -> None:
    engine = engine_with_services()
    engine.add_network(INSTANCE.cloister("api"), subnet="10.213.0.0/27", labels={})
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    with pytest.raises(networks.NetworkError, match="is not cloister 'api'"):
        ahead.network()
    ahead.discard()  # not made: someone else's stays
    assert INSTANCE.cloister("api") in engine.networks.by_name


def test_a_failed_start_discards_the_network_made_ahead() -> None:
    engine = engine_with_services()
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    ahead.discard()
    assert INSTANCE.cloister("api") not in engine.networks.by_name
    assert engine.log[-1] == f"network rm {INSTANCE.cloister('api')}"


# -- kept from one session to the next ------------------------------------------------------


def kept(engine: FakeEngine, cloister: str, subnet: str, created: str = "") -> Any:
    """Cloister *cloister*'s network as its stop left it: the services on it."""
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: cloister}
    network = engine.add_network(
        INSTANCE.cloister(cloister), subnet=subnet, labels=labels, Created=created, **GUARDED
    )
    for service, _ in stack.CLOISTER_SERVICES:
        box = engine.containers.by_name[INSTANCE.service(service)]
        network.members[box.id] = box.name
    return network


def test_a_kept_network_is_taken_with_one_inspect_and_no_join() -> None:
    engine = engine_with_services()
    network = kept(engine, "api", "10.213.0.64/27")
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    assert ahead.network() is network
    assert engine.log == []  # nothing made, nothing joined
    assert [name for name, _ in engine.calls] == ["api.networks", "networks.get"]


def test_a_kept_network_the_services_left_is_joined_again() -> None:
    """``guardian start`` recreates the services: they are on no kept network then."""
    engine = engine_with_services()
    network = kept(engine, "api", "10.213.0.64/27")
    network.members.clear()
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    assert ahead.network() is network
    assert [line.split(" --alias ")[0] for line in engine.log] == [
        f"network connect {network.name} {INSTANCE.service(service)}"
        for service, _ in stack.CLOISTER_SERVICES
    ]


def test_a_stranger_on_a_kept_network_refuses_the_start_and_stays() -> None:
    engine = engine_with_services()
    network = kept(engine, "api", "10.213.0.64/27")
    network.members["id-evil"] = "attack-evil"
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    with pytest.raises(networks.NetworkError, match=r"not the guardian's \(attack-evil\)"):
        ahead.network()
    ahead.discard()
    assert engine.networks.by_name[INSTANCE.cloister("api")] is network
    assert engine.log == []


@pytest.mark.parametrize(
    ("subnet", "why"),
    [("10.99.0.0/27", "outside the pool"), ("10.213.0.0/26", "another prefix")],
)
def test_a_kept_network_not_of_the_pool_is_made_anew(subnet: str, why: str) -> None:
    engine = engine_with_services()
    old = kept(engine, "api", subnet)
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())
    assert network is not old, why
    assert network.attrs["IPAM"]["Config"][0]["Subnet"] == "10.213.0.0/27"
    assert sorted(engine.log[:-2]) == sorted(
        f"network disconnect {old.name} {INSTANCE.service(service)}"
        for service, _ in stack.CLOISTER_SERVICES
    )
    assert engine.log[-2:] == [
        f"network rm {old.name}",
        f"network create {INSTANCE.cloister('api')} 10.213.0.0/27",
    ]


def test_a_full_pool_takes_back_the_oldest_kept_network_of_a_stopped_cloister() -> None:
    engine = engine_with_services()
    small = GuardianConfig(network_pool="10.213.0.0/25", network_prefix=27)  # four
    running = kept(engine, "running", "10.213.0.0/27", "2026-01-01T00:00:00Z")
    box = engine.add_container(INSTANCE.cloister("running"))
    running.members[box.id] = box.name
    kept(engine, "newer", "10.213.0.32/27", "2026-03-01T00:00:00Z")
    kept(engine, "older", "10.213.0.64/27", "2026-02-01T00:00:00Z")
    engine.add_network("someone-else", subnet="10.213.0.96/27")  # not the instance's
    network: Any = networks.create(engine.client, INSTANCE, "api", small)
    assert network.attrs["IPAM"]["Config"][0]["Subnet"] == "10.213.0.64/27"
    assert INSTANCE.cloister("older") not in engine.networks.by_name
    assert INSTANCE.cloister("newer") in engine.networks.by_name
    assert INSTANCE.cloister("running") in engine.networks.by_name
    assert "someone-else" in engine.networks.by_name
    assert engine.log[-2:] == [
        f"network rm {INSTANCE.cloister('older')}",
        f"network create {INSTANCE.cloister('api')} 10.213.0.64/27",
    ]


def test_a_full_pool_of_running_cloisters_refuses_the_start() -> None:
    engine = engine_with_services()
    small = GuardianConfig(network_pool="10.213.0.0/26", network_prefix=27)
    for index, subnet in enumerate(("10.213.0.0/27", "10.213.0.32/27")):
        network = kept(engine, f"run{index}", subnet)
        box = engine.add_container(INSTANCE.cloister(f"run{index}"))
        network.members[box.id] = box.name
    with pytest.raises(networks.NetworkError, match=r"no /27 of guardian\.network_pool"):
        networks.create(engine.client, INSTANCE, "api", small)
    assert not [line for line in engine.log if line.startswith("network rm")]


def test_a_guardian_restart_rejoins_only_networks_with_a_cloister() -> None:
    engine = engine_with_services()
    running = kept(engine, "running", "10.213.0.0/27")
    stopped = kept(engine, "stopped", "10.213.0.32/27")
    running.members.clear()  # compose recreated the services: on no network
    stopped.members.clear()
    box = engine.add_container(
        INSTANCE.cloister("running"), {**INSTANCE.labels, stack.LABEL_CLOISTER: "running"}
    )
    running.members[box.id] = box.name
    networks.reconnect_all(engine.client, INSTANCE)
    assert sorted(running.members.values()) == sorted(
        [box.name, *(INSTANCE.service(service) for service, _ in stack.CLOISTER_SERVICES)]
    )
    assert stopped.members == {}
