"""The guardian stack as rendered, the network guard, and the status: no Docker engine.

The compose file is rendered from this checkout's template and parsed; the topology
of DESIGN.md is asserted on the result. The networks and containers are fakes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest
from ruamel.yaml import YAML

from cloister_cli.guardian import (
    Guardian,
    GuardianError,
    GuardianStatus,
    ServiceStatus,
    port_taken,
)
from cloister_core.config.models import GlobalConfig, GuardianConfig
from cloister_core.paths import CloisterPaths

SOURCE = Path(__file__).resolve().parents[2]
SERVICES = {"proxy", "approval", "gateway", "credentials"}
IMAGES = {name: f"cloister-{name}:latest" for name in SERVICES} | {
    "credentials": "cloister-proxy:latest"  # the proxy's image, another command
}
UI_PORT = 19999


def guardian_for(paths: CloisterPaths, client: object = None, ui_port: int = UI_PORT) -> Guardian:
    config = GlobalConfig(guardian=GuardianConfig(ui_port=ui_port))
    return Guardian(paths, config, cast(docker.DockerClient, client), SOURCE)


def render(paths: CloisterPaths, ui_port: int = UI_PORT) -> dict[str, Any]:
    written = guardian_for(paths, ui_port=ui_port).render()
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
    path = guardian.render()
    assert path == paths.data_dir / "guardian" / "compose.yaml"
    assert path.stat().st_mode & 0o777 == 0o644
    first = path.read_text(encoding="utf-8")
    assert "{{" not in first
    assert first.startswith("# The Cloister guardian stack")
    guardian.render()
    assert path.read_text(encoding="utf-8") == first  # the same inputs, the same file


def test_render_needs_a_source_tree(paths: CloisterPaths) -> None:
    guardian = Guardian(paths, GlobalConfig(), cast(docker.DockerClient, None), None)
    with pytest.raises(GuardianError, match="no source tree"):
        guardian.render()


def test_networks_are_the_external_ones(stack: dict[str, Any]) -> None:
    assert stack["name"] == "cloister-guardian"
    assert stack["networks"] == {
        "cloister-net": {"name": "cloister-net", "external": True},
        "egress": {"name": "cloister-egress", "external": True},
        "control": {"name": "cloister-control", "external": True},
    }
    assert set(stack["services"]) == SERVICES


def test_which_service_is_on_which_network(stack: dict[str, Any]) -> None:
    services = stack["services"]
    assert services["proxy"]["networks"] == {
        "cloister-net": {"aliases": ["cloister-guardian-proxy"]},
        "egress": {},
        "control": {},
    }
    assert services["gateway"]["networks"] == {
        "cloister-net": {"aliases": ["cloister-guardian"]},
        "control": {},
    }
    # The credential gateway: reached by cloisters, reaches out; never the hub.
    assert services["credentials"]["networks"] == {
        "cloister-net": {"aliases": ["cloister-guardian-credentials"]},
        "egress": {},
    }
    # The hub is the human's: never on cloister-net, never on the egress network.
    assert services["approval"]["networks"] == {"control": {}}


def test_only_the_hub_publishes_a_port_and_only_on_loopback(stack: dict[str, Any]) -> None:
    services = stack["services"]
    assert services["approval"]["ports"] == [f"127.0.0.1:{UI_PORT}:9999"]
    assert "ports" not in services["proxy"]
    assert "ports" not in services["gateway"]
    assert "ports" not in services["credentials"]
    hosts = json.loads(services["approval"]["environment"]["CLOISTER_APPROVAL_PUBLIC_HOSTS"])
    assert hosts == [f"127.0.0.1:{UI_PORT}", f"localhost:{UI_PORT}"]


def test_the_ui_port_comes_from_the_config(paths: CloisterPaths) -> None:
    stack = render(paths, ui_port=8765)
    assert stack["services"]["approval"]["ports"] == ["127.0.0.1:8765:9999"]
    assert guardian_for(paths, ui_port=8765).ui_url == "http://127.0.0.1:8765/"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_is_locked_down(stack: dict[str, Any], name: str) -> None:
    service = stack["services"][name]
    assert service["user"] == f"{os.getuid()}:{os.getgid()}"
    assert service["cap_drop"] == ["ALL"]
    assert service["security_opt"] == ["no-new-privileges:true"]
    assert service["read_only"] is True
    assert service["container_name"] == f"cloister-guardian-{name}"
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


# -- networks ----------------------------------------------------------------------------


@dataclass
class FakeNetwork:
    name: str
    attrs: dict[str, Any]


@dataclass
class FakeNetworks:
    existing: list[FakeNetwork]
    created: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def list(self) -> list[FakeNetwork]:
        return self.existing

    def create(self, name: str, **options: Any) -> FakeNetwork:
        self.created.append((name, options))
        return FakeNetwork(name, {})


@dataclass
class FakeClient:
    networks: FakeNetworks


GUARDED = {"Internal": True, "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"}}


def ensure(paths: CloisterPaths, *existing: FakeNetwork) -> FakeNetworks:
    networks = FakeNetworks(list(existing))
    guardian_for(paths, FakeClient(networks)).ensure_networks()
    return networks


def test_missing_networks_are_created(paths: CloisterPaths) -> None:
    labels = {"org.cloister.guardian": "true"}
    common = {"driver": "bridge", "enable_ipv6": False, "labels": labels}
    assert ensure(paths).created == [
        (
            "cloister-net",
            {
                **common,
                "internal": True,
                "options": {"com.docker.network.bridge.inhibit_ipv4": "true"},
            },
        ),
        ("cloister-egress", {**common, "internal": False, "options": {}}),
        ("cloister-control", {**common, "internal": False, "options": {}}),
    ]


def test_existing_networks_are_kept(paths: CloisterPaths) -> None:
    networks = ensure(
        paths,
        FakeNetwork("bridge", {}),
        FakeNetwork("cloister-net", GUARDED),
        FakeNetwork("cloister-control", {"Internal": False}),
    )
    assert [name for name, _ in networks.created] == ["cloister-egress"]


@pytest.mark.parametrize(
    "attrs",
    [
        {"Internal": False, "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"}},
        {"Internal": True, "Options": {}},
        {"Internal": True},
        {"Internal": True, "Options": {"com.docker.network.bridge.inhibit_ipv4": "false"}},
        {},
    ],
    ids=["not-internal", "no-inhibit", "no-options", "inhibit-false", "nothing"],
)
def test_an_unguarded_cloister_net_is_refused(paths: CloisterPaths, attrs: dict[str, Any]) -> None:
    networks = FakeNetworks([FakeNetwork("cloister-net", attrs)])
    with pytest.raises(GuardianError) as caught:
        guardian_for(paths, FakeClient(networks)).ensure_networks()
    assert str(caught.value) == (
        "network 'cloister-net' exists but is not internal with inhibit_ipv4 and without"
        " IPv6; remove it (`docker network rm cloister-net`) and start again"
    )
    assert networks.created == []


def test_a_cloister_net_with_ipv6_is_refused(paths: CloisterPaths) -> None:
    """DESIGN.md: inhibit_ipv4 *and* no IPv6 on cloister-net; an IPv6 gateway would be
    a route to the host that inhibit_ipv4 does not close."""
    networks = FakeNetworks([FakeNetwork("cloister-net", {**GUARDED, "EnableIPv6": True})])
    with pytest.raises(GuardianError):
        guardian_for(paths, FakeClient(networks)).ensure_networks()


# -- status ------------------------------------------------------------------------------


@dataclass
class FakeContainer:
    attrs: dict[str, Any]


@dataclass
class FakeContainers:
    by_name: dict[str, FakeContainer]

    def get(self, name: str) -> FakeContainer:
        try:
            return self.by_name[name]
        except KeyError:
            raise docker.errors.NotFound(f"no such container: {name}") from None


@dataclass
class FakeEngine:
    containers: FakeContainers


@pytest.fixture
def tokens(paths: CloisterPaths) -> None:
    paths.tokens_dir.mkdir(parents=True)
    for name in ("api", "web", ".api.tmp"):  # a dot file is an atomic write in progress
        (paths.tokens_dir / name).write_text("{}", encoding="utf-8")


def test_status_of_a_stack_that_is_not_there(paths: CloisterPaths) -> None:
    status = guardian_for(paths, FakeEngine(FakeContainers({}))).status()
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
    )
    assert status.to_json()["services"][0] == {"name": "proxy", "state": "absent", "health": "-"}


def test_status_counts_tokens_and_reads_health(paths: CloisterPaths, tokens: None) -> None:
    engine = FakeEngine(
        FakeContainers(
            {
                "cloister-guardian-proxy": FakeContainer({"State": {"Status": "running"}}),
                "cloister-guardian-approval": FakeContainer(
                    {"State": {"Status": "running", "Health": {"Status": "healthy"}}}
                ),
                "cloister-guardian-gateway": FakeContainer({"State": {"Status": "exited"}}),
            }
        )
    )
    status = guardian_for(paths, engine).status()
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


def test_other_compose_failures_are_not_called_a_taken_port() -> None:
    assert port_taken("no such image: cloister-proxy", 9999, Path("c.yaml")) is None
