"""The container pipeline works, and Docker's network isolation is what docs/architecture.md says.

Real containers on real networks of the session's engine, talking to a TCP listener that
the test itself runs on the host. Everything is bounded by timeouts (``timeout`` inside
the containers, ``container.wait(timeout=...)`` outside); nothing sleeps for a fixed time.

What these tests pin down (checked on Docker 20.10 as Debian ships it):

* a container on an ``--internal`` network cannot open a TCP connection outward (to a
  host beyond this machine, played by a network namespace the test routes through the
  host), while a container on a plain bridge network reaches that same listener;
* a container on a user-defined bridge reaches a host listener bound to 0.0.0.0 through
  the host's primary address;
* ``--internal`` alone does NOT keep a container away from the host: it still reaches a
  0.0.0.0 listener through the network's gateway *and* through the host's primary
  address (``internal`` only drops forwarded traffic; traffic to the host's own
  addresses is not forwarded);
* an ``--internal`` network created with ``com.docker.network.bridge.inhibit_ipv4``
  leaves the host unreachable ("No route to host"), while containers on it still reach
  each other. This is how each cloister's network must be created.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import docker
import docker.errors
import pytest
from docker.models.containers import Container
from docker.models.networks import Network

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker

IMAGE = "debian:bookworm-slim"
KNOWN_LINE = b"cloister-ci-listener says hello\n"
PEER_LINE = "cloister-ci-peer says hello"
PEER_PORT = 7000
LABELS = {"org.cloister.test": "tests/ci/test_docker_network.py"}
CONNECT_TIMEOUT_SECONDS = 5
CONTAINER_WAIT_SECONDS = 30
INHIBIT_IPV4 = {"com.docker.network.bridge.inhibit_ipv4": "true"}


# --- the host side -------------------------------------------------------------------


class HostListener:
    """A TCP listener on 0.0.0.0:<ephemeral> that greets each client and records its address."""

    def __init__(self) -> None:
        self._server = socket.create_server(("0.0.0.0", 0))
        self._server.settimeout(0.2)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._peers: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="host-listener", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, (peer, _port) = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                # Recorded before the greeting: whoever read the line was recorded.
                with self._lock:
                    self._peers.append(peer)
                with contextlib.suppress(OSError):
                    conn.sendall(KNOWN_LINE)

    @property
    def peers(self) -> list[str]:
        with self._lock:
            return list(self._peers)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()


def _is_usable(address: str, docker_subnets: list[ipaddress.IPv4Network]) -> bool:
    try:
        ip = ipaddress.IPv4Address(address)
    except ipaddress.AddressValueError:
        return False
    if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        return False
    return not any(ip in subnet for subnet in docker_subnets)


def _udp_source_address(target: str) -> str | None:
    # connect() on a UDP socket only picks a route and a source address: nothing is sent.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((target, 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
        return address


def _ip_command(*args: str) -> str:
    ip = shutil.which("ip")
    if ip is None:
        return ""
    try:
        return subprocess.run(
            [ip, "-4", *args], capture_output=True, text=True, check=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _route_source_address() -> str | None:
    # "1.1.1.1 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0" (a lookup: nothing is sent)
    words = _ip_command("route", "get", "1.1.1.1").split()
    return words[words.index("src") + 1] if "src" in words[:-1] else None


def _global_addresses() -> list[str]:
    # "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0"
    out = _ip_command("-o", "addr", "show", "scope", "global")
    return [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]


def host_primary_ipv4(client: docker.DockerClient) -> str | None:
    """The host's primary IPv4 address: one that is not on any Docker network."""
    subnets: list[ipaddress.IPv4Network] = []
    for network in client.networks.list():
        for pool in (network.attrs.get("IPAM") or {}).get("Config") or []:
            with contextlib.suppress(KeyError, ValueError):
                subnet = ipaddress.ip_network(pool["Subnet"], strict=False)
                if isinstance(subnet, ipaddress.IPv4Network):
                    subnets.append(subnet)
    candidates = [
        _udp_source_address("10.255.255.255"),
        _route_source_address(),
        *_global_addresses(),
    ]
    for candidate in candidates:
        if candidate is not None and _is_usable(candidate, subnets):
            return candidate
    return None


class OutsideHost:
    """A machine "out there": a network namespace behind a veth pair, routed via the host.

    Traffic from a container to it leaves the container's network exactly as traffic
    to the internet would (forwarded and masqueraded by the host), so it shows whether
    a network lets anything out, without needing the internet. A listener runs inside
    the namespace and prints the address of each peer it greets.
    """

    def __init__(self, ip: str, suffix: str) -> None:
        self.namespace = f"cloister-ci-{suffix}"
        self._host_side = f"clh{suffix}"
        self._subnet = ipaddress.ip_network(
            f"198.18.{secrets.randbelow(250)}.{4 * secrets.randbelow(60)}/30"
        )
        gateway, self.address = (str(host) for host in self._subnet.hosts())
        self._ip = ip
        self._server: subprocess.Popen[str] | None = None
        self.port = 0
        peer_side = f"cln{suffix}"
        self._commands = [
            ["netns", "add", self.namespace],
            ["link", "add", self._host_side, "type", "veth", "peer", "name", peer_side],
            ["link", "set", peer_side, "netns", self.namespace],
            ["addr", "add", f"{gateway}/30", "dev", self._host_side],
            ["link", "set", self._host_side, "up"],
            ["-n", self.namespace, "addr", "add", f"{self.address}/30", "dev", peer_side],
            ["-n", self.namespace, "link", "set", peer_side, "up"],
            ["-n", self.namespace, "link", "set", "lo", "up"],
            ["-n", self.namespace, "route", "add", "default", "via", gateway],
        ]

    def start(self) -> None:
        for args in self._commands:
            subprocess.run([self._ip, *args], check=True, capture_output=True, timeout=10)
        server_code = (
            "import socket, sys\n"
            "server = socket.create_server(('0.0.0.0', 0))\n"
            "print(server.getsockname()[1], flush=True)\n"
            "while True:\n"
            "    conn, peer = server.accept()\n"
            "    print(peer[0], flush=True)\n"
            f"    conn.sendall({KNOWN_LINE!r})\n"
            "    conn.close()\n"
        )
        self._server = subprocess.Popen(
            [self._ip, "netns", "exec", self.namespace, sys.executable, "-c", server_code],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._server.stdout is not None
        self.port = int(self._server.stdout.readline())  # blocks until it listens

    def peers(self) -> list[str]:
        """Stop the listener and return the peers it greeted."""
        assert self._server is not None
        assert self._server.stdout is not None
        self._server.terminate()
        self._server.wait(timeout=10)
        return self._server.stdout.read().split()

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.kill()
            self._server.wait(timeout=10)
        if self._server is not None and self._server.stdout is not None:
            self._server.stdout.close()
        # Deleting the namespace deletes its end of the veth pair, and so the pair.
        for args in (["netns", "del", self.namespace], ["link", "del", self._host_side]):
            subprocess.run([self._ip, *args], capture_output=True, timeout=10, check=False)


# --- the Docker side -----------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    exit_code: int
    output: str


class Lab:
    """Creates networks and containers with unique names and removes them all afterwards."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.suffix = secrets.token_hex(4)
        self._containers: list[Container] = []
        self._networks: list[Network] = []

    def network(
        self, purpose: str, *, internal: bool, options: dict[str, str] | None = None
    ) -> Network:
        network = self.client.networks.create(
            f"cloister-ci-{purpose}-{self.suffix}",
            driver="bridge",
            internal=internal,
            options=options or {},
            labels=LABELS,
        )
        self._networks.append(network)
        network.reload()
        return network

    def start(self, network: Network, command: list[str]) -> Container:
        container = self.client.containers.create(
            IMAGE,
            command=command,
            network=network.name,
            labels=LABELS,
            name=f"cloister-ci-{secrets.token_hex(4)}-{self.suffix}",
        )
        self._containers.append(container)
        container.start()
        return container

    @staticmethod
    def ip_on(container: Container, network: Network) -> str:
        container.reload()
        address: str = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        return address

    def run(self, network: Network, script: str) -> Run:
        """Run ``bash -c script`` on ``network`` to completion; its exit code and output."""
        container = self.start(network, ["bash", "-c", script])
        result = container.wait(timeout=CONTAINER_WAIT_SECONDS)
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return Run(exit_code=int(result["StatusCode"]), output=output)

    def wait_for_log(self, container: Container, text: str) -> None:
        """Wait until ``text`` appears in the container's output; fail fast if it exits."""
        deadline = time.monotonic() + CONTAINER_WAIT_SECONDS
        while text.encode() not in container.logs(stdout=True, stderr=True):
            container.reload()
            if container.status not in {"created", "running"}:
                logs = container.logs(stdout=True, stderr=True).decode(errors="replace")
                pytest.fail(f"container exited before printing {text!r}: {logs}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {CONTAINER_WAIT_SECONDS} s waiting for {text!r}")
            time.sleep(0.05)

    def close(self) -> None:
        """Remove every container, then every network; try all, then report what stuck."""
        problems: list[str] = []
        for container in reversed(self._containers):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                problems.append(f"container {container.name}: {exc}")
        for network in reversed(self._networks):
            try:
                network.remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                problems.append(f"network {network.name}: {exc}")
        if problems:
            pytest.fail("cleanup failed: " + "; ".join(problems), pytrace=False)


def connect_script(address: str, port: int) -> str:
    """Connect to address:port with bash's /dev/tcp and print what the server sends."""
    return (
        f"timeout {CONNECT_TIMEOUT_SECONDS} bash -c "
        f"'exec 3<>/dev/tcp/{address}/{port} && head -c 100 <&3'"
    )


def subnet_of(network: Network) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(network.attrs["IPAM"]["Config"][0]["Subnet"])


def all_from(peers: list[str], network: Network) -> bool:
    subnet = subnet_of(network)
    return all(ipaddress.ip_address(peer) in subnet for peer in peers)


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_image(docker_client: docker.DockerClient, skip_or_fail: SkipOrFail) -> str:
    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        skip_or_fail(f"image {IMAGE} is not present locally (.ci/run creates it)")
    return IMAGE


@pytest.fixture(scope="module")
def host_ip(docker_client: docker.DockerClient, skip_or_fail: SkipOrFail) -> str:
    address = host_primary_ipv4(docker_client)
    if address is None:
        skip_or_fail("the host has no IPv4 address outside the Docker networks")
    return address


@pytest.fixture
def outside(skip_or_fail: SkipOrFail) -> Iterator[OutsideHost]:
    ip = shutil.which("ip")
    if ip is None:
        skip_or_fail("iproute2's `ip` is needed to build the outside host")
    host = OutsideHost(ip, secrets.token_hex(4))
    try:
        try:
            host.start()
        except (OSError, subprocess.CalledProcessError) as error:
            skip_or_fail(f"cannot create a network namespace here: {error}")
        yield host
    finally:
        host.close()


@pytest.fixture
def listener() -> Iterator[HostListener]:
    server = HostListener()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def lab(docker_client: docker.DockerClient, base_image: str) -> Iterator[Lab]:
    del base_image
    objects = Lab(docker_client)
    try:
        yield objects
    finally:
        objects.close()


# --- the tests -------------------------------------------------------------------------


def test_internal_network_cannot_connect_outward(lab: Lab, outside: OutsideHost) -> None:
    bridge = lab.network("out-bridge", internal=False)
    internal = lab.network("out-internal", internal=True)

    reached = lab.run(bridge, connect_script(outside.address, outside.port))
    blocked = lab.run(internal, connect_script(outside.address, outside.port))
    peers = outside.peers()

    assert reached.exit_code == 0, reached.output
    assert reached.output == KNOWN_LINE.decode()
    # No route out: the connection attempt fails or hangs until `timeout` ends it (124).
    assert blocked.exit_code != 0, blocked.output
    assert KNOWN_LINE.decode() not in blocked.output
    # Exactly one greeting: the bridge container's (masqueraded to the host's veth address).
    assert len(peers) == 1, peers


def test_bridge_container_reaches_host_listener(
    lab: Lab, listener: HostListener, host_ip: str
) -> None:
    network = lab.network("bridge", internal=False)

    run = lab.run(network, connect_script(host_ip, listener.port))

    assert run.exit_code == 0, run.output
    assert run.output == KNOWN_LINE.decode()
    assert len(listener.peers) == 1
    assert all_from(listener.peers, network), listener.peers


def test_isolated_internal_network_cannot_reach_host_listener(
    lab: Lab, listener: HostListener, host_ip: str
) -> None:
    # Plain --internal is not enough (see the next test); each cloister's network is made so.
    network = lab.network("isolated", internal=True, options=INHIBIT_IPV4)

    run = lab.run(network, connect_script(host_ip, listener.port))

    assert run.exit_code != 0, run.output
    assert KNOWN_LINE.decode() not in run.output
    assert listener.peers == []


def test_plain_internal_network_still_reaches_host(
    lab: Lab, listener: HostListener, host_ip: str
) -> None:
    network = lab.network("internal", internal=True)
    gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]

    via_gateway = lab.run(network, connect_script(gateway, listener.port))
    via_primary = lab.run(network, connect_script(host_ip, listener.port))

    assert via_gateway.exit_code == 0, via_gateway.output
    assert via_gateway.output == KNOWN_LINE.decode()
    assert via_primary.exit_code == 0, via_primary.output
    assert via_primary.output == KNOWN_LINE.decode()
    assert len(listener.peers) == 2
    assert all_from(listener.peers, network), listener.peers


def test_inhibit_ipv4_network_blocks_host_but_not_peers(
    lab: Lab, listener: HostListener, host_ip: str
) -> None:
    network = lab.network("inhibit", internal=True, options=INHIBIT_IPV4)
    gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
    assert gateway, "IPAM still hands out a gateway address even though the bridge has none"

    to_gateway = lab.run(network, connect_script(gateway, listener.port))
    to_primary = lab.run(network, connect_script(host_ip, listener.port))

    for run in (to_gateway, to_primary):
        assert run.exit_code != 0, run.output
        assert "No route to host" in run.output
    assert listener.peers == []

    server = lab.start(
        network,
        [
            "perl",
            "-MIO::Socket::INET",
            "-e",
            "$| = 1;"
            "my $s = IO::Socket::INET->new(LocalAddr => '0.0.0.0', "
            f'LocalPort => {PEER_PORT}, Listen => 5, ReuseAddr => 1) or die "listen: $!\\n";'
            'print "listening\\n";'
            f'while (my $c = $s->accept) {{ print $c "{PEER_LINE}\\n"; close $c; }}',
        ],
    )
    lab.wait_for_log(server, "listening")
    peer = lab.run(network, connect_script(lab.ip_on(server, network), PEER_PORT))

    assert peer.exit_code == 0, peer.output
    assert peer.output == PEER_LINE + "\n"
