"""Issue 22 acceptance 2: a compose devcontainer, an app service (the cloister) and a
database beside it, against a real Docker engine.

The database is Redis from Debian's packages, downloaded on the host with ``apt-get
download`` (no container reaches a package registry; the host can) into
``~/.cache/cloister-tests/redis-debs`` and installed FROM the local
``debian:bookworm-slim``: no registry is needed at run time beyond that download.

The compose file is the agent's, so it asks for what it must not get: a published
port, ``privileged``, a bind of the host's ``/etc``; each is named with its reason and
the compose file's line, and the container has none of them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.cli.cli_support import (
    BASE_IMAGE,
    SLIM_IMAGE,
    CloisterCli,
    docker_executable,
    environment,
    exec_ok,
    git,
    inspect,
    make_repo,
    network_gateway,
    run_command,
    squash,
    unique,
)

if TYPE_CHECKING:
    from tests.cli.test_acceptance import Cloisters

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_compose.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  cpus: 1.5
  pids: 256
"""
# What redis-server needs that debian:bookworm-slim lacks (the rest it has).
REDIS_PACKAGES = (
    "redis-server",
    "redis-tools",
    "lsb-base",
    "libatomic1",
    "libjemalloc2",
    "liblzf1",
    "libssl3",
)
DEBS = Path.home() / ".cache" / "cloister-tests" / "redis-debs"
DEVCONTAINER = """\
{
  "name": "app and db",
  "dockerComposeFile": ["docker-compose.yml"],
  "service": "app",
  "workspaceFolder": "/work"
}
"""
COMPOSE = f"""\
services:
  app:
    image: {BASE_IMAGE}
    command: sleep infinity
    depends_on:
      - db
  db:
    build:
      context: ./db
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 1s
      timeout: 3s
      retries: 60
    ports:
      - "6379:6379"
    privileged: true
    volumes:
      - /etc:/host-etc
"""
HOSTILE = ("ports", "privileged", "/etc")  # what the dry run and the start must name
DB_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
COPY debs/ /tmp/debs/
RUN dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs
CMD ["redis-server", "--protected-mode", "no", "--save", ""]
"""
CONNECTED = "CONNECTED"


@pytest.fixture(scope="module")
def redis_debs() -> Path:
    """Debian's redis packages, downloaded on the host once (kept between runs)."""
    if not all(any(DEBS.glob(f"{package}_*.deb")) for package in REDIS_PACKAGES):
        apt_get = shutil.which("apt-get")
        assert apt_get is not None, "the compose acceptance test needs apt-get on the host"
        DEBS.mkdir(parents=True, exist_ok=True)
        result = run_command([apt_get, "download", *REDIS_PACKAGES], cwd=DEBS, timeout=300)
        assert result.returncode == 0, result.describe()
    return DEBS


def compose_project(tmp_path: Path, debs: Path) -> tuple[Path, str]:
    name = unique("compose")
    repo = make_repo(tmp_path / name)
    devcontainer = repo / ".devcontainer"
    (devcontainer / "db" / "debs").mkdir(parents=True)
    (devcontainer / "devcontainer.json").write_text(DEVCONTAINER, encoding="utf-8")
    (devcontainer / "docker-compose.yml").write_text(COMPOSE, encoding="utf-8")
    (devcontainer / "db" / "Dockerfile").write_text(DB_DOCKERFILE, encoding="utf-8")
    for package in REDIS_PACKAGES:
        for deb in debs.glob(f"{package}_*.deb"):
            shutil.copy2(deb, devcontainer / "db" / "debs" / deb.name)
    git(repo, "add", ".devcontainer/devcontainer.json", ".devcontainer/docker-compose.yml")
    git(repo, "commit", "-q", "-m", "compose devcontainer")
    return repo, name


def docker_json(*args: str) -> Any:
    result = run_command([docker_executable(), *args], timeout=60)
    assert result.returncode == 0, result.describe()
    return json.loads(result.stdout)


def containers_named(name: str) -> list[str]:
    result = run_command(
        [docker_executable(), "ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}"],
        timeout=60,
    )
    return [line for line in result.stdout.split() if line == name]


def probe(container: str, address: str, port: int) -> str:
    """What a TCP connection from *container* to *address*:*port* gets: CONNECTED, or
    the shell's error (refused: the address is reachable; unreachable or a timeout:
    it is not)."""
    script = (
        f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address}/{port}' 2>&1 && echo {CONNECTED}"
        " || echo failed $?"
    )
    result = run_command([docker_executable(), "exec", container, "bash", "-c", script])
    return result.stdout + result.stderr


@contextlib.contextmanager
def host_listener() -> Iterator[int]:
    """A TCP port listening on every address of the host (the kernel completes a
    connection from the backlog: reaching it at all is what is checked)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("0.0.0.0", 0))  # every host address: what is checked
        server.listen(8)
        yield int(server.getsockname()[1])


def address_on(document: dict[str, Any], network: str) -> str:
    return str(document["NetworkSettings"]["Networks"][network]["IPAddress"])


def test_a_compose_devcontainer_runs_its_database_beside_the_cloister_and_nowhere_else(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path, redis_debs: Path
) -> None:
    repo, name = compose_project(tmp_path, redis_debs)
    network = cli.container(name)
    db = cli.instance.sidecar(name, "db")

    # The dry run says what would run and what of the compose file is dropped, and why.
    dry = cli.ok("start", "--dry-run", cwd=repo, timeout=300)
    compose_file = repo / ".devcontainer" / "docker-compose.yml"
    for word in HOSTILE:  # each with its reason and the compose file's line
        named = [line for line in dry.stdout.splitlines() if word in line]
        assert any(f"{compose_file}:" in line for line in named), dry.describe()
    assert f"service    db ({db})" in dry.stdout, dry.describe()

    started = cloisters.start(repo, name, "--yes")  # a first start: its shape approved
    said = squash(started.stderr + started.stdout)
    for word in HOSTILE:
        assert word in said, started.describe()

    # The agent's tests reach the database by its service name.
    pong = exec_ok(
        name,
        "exec 3<>/dev/tcp/db/6379; printf 'PING\\r\\n' >&3; read -t 5 line <&3; echo \"$line\"",
    )
    assert pong.stdout.strip() == "+PONG"

    # It has nothing of what the compose file asked for beyond what Cloister keeps.
    (document,) = docker_json("inspect", db)
    host = document["HostConfig"]
    assert host["Privileged"] is False
    assert not host.get("PortBindings")
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"]
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert not any(mount["Source"] == "/etc" for mount in document["Mounts"])
    assert list(document["NetworkSettings"]["Networks"]) == [network]
    variables = environment(document)
    assert not {key for key in variables if key.upper().startswith("CLOISTER")}
    assert not {key for key in variables if key.lower().endswith("_proxy")}

    # Nothing out: not the internet, not the proxy without a token, not the host,
    # not another cloister; the cloister itself answers (the control).
    cloister = inspect(name)
    assert "refused" in probe(db, address_on(cloister, network), 1)
    assert CONNECTED not in probe(db, "1.1.1.1", 80)
    connect = (
        "exec 3<>/dev/tcp/cloister-guardian-proxy/3128;"
        " printf 'CONNECT example.com:443 HTTP/1.1\\r\\nHost: example.com:443\\r\\n\\r\\n' >&3;"
        ' read -t 5 line <&3; echo "$line"'
    )
    answer = run_command([docker_executable(), "exec", db, "bash", "-c", connect])
    assert " 407 " in answer.stdout, answer.describe()
    with host_listener() as port:
        for gateway in (network_gateway("bridge"), network_gateway(network)):
            assert gateway is not None
            assert CONNECTED not in probe(db, gateway, port)
    other_repo = make_repo(tmp_path / unique("plain"))
    other = other_repo.name
    cloisters.start(other_repo, other)
    other_address = address_on(inspect(other), cli.container(other))
    assert CONNECTED not in probe(db, other_address, 1)
    assert "refused" not in probe(db, other_address, 1)

    # Its output, and its port on the host's 127.0.0.1 through a forwarder.
    logs = cli.ok("logs", name, "--service", "db")
    assert "Ready to accept connections" in logs.stdout, logs.describe()
    forward = json.loads(cli.ok("port", name, "6379:0", "--service", "db", "--json").stdout)
    with socket.create_connection(("127.0.0.1", int(forward["host_port"])), timeout=10) as peer:
        peer.sendall(b"PING\r\n")
        assert peer.recv(16).startswith(b"+PONG")

    # `stop` removes both.
    cli.ok("stop", name)
    assert containers_named(db) == []
    assert containers_named(network) == []


def test_a_compose_service_that_is_missing_its_image_fails_the_start_and_leaves_nothing(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    name = unique("compose")
    repo = make_repo(tmp_path / name)
    devcontainer = repo / ".devcontainer"
    devcontainer.mkdir()
    (devcontainer / "devcontainer.json").write_text(DEVCONTAINER, encoding="utf-8")
    (devcontainer / "docker-compose.yml").write_text(
        f"services:\n  app:\n    image: {BASE_IMAGE}\n  db:\n    image: cloister-absent:{name}\n",
        encoding="utf-8",
    )
    failed = cli.run("start", "-d", "--yes", cwd=repo, timeout=300)
    assert failed.returncode != 0
    assert f"cloister-absent:{name}" in squash(failed.stderr), failed.describe()
    assert "pulls nothing" in squash(failed.stderr), failed.describe()
    assert name not in cli.listing()
    assert containers_named(cli.container(name)) == []
    assert containers_named(cli.instance.sidecar(name, "db")) == []
