"""The e2e harness: a fake internet on testcontainers, guardians and cloisters started by
the real CLI, and the ways to attack from inside one. Names, labels and wait strategies
of everything the suite makes live here, and only here.

**The fake internet.** One host address that is on none of the guardian's networks
(the proxy refuses every network it is attached to, whatever the config says): the
gateway of a bridge network the harness makes (labelled :data:`E2E_LABEL`). The
upstream container (``tests/e2e/upstream.py`` in the ``cloister-fakeapi`` image, on the
host's network) listens there on 80 (HTTP), 443 (TLS with the test CA) and 8080 (the fake
model APIs). Every fake-internet name (:data:`ALLOWED`, :data:`DENIED`, any
``*.example.test`` a test makes up) resolves to that address in the proxy's and the
credential gateway's ``/etc/hosts``, as a company's DNS would answer them, so a request
reaches it only through the proxy, by name, with the guardian's config allowing that one
address (``proxy.allow_private_networks``). Everything else the suite reaches for — the
address of another bridge, the hub, 1.1.1.1 — is the real engine's.

**A stack** is one guardian of one host user (root, or the suite's non-root user of
:func:`tests.cli.cli_support.host_user`) with that config, and :meth:`Stack.cloister`
starts a cloister in a new repository of that user's with ``cloister start -d``, the
test CA in its work tree (``/work/e2e-ca.pem``) for curl.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import docker
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from cloister_core import stack as stack_names
from tests.agents.agent_images import fakeapi_image
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    HostUser,
    Result,
    container,
    docker_executable,
    exec_in,
    guardian,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
)
from tests.e2e import upstream
from tests.waiting import free_port, wait_until

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

E2E_LABEL = "org.cloister.test.e2e"
LABELS = {E2E_LABEL: "tests/e2e"}
DOMAIN = "example.test"
ALLOWED = f"allowed.{DOMAIN}"
DENIED = f"denied.{DOMAIN}"
API = f"api.{DOMAIN}"
WILD = f"wild.{DOMAIN}"  # allowed as *.wild.example.test
API_PORT = 8080
CA_FILE = "e2e-ca.pem"  # in each cloister's work tree
UPSTREAM_SCRIPT = Path(upstream.__file__)
UPSTREAM_TIMEOUT = 60
HOSTS_TIMEOUT = 30.0
SERVICES_RESOLVING = ("proxy", "credentials")  # the services that dial the internet

HostKind = Literal["root", "nonroot"]
HOST_KINDS: tuple[HostKind, ...] = ("root", "nonroot")

# The guardian's config every stack starts from: the fake internet's address allowed as
# an upstream, one name allowed, one denied, a wildcard, and the agents' APIs on it.
CONFIG = """\
# Written by tests/e2e/harness.py
defaults:
  image: {image}
guardian:
  ui_port: {ui_port}
proxy:
  allow_private_networks: ['{address}/32']
  allow:
    - domain: {allowed}
    - pattern: '*.{wild}'
  deny:
    - domain: {denied}
hostexec:
  auto_approve:
    - pattern: "^echo( .*)?$"
agents:
  claude: {{api_base: 'http://{api}:{api_port}'}}
  codex: {{api_base: 'http://{api}:{api_port}'}}
  gemini: {{api_base: 'http://{api}:{api_port}'}}
"""


def openssl(*args: str, cwd: Path) -> None:
    executable = shutil.which("openssl")
    assert executable is not None, "the openssl command is not installed"
    completed = subprocess.run(
        [executable, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, f"openssl {' '.join(args)}:\n{completed.stderr}"


def make_certificates(directory: Path) -> Path:
    """A test CA (``ca.pem``) and a leaf of it for the fake internet's names
    (``leaf.pem``, ``leaf.key``), made with the openssl command in *directory*."""
    directory.mkdir(parents=True, exist_ok=True)
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=Cloister e2e test CA", "-keyout", "ca.key", "-out", "ca.pem",
        cwd=directory,
    )  # fmt: skip
    (directory / "leaf.ext").write_text(
        f"subjectAltName=DNS:{DOMAIN},DNS:*.{DOMAIN},DNS:*.{WILD}\nextendedKeyUsage=serverAuth\n",
        encoding="ascii",
    )
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={DOMAIN}",
        "-keyout", "leaf.key", "-out", "leaf.csr",
        cwd=directory,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "leaf.ext", "-out", "leaf.pem",
        cwd=directory,
    )  # fmt: skip
    for name in ("leaf.key", "leaf.pem", "ca.pem"):
        (directory / name).chmod(0o644)  # read by the upstream's user
    return directory / "ca.pem"


# --- the fake internet -------------------------------------------------------------------


@dataclass
class FakeInternet:
    """The upstream container and the address every fake-internet name resolves to."""

    network: Network
    upstream: DockerContainer
    address: str
    ca: Path
    logs: Path

    def requests(self) -> list[dict[str, Any]]:
        """Every request the upstream's web servers saw, oldest first."""
        return read_lines(self.logs / "upstream.jsonl")

    def api_requests(self) -> list[dict[str, Any]]:
        """Every request the fake model APIs saw."""
        return read_lines(self.logs / "api.jsonl")

    def seen(self, text: str) -> bool:
        """Whether *text* appears anywhere in what reached the fake internet."""
        return any(
            text in (self.logs / name).read_text(encoding="utf-8", errors="replace")
            for name in ("upstream.jsonl", "api.jsonl")
            if (self.logs / name).exists()
        )


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@contextlib.contextmanager
def fake_internet(client: docker.DockerClient, scratch: Path) -> Iterator[FakeInternet]:
    """The fake internet, for as long as the block runs (removed after, also on error)."""
    testcontainers_config.ryuk_disabled = True  # no registry here: the reaper's image is absent
    certs = scratch / "certs"
    ca = make_certificates(certs)
    logs = scratch / "logs"
    logs.mkdir(mode=0o777, exist_ok=True)
    logs.chmod(0o777)  # written by the upstream's root, read by the tests
    network = Network(docker_network_kw={"labels": LABELS, "driver": "bridge"})
    network.name = f"cloister-e2e-internet-{secrets.token_hex(3)}"
    with network:
        address = network_gateway(client, network.name)
        upstream_container = (
            DockerContainer(fakeapi_image(client))
            .with_name(f"cloister-e2e-upstream-{secrets.token_hex(3)}")
            .with_kwargs(network_mode="host", user="0", labels=LABELS)
            .with_volume_mapping(str(UPSTREAM_SCRIPT), "/opt/e2e/upstream.py", "ro")
            .with_volume_mapping(str(certs), "/certs", "ro")
            .with_volume_mapping(str(logs), "/log", "rw")
            .with_command(upstream_command(address))
            .waiting_for(
                LogMessageWaitStrategy(upstream.READY).with_startup_timeout(UPSTREAM_TIMEOUT)
            )
        )
        with upstream_container:
            yield FakeInternet(network, upstream_container, address, ca, logs)


def upstream_command(address: str) -> list[str]:
    options = {"--address": address, "--certs": "/certs", "--log": "/log"}
    options["--api-port"] = str(API_PORT)
    return ["python3", "/opt/e2e/upstream.py", *(item for pair in options.items() for item in pair)]


def network_gateway(client: docker.DockerClient, name: str) -> str:
    """The host's IPv4 address on network *name*."""
    network = client.networks.get(name)
    network.reload()
    for pool in network.attrs["IPAM"]["Config"] or []:
        gateway = pool.get("Gateway")
        if gateway and ":" not in gateway:
            return str(gateway)
    raise AssertionError(f"network {name!r} has no IPv4 gateway: {network.attrs['IPAM']}")


# --- guardians and cloisters --------------------------------------------------------------


@dataclass
class Cloister:
    """One running cloister of a stack: its name, its repository on the host."""

    stack: Stack
    name: str
    repo: Path

    @property
    def container(self) -> str:
        return container(self.name)

    def sh(self, script: str, *, timeout: float = 60) -> Result:
        """*script* run by bash inside, as the cloister's user, in /work."""
        return exec_in(self.name, script, timeout=timeout)

    def ok(self, script: str, *, timeout: float = 60) -> Result:
        result = self.sh(script, timeout=timeout)
        assert result.returncode == 0, result.describe()
        return result

    def curl(self, url: str, *options: str, max_time: float = 15) -> tuple[str, str]:
        """``curl`` through the cloister's own proxy (its environment): the HTTP status
        (``000`` for none) and the body."""
        quoted = " ".join(shell_quote(part) for part in (*options, url))
        script = (
            f"curl --silent --show-error --max-time {max_time:g} --cacert /work/{CA_FILE}"
            f" --write-out '\\n%{{http_code}}' {quoted}"
        )
        result = self.sh(script, timeout=max_time + 30)
        body, _, status = result.stdout.rpartition("\n")
        return status.strip() or "000", body

    def connect_status(self, target: str, *, token: str | None = None) -> str:
        """The proxy's answer to ``CONNECT target`` (``host:port``) with the cloister's
        token or *token*: ``200``, ``403``, ``407``, or ``000`` for none."""
        proxy = f"http://cloister:{token}@{self.stack.proxy_alias}" if token else '"$HTTPS_PROXY"'
        script = (
            "curl --silent --output /dev/null --max-time 10 --write-out '%{http_connect}'"
            f" --proxytunnel --proxy {proxy} telnet://{target}"
        )
        return self.sh(script, timeout=40).stdout.strip()[:3] or "000"

    def stop(self) -> None:
        self.stack.cli.ok("stop", self.name)


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@dataclass
class Stack:
    """One guardian of one host user on the fake internet, and the cloisters it started."""

    kind: HostKind
    cli: CloisterCli
    internet: FakeInternet
    user: HostUser | None
    started: list[str] = field(default_factory=list)
    resolving: set[str] = field(default_factory=set)
    ui_port: int = 0  # the hub's port on the host's 127.0.0.1

    @property
    def proxy_alias(self) -> str:
        return f"{stack_names.PROXY_ALIAS}:{stack_names.PROXY_PORT}"

    def resolve(self, *names: str) -> None:
        """Make *names* resolve to the fake internet in the services that dial out."""
        self.resolving.update(names)
        self._write_hosts()

    def _write_hosts(self) -> None:
        lines = "".join(f"{self.internet.address} {name}\n" for name in sorted(self.resolving))
        for service in SERVICES_RESOLVING:
            name = self.cli.instance.service(service)
            # The file Docker binds on /etc/hosts (read-only inside: the services' root
            # file system is), written from the host, as the engine itself writes it.
            found = run_command(
                [docker_executable(), "inspect", "--format", "{{.HostsPath}}", name], timeout=30
            )
            assert found.returncode == 0, found.describe()
            hosts = Path(found.stdout.strip())
            kept = [
                line
                for line in hosts.read_text(encoding="utf-8").splitlines(keepends=True)
                if not line.rstrip().endswith(f".{DOMAIN}")
            ]
            hosts.write_text("".join(kept) + lines, encoding="utf-8")

    def guardian_start(self) -> Result:
        """``cloister guardian start`` (it heals what is missing), the names again."""
        result = self.cli.ok("guardian", "start", timeout=600)
        self._write_hosts()
        return result

    def cloister(self, prefix: str, *args: str, files: dict[str, str] | None = None) -> Cloister:
        """``cloister start -d ARGS`` in a new repository of the stack's user, with
        *files* committed in it and the test CA beside them."""
        name = unique(prefix)
        repo = make_repo(self.cli.root / name, user=self.user)
        for relative, text in (files or {}).items():
            path = repo / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        (repo / CA_FILE).write_bytes(self.internet.ca.read_bytes())
        if self.user is not None:
            self.user.adopt(repo)
        self.started.append(name)
        result = self.cli.ok("start", "-d", *args, cwd=repo)
        assert f"cloister {name} " in squash(result.stderr), result.describe()
        return Cloister(self, name, repo)

    def close(self) -> None:
        running = set(self.cli.listing())
        for name in self.started:
            if name in running:
                self.cli.run("stop", name)
        remove_containers(self.started)

    def resolve_to(self, address: str | tuple[str, ...], *names: str) -> None:
        """Make *names* resolve to *address* (a private one, say; a tuple: each of them)
        in the services that dial out, as a hostile or careless DNS would answer; the
        next :meth:`resolve` or :meth:`guardian_start` drops them (``resolve(name)``
        maps one back)."""
        self.resolving.difference_update(names)
        for service in SERVICES_RESOLVING:
            argv = [docker_executable(), "inspect", "--format", "{{.HostsPath}}"]
            found = run_command([*argv, self.cli.instance.service(service)], timeout=30)
            assert found.returncode == 0, found.describe()
            hosts = Path(found.stdout.strip())
            kept = [
                line
                for line in hosts.read_text(encoding="utf-8").splitlines(keepends=True)
                if not set(line.split()[1:]) & set(names)
            ]
            each = (address,) if isinstance(address, str) else address
            added = "".join(f"{one} {name}\n" for name in names for one in each)
            hosts.write_text("".join(kept) + added, encoding="utf-8")


def config_for(internet: FakeInternet, ui_port: int, extra: str = "") -> str:
    return CONFIG.format(
        image=SLIM_IMAGE,
        ui_port=ui_port,
        address=internet.address,
        allowed=ALLOWED,
        denied=DENIED,
        wild=WILD,
        api=API,
        api_port=API_PORT,
    ) + textwrap.dedent(extra)


@contextlib.contextmanager
def running_stack(
    user: HostUser | None,
    client: docker.DockerClient,
    internet: FakeInternet,
    scratch: Path,
    skip: SkipOrFail,
    *,
    extra_config: str = "",
    names: Sequence[str] = (ALLOWED, DENIED, API, f"a.{WILD}"),
) -> Iterator[Stack]:
    """A guardian of host *user* (None: the tests' own, root in CI) on *internet*, for
    as long as the block runs. The non-root user is the session's ``nonroot_user``
    fixture (:func:`host_user` holds a lock for as long as it runs: once per session)."""
    kind: HostKind = "root" if user is None else "nonroot"
    with contextlib.ExitStack() as exits:
        root = user.mktemp("e2e") if user is not None else scratch
        ui_port = free_port()
        text = config_for(internet, ui_port, extra_config)
        cli = exits.enter_context(guardian(client, root, text, skip, user=user))
        stack = Stack(kind, cli, internet, user, ui_port=ui_port)
        exits.callback(stack.close)
        stack.resolve(*names)
        yield stack


def wait_for_held(stack: Stack, what: str, timeout: float = 30) -> dict[str, Any]:
    """The held item whose text contains *what*, from ``cloister approvals list --json``."""

    def probe() -> dict[str, Any] | None:
        listed = stack.cli.json("approvals", "list", "--json")
        for kind in ("domains", "commands"):
            for item in listed.get(kind, []):
                if what in json.dumps(item):
                    return dict(item)
        return None

    return wait_until(probe, timeout, f"{what!r} held in the hub")


# --- what crosses the host's interfaces -----------------------------------------------------

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
CAPTURE_BUFFER = 32 * 1024 * 1024
SO_RCVBUFFORCE = 33  # root may set a buffer over net.core.rmem_max


@dataclass
class Capture:
    """Frames of every interface of the host's network namespace (loopback, eth0, every
    bridge and the host's end of every container's veth) that held one of *needles*:
    ``(interface, needle)`` for each, and how many frames the kernel dropped."""

    needles: tuple[bytes, ...]
    hits: list[tuple[str, bytes]] = field(default_factory=list)
    dropped: int = 0

    def where(self, needle: bytes) -> set[str]:
        """The interfaces a frame holding *needle* (case-insensitive) crossed."""
        return {interface for interface, found in list(self.hits) if found == needle.lower()}


@contextlib.contextmanager
def capture(*needles: bytes) -> Iterator[Capture]:
    """Every frame on the host (an AF_PACKET socket: needs root) searched for *needles*,
    for as long as the block runs; the kernel's drop count is read at the end, so that a
    test can tell "never sent" from "missed"."""
    import socket
    import struct
    import threading

    found = Capture(tuple(needle.lower() for needle in needles))
    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
    sniffer.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, CAPTURE_BUFFER)
    sniffer.settimeout(0.1)
    stop = threading.Event()

    def sniff() -> None:
        while not stop.is_set():
            try:
                frame, address = sniffer.recvfrom(65535)
            except TimeoutError:
                continue
            lowered = frame.lower()
            found.hits.extend((address[0], n) for n in found.needles if n in lowered)

    thread = threading.Thread(target=sniff, name="e2e-capture", daemon=True)
    with sniffer:
        thread.start()
        try:
            yield found
        finally:
            stop.set()
            thread.join(timeout=10)
            _packets, found.dropped = struct.unpack(
                "II", sniffer.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            )
