"""Family 3, unreachable: what a cloister must never reach or change, tried from inside
one (root and non-root host user).

A cloister is alone on an internal network whose bridge has no IPv4 address, with its
guardian's proxy, hostexec gateway and credential gateway: the hub (on the guardian's
control network, published on the host's 127.0.0.1 only), the executor (a Unix socket on
the host), the host itself, the Docker engine and every other cloister are out of reach.
It runs as the host user's uid with every capability dropped and ``no-new-privileges``;
it writes only ``/work``, its home and the temporary directories, never ``/refs``.

Attacks (the test of each, then what happens):

=======================================  ===================================================
attack (from inside)                     test: expected result
=======================================  ===================================================
TCP to the hub's host port on every      ``test_the_hub_is_unreachable_on_every_address``:
IPv4 address of the host (docker0, the   every connect fails, and ``approval`` is no name.
fake internet's, eth0's, every           Control: the host reaches the hub on 127.0.0.1 and
bridge's), and to the hub container's    on its control address
control address (9999 and that port)
TCP to a listener the test opens on      ``test_a_host_listener_is_unreachable``: every
0.0.0.0 of the host, on every host       connect fails, the listener greets nobody.
address and the cloister's own           Control: the host is greeted; the proxy on the
network's gateway                        same network is reached from inside
the executor: its Unix socket, any TCP   ``test_the_executor_is_out_of_reach``: no socket
port it has (on every host address)      file anywhere inside, its socket's path absent, no
                                         mount of its directory; it listens on no TCP port.
                                         Control: the host sees its socket
the Docker engine: its socket (any       ``test_the_engine_is_out_of_reach``: no engine
path), ``DOCKER_HOST``, its TCP ports    socket, no ``DOCKER_HOST``, no mount naming one;
2375/2376 on every host address          every connect fails
another cloister of the stack: TCP by    ``test_other_cloisters_are_unreachable``: no
its name, container name and address;    name resolves, every connect fails, no datagram
UDP unicast and broadcast                arrives. Control: each reaches its own listeners
                                         and the guardian's services; stopping one leaves
                                         the other working, B's kept network out of reach
capabilities: ``/proc/self/status``; a   ``test_no_capabilities_and_setuid_gains_nothing``:
setuid-root binary (``chfn``) run and    every capability set is 0, ``NoNewPrivs`` 1; the
read while it waits                      setuid binary runs as the cloister's uid, with no
                                         capability
writing anywhere (``find / -writable``   ``test_nothing_writable_outside_work_home_tmp``:
but /proc, /sys, /dev)                   for the non-root user only ``/work``, the home and
                                         the image's temporary directories; for root (uid
                                         0, no capability) also the container's own layer
                                         and Docker's ``/etc/hosts``, ``/etc/hostname``,
                                         ``/etc/resolv.conf`` for that container, never a
                                         host file. Control: /work, home, /tmp written
writing, creating, removing, changing    ``test_refs_are_read_only``: each fails with
the mode in ``/refs/<name>``             "Read-only file system"; the host's copy unchanged.
                                         Control: it reads
=======================================  ===================================================
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import socket
from pathlib import Path

import httpx
import pytest

from cloister_core import stack as stack_names
from tests.ci.test_docker_network import KNOWN_LINE, HostListener
from tests.cli.cli_support import (
    docker_executable,
    inspect,
    make_repo,
    network_gateway,
    run_command,
    unique,
)
from tests.e2e.harness import Cloister, Stack, shell_quote
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

CONNECT_TIMEOUT = 4
REFERENCE = "notes.txt"
ENGINE_PORTS = (2375, 2376)
# Docker's files for one container, bound over the image's (root inside may write them:
# they are that container's own, under the engine's directory for it).
DOCKER_FILES = frozenset({"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"})
# The image's own scratch directories (1777), in the container's layer.
IMAGE_TMP = frozenset({"/var/tmp", "/var/lock", "/run/lock"})
TCP_PORT = 8000
UDP_PORT = 8001
UDP_LOG = "/tmp/udp.log"
# The other cloister's listeners: a TCP server that greets, a UDP socket that logs.
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
# One datagram to ARGV[0] (broadcast allowed).
SEND_UDP = f"""
use IO::Socket::INET; use Socket;
my $s = IO::Socket::INET->new(Proto => "udp", Broadcast => 1) or die $!;
my $to = sockaddr_in({UDP_PORT}, inet_aton($ARGV[0]));
defined($s->send($ARGV[1], 0, $to)) or die "send: $!";
"""
# A setuid-root binary that waits (for a password on its stdin) long enough to be read.
SETUID = "/usr/bin/chfn"
SETUID_STATUS = f"""
sleep 20 | {SETUID} >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ "$(cat /proc/$pid/comm 2>/dev/null)" = chfn ] && break; sleep 0.1; done
grep -E '^(Uid|Gid|CapEff|CapPrm|NoNewPrivs):' /proc/$pid/status
kill %1 2>/dev/null; wait
"""


# --- the cloister and what it aims at ---------------------------------------------------------


@pytest.fixture(scope="session")
def _probers() -> dict[str, Cloister]:
    return {}


@pytest.fixture
def prober(stack: Stack, _probers: dict[str, Cloister]) -> Cloister:
    """One cloister per stack for the module (its attacks change nothing), with a
    reference repository at ``/refs/<name>-ref``."""
    key = stack.cli.instance.id
    if key not in _probers:
        _probers[key] = cloister_with_a_ref(stack)
    return _probers[key]


def cloister_with_a_ref(stack: Stack) -> Cloister:
    """``cloister start -d`` in a new repository whose project lists one ref."""
    name = unique("unreach")
    reference = stack.cli.root / f"{name}-ref"
    reference.mkdir()
    (reference / REFERENCE).write_text("read me\n", encoding="utf-8")
    repo_parent = stack.cli.root
    if stack.user is not None:
        stack.user.adopt(reference)
    stack.cli.write_project_config(name, f"refs:\n  - {reference}\n")
    repo = make_repo(repo_parent / name, user=stack.user)
    stack.started.append(name)
    stack.cli.ok("start", "-d", cwd=repo)
    return Cloister(stack, name, repo)


def ip_addresses() -> list[str]:
    """Every IPv4 address of the host's interfaces but the loopback's (inside, the
    loopback is the cloister's own)."""
    ip = shutil.which("ip")
    assert ip is not None, "iproute2's ip lists the host's addresses"
    listed = run_command([ip, "-4", "-o", "addr", "show"], timeout=10)
    assert listed.returncode == 0, listed.describe()
    found = {line.split()[3].split("/")[0] for line in listed.stdout.splitlines()}
    return sorted(a for a in found if not a.startswith("127."))


def host_addresses(stack: Stack, prober: Cloister) -> list[str]:
    """The host's addresses as a cloister would try them: every interface's, docker0's,
    the fake internet's, the guardian's networks' gateways and its own network's."""
    found = set(ip_addresses())
    found.add(stack.internet.address)
    for network in ("bridge", stack.cli.instance.egress_net, stack.cli.instance.control_net):
        gateway = network_gateway(network)
        if gateway:
            found.add(gateway)
    own = network_gateway(prober.container)  # the bridge holds no address: nobody has it
    assert own is not None
    found.add(own)
    return sorted(found)


def tcp_probe(address: str, port: int) -> str:
    return (
        f"( timeout {CONNECT_TIMEOUT} bash -c 'exec 3<>/dev/tcp/{address}/{port}"
        f' && head -c 64 <&3\'; echo "{address}:{port} exit=$?" ) &'
    )


def probe_all(
    prober: Cloister, targets: list[tuple[str, int]], names: tuple[str, ...] = ()
) -> dict[str, int]:
    """A TCP connect from inside to each target, and ``getent hosts`` of each of *names*
    (an unknown name takes the engine's resolver seconds), all at once: each one's exit
    status (0: it connected, or resolved), as ``ADDRESS:PORT`` and ``getent NAME``."""
    script = [tcp_probe(address, port) for address, port in targets]
    script += [f'( getent hosts {name}; echo "getent {name} exit=$?" ) &' for name in names]
    result = prober.sh("\n".join(script) + "\nwait", timeout=90)
    found: dict[str, int] = {}
    for line in result.stdout.splitlines():
        what, _, status = line.rpartition(" exit=")
        if what and status.isdigit():
            found[what] = int(status)
    assert len(found) == len(script), result.describe()
    return found


def reaches(prober: Cloister, host: str, port: int) -> bool:
    script = f"timeout {CONNECT_TIMEOUT} bash -c 'exec 3<>/dev/tcp/{host}/{port}'"
    return prober.sh(script).returncode == 0


def reaches_the_services(prober: Cloister) -> None:
    """The proxy, the hostexec gateway and the credential gateway (the probe works)."""
    for host, port in (
        (stack_names.PROXY_ALIAS, stack_names.PROXY_PORT),
        (stack_names.HOSTEXEC_ALIAS, stack_names.HOSTEXEC_PORT),
        (stack_names.CREDENTIALS_ALIAS, stack_names.CREDENTIALS_PORT),
    ):
        assert reaches(prober, host, port), (host, port)


def addresses_of(container: str) -> dict[str, str]:
    """A container's address on each of its networks."""
    result = run_command([docker_executable(), "inspect", container], timeout=30)
    assert result.returncode == 0, result.describe()
    (document,) = result.json()
    networks = document["NetworkSettings"]["Networks"]
    return {name: str(network["IPAddress"]) for name, network in networks.items()}


# --- the attacks ---------------------------------------------------------------------------------


def test_the_hub_is_unreachable_on_every_address(stack: Stack, prober: Cloister) -> None:
    hub = stack.cli.instance.service("approval")
    hub_addresses = sorted(addresses_of(hub).values())
    assert hub_addresses, hub
    # The controls: the hub answers on the host's loopback, and on its control address.
    health = httpx.get(f"http://127.0.0.1:{stack.ui_port}/api/v1/health", timeout=10)
    assert health.status_code == 200, health.text
    for address in hub_addresses:
        socket.create_connection((address, stack_names.APPROVAL_PORT), timeout=5).close()

    targets = [(address, stack.ui_port) for address in host_addresses(stack, prober)]
    targets += [
        (address, port)
        for address in hub_addresses
        for port in (stack_names.APPROVAL_PORT, stack.ui_port)
    ]
    found = probe_all(prober, targets, names=("approval", hub))
    assert all(found.values()), found  # nothing connects, neither name resolves
    reaches_the_services(prober)


def test_a_host_listener_is_unreachable(stack: Stack, prober: Cloister) -> None:
    listener = HostListener()
    try:
        with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as own:
            assert own.recv(len(KNOWN_LINE)) == KNOWN_LINE  # the control: it greets
        before = listener.peers
        assert before == ["127.0.0.1"]
        addresses = host_addresses(stack, prober)
        result = prober.sh(
            "\n".join(tcp_probe(address, listener.port) for address in addresses) + "\nwait",
            timeout=60,
        )
        assert KNOWN_LINE.decode().strip() not in result.stdout, result.describe()
        for address in addresses:
            assert f"{address}:{listener.port} exit=" in result.stdout, result.describe()
            assert f"{address}:{listener.port} exit=0" not in result.stdout, result.describe()
        assert listener.peers == before, (addresses, result.describe())
    finally:
        listener.close()
    # ...while the proxy on the same network is reached (the probe itself works).
    assert reaches(prober, stack_names.PROXY_ALIAS, stack_names.PROXY_PORT)


def executor_sockets(pid: int) -> tuple[list[int], list[str]]:
    """The TCP ports process *pid* listens on, and the paths of its Unix sockets."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        found = re.fullmatch(r"socket:\[(\d+)\]", str(fd.readlink()))
        if found:
            inodes.add(found.group(1))
    ports = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and fields[3] == "0A":  # listening
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    paths = []
    for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[6] in inodes and len(fields) > 7:
            paths.append(fields[7])
    return ports, paths


def all_sockets(prober: Cloister) -> str:
    """Every socket file inside (the kernel's and the engine's trees aside)."""
    script = r"find / \( -path /proc -o -path /sys \) -prune -o -type s -print 2>/dev/null"
    return prober.sh(script, timeout=120).stdout


def test_the_executor_is_out_of_reach(stack: Stack, prober: Cloister) -> None:
    pid = stack.cli.json("guardian", "status", "--json")["executor_pid"]
    assert isinstance(pid, int)
    ports, paths = executor_sockets(pid)
    assert paths, f"the executor (pid {pid}) has no Unix socket"  # the control
    assert ports == [], f"the executor listens on TCP ports {ports}"
    assert all_sockets(prober) == ""
    for path in paths:
        assert prober.sh(f"test -e {shell_quote(path)}").returncode != 0, path
        assert prober.sh(f"test -e {shell_quote(str(Path(path).parent))}").returncode != 0, path
    mounts = inspect(prober.name)["Mounts"]
    directories = {str(Path(path).parent) for path in paths}
    assert not [m for m in mounts if any(m["Source"].startswith(d) for d in directories)]


def test_the_engine_is_out_of_reach(stack: Stack, prober: Cloister) -> None:
    assert all_sockets(prober) == ""
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd"):
        assert prober.sh(f"test -e {path}").returncode != 0, path
    assert "DOCKER_HOST" not in prober.ok("env").stdout
    document = inspect(prober.name)
    binds = [*(document["HostConfig"].get("Binds") or []), *map(str, document["Mounts"])]
    assert not [entry for entry in binds if "docker" in entry or "containerd" in entry]
    targets = [(a, port) for a in host_addresses(stack, prober) for port in ENGINE_PORTS]
    found = probe_all(prober, targets)
    assert all(found.values()), found


def test_other_cloisters_are_unreachable(stack: Stack, prober: Cloister) -> None:
    a = prober
    b = stack.cloister("unreach-b")
    served = run_command(
        [docker_executable(), "exec", "-d", b.container, "perl", "-e", LISTENERS], timeout=30
    )
    assert served.returncode == 0, served.describe()

    def send_udp(cloister: Cloister, host: str, text: str) -> None:
        cloister.sh(f"perl -e {shell_quote(SEND_UDP)} {host} {text}")

    def logged() -> str:
        return b.sh(f"cat {UDP_LOG}").stdout

    # The listeners work: B reaches its own, by TCP and by UDP.
    wait_until(lambda: reaches(b, "127.0.0.1", TCP_PORT), 30, "B's TCP listener")
    send_udp(b, "127.0.0.1", "from-b-itself")
    wait_until(lambda: "from-b-itself" in logged(), 10, "B's UDP listener")

    # Each on a network of its own, on subnets that do not overlap.
    b_address = addresses_of(b.container)[b.container]
    a_address = addresses_of(a.container)[a.container]
    a_network = ipaddress.ip_network(f"{a_address}/27", strict=False)
    assert ipaddress.ip_address(b_address) not in a_network
    assert set(addresses_of(a.container)) == {a.container}

    # From A: B is no name, and nothing reaches it by TCP, by its name, its container's
    # name or its address.
    targets = [(host, TCP_PORT) for host in (b.name, b.container, b_address)]
    found = probe_all(a, targets, names=(b.name, b.container))
    assert all(found.values()), found
    # Nor by UDP: unicast, the limited broadcast, and A's own network's broadcast.
    for host in (b_address, "255.255.255.255", str(a_network.broadcast_address)):
        send_udp(a, host, "from-a")
    send_udp(b, "127.0.0.1", "after-a")  # a datagram of A's would have arrived before
    wait_until(lambda: "after-a" in logged(), 10, "B's own datagram")
    assert "from-a" not in logged()

    # Both still reach the proxy, the hostexec gateway and the credential gateway.
    reaches_the_services(a)
    reaches_the_services(b)
    # Stopping one keeps its network for its next start, nothing on it but the
    # services; the other keeps working, and still reaches nothing of B's.
    b.stop()
    kept = run_command([docker_executable(), "network", "inspect", b.container], timeout=30)
    assert kept.returncode == 0, kept.describe()
    (document,) = kept.json()
    assert b.container not in {e["Name"] for e in (document["Containers"] or {}).values()}
    reaches_the_services(a)
    found = probe_all(a, [(b_address, TCP_PORT)])
    assert all(found.values()), found


def status_fields(text: str) -> dict[str, str]:
    return {
        key: value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())
    }


def test_no_capabilities_and_setuid_gains_nothing(stack: Stack, prober: Cloister) -> None:
    uid = 0 if stack.user is None else stack.user.uid
    own = status_fields(prober.ok("cat /proc/self/status").stdout)
    assert own["Uid"].split() == [str(uid)] * 4, own["Uid"]
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(own[key], 16) == 0, (key, own[key])
    assert own["NoNewPrivs"] == "1"
    assert own["Seccomp"] == "2"  # the engine's default filter
    # The binary is setuid root (the control), and run, it is the cloister's uid.
    assert prober.ok(f"stat -c '%a %u' {SETUID}").stdout.split() == ["4755", "0"]
    waited = status_fields(prober.ok(SETUID_STATUS, timeout=60).stdout)
    assert waited["Uid"].split() == [str(uid)] * 4, waited
    assert int(waited["CapEff"], 16) == 0, waited
    assert int(waited["CapPrm"], 16) == 0, waited
    assert waited["NoNewPrivs"] == "1", waited


WRITABLE = r"""
find / \( -path /proc -o -path /sys -o -path /dev -o -path /work -o -path "$HOME" \
    -o -path /tmp \) -prune -o -writable -printf '%D %p\n' 2>/dev/null
true  # find fails on what it may not read (/root, say): not written there either
"""


def test_nothing_writable_outside_work_home_tmp(stack: Stack, prober: Cloister) -> None:
    # The controls: the three are written.
    prober.ok(
        'for d in /work "$HOME" /tmp; do echo x > "$d/written.$$" && rm "$d/written.$$"; done'
    )
    root_device = prober.ok("stat -c %d /").stdout.strip()
    found = prober.ok(WRITABLE, timeout=180).stdout.splitlines()
    writable = {path: device for device, _, path in (line.partition(" ") for line in found)}
    if stack.user is None:
        # uid 0 with no capability still owns the image's files: its own layer, and
        # Docker's files for this container, never another file of the host.
        elsewhere = {path for path, device in writable.items() if device != root_device}
        assert elsewhere == DOCKER_FILES, sorted(elsewhere)
    else:
        assert set(writable) == IMAGE_TMP, sorted(writable)
        assert {writable[path] for path in IMAGE_TMP} == {root_device}


def test_refs_are_read_only(stack: Stack, prober: Cloister) -> None:
    name = f"{prober.name}-ref"
    ref = f"/refs/{name}"
    assert prober.ok(f"cat {ref}/{REFERENCE}").stdout == "read me\n"  # the control
    host_copy = stack.cli.root / name
    for attempt in (
        f"echo x >> {ref}/{REFERENCE}",
        f"echo x > {ref}/new.txt",
        f"rm -f {ref}/{REFERENCE}",
        f"mkdir {ref}/directory",
        f"chmod 777 {ref}/{REFERENCE}",
        f"touch {ref}/{REFERENCE}",
        f"mv {ref}/{REFERENCE} {ref}/moved.txt",
    ):
        tried = prober.sh(attempt)
        assert tried.returncode != 0, tried.describe()
        assert "Read-only file system" in tried.stderr, tried.describe()
    assert sorted(p.name for p in host_copy.iterdir()) == [REFERENCE]
    assert (host_copy / REFERENCE).read_text(encoding="utf-8") == "read me\n"
