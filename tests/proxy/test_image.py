"""The proxy's image: built from this tree, non-root, healthy, and proxying for real."""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from cloister_cli.images.builds import PROXY_IMAGE, assemble_context, build_image
from cloister_cli.images.sourcetree import find_workspace
from cloister_core.tokens import TokenRecord, write_token_file
from tests.proxy.support import basic, read_response, recv_exactly

pytestmark = pytest.mark.docker
TAG = "cloister-proxy:test"
LABELS = {"org.cloister.test": "tests/proxy/test_image.py"}
# 127.0.0.1 and a free port (None); the SDK's stubs do not know the None form.
PUBLISH_ON_LOOPBACK: Any = {"3128/tcp": ("127.0.0.1", None)}


@pytest.fixture(scope="module")
def proxy_image(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> str:
    workspace = find_workspace(Path(__file__).resolve().parent)
    architecture = docker_client.info()["Architecture"]
    context = assemble_context(
        workspace, PROXY_IMAGE, tmp_path_factory.mktemp("ctx") / "proxy", architecture
    )
    lines: list[str] = []
    build_image(docker_client, context, TAG, on_line=lines.append)
    assert any("Successfully tagged" in line for line in lines), lines[-5:]
    return TAG


def exec_ok(container: Container, *argv: str) -> str:
    result = container.exec_run(list(argv))
    assert result.exit_code == 0, result.output
    assert isinstance(result.output, bytes)
    return result.output.decode().strip()


def wait_healthy(container: Container, timeout: float = 30) -> None:
    """The image's own health check script, polled until it passes."""
    deadline = time.monotonic() + timeout
    image = container.image
    assert image is not None
    check = image.attrs["Config"]["Healthcheck"]["Test"][1:]  # the image's own
    while container.exec_run(check).exit_code != 0:
        container.reload()
        if container.status != "running":
            pytest.fail(f"proxy exited: {container.logs().decode()}")
        if time.monotonic() > deadline:
            pytest.fail(f"proxy not healthy after {timeout}s: {container.logs().decode()}")
        time.sleep(0.1)


@pytest.fixture
def stack(
    docker_client: docker.DockerClient, proxy_image: str, tmp_path: Path
) -> Iterator[tuple[Container, int, TokenRecord]]:
    """A network with an echo upstream (perl) and the proxy, published on 127.0.0.1."""
    suffix = secrets.token_hex(4)
    network = docker_client.networks.create(f"cloister-test-{suffix}", labels=LABELS)
    containers: list[Container] = []
    try:
        network.reload()
        subnet = network.attrs["IPAM"]["Config"][0]["Subnet"]
        upstream = docker_client.containers.run(
            "debian:bookworm-slim",
            [
                "perl", "-MIO::Socket::INET", "-e",
                "my $s = IO::Socket::INET->new(LocalPort => 7000, Listen => 5, ReuseAddr => 1)"
                " or die; while (my $c = $s->accept)"
                " { my $l = <$c>; print $c \"echo:$l\"; close $c }",
            ],
            name=f"upstream-{suffix}",
            network=network.name,
            labels=LABELS,
            detach=True,
        )  # fmt: skip
        containers.append(upstream)
        config = tmp_path / "config"
        (config / "tokens").mkdir(parents=True)
        (config / "config.yaml").write_text(
            f"proxy:\n  allow: [{{domain: upstream-{suffix}, ports: [7000]}}]\n"
            f"  allow_private_networks: ['{subnet}']\n",
            encoding="utf-8",
        )
        # The test connects through the published port: the proxy sees the network's
        # gateway as the client, so that is the address the token is bound to.
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
        record = TokenRecord.create(cloister="demo", project="demo", path=tmp_path, address=gateway)
        write_token_file(config / "tokens", record)
        for path in (config, config / "tokens", *config.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by the proxy's uid
        proxy = docker_client.containers.run(
            proxy_image,
            name=f"proxy-{suffix}",
            network=network.name,
            volumes={str(config): {"bind": "/config", "mode": "ro"}},
            # The upstream shares the proxy's network here; in the guardian that network
            # would be the guardian's own and refused (test_server_guardian.py).
            environment={"CLOISTER_PROXY_REFUSE_OWN_NETWORKS": "false"},
            ports=PUBLISH_ON_LOOPBACK,
            labels=LABELS,
            detach=True,
        )
        containers.append(proxy)
        wait_healthy(proxy)
        proxy.reload()
        port = int(proxy.attrs["NetworkSettings"]["Ports"]["3128/tcp"][0]["HostPort"])
        yield proxy, port, record
    finally:
        for container in containers:
            container.remove(force=True)
        network.remove()


def test_image_runs_as_non_root_with_a_health_check(
    docker_client: docker.DockerClient, proxy_image: str
) -> None:
    config = docker_client.images.get(proxy_image).attrs["Config"]
    assert config["User"] == "10001:10001"
    assert config["Healthcheck"]["Test"] == [
        *("CMD", "python3", "/opt/cloister/healthcheck.py"),
        *("/healthz", "CLOISTER_PROXY_LISTEN", "3128"),
    ]
    assert "3128/tcp" in config["ExposedPorts"]


def test_container_proxies_and_audits(stack: tuple[Container, int, TokenRecord]) -> None:
    proxy, port, record = stack
    assert exec_ok(proxy, "id", "-u") == "10001"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        target = str(proxy.name).replace("proxy-", "upstream-") + ":7000"
        auth = basic(record.secret)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n".encode())
        response = read_response(sock, head_only=True)
        assert response.status == 200
        sock.sendall(b"hello\n")
        assert (
            response.leftover + recv_exactly(sock, 11 - len(response.leftover)) == b"echo:hello\n"
        )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        assert read_response(sock).status == 407
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(line) for line in proxy.logs(stderr=False).decode().splitlines()]
        if len(lines) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    # A tunnel is audited when it closes, which may be after the 407 was written.
    lines.sort(key=lambda line: int(line["status"]))
    assert [(line["method"], line["status"]) for line in lines] == [
        ("CONNECT", 200),
        ("CONNECT", 407),
    ]
    assert lines[0]["cloister"] == "demo"
    assert lines[0]["bytes_up"] == 6
