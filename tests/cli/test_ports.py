"""``cloister port``'s library without an engine: PORT[:HOSTPORT], the forwarder's
container, and what publishing does in each state (a small fake engine)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, cast

import docker
import docker.errors
import pytest
from click.testing import CliRunner

from cloister_cli import ports
from cloister_cli.lifecycle import Context
from cloister_cli.main import cli
from cloister_cli.ports import PortError, PortSpec
from cloister_core import stack
from cloister_core.names import CONTAINER_PREFIX, RESERVED_CLOISTER_PREFIX, container_name

IMAGE = "cloister-proxy:latest"
GATEWAY = "172.30.0.1"
ADDRESS = "172.18.0.5"

# --- PORT[:HOSTPORT] -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("8000", PortSpec(8000)),
        ("8000:3000", PortSpec(8000, 3000)),
        ("5173:0", PortSpec(5173, 0)),  # any free port
        ("1:65535", PortSpec(1, 65535)),
    ],
)
def test_parse_spec(text: str, spec: PortSpec) -> None:
    assert ports.parse_spec(text) == spec


def test_host_port_defaults_to_port() -> None:
    assert ports.parse_spec("8000").host_port == 8000
    assert ports.parse_spec("8000:3000").host_port == 3000
    assert ports.parse_spec("8000:0").host_port == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "PORT must be a number from 1 to 65535, not '0'"),
        ("65536", "PORT must be a number from 1 to 65535, not '65536'"),
        ("http", "PORT must be a number from 1 to 65535, not 'http'"),
        ("", "PORT must be a number from 1 to 65535, not ''"),
        ("-1", "PORT must be a number from 1 to 65535, not '-1'"),
        ("\uff18\uff10", "PORT must be a number from 1 to 65535, not '\uff18\uff10'"),  # fullwidth
        (":8000", "PORT must be a number from 1 to 65535, not ''"),
        ("8000:", "HOSTPORT must be a number from 0 to 65535, not ''"),
        ("8000:70000", "HOSTPORT must be a number from 0 to 65535, not '70000'"),
        ("8000:1:2", "HOSTPORT must be a number from 0 to 65535, not '1:2'"),
        ("8000:127.0.0.1", "HOSTPORT must be a number from 0 to 65535, not '127.0.0.1'"),
    ],
)
def test_parse_spec_refuses_impossible_ports(text: str, message: str) -> None:
    with pytest.raises(PortError) as caught:
        ports.parse_spec(text)
    assert str(caught.value) == message


# --- names -----------------------------------------------------------------------------------


def test_forwarder_names_are_in_the_guardian_namespace_and_never_collide() -> None:
    assert stack.forwarder("my-api", 8000) == "cloister-guardian-port-my-api-8000"
    # No cloister can be called that: its container would be cloister-guardian-…
    assert stack.forwarder("x", 1).startswith(CONTAINER_PREFIX + RESERVED_CLOISTER_PREFIX)
    pairs = [("a", 18000), ("a-1", 8000), ("a-1-8", 1), ("a", 1)]
    names = {stack.forwarder(name, port) for name, port in pairs}
    assert len(names) == len(pairs)


# --- the forwarder's container ---------------------------------------------------------------


@dataclass
class FakeContainer:
    name: str
    labels: dict[str, str]
    engine: FakeEngine | None = None
    status: str = "running"
    id: str = field(default_factory=lambda: os.urandom(8).hex())
    attrs: dict[str, Any] = field(default_factory=dict)
    logs_text: bytes = b""
    start_error: str | None = None
    exits: bool = False  # on start, as a forwarder that fails does

    @property
    def short_id(self) -> str:
        return self.id[:12]

    def reload(self) -> None:
        pass

    def logs(self, **kwargs: Any) -> bytes:
        return self.logs_text

    def start(self) -> None:
        if self.start_error is not None:
            raise docker.errors.APIError("500", explanation=self.start_error)
        self.status = "exited" if self.exits else "running"
        if self.engine is not None:
            self.engine.log.append(f"start {self.name}")

    def remove(self, force: bool = False) -> None:
        assert force
        if self.engine is not None:
            self.engine.containers.items.remove(self)
            self.engine.log.append(f"rm {self.name}")


def cloister(name: str, status: str = "running", address: str = ADDRESS) -> FakeContainer:
    networks = {stack.CLOISTER_NET: {"IPAddress": address}} if address else {}
    return FakeContainer(
        container_name(name),
        {stack.LABEL_CLOISTER: name},
        status=status,
        attrs={"NetworkSettings": {"Networks": networks}},
    )


def published(host_port: int) -> dict[str, Any]:
    return {
        "NetworkSettings": {
            "Ports": {
                f"{stack.FORWARDER_PORT}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(host_port)}]
            }
        }
    }


def spec_plan(spec: PortSpec | None = None) -> ports.ForwarderPlan:
    owner = cloister("my-api")
    spec = spec or PortSpec(8000, 8001)
    return ports.plan(cast("Any", owner), "my-api", spec, gateway=GATEWAY, image=IMAGE)


def test_the_forwarder_is_hardened_and_reaches_one_address() -> None:
    forwarder = spec_plan()
    kwargs = forwarder.create_kwargs()
    assert kwargs.pop("log_config") == {
        "Type": "json-file",
        "Config": {"max-size": "1m", "max-file": "1"},
    }
    assert kwargs == {
        "image": IMAGE,
        "entrypoint": ["python3", "-m", "cloister_proxy.forwarder"],
        "command": ["--target", f"{ADDRESS}:8000", "--via", GATEWAY, "--listen-port", "9996"],
        "name": "cloister-guardian-port-my-api-8000",
        "user": f"{os.getuid()}:{os.getgid()}",
        "labels": {
            stack.LABEL_FORWARD: "my-api",
            stack.LABEL_FORWARD_PORT: "8000",
            stack.LABEL_FORWARD_TARGET: f"{ADDRESS}:8000",
            stack.LABEL_FORWARD_CONTAINER: forwarder.cloister_id,
        },
        "network": stack.PORTS_NET,
        "ports": {"9996/tcp": ("127.0.0.1", 8001)},  # the host's loopback only
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "init": True,
        "mem_limit": "64m",
        "pids_limit": 16,
        "nano_cpus": 1_000_000_000,
        "sysctls": {"net.ipv4.ip_forward": "0"},
        "healthcheck": {"test": ["NONE"]},
    }
    # Not a cloister: `cloister list`, `stop --all` and the token services never see it.
    assert stack.LABEL_CLOISTER not in kwargs["labels"]


def test_host_port_zero_lets_the_engine_choose() -> None:
    assert spec_plan(PortSpec(8000, 0)).create_kwargs()["ports"] == {
        "9996/tcp": ("127.0.0.1", None)
    }


def test_a_cloister_without_an_address_on_cloister_net_is_refused() -> None:
    owner = cast("Any", cloister("my-api", address=""))
    with pytest.raises(PortError, match="cloister 'my-api' has no address on cloister-net"):
        ports.plan(owner, "my-api", PortSpec(8000), gateway=GATEWAY, image=IMAGE)


@pytest.mark.parametrize(
    ("change", "accepted"),
    [
        ({}, True),
        ({"Internal": True}, False),  # publishes nothing
        ({"EnableIPv6": True}, False),
        ({"Driver": "macvlan"}, False),
        ({"Options": {}}, False),  # its containers could reach each other
    ],
)
def test_the_ports_network_must_be_as_cloister_makes_it(
    change: dict[str, Any], accepted: bool
) -> None:
    attrs = {
        "Driver": "bridge",
        "Internal": False,
        "EnableIPv6": False,
        "Options": {"com.docker.network.bridge.enable_icc": "false"},
    } | change
    assert ports.is_ports_network(attrs) is accepted


# --- publishing, on a fake engine ------------------------------------------------------------


@dataclass
class FakeContainers:
    engine: FakeEngine
    items: list[FakeContainer] = field(default_factory=list)
    next_logs: bytes = b"cloister-forwarder: listening on 172.30.0.2:9996\n"
    next_start_error: str | None = None
    next_exits: bool = False
    created: list[dict[str, Any]] = field(default_factory=list)

    def get(self, name: str) -> FakeContainer:
        for item in self.items:
            if name in (item.name, item.id):
                return item
        raise docker.errors.NotFound(f"no container {name}")

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[FakeContainer]:
        key, _, value = (filters or {})["label"].partition("=")
        return [c for c in self.items if key in c.labels and (not value or c.labels[key] == value)]

    def create(self, **kwargs: Any) -> FakeContainer:
        self.created.append(kwargs)
        host_port = kwargs["ports"]["9996/tcp"][1] or 49153
        made = FakeContainer(
            kwargs["name"],
            kwargs["labels"],
            self.engine,
            status="created",
            attrs=published(host_port),
            logs_text=self.next_logs,
            start_error=self.next_start_error,
            exits=self.next_exits,
        )
        self.items.append(made)
        self.engine.log.append(f"create {made.name}")
        return made


@dataclass
class FakeNetwork:
    name: str
    engine: FakeEngine
    attrs: dict[str, Any] = field(default_factory=dict)

    def connect(self, container: FakeContainer) -> None:
        self.engine.log.append(f"connect {self.name} {container.name}")


@dataclass
class FakeNetworks:
    engine: FakeEngine
    present: dict[str, FakeNetwork] = field(default_factory=dict)

    def get(self, name: str) -> FakeNetwork:
        if name not in self.present:
            raise docker.errors.NotFound(f"network {name} not found")
        return self.present[name]

    def create(self, name: str, **kwargs: Any) -> FakeNetwork:
        assert kwargs["internal"] is False
        assert kwargs["enable_ipv6"] is False
        attrs = {
            "Driver": kwargs["driver"],
            "Internal": kwargs["internal"],
            "EnableIPv6": kwargs["enable_ipv6"],
            "Options": kwargs["options"],
            "IPAM": {"Config": [{"Subnet": "172.30.0.0/16", "Gateway": GATEWAY}]},
        }
        self.present[name] = FakeNetwork(name, self.engine, attrs)
        self.engine.log.append(f"network create {name}")
        return self.present[name]


@dataclass
class FakeEngine:
    log: list[str] = field(default_factory=list)
    containers: FakeContainers = field(init=False)
    networks: FakeNetworks = field(init=False)

    def __post_init__(self) -> None:
        self.containers = FakeContainers(self)
        self.networks = FakeNetworks(self)
        self.networks.present[stack.CLOISTER_NET] = FakeNetwork(stack.CLOISTER_NET, self)

    def add(self, container: FakeContainer) -> FakeContainer:
        container.engine = self
        self.containers.items.append(container)
        return container

    @property
    def client(self) -> docker.DockerClient:
        return cast("docker.DockerClient", self)


@pytest.fixture
def engine() -> FakeEngine:
    fake = FakeEngine()
    fake.add(cloister("my-api"))
    return fake


def publish(engine: FakeEngine, text: str, name: str = "my-api") -> ports.Published:
    return ports.publish(engine.client, name, ports.parse_spec(text), image=IMAGE)


def test_publish_creates_the_network_then_a_forwarder_on_both_networks(engine: FakeEngine) -> None:
    result = publish(engine, "8000")
    assert result.created
    assert result.forward == ports.Forward(
        "my-api", 8000, 8000, "running", "cloister-guardian-port-my-api-8000"
    )
    assert result.forward.host == "127.0.0.1:8000"
    assert engine.log == [
        f"network create {stack.PORTS_NET}",
        "create cloister-guardian-port-my-api-8000",
        f"connect {stack.CLOISTER_NET} cloister-guardian-port-my-api-8000",  # before it starts
        "start cloister-guardian-port-my-api-8000",
    ]
    (kwargs,) = engine.containers.created
    assert kwargs["command"][1] == f"{ADDRESS}:8000"
    assert kwargs["command"][3] == GATEWAY


def test_publishing_again_answers_with_the_forward_there_is(engine: FakeEngine) -> None:
    first = publish(engine, "8000:8001").forward
    engine.log.clear()
    again = publish(engine, "8000:8001")
    assert (again.created, again.forward) == (False, first)
    assert publish(engine, "8000:0") == ports.Published(first, created=False)
    assert publish(engine, "8000") == ports.Published(first, created=False)  # no HOSTPORT
    assert engine.log == []
    with pytest.raises(PortError) as caught:
        publish(engine, "8000:8000")  # on 8000, while it is on 8001
    assert str(caught.value) == (
        "port 8000 of cloister 'my-api' is already published on 127.0.0.1:8001;"
        " `cloister port my-api 8000 --remove` first"
    )


def test_forwarders_of_an_earlier_cloister_of_that_name_are_replaced(engine: FakeEngine) -> None:
    publish(engine, "8000")
    publish(engine, "3000")
    # The cloister went without `cloister stop`, and a new one of that name started.
    engine.containers.items.remove(engine.containers.get(container_name("my-api")))
    engine.add(cloister("my-api", address="172.18.0.9"))
    assert {forward.status for forward in ports.forwards(engine.client, "my-api")} == {"stale"}
    engine.log.clear()
    result = publish(engine, "8000")
    assert result.created
    assert "rm cloister-guardian-port-my-api-3000" in engine.log
    assert [f.port for f in ports.forwards(engine.client)] == [8000]
    assert engine.containers.created[-1]["command"][1] == "172.18.0.9:8000"


def test_remove_stale_leaves_the_current_ones(engine: FakeEngine) -> None:
    engine.add(cloister("web", address="172.18.0.7"))
    publish(engine, "8000")
    publish(engine, "3000", name="web")
    engine.containers.items.remove(engine.containers.get(container_name("web")))
    assert ports.remove_stale(engine.client) == ["cloister-guardian-port-web-3000"]
    assert [(f.cloister, f.status) for f in ports.forwards(engine.client)] == [
        ("my-api", "running")
    ]


def test_an_exited_forwarder_is_made_anew(engine: FakeEngine) -> None:
    publish(engine, "8000")
    engine.containers.get(stack.forwarder("my-api", 8000)).status = "exited"
    (listed,) = ports.forwards(engine.client, "my-api")
    assert (listed.status, listed.host) == ("exited", None)
    assert publish(engine, "8000").created


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            "paused",
            "cloister 'my-api' is paused by Cloister's git guard; see `cloister review my-api`",
        ),
        ("exited", "cloister 'my-api' is exited; `cloister start` in its directory"),
    ],
)
def test_a_cloister_that_does_not_run_is_refused(status: str, message: str) -> None:
    engine = FakeEngine()
    engine.add(cloister("my-api", status=status))
    with pytest.raises(PortError) as caught:
        publish(engine, "8000")
    assert str(caught.value) == message
    assert engine.log == []


def test_no_such_cloister() -> None:
    with pytest.raises(PortError, match=r"no cloister 'ghost' \(`cloister list`\)"):
        publish(FakeEngine(), "8000", name="ghost")


def test_a_taken_host_port_names_who_holds_it(engine: FakeEngine) -> None:
    engine.add(cloister("web"))
    publish(engine, "3000:8000", name="web")
    engine.containers.next_start_error = (
        "driver failed programming external connectivity on endpoint x:"
        " Bind for 127.0.0.1:8000 failed: port is already allocated"
    )
    with pytest.raises(PortError) as caught:
        publish(engine, "8000")
    assert str(caught.value) == (
        "port 8000 on 127.0.0.1 is taken by port 3000 of cloister web; choose another:"
        " `cloister port my-api 8000:HOSTPORT` (`8000:0` picks a free one)"
    )
    # The forwarder that could not start is gone.
    assert [f.cloister for f in ports.forwards(engine.client)] == ["web"]

    engine.containers.next_start_error = (
        "Error starting userland proxy: listen tcp4 127.0.0.1:9000: bind: address already in use"
    )
    with pytest.raises(PortError, match=r"port 9000 on 127\.0\.0\.1 is taken by another program;"):
        publish(engine, "8000:9000")


def test_a_forwarder_that_exits_says_why(engine: FakeEngine) -> None:
    engine.containers.next_exits = True
    engine.containers.next_logs = b"/usr/bin/python3: No module named cloister_proxy.forwarder\n"
    with pytest.raises(PortError) as caught:
        publish(engine, "8000")
    assert str(caught.value) == (
        "the image cloister-proxy:latest was built before `cloister port` existed;"
        " `cloister guardian start --build` rebuilds it"
    )
    engine.containers.next_logs = b"cloister-forwarder: --via must be an IPv4 address\n"
    with pytest.raises(PortError) as caught:
        publish(engine, "8000")
    assert str(caught.value) == (
        "the forwarder cloister-guardian-port-my-api-8000 exited:"
        " cloister-forwarder: --via must be an IPv4 address"
    )
    assert ports.forwards(engine.client) == []  # removed, both times


def test_remove_and_remove_all(engine: FakeEngine) -> None:
    publish(engine, "8000")
    publish(engine, "3000:0")
    removed = ports.remove(engine.client, "my-api", 3000)
    assert (removed.port, removed.host) == (3000, "127.0.0.1:49153")
    with pytest.raises(PortError) as caught:
        ports.remove(engine.client, "my-api", 3000)
    assert str(caught.value) == (
        "cloister 'my-api' publishes no port 3000 (`cloister port my-api --list`)"
    )
    assert ports.remove_all(engine.client, "my-api") == ["cloister-guardian-port-my-api-8000"]
    assert ports.forwards(engine.client) == []


# --- the command -----------------------------------------------------------------------------


@pytest.fixture
def command_engine(engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    monkeypatch.setattr(Context, "docker", property(lambda self: engine))
    return engine


def test_the_command_publishes_lists_and_removes(command_engine: FakeEngine) -> None:
    runner = CliRunner()
    added = runner.invoke(cli, ["port", "my-api", "8000:0", "--json"])
    assert added.exit_code == 0, added.output
    assert '"host": "127.0.0.1:49153"' in added.stdout
    assert '"created": true' in added.stdout
    listed = runner.invoke(cli, ["port", "my-api", "--list"])
    assert listed.exit_code == 0, listed.output
    assert "127.0.0.1:49153" in listed.stdout
    removed = runner.invoke(cli, ["port", "my-api", "8000", "--remove"])
    assert removed.exit_code == 0, removed.output
    assert "cloister my-api: port 8000 no longer published" in removed.stdout
    empty = runner.invoke(cli, ["port", "--list"])
    assert empty.stdout == "no cloister publishes a port\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["port", "my-api", "8000", "--list", "--remove"], "give --list or --remove, not both"),
        (["port", "a", "b", "--list"], "--list takes at most a NAME"),
        (["port", "a", "8000", "extra"], "say which port: cloister port [NAME] PORT[:HOSTPORT]"),
        (["port"], "say which port"),
    ],
)
def test_the_command_refuses_unclear_arguments(
    command_engine: FakeEngine, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert message in result.output


def test_the_command_says_what_is_wrong_with_a_port(command_engine: FakeEngine) -> None:
    result = CliRunner().invoke(cli, ["port", "my-api", "99999"])
    assert result.exit_code == 1
    assert "Error: PORT must be a number from 1 to 65535, not '99999'" in result.output
