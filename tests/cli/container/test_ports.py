"""``cloister port``'s library without an engine: PORT[:HOSTPORT], the forwarder's
container, and what publishing does in each state (a small fake engine)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from cloister_cli.commands.main import cli
from cloister_cli.container import ports
from cloister_cli.container.ports import PortError, PortSpec
from cloister_cli.context import Context
from cloister_cli.stack.guardian import whose
from cloister_core import stack
from cloister_core.names import RESERVED_CLOISTER_PREFIX
from cloister_core.paths import CloisterPaths
from tests.fake_engine import FakeContainer, FakeEngine

INSTANCE = stack.Instance("0123abcd", os.getuid(), Path("/data"))
OTHER = stack.Instance("4567cdef", os.getuid() + 1, Path("/other"))
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
    assert INSTANCE.forwarder("my-api", 8000) == "cloister-0123abcd-guardian-port-my-api-8000"
    # No cloister can be called that: its container would be cloister-<id>-guardian-…
    prefix = f"{INSTANCE.project}-{RESERVED_CLOISTER_PREFIX}"
    assert INSTANCE.forwarder("x", 1).startswith(prefix)
    pairs = [("a", 18000), ("a-1", 8000), ("a-1-8", 1), ("a", 1)]
    names = {INSTANCE.forwarder(name, port) for name, port in pairs}
    assert len(names) == len(pairs)


# --- the forwarder's container ---------------------------------------------------------------


def cloister(
    name: str, status: str = "running", address: str = ADDRESS, instance: stack.Instance = INSTANCE
) -> FakeContainer:
    networks = {instance.cloister(name): {"IPAddress": address}} if address else {}
    return FakeContainer.of(
        instance.cloister(name),
        {**instance.labels, stack.LABEL_CLOISTER: name},
        status=status,
        NetworkSettings={"Networks": networks},
    )


def spec_plan(spec: PortSpec | None = None) -> ports.ForwarderPlan:
    owner = cloister("my-api")
    spec = spec or PortSpec(8000, 8001)
    return ports.plan(INSTANCE, cast("Any", owner), "my-api", spec, gateway=GATEWAY, image=IMAGE)


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
        "name": "cloister-0123abcd-guardian-port-my-api-8000",
        "user": f"{os.getuid()}:{os.getgid()}",
        "labels": {
            **INSTANCE.labels,
            stack.LABEL_FORWARD: "my-api",
            stack.LABEL_FORWARD_PORT: "8000",
            stack.LABEL_FORWARD_TARGET: f"{ADDRESS}:8000",
            stack.LABEL_FORWARD_CONTAINER: forwarder.cloister_id,
        },
        "network": INSTANCE.ports_net,
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


def test_a_cloister_without_an_address_on_its_network_is_refused() -> None:
    owner = cast("Any", cloister("my-api", address=""))
    with pytest.raises(
        PortError,
        match="cloister 'my-api' has no address on its network 'cloister-0123abcd-my-api'",
    ):
        ports.plan(INSTANCE, owner, "my-api", PortSpec(8000), gateway=GATEWAY, image=IMAGE)


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


def new_engine() -> FakeEngine:
    """An engine with the networks of cloisters my-api and web, whose forwarders start."""
    fake = FakeEngine()
    fake.add_network(INSTANCE.cloister("my-api"), subnet="10.213.0.0/27")
    fake.add_network(INSTANCE.cloister("web"), subnet="10.213.0.32/27")
    fake.containers.next_logs = b"cloister-forwarder: listening on 172.30.0.2:9996\n"
    return fake


@pytest.fixture
def engine() -> FakeEngine:
    fake = new_engine()
    fake.add(cloister("my-api"))
    return fake


UI_PORT = 9999  # guardian.ui_port of INSTANCE's config


def publish(engine: FakeEngine, text: str, name: str = "my-api") -> ports.Published:
    return ports.publish(
        engine.client, INSTANCE, name, ports.parse_spec(text), image=IMAGE, ui_port=UI_PORT
    )


def test_publish_creates_the_network_then_a_forwarder_on_both_networks(engine: FakeEngine) -> None:
    result = publish(engine, "8000")
    assert result.created
    assert result.forward == ports.Forward(
        "my-api", 8000, 8000, "running", "cloister-0123abcd-guardian-port-my-api-8000"
    )
    assert result.forward.host == "127.0.0.1:8000"
    assert engine.log == [
        f"network create {INSTANCE.ports_net} 172.30.0.0/16",
        "create cloister-0123abcd-guardian-port-my-api-8000",
        # the cloister's own network, before it starts
        "network connect cloister-0123abcd-my-api cloister-0123abcd-guardian-port-my-api-8000",
        "start cloister-0123abcd-guardian-port-my-api-8000",
    ]
    (kwargs,) = engine.called("containers.create")
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
    del engine.containers.by_name[INSTANCE.cloister("my-api")]
    engine.add(cloister("my-api", address="172.18.0.9"))
    found = ports.forwards(engine.client, INSTANCE, "my-api")
    assert {forward.status for forward in found} == {"stale"}
    engine.log.clear()
    result = publish(engine, "8000")
    assert result.created
    assert "rm cloister-0123abcd-guardian-port-my-api-3000" in engine.log
    assert [f.port for f in ports.forwards(engine.client, INSTANCE)] == [8000]
    assert engine.called("containers.create")[-1]["command"][1] == "172.18.0.9:8000"


def test_remove_stale_leaves_the_current_ones(engine: FakeEngine) -> None:
    engine.add(cloister("web", address="172.18.0.7"))
    publish(engine, "8000")
    publish(engine, "3000", name="web")
    del engine.containers.by_name[INSTANCE.cloister("web")]
    assert ports.remove_stale(engine.client, INSTANCE) == [
        "cloister-0123abcd-guardian-port-web-3000"
    ]
    assert [(f.cloister, f.status) for f in ports.forwards(engine.client, INSTANCE)] == [
        ("my-api", "running")
    ]


def test_another_instances_cloisters_and_forwarders_are_not_seen(engine: FakeEngine) -> None:
    publish(engine, "8000")
    engine.add(cloister("my-api", instance=OTHER))
    assert ports.forwards(engine.client, OTHER) == []
    assert ports.remove_stale(engine.client, OTHER) == []
    assert ports.remove_all(engine.client, OTHER, None) == []
    with pytest.raises(PortError, match="no cloister 'web'"):
        ports.publish(engine.client, OTHER, "web", PortSpec(8000), image=IMAGE, ui_port=UI_PORT)
    assert [f.status for f in ports.forwards(engine.client, INSTANCE)] == ["running"]


def test_an_exited_forwarder_is_made_anew(engine: FakeEngine) -> None:
    publish(engine, "8000")
    engine.containers.get(INSTANCE.forwarder("my-api", 8000)).status = "exited"
    (listed,) = ports.forwards(engine.client, INSTANCE, "my-api")
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
    engine = new_engine()
    engine.add(cloister("my-api", status=status))
    with pytest.raises(PortError) as caught:
        publish(engine, "8000")
    assert str(caught.value) == message
    assert engine.log == []


def test_no_such_cloister() -> None:
    with pytest.raises(PortError, match=r"no cloister 'ghost' \(`cloister list`\)"):
        publish(new_engine(), "8000", name="ghost")


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
    assert [f.cloister for f in ports.forwards(engine.client, INSTANCE)] == ["web"]

    engine.containers.next_start_error = (
        "Error starting userland proxy: listen tcp4 127.0.0.1:9000: bind: address already in use"
    )
    with pytest.raises(PortError, match=r"port 9000 on 127\.0\.0\.1 is taken by another program;"):
        publish(engine, "8000:9000")


def hub(
    instance: stack.Instance, host_port: int, status: str = "running", project: str | None = None
) -> FakeContainer:
    """A guardian's approval hub container publishing its port on *host_port*."""
    bindings = {f"{stack.APPROVAL_PORT}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(host_port)}]}
    return FakeContainer.of(
        instance.service("approval") if project is None else f"{project}-approval",
        {
            stack.LABEL_GUARDIAN: "true",
            ports.COMPOSE_SERVICE_LABEL: "approval",
            **(instance.labels if project is None else {}),
        },
        status=status,
        # A stopped container publishes nothing; its configured binding remains.
        NetworkSettings={"Ports": bindings if status == "running" else {}},
        HostConfig={"PortBindings": bindings},
    )


def refusal(port: int, who: str, spec: str = "8000") -> str:
    return (
        f"port {port} on 127.0.0.1 is the approval UI's ({who}): a page there would be in the"
        " hub's origin and could read its login; choose another:"
        f" `cloister port my-api {spec}:HOSTPORT` (`{spec}:0` picks a free one)"
    )


def test_the_own_approval_ui_port_is_refused_whether_the_guardian_runs_or_not(
    engine: FakeEngine,
) -> None:
    own = "guardian.ui_port in this machine's config"
    for text in (f"8000:{UI_PORT}", str(UI_PORT)):
        with pytest.raises(PortError) as caught:
            publish(engine, text)
        assert str(caught.value) == refusal(UI_PORT, own, text.partition(":")[0])
    # Nothing was made; the guardian is not even running (no hub container).
    assert engine.log == []
    assert engine.called("containers.create") == []
    # This guardian's hub, still on the port of an earlier config: refused too.
    engine.add(hub(INSTANCE, 18999, status="exited"))
    with pytest.raises(PortError) as caught:
        publish(engine, "8000:18999")
    assert str(caught.value) == refusal(
        18999, "cloister-0123abcd-guardian-approval, this guardian's approval hub"
    )
    assert publish(engine, "8000:8001").created  # any other port is fine


@pytest.mark.parametrize("status", ["running", "exited"])
def test_another_guardians_approval_ui_port_is_refused(engine: FakeEngine, status: str) -> None:
    engine.add(hub(OTHER, 18777, status=status))
    with pytest.raises(PortError) as caught:
        publish(engine, "8000:18777")
    assert str(caught.value) == refusal(
        18777,
        f"cloister-4567cdef-guardian-approval, the approval hub of {whose(OTHER.labels)} guardian",
    )
    assert "(data directory /other)" in str(caught.value)
    assert engine.called("containers.create") == []


def test_an_older_cloisters_hub_port_is_refused(engine: FakeEngine) -> None:
    engine.add(hub(INSTANCE, 9000, project=stack.LEGACY_PROJECT))
    with pytest.raises(PortError) as caught:
        publish(engine, "8000:9000")
    assert str(caught.value) == refusal(
        9000,
        "cloister-guardian-approval, the approval hub of an older Cloister's guardian",
    )


def test_a_free_port_the_engine_chose_on_a_stopped_hubs_port_is_given_back(
    engine: FakeEngine,
) -> None:
    engine.add(hub(OTHER, 49153, status="exited"))  # the fake engine's "free" port
    with pytest.raises(PortError, match=r"port 49153 on 127\.0\.0\.1 is the approval UI's"):
        publish(engine, "8000:0")
    assert ports.forwards(engine.client, INSTANCE) == []  # removed again
    assert "rm cloister-0123abcd-guardian-port-my-api-8000" in engine.log


def test_the_forwarder_on_a_host_port_is_found_for_any_instance(engine: FakeEngine) -> None:
    publish(engine, "8000:9001")
    found = ports.forwarder_on(engine.client, 9001)
    assert found is not None
    assert found.name == "cloister-0123abcd-guardian-port-my-api-8000"
    assert ports.forwarder_on(engine.client, 9002) is None


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
        "the forwarder cloister-0123abcd-guardian-port-my-api-8000 exited:"
        " cloister-forwarder: --via must be an IPv4 address"
    )
    assert ports.forwards(engine.client, INSTANCE) == []  # removed, both times


def test_remove_and_remove_all(engine: FakeEngine) -> None:
    publish(engine, "8000")
    publish(engine, "3000:0")
    removed = ports.remove(engine.client, INSTANCE, "my-api", 3000)
    assert (removed.port, removed.host) == (3000, "127.0.0.1:49153")
    with pytest.raises(PortError) as caught:
        ports.remove(engine.client, INSTANCE, "my-api", 3000)
    assert str(caught.value) == (
        "cloister 'my-api' publishes no port 3000 (`cloister port my-api --list`)"
    )
    assert ports.remove_all(engine.client, INSTANCE, "my-api") == [
        "cloister-0123abcd-guardian-port-my-api-8000"
    ]
    assert ports.forwards(engine.client, INSTANCE) == []


# --- the command -----------------------------------------------------------------------------


@pytest.fixture
def command_engine(
    engine: FakeEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> FakeEngine:
    monkeypatch.setattr(Context, "docker", property(lambda self: engine))
    monkeypatch.setattr(Context, "instance", property(lambda self: INSTANCE))
    # The command reads guardian.ui_port from the config: this one, never the real one.
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("guardian:\n  ui_port: 18777\n")
    monkeypatch.setenv("CLOISTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("CLOISTER_DATA_DIR", str(tmp_path / "data"))
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


def test_the_command_remembers_every_host_port_an_agents_page_had(
    command_engine: FakeEngine, tmp_path: Path
) -> None:
    """What the page left in a browser outlives the forward: the port stays known."""
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    assert ports.served_agents(paths) == frozenset()
    runner = CliRunner()
    assert runner.invoke(cli, ["port", "my-api", "8000:0"]).exit_code == 0
    assert runner.invoke(cli, ["port", "my-api", "8000", "--remove"]).exit_code == 0
    assert ports.served_agents(paths) == {49153}
    record = paths.guardian_dir / "agent-ports"
    assert record.read_text(encoding="ascii") == "49153\n"


def test_remembered_ports_are_kept_sorted_once_each(tmp_path: Path) -> None:
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    for port in (8000, 3000, 8000):
        ports.remember(paths, port)
    assert (paths.guardian_dir / "agent-ports").read_text(encoding="ascii") == "3000\n8000\n"
    assert ports.served_agents(paths) == {3000, 8000}


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


def test_the_command_refuses_the_configured_approval_ui_port(command_engine: FakeEngine) -> None:
    result = CliRunner().invoke(cli, ["port", "my-api", "8081:18777"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: " + refusal(18777, "guardian.ui_port in this machine's config", "8081") + "\n"
    )
    assert command_engine.called("containers.create") == []


def test_the_command_says_what_is_wrong_with_a_port(command_engine: FakeEngine) -> None:
    result = CliRunner().invoke(cli, ["port", "my-api", "99999"])
    assert result.exit_code == 1
    assert "Error: PORT must be a number from 1 to 65535, not '99999'" in result.output
