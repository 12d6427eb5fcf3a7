"""Issue 19 acceptance: cloisters apart, and guardians side by side, on a real engine.

Each cloister is alone on a network of its own with its guardian's proxy, hostexec
gateway and credential gateway: from inside cloister A, cloister B is neither reachable
(TCP by its name, its container's name or its address; UDP unicast and broadcast) nor
even a name, while both still reach the three services. And two guardians (two data
directories: two instances, one root's and one another user's) run on one engine
without touching each other: each one's cloister keeps working while the other starts
and stops.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from cloister_core import stack
from tests.cli.cli_support import (
    CONNECT_ACCEPTED,
    CloisterCli,
    HostUser,
    connect_status,
    container,
    docker_executable,
    exec_in,
    exec_ok,
    free_port,
    guardian,
    host_user,
    inspect,
    make_repo,
    run_command,
    squash,
    unique,
    wait_until,
)
from tests.cli.test_acceptance import CONFIG, Cloisters

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

TCP_PORT = 8000
UDP_PORT = 8001
UDP_LOG = "/tmp/udp.log"
# B's listeners: a TCP server that greets, and a UDP socket that logs each datagram.
LISTENERS = f"""
use IO::Socket::INET;
if (fork() == 0) {{
    my $udp = IO::Socket::INET->new(LocalPort => {UDP_PORT}, Proto => "udp") or die $!;
    while (1) {{
        $udp->recv(my $data, 512);
        open(my $log, ">>", "{UDP_LOG}"); print $log "$data\\n"; close($log);
    }}
}}
my $tcp = IO::Socket::INET->new(LocalPort => {TCP_PORT}, Listen => 5, ReuseAddr => 1) or die $!;
while (my $peer = $tcp->accept()) {{ print $peer "hello from b\\n"; close($peer); }}
"""
# Sends one datagram to ARGV[0] (broadcast allowed); exits 0 when the kernel took it.
SEND_UDP = f"""
use IO::Socket::INET; use Socket;
my $s = IO::Socket::INET->new(Proto => "udp", Broadcast => 1) or die $!;
my $to = sockaddr_in({UDP_PORT}, inet_aton($ARGV[0]));
defined($s->send($ARGV[1], 0, $to)) or die "send: $!";
"""


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    config = CONFIG + f"guardian:\n  ui_port: {free_port()}\n"
    with guardian(docker_client, tmp_path_factory.mktemp("apart"), config, skip_or_fail) as tool:
        yield tool


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()


def start(cloisters: Cloisters, tmp_path: Path, prefix: str) -> str:
    name = unique(prefix)
    cloisters.start(make_repo(tmp_path / name), name)
    return name


def address_of(cli: CloisterCli, name: str) -> str:
    address: str = inspect(name)["NetworkSettings"]["Networks"][cli.container(name)]["IPAddress"]
    return address


def tcp(name: str, host: str, port: int) -> int:
    """The exit status of a TCP connect from inside cloister *name* (0: it connected)."""
    return exec_in(name, f"timeout 4 bash -c 'exec 3<>/dev/tcp/{host}/{port}'").returncode


def send_udp(name: str, host: str, text: str) -> None:
    exec_in(name, f"perl -e '{SEND_UDP}' {host} {text}")


def reaches_the_services(name: str) -> None:
    """The proxy (accepting its token), the hostexec gateway and the credential gateway."""
    assert connect_status(name) == CONNECT_ACCEPTED
    assert tcp(name, stack.HOSTEXEC_ALIAS, stack.HOSTEXEC_PORT) == 0
    assert tcp(name, stack.CREDENTIALS_ALIAS, stack.CREDENTIALS_PORT) == 0


def test_cloisters_neither_reach_nor_resolve_each_other(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    a = start(cloisters, tmp_path, "apart-a")
    b = start(cloisters, tmp_path, "apart-b")
    served = run_command(
        [docker_executable(), "exec", "-d", container(b), "perl", "-e", LISTENERS], timeout=30
    )
    assert served.returncode == 0, served.describe()
    # The listeners work: B reaches its own, by TCP and by UDP.
    wait_until(lambda: tcp(b, "127.0.0.1", TCP_PORT) == 0, 30, "B's TCP listener")
    send_udp(b, "127.0.0.1", "from-b-itself")
    wait_until(
        lambda: "from-b-itself" in exec_in(b, f"cat {UDP_LOG}").stdout, 10, "B's UDP listener"
    )

    # Each on a network of its own, on subnets of the pool that do not overlap.
    b_address = address_of(cli, b)
    a_network = ipaddress.ip_network(f"{address_of(cli, a)}/27", strict=False)
    assert ipaddress.ip_address(b_address) not in a_network
    assert set(inspect(a)["NetworkSettings"]["Networks"]) == {cli.container(a)}

    # From A: B is no name...
    for host in (b, cli.container(b)):
        looked_up = exec_in(a, f"getent hosts {host}")
        assert looked_up.returncode != 0, looked_up.describe()
    # ...and nothing reaches it by TCP, by its name, its container's name or its address.
    for host in (b, cli.container(b), b_address):
        assert tcp(a, host, TCP_PORT) != 0, host
    # Nor by UDP: unicast, the limited broadcast, and A's own network's broadcast.
    for host in (b_address, "255.255.255.255", str(a_network.broadcast_address)):
        send_udp(a, host, "from-a")
    send_udp(b, "127.0.0.1", "after-a")  # a datagram of A's would have arrived before
    wait_until(lambda: "after-a" in exec_in(b, f"cat {UDP_LOG}").stdout, 10, "B's own datagram")
    assert "from-a" not in exec_ok(b, f"cat {UDP_LOG}").stdout

    # Both still reach the proxy, the hostexec gateway and the credential gateway.
    reaches_the_services(a)
    reaches_the_services(b)

    # Stopping one removes its network; the other keeps working.
    cli.ok("stop", b)
    gone = run_command([docker_executable(), "network", "inspect", cli.container(b)], timeout=30)
    assert gone.returncode != 0, gone.describe()
    reaches_the_services(a)


def test_a_guardian_restart_reconnects_the_services(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    name = start(cloisters, tmp_path, "apart-restart")
    cli.ok("guardian", "stop")
    cli.ok("guardian", "start")  # compose recreates the services, on none of its networks
    reaches_the_services(name)


@pytest.fixture(scope="module")
def user(skip_or_fail: SkipOrFail) -> Iterator[HostUser]:
    with host_user(skip_or_fail) as account:
        yield account


def test_two_guardians_run_side_by_side(
    cli: CloisterCli,
    cloisters: Cloisters,
    tmp_path: Path,
    user: HostUser,
    docker_client: docker.DockerClient,
    skip_or_fail: SkipOrFail,
) -> None:
    mine = start(cloisters, tmp_path, "apart-mine")
    reaches_the_services(mine)
    config = CONFIG + f"guardian:\n  ui_port: {free_port()}\n"  # the denied domain too
    with guardian(docker_client, user.mktemp("other"), config, skip_or_fail, user=user) as other:
        assert other.instance.id != cli.instance.id
        # While the other one started, this one's cloister kept working.
        reaches_the_services(mine)
        repo = make_repo(other.root / unique("apart-theirs"), user=user)
        theirs = repo.name
        started = other.ok("start", "-d", cwd=repo)
        assert f"cloister {theirs} " in squash(started.stderr), started.describe()
        reaches_the_services(theirs)
        assert container(theirs) == other.container(theirs)
        # Neither lists, nor reaches, the other's.
        assert theirs not in cli.listing()
        assert mine not in other.listing()
        assert tcp(theirs, cli.container(mine), 1) != 0
        assert exec_in(theirs, f"getent hosts {cli.container(mine)}").returncode != 0
        # Its hub's port is its own: a third guardian asked for it is refused, saying whose.
        taken = other.json("guardian", "status", "--json")["ui"].rsplit(":", 1)[1].strip("/")
        third = CloisterCli(tmp_path / "third")
        third.write_config(f"guardian:\n  ui_port: {taken}\n")
        refused = third.fails("guardian", "start")
        message = squash(refused.stderr)
        assert f"user {user.name}'s (data directory {other.data_dir}" in message, message
        assert "ui_port" in message, message
        other.ok("stop", theirs)
    # The other one stopped: this one's cloister still works.
    reaches_the_services(mine)
