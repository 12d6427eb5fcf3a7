"""``cloister port`` against a real engine: a dev server in a cloister answers on the
host's 127.0.0.1, and the cloister still reaches neither the internet nor the host.

The server is a few lines of Perl (the slim image has Perl, not Python) on port 8000
inside the cloister; the host asks it over HTTP. Reachability is probed from inside the
cloister with bash's ``/dev/tcp``, each probe bounded by ``timeout``; the host listener
records every peer that got through. One guardian for the module, as in
``test_acceptance.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import httpx
import pytest

from cloister_core import stack
from tests.ci.test_docker_network import KNOWN_LINE, HostListener, host_primary_ipv4
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    container,
    docker_executable,
    exec_in,
    exec_ok,
    network_gateway,
    run_command,
)
from tests.cli.test_acceptance import Cloisters, new_repo
from tests.waiting import free_port, wait_until

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_port.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
"""
PORT = 8000
GREETING = "hello from the cloister"
# An HTTP/1.0 server: reads the request head, answers, closes; one client at a time.
SERVER = (
    "use IO::Socket::INET;"
    f" my $s = IO::Socket::INET->new(LocalPort => {PORT}, Listen => 16, ReuseAddr => 1)"
    " or die $!;"
    " while (my $c = $s->accept) {"
    r" while (<$c>) { last if /^\r?\n$/ }"
    rf' print $c "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{GREETING}\n";'
    " close $c }"
)


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()
        for name in started.names:  # a test that failed before `stop`: its forwarders
            found = run_command(
                [
                    docker_executable(),
                    "ps",
                    "-aq",
                    "--filter",
                    f"label={stack.LABEL_FORWARD}={name}",
                ],
                timeout=30,
            ).stdout.split()
            if found:
                run_command([docker_executable(), "rm", "-f", *found], timeout=60)


@pytest.fixture
def host_listener() -> Iterator[HostListener]:
    server = HostListener()
    try:
        yield server
    finally:
        server.close()


def serve(name: str) -> None:
    """The dev server, in the background inside cloister *name*, once it accepts."""
    started = run_command(
        [docker_executable(), "exec", "-d", container(name), "perl", "-e", SERVER], timeout=30
    )
    assert started.returncode == 0, started.describe()
    wait_until(
        lambda: exec_in(name, f"exec 3<>/dev/tcp/127.0.0.1/{PORT}").returncode == 0,
        30,
        "the server in the cloister",
    )


def ask(host_port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{host_port}/", timeout=10).text


def inspect_container(name: str) -> dict[str, Any]:
    result = run_command([docker_executable(), "inspect", name], timeout=30)
    assert result.returncode == 0, result.describe()
    (document,) = result.json()
    assert isinstance(document, dict)
    return document


def exists(container: str) -> bool:
    return run_command([docker_executable(), "inspect", container], timeout=30).returncode == 0


def test_a_dev_server_answers_on_the_host_and_nothing_else_opens(
    cli: CloisterCli,
    cloisters: Cloisters,
    tmp_path: Path,
    host_listener: HostListener,
    docker_client: docker.DockerClient,
) -> None:
    repo, name = new_repo(tmp_path, "port")
    cloisters.start(repo, name)
    serve(name)
    host_port = free_port()

    added = cli.json("port", name, f"{PORT}:{host_port}", "--json")
    assert added["host"] == f"127.0.0.1:{host_port}", added
    assert added["created"] is True
    assert ask(host_port) == f"{GREETING}\n"
    # From the cloister's directory, NAME is implied; publishing again changes nothing.
    again = cli.ok("port", str(PORT), cwd=repo)
    assert f"port {PORT} already published on 127.0.0.1:{host_port}" in again.stdout
    (listed,) = cli.json("port", name, "--list", "--json")
    assert (listed["port"], listed["host"], listed["status"]) == (
        PORT,
        f"127.0.0.1:{host_port}",
        "running",
    )

    # The forwarder: hardened, published on the host's loopback only, on two networks.
    instance = cli.instance
    forwarder = instance.forwarder(name, PORT)
    document = inspect_container(forwarder)
    host_config = document["HostConfig"]
    assert host_config["PortBindings"] == {
        f"{stack.FORWARDER_PORT}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(host_port)}]
    }
    assert host_config["ReadonlyRootfs"] is True
    assert host_config["CapDrop"] == ["ALL"]
    assert host_config["SecurityOpt"] == ["no-new-privileges:true"]
    assert host_config["Init"] is True
    assert host_config["Privileged"] is False
    networks = document["NetworkSettings"]["Networks"]
    own_network = instance.cloister(name)  # the cloister's own, and the ports network
    assert set(networks) == {own_network, instance.ports_net}
    assert stack.LABEL_CLOISTER not in document["Config"]["Labels"]
    working_here = [n for n, item in cli.listing().items() if item["path"] == str(repo.resolve())]
    assert working_here == [name]  # the forwarder is no cloister

    # From inside the cloister: the internet, the host (through either network's gateway
    # or its own address), and the forwarder (on either of its addresses, on any port)
    # stay out of reach.
    ports_gateway = network_gateway(instance.ports_net)
    on_net = networks[own_network]["IPAddress"]
    on_ports = networks[instance.ports_net]["IPAddress"]
    listening = host_listener.port
    targets = {
        "internet 1.1.1.1:443": "1.1.1.1/443",
        "internet 203.0.113.1:80": "203.0.113.1/80",
        "its network's gateway": f"{network_gateway(own_network)}/{listening}",
        "cloister-ports gateway": f"{ports_gateway}/{listening}",
        "cloister-ports gateway, published port": f"{ports_gateway}/{host_port}",
        "docker0": f"{network_gateway('bridge') or '172.17.0.1'}/{listening}",
        "forwarder on its network": f"{on_net}/{stack.FORWARDER_PORT}",
        "forwarder on its network, the listener's port": f"{on_net}/{listening}",
        "forwarder on cloister-ports": f"{on_ports}/{stack.FORWARDER_PORT}",
        "forwarder on cloister-ports, the listener's port": f"{on_ports}/{listening}",
    }
    primary = host_primary_ipv4(docker_client)
    if primary is not None:
        targets["host primary"] = f"{primary}/{listening}"
        targets["host primary, published port"] = f"{primary}/{host_port}"
    assert all(not target.startswith("None/") for target in targets.values()), targets
    probes = " ".join(
        f"(timeout 4 bash -c 'exec 3<>/dev/tcp/{target} && head -c {len(KNOWN_LINE)} <&3';"
        f' echo "{target} exit=$?") &'
        for target in targets.values()
    )
    result = exec_in(name, f"{probes} wait", timeout=30)
    for target in targets.values():
        assert f"{target} exit=" in result.stdout, result.describe()
        assert f"{target} exit=0" not in result.stdout, (targets, result.describe())
    assert KNOWN_LINE.decode().strip() not in result.stdout, result.describe()
    assert host_listener.peers == [], (targets, result.describe())
    # ...while the probe itself works: the proxy, and the cloister's own server, answer.
    exec_ok(name, "timeout 4 bash -c 'exec 3<>/dev/tcp/cloister-guardian-proxy/3128'")
    exec_ok(name, f"timeout 4 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{PORT}'")

    # `cloister stop` removes the forwarder; nothing answers on the host port any more.
    cli.ok("stop", name)
    assert not exists(forwarder)
    with pytest.raises(httpx.ConnectError):
        ask(host_port)
    assert cli.json("port", "--list", "--json") == []


def test_any_free_port_remove_and_clear_errors(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "portauto")
    cloisters.start(repo, name)
    serve(name)

    # 0: the engine picks a free port, and says which.
    chosen = cli.json("port", name, f"{PORT}:0", "--json")
    host_port = chosen["host_port"]
    assert isinstance(host_port, int)
    assert host_port > 0
    assert ask(host_port) == f"{GREETING}\n"

    # A host port another program holds: named, and nothing is left behind.
    with socket.create_server(("127.0.0.1", 0)) as holder:
        taken = holder.getsockname()[1]
        refused = cli.fails("port", name, f"3000:{taken}")
    assert f"port {taken} on 127.0.0.1 is taken by another program" in refused.stderr
    assert not exists(cli.instance.forwarder(name, 3000))
    # One a forward of Cloister's holds: which one is named.
    refused = cli.fails("port", name, f"3000:{host_port}")
    assert f"is taken by port {PORT} of cloister {name}" in refused.stderr

    # --remove: it no longer answers.
    removed = cli.ok("port", name, str(PORT), "--remove")
    assert f"port {PORT} no longer published" in removed.stdout
    assert not exists(cli.instance.forwarder(name, PORT))
    with pytest.raises(httpx.ConnectError):
        ask(host_port)
    assert cli.json("port", name, "--list", "--json") == []

    # A paused cloister (the git guard pauses a hostile one) is refused, clearly.
    paused_container = container(name)
    pause = [docker_executable(), "pause", paused_container]
    assert run_command(pause, timeout=30).returncode == 0
    try:
        paused = cli.fails("port", name, str(PORT))
    finally:
        run_command([docker_executable(), "unpause", paused_container], timeout=30)
    assert f"cloister {name!r} is paused" in paused.stderr
    missing = cli.fails("port", "no-such-cloister", str(PORT))
    assert "no cloister 'no-such-cloister'" in missing.stderr
