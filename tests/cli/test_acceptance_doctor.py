"""``cloister doctor`` on a real engine: a sealed cloister passes every check, and each
way of weakening one on purpose (as a person tampering with it would) makes doctor
report that failure, and only the checks that follow from it.

A cloister is weakened by recreating its container from its own ``docker inspect``
document with one change (same name, labels, network and address, so its token stays
valid), and put back the same way; the hub likewise. The guardian stopped comes last.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import docker
import pytest

from cloister_core import stack
from tests.cli.cli_support import (
    CloisterCli,
    Result,
    container,
    guardian,
    make_repo,
    remove_containers,
    unique,
)
from tests.cli.test_acceptance import CONFIG
from tests.waiting import free_port

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

EGRESS = frozenset(
    {
        "egress.tcp",
        "egress.udp",
        "egress.ipv6",
        "egress.route",
        "egress.dns",
    }
)


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    config = CONFIG + f"guardian:\n  ui_port: {free_port()}\n"
    with guardian(docker_client, tmp_path_factory.mktemp("doctor"), config, skip_or_fail) as tool:
        yield tool


@pytest.fixture(scope="module")
def cloister(cli: CloisterCli, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    name = unique("doctor")
    repository = make_repo(tmp_path_factory.mktemp("doctor-repo") / name)
    try:
        cli.ok("start", "-d", cwd=repository)
        yield name
    finally:
        cli.run("stop", name)
        remove_containers([name])


def doctor(cli: CloisterCli, name: str) -> tuple[Result, dict[str, Any]]:
    """``cloister doctor NAME --json``: the result and its document (exit 0 or 1)."""
    result = cli.run("doctor", name, "--json")
    assert result.returncode in (0, 1), result.describe()
    assert "Traceback" not in result.output, result.describe()
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["passed"] is (result.returncode == 0), result.describe()
    return result, document


def failures(document: dict[str, Any]) -> dict[str, str]:
    return {check["id"]: check["evidence"] for check in document["checks"] if not check["passed"]}


def assert_fails(
    cli: CloisterCli,
    name: str,
    required: set[str],
    allowed: frozenset[str] | set[str] = frozenset(),
) -> dict[str, str]:
    """Doctor fails every check of *required*, and none but those and *allowed*."""
    result, document = doctor(cli, name)
    failed = failures(document)
    assert result.returncode == 1, result.describe()
    assert required <= set(failed), result.describe()
    assert set(failed) <= required | allowed, result.describe()
    return failed


# -- recreating a container from its inspect document ------------------------------------------


def recreate(client: docker.DockerClient, document: dict[str, Any], *, pin_address: bool) -> None:
    """Replace the container of *document* (its inspect document) by one made from it:
    the same name, image, command, user, environment, labels, host config and networks
    (with its address, when *pin_address*: the network's subnet is explicit)."""
    config = document["Config"]
    client.api.remove_container(document["Id"], force=True)
    endpoints = {}
    for network, settings in document["NetworkSettings"]["Networks"].items():
        aliases = [alias for alias in settings.get("Aliases") or [] if alias != document["Id"][:12]]
        endpoint: dict[str, Any] = {"Aliases": aliases}
        if pin_address:
            endpoint["IPAMConfig"] = {"IPv4Address": settings["IPAddress"]}
        endpoints[network] = endpoint
    first, *others = endpoints
    made = client.api.create_container(
        image=config["Image"],
        command=config["Cmd"],
        entrypoint=config["Entrypoint"],
        user=config["User"],
        environment=config["Env"],
        labels=config["Labels"],
        working_dir=config["WorkingDir"],
        hostname=config["Hostname"],
        ports=list(config.get("ExposedPorts") or {}),
        name=document["Name"].removeprefix("/"),
        host_config=document["HostConfig"],
        networking_config={"EndpointsConfig": {first: endpoints[first]}},
    )
    for network in others:
        client.api.connect_container_to_network(made["Id"], network, **_lower(endpoints[network]))
    client.api.start(made["Id"])


def _lower(endpoint: dict[str, Any]) -> dict[str, Any]:
    pinned = endpoint.get("IPAMConfig") or {}
    return {"aliases": endpoint["Aliases"], "ipv4_address": pinned.get("IPv4Address")}


@contextlib.contextmanager
def tampered(
    client: docker.DockerClient,
    name: str,
    change: Callable[[dict[str, Any]], None],
    *,
    pin_address: bool,
) -> Iterator[None]:
    """Container *name* recreated with *change* made to its inspect document, for the
    block; then recreated as it was."""
    original = client.api.inspect_container(name)
    changed = copy.deepcopy(original)
    change(changed)
    recreate(client, changed, pin_address=pin_address)
    try:
        yield
    finally:
        recreate(
            client,
            client.api.inspect_container(name) | _restored(original),
            pin_address=pin_address,
        )


def _restored(original: dict[str, Any]) -> dict[str, Any]:
    """What of *original* a recreation takes (the rest is the current container's)."""
    return {"Config": original["Config"], "HostConfig": original["HostConfig"]}


# -- the tests ---------------------------------------------------------------------------------


def test_a_sealed_cloister_passes_every_check(
    cli: CloisterCli, cloister: str, docker_client: docker.DockerClient
) -> None:
    result, document = doctor(cli, cloister)
    assert result.returncode == 0, result.describe()
    assert failures(document) == {}
    families = {check["family"] for check in document["checks"]}
    assert families == {"egress", "unreachable", "proxy", "identity", "fail-closed", "engine"}
    assert {check["source"] for check in document["checks"]} == {"network", "engine"}
    assert no_sidecars(docker_client, cloister)
    print(f"cloister doctor: {document['seconds']:.2f}s of checks, {result.seconds:.2f}s in all")
    table = cli.run("doctor", cloister)
    assert table.returncode == 0, table.describe()
    assert "checks passed" in table.stderr, table.describe()
    # The start checked this engine once, and remembered it.
    record = json.loads((cli.data_dir / "engines.json").read_text(encoding="utf-8"))
    assert docker_client.info()["ID"] in record["engines"]


def test_a_second_network_is_reported(
    cli: CloisterCli, cloister: str, docker_client: docker.DockerClient
) -> None:
    bridge = docker_client.networks.get("bridge")
    bridge.connect(container(cloister))
    try:
        failed = assert_fails(cli, cloister, {"engine.attached", "fail-closed.interfaces"}, EGRESS)
        assert "bridge" in failed["engine.attached"]
    finally:
        bridge.disconnect(container(cloister), force=True)
    assert doctor(cli, cloister)[0].returncode == 0


def test_a_mounted_docker_socket_is_reported(
    cli: CloisterCli, cloister: str, docker_client: docker.DockerClient
) -> None:
    def mount_socket(document: dict[str, Any]) -> None:
        socket = "/var/run/docker.sock"
        mounts = document["HostConfig"].setdefault("Mounts", None) or []
        mounts.append({"Type": "bind", "Source": socket, "Target": socket})
        document["HostConfig"]["Mounts"] = mounts

    with tampered(docker_client, container(cloister), mount_socket, pin_address=True):
        # A writable mount of the host outside /work, too.
        failed = assert_fails(cli, cloister, {"engine.docker-socket", "unreachable.filesystem"})
        assert "/var/run/docker.sock" in failed["unreachable.filesystem"]
    assert doctor(cli, cloister)[0].returncode == 0


def test_an_added_capability_is_reported(
    cli: CloisterCli, cloister: str, docker_client: docker.DockerClient
) -> None:
    def add_net_raw(document: dict[str, Any]) -> None:
        document["HostConfig"]["CapAdd"] = ["NET_RAW"]

    with tampered(docker_client, container(cloister), add_net_raw, pin_address=True):
        failed = assert_fails(cli, cloister, {"engine.capabilities"})
        assert "NET_RAW" in failed["engine.capabilities"]
    assert doctor(cli, cloister)[0].returncode == 0


def test_what_the_agent_writes_in_its_cloister_does_not_answer_for_the_probe(
    cli: CloisterCli, cloister: str, docker_client: docker.DockerClient
) -> None:
    """A perl of the agent's that says every check passes, and an /etc/hosts that sends
    the proxy's name elsewhere: the probe runs in its own sidecar, to addresses."""
    name = container(cloister)
    forged = "#!/bin/sh\n" + "".join(
        f"printf '{check}\\tpass\\tforged\\n'\n"
        for check in ("egress.tcp", "fail-closed.interfaces")
    )
    forge = (
        'mv /usr/bin/perl /usr/bin/perl.real && printf %s "$FORGED" > /usr/bin/perl'
        " && chmod 755 /usr/bin/perl && echo '192.0.2.1 cloister-guardian-proxy' >> /etc/hosts"
    )
    as_root(docker_client, name, forge, FORGED=forged)
    bridge = docker_client.networks.get("bridge")
    bridge.connect(name)
    try:
        failed = assert_fails(cli, cloister, {"engine.attached", "fail-closed.interfaces"}, EGRESS)
        assert "forged" not in " ".join(failed.values())
    finally:
        bridge.disconnect(name, force=True)
    # Sealed again, with the agent's perl and /etc/hosts still in place: all pass.
    result, document = doctor(cli, cloister)
    assert result.returncode == 0, result.describe()
    assert "forged" not in json.dumps(document)
    as_root(docker_client, name, "mv /usr/bin/perl.real /usr/bin/perl")
    assert no_sidecars(docker_client, cloister)


def as_root(client: docker.DockerClient, name: str, script: str, **environment: str) -> None:
    code, output = client.containers.get(name).exec_run(
        ["sh", "-c", script], user="0", environment=environment
    )
    assert code == 0, output


def no_sidecars(client: docker.DockerClient, cloister: str) -> bool:
    """No probe sidecar of *cloister* is left."""
    found = client.containers.list(all=True, filters={"label": stack.LABEL_DOCTOR})
    return not [each for each in found if each.labels[stack.LABEL_DOCTOR] == container(cloister)]


def test_a_hub_published_on_every_address_is_reported(
    cli: CloisterCli, cloister: str, docker_client: docker.DockerClient
) -> None:
    def publish_widely(document: dict[str, Any]) -> None:
        for bindings in document["HostConfig"]["PortBindings"].values():
            for binding in bindings:
                binding["HostIp"] = "0.0.0.0"

    hub = cli.instance.service("approval")
    with tampered(docker_client, hub, publish_widely, pin_address=False):
        failed = assert_fails(cli, cloister, {"engine.hub-published"})
        assert "0.0.0.0" in failed["engine.hub-published"]
    assert doctor(cli, cloister)[0].returncode == 0


def test_a_stopped_guardian_is_reported(cli: CloisterCli, cloister: str) -> None:
    """Last: the guardian is started again for the cleanup, but nothing after needs it."""
    cli.ok("guardian", "stop")
    try:
        failed = assert_fails(
            cli,
            cloister,
            {
                "engine.guardian",
                "proxy.literals",
                "proxy.services",
                "identity.random-token",
                "identity.no-token",
            },
        )
        assert "not there" in failed["engine.guardian"]
    finally:
        cli.ok("guardian", "start", timeout=300)
    assert doctor(cli, cloister)[0].returncode == 0
