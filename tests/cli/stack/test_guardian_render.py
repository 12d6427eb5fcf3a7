"""The guardian stack as rendered, the network guard, and the status: no Docker engine.

The compose file is rendered from this checkout's template and parsed; the topology
of docs/architecture.md (Topology) is asserted on the result. The networks and containers are fakes.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest
from ruamel.yaml import YAML

from cloister_cli.container import ports
from cloister_cli.stack import guardian as guardian_module
from cloister_cli.stack.guardian import (
    Guardian,
    GuardianError,
    GuardianStatus,
    ServiceStatus,
    port_taken,
)
from cloister_core.config.models import GlobalConfig, GuardianConfig
from cloister_core.paths import CloisterPaths
from cloister_core.stack import LABEL_FORWARD, LABEL_FORWARD_PORT, LABEL_GUARDIAN, Instance
from tests.fake_engine import FakeEngine

SOURCE = Path(__file__).resolve().parents[3]
SERVICES = {"proxy", "approval", "gateway", "credentials"}
IMAGES = {name: f"cloister-{name}:latest" for name in SERVICES} | {
    "credentials": "cloister-proxy:latest"  # the proxy's image, another command
}
UI_PORT = 19999
# What the proxy and the credential gateway must never dial: the pool, and the stack's.
NEVER = ["10.213.0.0/16", "172.30.0.0/16", "172.31.0.0/16", "172.29.0.0/16"]


def instance_of(paths: CloisterPaths) -> Instance:
    return Instance.of(paths, os.getuid())


def guardian_for(paths: CloisterPaths, client: object = None, ui_port: int = UI_PORT) -> Guardian:
    config = GlobalConfig(guardian=GuardianConfig(ui_port=ui_port))
    return Guardian(paths, config, cast(docker.DockerClient, client), SOURCE, instance_of(paths))


def render(paths: CloisterPaths, ui_port: int = UI_PORT) -> dict[str, Any]:
    written = guardian_for(paths, ui_port=ui_port).render(NEVER)
    assert written == paths.compose_file
    document: dict[str, Any] = YAML(typ="safe").load(written.read_text(encoding="utf-8"))
    return document


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def stack(paths: CloisterPaths) -> dict[str, Any]:
    return render(paths)


def volumes(service: dict[str, Any]) -> dict[str, str]:
    """Container path → ``host`` or ``host:ro`` of each (long-syntax bind) volume."""
    found = {}
    for spec in service["volumes"]:
        assert spec["type"] == "bind"
        found[spec["target"]] = spec["source"] + (":ro" if spec.get("read_only") else "")
    return found


# -- render ------------------------------------------------------------------------------


def test_render_writes_the_compose_file(paths: CloisterPaths) -> None:
    guardian = guardian_for(paths)
    path = guardian.render(NEVER)
    assert path == paths.data_dir / "guardian" / "compose.yaml"
    assert path.stat().st_mode & 0o777 == 0o644
    first = path.read_text(encoding="utf-8")
    assert "{{" not in first
    assert first.startswith("# The Cloister guardian stack")
    guardian.render(NEVER)
    assert path.read_text(encoding="utf-8") == first  # the same inputs, the same file


def test_render_needs_a_source_tree(paths: CloisterPaths) -> None:
    guardian = Guardian(
        paths, GlobalConfig(), cast(docker.DockerClient, None), None, instance_of(paths)
    )
    with pytest.raises(GuardianError, match="no source tree"):
        guardian.render(NEVER)


def test_networks_are_the_instances_external_ones(
    stack: dict[str, Any], paths: CloisterPaths
) -> None:
    instance = instance_of(paths)
    assert stack["name"] == f"cloister-{instance.id}"
    assert stack["networks"] == {
        "egress": {"name": f"cloister-{instance.id}-guardian-egress", "external": True},
        "control": {"name": f"cloister-{instance.id}-guardian-control", "external": True},
    }
    assert set(stack["services"]) == SERVICES


def test_which_service_is_on_which_network(stack: dict[str, Any]) -> None:
    # The cloisters' own networks are not in the file: the CLI connects the proxy, the
    # hostexec gateway and the credential gateway to each (cloister_cli.container.networks).
    services = stack["services"]
    assert services["proxy"]["networks"] == {"egress": {}, "control": {}}
    assert services["gateway"]["networks"] == {"control": {}}
    # The credential gateway reaches out; never the hub.
    assert services["credentials"]["networks"] == {"egress": {}}
    # The hub is the human's: never on a cloister's network, never on the egress network.
    assert services["approval"]["networks"] == {"control": {}}


def test_the_dialling_services_are_told_the_networks_they_must_never_dial(
    stack: dict[str, Any],
) -> None:
    services = stack["services"]
    proxy = services["proxy"]["environment"]["CLOISTER_PROXY_GUARDIAN_NETWORKS"]
    credentials = services["credentials"]["environment"]["CLOISTER_CREDENTIALS_GUARDIAN_NETWORKS"]
    assert json.loads(proxy) == json.loads(credentials) == NEVER


def test_only_the_hub_publishes_a_port_and_only_on_loopback(stack: dict[str, Any]) -> None:
    services = stack["services"]
    assert services["approval"]["ports"] == [f"127.0.0.1:{UI_PORT}:9999"]
    assert "ports" not in services["proxy"]
    assert "ports" not in services["gateway"]
    assert "ports" not in services["credentials"]
    hosts = json.loads(services["approval"]["environment"]["CLOISTER_APPROVAL_PUBLIC_HOSTS"])
    assert hosts == [f"127.0.0.1:{UI_PORT}"]  # not localhost: it may be ::1, someone else's


def test_the_ui_port_comes_from_the_config(paths: CloisterPaths) -> None:
    stack = render(paths, ui_port=8765)
    assert stack["services"]["approval"]["ports"] == ["127.0.0.1:8765:9999"]
    assert guardian_for(paths, ui_port=8765).ui_url == "http://127.0.0.1:8765/"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_is_locked_down(
    stack: dict[str, Any], paths: CloisterPaths, name: str
) -> None:
    service = stack["services"][name]
    assert service["user"] == f"{os.getuid()}:{os.getgid()}"
    assert service["cap_drop"] == ["ALL"]
    assert service["security_opt"] == ["no-new-privileges:true"]
    assert service["read_only"] is True
    instance = instance_of(paths)
    assert service["container_name"] == f"cloister-{instance.id}-guardian-{name}"
    assert service["labels"] == {
        LABEL_GUARDIAN: "true",
        "org.cloister.instance": instance.id,
        "org.cloister.owner": str(os.getuid()),
        "org.cloister.data-dir": str(paths.data_dir.resolve()),
    }
    # Limits on each; none forwards packets between the networks it is on.
    assert service["mem_limit"] == ("1g" if name == "proxy" else "512m")
    assert service["pids_limit"] == (512 if name == "proxy" else 256)
    assert service["sysctls"] == {"net.ipv4.ip_forward": "0"}
    assert service["image"] == IMAGES[name]
    for key in ("privileged", "network_mode", "pid", "ipc", "cap_add", "devices"):
        assert key not in service
    assert not any("docker.sock" in spec["source"] for spec in service["volumes"])


def test_mounts(stack: dict[str, Any], paths: CloisterPaths) -> None:
    credential = paths.guardian_dir / "service.credential"
    config, audit, logs = str(paths.config_dir), str(paths.audit_log), str(paths.logs_dir)
    services = stack["services"]
    assert volumes(services["proxy"]) == {
        "/config": f"{config}:ro",
        "/run/secrets/service.credential": f"{credential}:ro",
        "/audit/audit.log": audit,
        "/logs": logs,
    }
    # Only the hub writes, and only the decisions; tokens and config stay read-only.
    assert volumes(services["approval"]) == {
        "/config": f"{config}:ro",
        "/config/decisions": f"{config}/decisions",
        "/run/secrets/service.credential": f"{credential}:ro",
        "/run/secrets/hub.secret": f"{paths.data_dir / 'guardian' / 'hub.secret'}:ro",
        # The directory `cloister guardian logout` writes revoked-before to.
        "/run/secrets/hub-sessions": f"{paths.data_dir / 'guardian' / 'hub-sessions'}:ro",
        "/audit/audit.log": audit,
        "/logs": logs,
    }
    # Only the gateway sees the executor's socket directory, read-only.
    assert volumes(services["gateway"]) == {
        "/config": f"{config}:ro",
        "/run/cloister": f"{paths.data_dir / 'run'}:ro",
        "/run/secrets/service.credential": f"{credential}:ro",
        "/audit/audit.log": audit,
        "/logs": logs,
    }
    # Only the credential gateway sees the stored credentials, read-only; none of the
    # others mounts anything holding them (the config dir is mounted everywhere).
    assert volumes(services["credentials"]) == {
        "/config": f"{config}:ro",
        "/secrets": f"{paths.data_dir / 'credentials'}:ro",
        "/audit/audit.log": audit,
        "/logs": logs,
    }
    secrets = paths.data_dir / "credentials"
    for name in SERVICES - {"credentials"}:
        for source in volumes(services[name]).values():
            host = Path(source.removesuffix(":ro"))
            assert not secrets.is_relative_to(host), (name, host)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_writes_the_cloisters_logs(stack: dict[str, Any], name: str) -> None:
    """Each service appends a cloister's lines to <data>/logs/<cloister>.log (read-write,
    as the host user; nothing else of <data> but audit.log is writable)."""
    service = stack["services"][name]
    prefix = "CLOISTER_" + name.upper()
    assert service["environment"][f"{prefix}_AUDIT_LOG"] == "/audit/audit.log"
    assert service["environment"][f"{prefix}_CLOISTER_LOGS"] == "/logs"
    (mount,) = [spec for spec in service["volumes"] if spec["target"] == "/logs"]
    assert mount["source"].endswith("/data/logs")
    assert not mount.get("read_only")


def test_start_makes_the_logs_directory(paths: CloisterPaths) -> None:
    guardian_for(paths)._ensure_files()
    assert paths.logs_dir.is_dir()
    assert paths.logs_dir.stat().st_mode & 0o777 == 0o700


def test_only_the_hub_has_the_hub_secret(stack: dict[str, Any], paths: CloisterPaths) -> None:
    """The human's credential: read-only in the hub, in no other service (the proxy and
    the gateway on the control network reach the hub, but cannot decide)."""
    secret = paths.data_dir / "guardian" / "hub.secret"
    services = stack["services"]
    approval = services["approval"]
    (mount,) = [spec for spec in approval["volumes"] if spec["target"] == "/run/secrets/hub.secret"]
    assert mount == {
        "type": "bind",
        "source": str(secret),
        "target": "/run/secrets/hub.secret",
        "read_only": True,
    }
    assert approval["environment"]["CLOISTER_APPROVAL_HUB_SECRET_FILE"] == "/run/secrets/hub.secret"
    for name in SERVICES - {"approval"}:
        for source in volumes(services[name]).values():
            host = Path(source.removesuffix(":ro"))
            assert not secret.is_relative_to(host), (name, host)
        assert not any("HUB_SECRET" in key for key in services[name].get("environment", {}))


def test_start_writes_the_hub_secret_once(paths: CloisterPaths) -> None:
    guardian = guardian_for(paths)
    guardian._ensure_files()
    secret = paths.data_dir / "guardian" / "hub.secret"
    assert guardian.hub_secret_file == secret
    assert secret.stat().st_mode & 0o777 == 0o600
    first = secret.read_text(encoding="utf-8")
    assert len(first.strip()) == 64
    assert int(first, 16) >= 0  # hex
    guardian._ensure_files()
    assert secret.read_text(encoding="utf-8") == first  # kept: browser logins survive
    assert first != (paths.data_dir / "guardian" / "service.credential").read_text()


def test_services_reach_the_hub_on_the_control_network(stack: dict[str, Any]) -> None:
    services = stack["services"]
    assert services["proxy"]["environment"]["CLOISTER_PROXY_APPROVAL_URL"] == "http://approval:9999"
    gateway = services["gateway"]["environment"]
    assert gateway["CLOISTER_GATEWAY_APPROVAL_URL"] == "http://approval:9999"


@pytest.mark.parametrize("directory", ["with space", "number #1", "a: colon", 'quote "it"'])
def test_paths_with_unusual_characters_render_as_they_are(tmp_path: Path, directory: str) -> None:
    """Home directories and $CLOISTER_*_DIR may hold spaces; a ' #' in one must not
    start a YAML comment in the rendered file (cutting the volume to its first part)."""
    paths = CloisterPaths(tmp_path / directory / "config", tmp_path / directory / "data")
    stack = render(paths)
    assert volumes(stack["services"]["proxy"])["/config"] == f"{paths.config_dir}:ro"
    # Refusals name the files the human edits: the host's config directory, as data.
    proxy, gateway = stack["services"]["proxy"], stack["services"]["gateway"]
    assert proxy["environment"]["CLOISTER_PROXY_HOST_CONFIG_DIR"] == str(paths.config_dir)
    assert gateway["environment"]["CLOISTER_GATEWAY_HOST_CONFIG_DIR"] == str(paths.config_dir)


def test_start_moves_the_go_implementations_approvals(paths: CloisterPaths) -> None:
    old = paths.config_dir / "approvals" / "projects" / "api.yaml"
    old.parent.mkdir(parents=True)
    old.write_text("proxy:\n  allow:\n    - domain: a.test\n", encoding="utf-8")
    guardian_for(paths)._ensure_files()
    assert paths.project_decisions("api").read_text(encoding="utf-8").endswith("a.test\n")
    assert not (paths.config_dir / "approvals").exists()


# -- networks ----------------------------------------------------------------------------


def ensure(
    paths: CloisterPaths, engine: FakeEngine | None = None
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The networks ``ensure_networks`` created (name, options) on *engine*, and what it
    says never to dial."""
    engine = engine or FakeEngine()
    never = guardian_for(paths, engine.client).ensure_networks()
    created = [
        (call["name"], {key: value for key, value in call.items() if key != "name"})
        for call in engine.called("networks.create")
    ]
    return created, never


def test_missing_networks_are_created_and_their_subnets_never_dialled(
    paths: CloisterPaths,
) -> None:
    instance = instance_of(paths)
    labels = {"org.cloister.guardian": "true", **instance.labels}
    common = {"driver": "bridge", "enable_ipv6": False, "check_duplicate": True, "labels": labels}
    created, never = ensure(paths)
    assert created == [
        (
            instance.ports_net,
            {
                **common,
                "internal": False,
                "options": {"com.docker.network.bridge.enable_icc": "false"},
            },
        ),
        (instance.egress_net, {**common, "internal": False}),
        (instance.control_net, {**common, "internal": False}),
    ]
    # The cloisters' pool, then egress, control and ports (the engine's subnets, in the
    # order it made them: ports first).
    assert never == ["10.213.0.0/16", "172.31.0.0/16", "172.32.0.0/16", "172.30.0.0/16"]


def test_existing_networks_are_kept(paths: CloisterPaths) -> None:
    instance = instance_of(paths)
    engine = FakeEngine()
    engine.add_network("bridge", subnet="172.17.0.0/16")
    engine.add_network(instance.control_net, subnet="172.20.0.0/16", labels=instance.labels)
    created, never = ensure(paths, engine)
    assert [name for name, _ in created] == [instance.ports_net, instance.egress_net]
    assert "172.20.0.0/16" in never


def test_a_network_of_the_instances_name_that_is_not_its_own_is_refused(
    paths: CloisterPaths,
) -> None:
    instance = instance_of(paths)
    theirs = {"org.cloister.instance": "ffffffff", "org.cloister.owner": "0"}
    engine = FakeEngine()
    engine.add_network(instance.egress_net, labels=theirs)
    with pytest.raises(GuardianError, match=rf"{instance.egress_net} is user root's"):
        guardian_for(paths, engine.client).ensure_networks()


def hub_on(port: int, labels: dict[str, str], name: str) -> FakeEngine:
    """An engine where a guardian's hub, *name*, publishes *port*."""
    engine = FakeEngine()
    published = {"9999/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    engine.add_container(
        name, {LABEL_GUARDIAN: "true", **labels}, NetworkSettings={"Ports": published}
    )
    return engine


def test_another_guardians_hub_on_the_ui_port_is_named(paths: CloisterPaths) -> None:
    user = pwd.getpwuid(os.getuid()).pw_name
    theirs = {
        "org.cloister.instance": "ffffffff",
        "org.cloister.owner": str(os.getuid()),
        "org.cloister.data-dir": "/elsewhere/data",
    }
    engine = hub_on(UI_PORT, theirs, "cloister-ffffffff-guardian-approval")
    with pytest.raises(GuardianError) as caught:
        guardian_for(paths, engine.client).check_hub_port()
    assert str(caught.value) == (
        f"port {UI_PORT} is published by cloister-ffffffff-guardian-approval, the approval hub"
        f" of user {user}'s (data directory /elsewhere/data) guardian; set"
        f" `guardian: {{ui_port: PORT}}` in {paths.config_file} to a free port"
    )
    # Another port: no concern of this guardian's.
    guardian_for(paths, engine.client, ui_port=UI_PORT + 1).check_hub_port()


def test_the_hub_never_goes_where_an_agents_page_was(paths: CloisterPaths) -> None:
    """A browser keeps what a page left in its origin (cached answers, a service worker):
    the approval UI must not take over a port `cloister port` served an agent's page on."""
    engine = FakeEngine().client
    guardian_for(paths, engine).check_agents_were_not_there()  # none yet
    ports.remember(paths, UI_PORT)
    with pytest.raises(GuardianError) as caught:
        guardian_for(paths, engine).check_agents_were_not_there()
    assert str(caught.value).startswith(
        f"guardian.ui_port {UI_PORT} is a port where `cloister port` served an agent's page;"
    )
    assert f"in {paths.config_file} to another port" in str(caught.value)
    guardian_for(paths, engine, ui_port=UI_PORT + 1).check_agents_were_not_there()


def test_an_older_cloisters_stack_is_named_with_how_to_remove_it(paths: CloisterPaths) -> None:
    legacy = hub_on(UI_PORT, {}, "cloister-guardian-approval")
    with pytest.raises(GuardianError) as caught:
        guardian_for(paths, legacy.client).check_hub_port()
    assert "the guardian of an older Cloister" in str(caught.value)
    assert "docker compose -p cloister-guardian down" in str(caught.value)


# -- status ------------------------------------------------------------------------------


@pytest.fixture
def tokens(paths: CloisterPaths) -> None:
    paths.tokens_dir.mkdir(parents=True)
    for name in ("api", "web", ".api.tmp"):  # a dot file is an atomic write in progress
        (paths.tokens_dir / name).write_text("{}", encoding="utf-8")


def test_status_of_a_stack_that_is_not_there(paths: CloisterPaths) -> None:
    status = guardian_for(paths, FakeEngine().client).status()
    assert status == GuardianStatus(
        running=False,
        services=tuple(
            ServiceStatus(name, "absent", "-")
            for name in ("proxy", "approval", "gateway", "credentials")
        ),
        executor_pid=None,
        tokens=0,
        ui=f"http://127.0.0.1:{UI_PORT}/",
        compose_file=str(paths.compose_file),
        project=instance_of(paths).project,
    )
    assert status.to_json()["services"][0] == {"name": "proxy", "state": "absent", "health": "-"}


def test_status_counts_tokens_and_reads_health(paths: CloisterPaths, tokens: None) -> None:
    instance = instance_of(paths)
    mine = instance.labels
    engine = FakeEngine()
    engine.add_container(instance.service("proxy"), mine, status="running")
    engine.add_container(instance.service("approval"), mine, status="running", health="healthy")
    engine.add_container(instance.service("gateway"), mine, status="exited")
    status = guardian_for(paths, engine.client).status()
    assert status.services == (
        ServiceStatus("proxy", "running", "-"),
        ServiceStatus("approval", "running", "healthy"),
        ServiceStatus("gateway", "exited", "-"),
        ServiceStatus("credentials", "absent", "-"),
    )
    assert status.tokens == 2
    assert status.running is False  # a service is down, and no executor runs
    assert json.loads(json.dumps(status.to_json()))["tokens"] == 2


@pytest.mark.parametrize(
    "detail",
    [
        "Error response from daemon: driver failed programming external connectivity on"
        " endpoint cloister-guardian-approval: Error starting userland proxy: listen tcp4"
        " 127.0.0.1:9999: bind: address already in use",
        "Error response from daemon: Bind for 127.0.0.1:9999 failed: port is already allocated",
    ],
)
def test_a_taken_ui_port_is_one_line_that_says_what_to_do(detail: str) -> None:
    message = port_taken(detail, 9999, Path("/home/me/.config/cloister/config.yaml"))
    assert message == (
        "port 9999 on 127.0.0.1 (the approval UI) is taken by another program; free it, or"
        " set `guardian: {ui_port: PORT}` in /home/me/.config/cloister/config.yaml to a free"
        " port, then run `cloister guardian start` again"
    )


def forwarder_on(port: int, labels: dict[str, str], name: str) -> FakeEngine:
    """An engine where a `cloister port` forwarder, *name*, publishes *port*."""
    engine = FakeEngine()
    published = {"9996/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    forward = {LABEL_FORWARD: "repob", LABEL_FORWARD_PORT: "8081"}
    engine.add_container(name, {**labels, **forward}, NetworkSettings={"Ports": published})
    return engine


# How the guardian asks for the forwarders: the running ones, by their label.
FORWARDERS_ASKED = [{"all": False, "filters": {"label": [LABEL_FORWARD]}}]


def test_a_cloister_port_on_the_ui_port_is_named_with_how_to_free_it(
    paths: CloisterPaths,
) -> None:
    detail = "Bind for 127.0.0.1:9999 failed: port is already allocated"
    mine = forwarder_on(UI_PORT, instance_of(paths).labels, "cloister-x-guardian-port-repob-8081")
    guardian = guardian_for(paths, mine.client)
    message = port_taken(detail, UI_PORT, paths.config_file, guardian._forwarder_on_ui_port)
    assert mine.called("containers.list") == FORWARDERS_ASKED
    assert message == (
        f"port {UI_PORT} on 127.0.0.1 (the approval UI) is taken by `cloister port`: port 8081"
        " of cloister repob; `cloister port repob 8081 --remove` frees it, or set"
        f" `guardian: {{ui_port: PORT}}` in {paths.config_file} to a free port, then run"
        " `cloister guardian start` again"
    )
    theirs = {
        "org.cloister.instance": "ffffffff",
        "org.cloister.owner": "0",
        "org.cloister.data-dir": "/elsewhere/data",
    }
    other = forwarder_on(UI_PORT, theirs, "cloister-ffffffff-guardian-port-repob-8081")
    guardian = guardian_for(paths, other.client)
    assert guardian._forwarder_on_ui_port() == (
        "`cloister port` of user root's (data directory /elsewhere/data) guardian"
        " (cloister-ffffffff-guardian-port-repob-8081, port 8081 of its cloister repob);"
        " its owner can remove it"
    )
    elsewhere = forwarder_on(UI_PORT + 1, theirs, "cloister-ffffffff-guardian-port-repob-8081")
    guardian = guardian_for(paths, elsewhere.client)
    assert guardian._forwarder_on_ui_port() is None  # then: "another program"
    assert other.called("containers.list") == FORWARDERS_ASKED
    assert elsewhere.called("containers.list") == FORWARDERS_ASKED


def test_other_compose_failures_are_not_called_a_taken_port() -> None:
    assert port_taken("no such image: cloister-proxy", 9999, Path("c.yaml")) is None


@pytest.mark.parametrize(
    ("started", "seconds"),
    [
        ("2026-11-26T20:51:14.123456789Z", 1795726274.123456),
        ("2026-11-26T21:51:14+01:00", 1795726274.0),
        ("0001-01-01T00:00:00Z", 0.0),  # never started: the engine's zero time
        ("", 0.0),
        ("yesterday", 0.0),
    ],
)
def test_a_services_current_run_starts_when_the_engine_says(started: str, seconds: float) -> None:
    """Readiness reads only the current run's log: a service that crashed and was started
    again keeps the "listening" line of its earlier run."""
    assert guardian_module.started_at({"State": {"StartedAt": started}}) == pytest.approx(seconds)
