"""Issue 22 acceptance: dev container Features through the real CLI and a real engine.

A project FROM the local ``debian:bookworm-slim`` with one local Feature and two OCI
Features from a fake registry on this host's loopback (:mod:`tests.registry`; the fetch
is on the host, never in a cloister): ``app`` depends on ``base`` with an option set.
``cloister start`` fetches them, writes the lock file, installs each as root in its own
layers in install order (each install.sh records its options and its turn), and the
cloister sees what they wrote and their ``containerEnv``. A Feature asking for
``privileged`` and ``capAdd`` starts without them, and the start says so. A second
start reuses the image and asks nothing of the registry.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from cloister_cli.images.projectimages import PROJECT_LABEL
from tests.cli.cli_support import (
    BASE_IMAGE,
    SLIM_IMAGE,
    CloisterCli,
    exec_ok,
    guardian,
    inspect,
    make_repo,
    remove_containers,
    squash,
    unique,
)
from tests.cli.images.features.conftest import make_feature
from tests.registry import FakeRegistry

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

# Each install.sh appends its name, its options and who ran it to /opt/features.log.
RECORD = """#!/bin/sh
set -e
options="${{FLAVOUR:-}}${{LOUD:-}}${{GREETING:-}}"
echo "{name} $(id -u) $options ${{_REMOTE_USER}}" >> /opt/features.log
"""


@pytest.fixture(scope="module")
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry(auth=True) as served:
        yield served


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
    registry: FakeRegistry,
) -> Iterator[CloisterCli]:
    config = (
        "# Written by tests/cli/test_acceptance_features.py\n"
        f"defaults:\n  image: {SLIM_IMAGE}\n"
        f'devcontainer:\n  trusted_features:\n    - "{registry.host}/"\n'
    )
    root = tmp_path_factory.mktemp("cloister-features")
    with guardian(docker_client, root, config, skip_or_fail) as tool:
        yield tool


@pytest.fixture
def project(docker_client: docker.DockerClient) -> Iterator[str]:
    name = unique("feat")
    try:
        yield name
    finally:
        remove_containers([name])
        for image in docker_client.images.list(filters={"label": f"{PROJECT_LABEL}={name}"}):
            docker_client.images.remove(str(image.id), force=True)


def _publish(registry: FakeRegistry, sources: Path) -> tuple[str, str]:
    base = make_feature(
        sources / "base",
        "base",
        script=RECORD.format(name="base"),
        options={"flavour": {"type": "string", "default": "plain"}},
        containerEnv={"BASE_HOME": "/opt/base"},
    )
    app = make_feature(
        sources / "app",
        "app",
        script=RECORD.format(name="app"),
        options={"loud": {"type": "boolean", "default": False}},
        dependsOn={f"{registry.host}/f/base:1": {"flavour": "mint"}},
    )
    registry.publish("f/base", base, "1")
    registry.publish("f/app", app, "1")
    return f"{registry.host}/f/base:1", f"{registry.host}/f/app:1"


def _project(cli: CloisterCli, name: str, features: dict[str, object], after: str = "") -> Path:
    repo = make_repo(cli.root / name)
    folder = repo / ".devcontainer"
    folder.mkdir()
    make_feature(
        folder / "mine",
        "mine",
        script=RECORD.format(name="mine"),
        options={"greeting": {"type": "string", "default": "hi"}},
        installsAfter=[after] if after else [],
    )
    document = {"image": BASE_IMAGE, "features": {"./mine": {"greeting": "hello"}, **features}}
    (folder / "devcontainer.json").write_text(json.dumps(document, indent=2))
    return repo


def test_local_and_oci_features_are_installed_in_order_and_cached(
    cli: CloisterCli, registry: FakeRegistry, project: str, tmp_path: Path
) -> None:
    base_id, app_id = _publish(registry, tmp_path / "sources")
    # installsAfter names a Feature without its version, as the specification says.
    repo = _project(cli, project, {app_id: {"loud": True}}, after=app_id.removesuffix(":1"))

    planned = cli.ok("start", "--dry-run", cwd=repo)
    shown = squash(planned.stdout)
    assert "features in install order" in shown, planned.describe()
    assert f"{base_id} sha256:" in shown
    assert "added by dependsOn" in shown
    assert "option FLAVOUR=mint" in shown
    assert not (repo / ".devcontainer" / "devcontainer-lock.json").exists()

    started = cli.ok("start", "-d", "--yes", cwd=repo)
    lock = json.loads((repo / ".devcontainer" / "devcontainer-lock.json").read_text())
    assert set(lock["features"]) == {base_id, app_id}, started.describe()
    log = exec_ok(project, "cat /opt/features.log").stdout.splitlines()
    assert log == ["base 0 mint root", "app 0 true root", "mine 0 hello root"]
    assert exec_ok(project, 'echo "$BASE_HOME"').stdout.strip() == "/opt/base"
    cli.ok("stop", project)

    registry.clear()
    cached = cli.ok("start", "--dry-run", cwd=repo)
    assert "(exists)" in cached.stdout, cached.describe()
    assert "(cached" in cached.stdout
    again = cli.ok("start", "-d", cwd=repo)
    # Only the dry run looked where the tags point now; nothing was fetched again.
    assert set(registry.served("/v2/")) == {f"/v2/f/{n}/manifests/1" for n in ("app", "base")}
    assert registry.served("/blobs/") == [], again.describe()
    cli.ok("stop", project)


def test_a_feature_asking_for_privileged_and_capabilities_starts_without_them(
    cli: CloisterCli, registry: FakeRegistry, project: str, tmp_path: Path
) -> None:
    asking = make_feature(
        tmp_path / "asking",
        "asking",
        script="#!/bin/sh\ntouch /opt/asked\n",
        privileged=True,
        capAdd=["SYS_ADMIN", "NET_ADMIN"],
        mounts=[
            {"source": "/var/run/docker.sock", "target": "/var/run/docker.sock", "type": "bind"}
        ],
    )
    registry.publish("f/asking", asking, "1")
    repo = _project(cli, project, {f"{registry.host}/f/asking:1": {}})
    started = cli.ok("start", "-d", "--yes", cwd=repo)
    said = squash(started.output)
    assert "privileged" in said, started.describe()
    assert "capAdd" in said
    attrs = inspect(project)
    assert attrs["HostConfig"]["Privileged"] is False
    assert not set(attrs["HostConfig"]["CapAdd"] or []) & {
        "SYS_ADMIN",
        "NET_ADMIN",
        "CAP_SYS_ADMIN",
    }
    assert "docker.sock" in said
    assert all("docker.sock" not in str(mount.get("Source")) for mount in attrs["Mounts"])
    exec_ok(project, "test -e /opt/asked")
    cli.ok("stop", project)
