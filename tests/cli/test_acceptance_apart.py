"""Issue 19 acceptance: cloisters apart, and guardians side by side, on a real engine.

Each cloister is alone on a network of its own with its guardian's proxy, hostexec
gateway and credential gateway (that cloister B is out of A's reach is attacked in
tests/e2e/test_unreachable.py): a guardian restart reconnects the services. A stop keeps
the network, with the services alone on it, for the cloister's next start, which takes
it; another cloister reaches nothing on it meanwhile. Two guardians (two data
directories: two instances, one root's and one another user's) run on one engine
without touching each other: each one's cloister keeps working while the other starts
and stops.
"""

from __future__ import annotations

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
    exec_in,
    guardian,
    host_user,
    inspect_network,
    make_repo,
    squash,
    unique,
)
from tests.cli.test_acceptance import CONFIG, Cloisters
from tests.waiting import free_port

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]


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


def tcp(name: str, host: str, port: int) -> int:
    """The exit status of a TCP connect from inside cloister *name* (0: it connected)."""
    return exec_in(name, f"timeout 4 bash -c 'exec 3<>/dev/tcp/{host}/{port}'").returncode


def reaches_the_services(name: str) -> None:
    """The proxy (accepting its token), the hostexec gateway and the credential gateway."""
    assert connect_status(name) == CONNECT_ACCEPTED
    assert tcp(name, stack.HOSTEXEC_ALIAS, stack.HOSTEXEC_PORT) == 0
    assert tcp(name, stack.CREDENTIALS_ALIAS, stack.CREDENTIALS_PORT) == 0


def test_a_guardian_restart_reconnects_the_services(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    name = start(cloisters, tmp_path, "apart-restart")
    cli.ok("guardian", "stop")
    cli.ok("guardian", "start")  # compose recreates the services, on none of its networks
    reaches_the_services(name)


SERVICE_PORTS = {
    "proxy": stack.PROXY_PORT,
    "gateway": stack.HOSTEXEC_PORT,
    "credentials": stack.CREDENTIALS_PORT,
}


def test_a_kept_network_is_out_of_reach_and_taken_by_the_next_start(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    name = unique("apart-kept")
    repo = make_repo(tmp_path / name)
    cloisters.start(repo, name)
    other = start(cloisters, tmp_path, "apart-other")
    network = cli.container(name)
    (had,) = (
        endpoint["IPv4Address"].split("/")[0]
        for endpoint in inspect_network(network)["Containers"].values()
        if endpoint["Name"] == network
    )
    cli.ok("stop", name)
    kept = inspect_network(network)
    on_it = {
        endpoint["Name"]: endpoint["IPv4Address"].split("/")[0]
        for endpoint in kept["Containers"].values()
    }
    ports = {cli.instance.service(service): port for service, port in SERVICE_PORTS.items()}
    assert set(on_it) == set(ports), on_it  # the services alone
    reaches_the_services(other)  # the control: its own
    # From the other cloister, nothing on the kept network: not the address the stopped
    # one had, nor the services' there.
    for host, port in [(had, 1), *((on_it[service], ports[service]) for service in ports)]:
        assert tcp(other, host, port) != 0, (host, port)
    # Its next start takes the network as it is, and works there.
    cloisters.start(repo, name)
    assert inspect_network(network)["Id"] == kept["Id"]
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
