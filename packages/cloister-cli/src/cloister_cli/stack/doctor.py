"""``cloister doctor``: a cloister audited by Cloister, on this machine's engine.

Two sources, both data (:class:`Check`), nothing printed:

* **network**: one probe program (``doctor_probe.pl``) run in a throwaway sidecar
  container of Cloister's own slim image that joins the cloister's network namespace
  and nothing else of it: not its filesystem, processes or user, so the agent can
  neither see the probe nor write its output or its perl. It tries what an agent would:
  TCP and UDP out without the proxy, IPv6, a route out, DNS (asked of the engine's
  resolver directly); the hub on every address of the host it could know, the other
  cloisters; the interfaces; the proxy with the cloister's token to IP literals and the
  guardian's own services (refused: 403), and with a random token or none (407). Every
  target is an address the engine gave, never a name the cloister's /etc/hosts (which
  the sidecar shares) could redirect.
* **engine**: what the engine says of the cloister and the guardian (the docker SDK):
  its network internal, without IPv4 on the host's side and without IPv6, and it on no
  other; no capability added, no-new-privileges, not privileged, no engine socket
  mounted, the host written only in /work and the agents' state, /refs read-only; the
  hub published on 127.0.0.1 only; the executor's socket the user's alone; the
  guardian's containers this user's and running; the disk quota as configured.

``cloister start`` runs the cheap part (:data:`CHEAP`) once per engine
(:func:`check_new_engine`), remembered by the engine's ID in ``<data>/engines.json``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import selectors
import shutil
import stat
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors

from cloister_cli.container import cloisters, engine, listing, networks
from cloister_cli.container.engine import Container, Engine
from cloister_cli.container.safeguards import no_disk_quota
from cloister_cli.images.builds import SLIM_AGENT_IMAGE
from cloister_cli.stack import executor_process
from cloister_core import stack
from cloister_core.config import load_global_config
from cloister_core.config.models import GlobalConfig
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable
from cloister_executor.locations import run_dir, socket_path

Family = Literal["egress", "unreachable", "proxy", "identity", "fail-closed", "engine"]
FAMILIES: tuple[Family, ...] = (
    "egress",
    "unreachable",
    "proxy",
    "identity",
    "fail-closed",
    "engine",
)

Source = Literal["network", "engine"]

PROBE_WAIT = 2  # seconds the probe gives one attempt (a connect, a lookup, an answer)
PROBE_TIMEOUT = 20.0  # the whole sidecar run, engine included
PROBE_OUTPUT_LIMIT = 64 * 1024  # bytes: the probe writes a few KiB; more is not the probe
EVIDENCE_LIMIT = 500  # characters of one check's evidence
PROBE_IMAGE = SLIM_AGENT_IMAGE.tag  # built by Cloister; no cloister writes it
PROBE_USER = "65534:65534"  # nobody: the probe needs no privilege
RESOLVER = "127.0.0.11"  # the engine's DNS server in every user-defined network
ENGINES_FILE = "engines.json"  # under <data>: the engines whose start check passed


class DoctorError(CloisterError):
    """The audit could not run (no such cloister, no engine, the probe did not answer)."""


class ProbeUnavailableError(DoctorError):
    """The probe could not be started at all, for a reason of this machine's (no docker
    command, no probe image), not of the cloister's."""


@dataclass(frozen=True, slots=True)
class About:
    """What a check is, what its failure means, and how to fix it."""

    family: Family
    title: str
    meaning: str
    fix: str


_RESTART = "`cloister stop NAME` and `cloister start` make the cloister afresh"
_ENGINE = "an engine or host firewall that lets it through; Docker ≥ 20.10 with iptables on"

CHECKS: dict[str, About] = {
    "egress.tcp": About(
        "egress",
        "No TCP out without the proxy",
        "the agent can open TCP connections to the internet or the host, past the proxy"
        " and its approvals",
        f"the cloister's network must be internal; {_RESTART}, and check {_ENGINE}",
    ),
    "egress.udp": About(
        "egress",
        "No UDP out (DNS or otherwise)",
        "the agent can send datagrams out and get answers: data leaves unseen",
        f"{_RESTART}; check {_ENGINE}",
    ),
    "egress.ipv6": About(
        "egress",
        "No IPv6 but loopback and link-local",
        "an IPv6 address or route is a way to the host that inhibit_ipv4 does not close",
        "the cloister's network must have IPv6 off; " + _RESTART,
    ),
    "egress.route": About(
        "egress",
        "No route out but the network's unanswered gateway",
        "a route to a gateway that answers is a way out past the proxy",
        "detach the cloister from every other network (`docker network disconnect`); " + _RESTART,
    ),
    "egress.dns": About(
        "egress",
        "Outside names do not resolve",
        "names resolve from inside: DNS queries leave the cloister, and data with them",
        f"{_RESTART}; check that the engine gives internal networks no outside DNS",
    ),
    "unreachable.hub": About(
        "unreachable",
        "The approval hub is out of reach",
        "the agent can reach the hub's API: it could try to approve its own requests",
        "the hub must be published on 127.0.0.1 only: `cloister guardian start` renders it so",
    ),
    "unreachable.cloisters": About(
        "unreachable",
        "Other cloisters are out of reach",
        "one agent can reach another cloister, and what runs there",
        "each cloister must be alone on its own network; " + _RESTART,
    ),
    "unreachable.filesystem": About(
        "unreachable",
        "The host is written only in /work and the agents' state (its mounts)",
        "the agent can write a directory of the host outside its project",
        "remove the mount (a devcontainer.json's, say); " + _RESTART,
    ),
    "unreachable.refs": About(
        "unreachable",
        "/refs is mounted read-only",
        "the agent can write the project's refs (other repositories of yours)",
        _RESTART,
    ),
    "fail-closed.interfaces": About(
        "fail-closed",
        "One network: the cloister's own",
        "the cloister is on a second network: a way out that does not go through the proxy",
        "`docker network disconnect NETWORK CONTAINER`, or " + _RESTART,
    ),
    "proxy.literals": About(
        "proxy",
        "The proxy refuses IP literals of the host and private ranges",
        "through the proxy the agent reaches loopback, the metadata service or private networks",
        "restart the guardian with this Cloister (`cloister guardian start`)",
    ),
    "proxy.services": About(
        "proxy",
        "The proxy refuses the guardian's own services",
        "through the proxy the agent reaches the hub or the gateways from the guardian's side",
        "restart the guardian with this Cloister (`cloister guardian start`)",
    ),
    "identity.random-token": About(
        "identity",
        "The proxy refuses a token it did not issue",
        "the proxy serves requests without this cloister's identity",
        "restart the guardian (`cloister guardian start`); check its logs",
    ),
    "identity.no-token": About(
        "identity",
        "The proxy refuses a request with no token",
        "the proxy serves anyone on the cloister's network",
        "restart the guardian (`cloister guardian start`); check its logs",
    ),
    "engine.network": About(
        "engine",
        "Its network is internal, without IPv4 on the host's side, without IPv6",
        "the engine routes the cloister's network to the host or the internet",
        "`cloister stop NAME`, `docker network rm` its network (a stop keeps it for the"
        " next start), and `cloister start` makes it anew",
    ),
    "engine.attached": About(
        "engine",
        "It is attached to its own network alone",
        "the cloister is on another network too: a way out past the proxy",
        "`docker network disconnect NETWORK CONTAINER`, or " + _RESTART,
    ),
    "engine.capabilities": About(
        "engine",
        "No capability added, all dropped",
        "the container was made with capabilities: not as Cloister makes it",
        _RESTART,
    ),
    "engine.no-new-privileges": About(
        "engine",
        "no-new-privileges is set",
        "the container was made without no-new-privileges: not as Cloister makes it",
        _RESTART,
    ),
    "engine.privileged": About(
        "engine",
        "Not privileged, no devices",
        "a privileged container (or one given devices) is root on this machine",
        _RESTART,
    ),
    "engine.docker-socket": About(
        "engine",
        "No engine socket mounted",
        "the container has the engine's socket: that is root on this machine",
        _RESTART,
    ),
    "engine.executor": About(
        "engine",
        "The executor's socket is yours alone, and not mounted",
        "another user of this machine, or the cloister, can reach the host executor",
        "`chmod 700 <data>/run`, then `cloister guardian start`",
    ),
    "engine.hub-published": About(
        "engine",
        "The hub is published on 127.0.0.1 only",
        "the approval hub answers on an address others (the LAN, the cloisters) can reach",
        "`cloister guardian stop` and `cloister guardian start` (it renders 127.0.0.1)",
    ),
    "engine.guardian": About(
        "engine",
        "The guardian runs, and is yours",
        "the guardian is down, or its containers are not this user's",
        "`cloister guardian start`; `cloister guardian status` shows each service",
    ),
    "engine.disk-quota": About(
        "engine",
        "The disk limit is what the configuration asks",
        "defaults.disk is set but the engine cannot enforce it: a cloister can fill the disk",
        "remove defaults.disk from config.yaml, or move Docker to a storage driver with a"
        " quota (overlay2 on xfs with pquota, btrfs, zfs)",
    ),
}

# The probe's, seen from the cloister's network namespace; every other is the engine's word.
PROBE_CHECKS = (
    "egress.tcp",
    "egress.udp",
    "egress.ipv6",
    "egress.route",
    "egress.dns",
    "unreachable.hub",
    "unreachable.cloisters",
    "fail-closed.interfaces",
    "proxy.literals",
    "proxy.services",
    "identity.random-token",
    "identity.no-token",
)
# What `cloister start` runs once per engine: quick, and what a weak engine gets wrong.
CHEAP = ("egress.tcp", "egress.udp", "egress.ipv6", "egress.route", "egress.dns")


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: what was checked, whether it held, and the evidence."""

    id: str
    family: Family
    title: str
    passed: bool
    meaning: str  # what a failure means
    fix: str  # how to fix it
    evidence: str
    source: Source  # network: Cloister's probe saw it; engine: the engine says so

    @classmethod
    def of(cls, check_id: str, passed: bool, evidence: str) -> Check:
        about = CHECKS[check_id]
        source: Source = "network" if check_id in PROBE_CHECKS else "engine"
        evidence = evidence if len(evidence) <= EVIDENCE_LIMIT else evidence[:EVIDENCE_LIMIT] + "…"
        return cls(
            check_id, about.family, about.title, passed, about.meaning, about.fix, evidence, source
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "title": self.title,
            "passed": self.passed,
            "meaning": self.meaning,
            "fix": self.fix,
            "evidence": self.evidence,
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class Report:
    cloister: str
    container: str
    checks: tuple[Check, ...]
    seconds: float = 0.0

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    @property
    def passed(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return {
            "cloister": self.cloister,
            "container": self.container,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "checks": [check.to_json() for check in self.checks],
        }


# -- the probe -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Targets:
    """What the probe aims at, as the engine sees it: addresses, never names the
    cloister's /etc/hosts could redirect (the probe cannot look)."""

    docker0: tuple[str, ...] = ()  # the default bridge's gateways
    gateway: tuple[str, ...] = ()  # the cloister's network's (its default route's) gateway
    hub: tuple[str, ...] = ()  # address:port where the hub might answer
    others: tuple[str, ...] = ()  # the other cloisters' addresses
    services: tuple[str, ...] = ()  # host:port of the guardian's services (the proxy resolves)
    proxy: str = ""  # the proxy's address:port on the cloister's network
    token: str = ""  # the cloister's proxy token (its HTTPS_PROXY)
    resolver: str = RESOLVER
    # a name the resolver holds whatever else runs: the cloister's short id, an alias the
    # engine gives it on its network (not its name, which may pass DNS's 63-character
    # label): answered, or the resolver is dead
    control: str = ""


def probe_source() -> str:
    return resources.files("cloister_cli").joinpath("doctor_probe.pl").read_text("utf-8")


def probe_input(targets: Targets, checks: Iterable[str], wait: int = PROBE_WAIT) -> bytes:
    """The probe's parameters, on its stdin: ``NAME<TAB>VALUE`` lines, then ``end``."""
    pairs: list[tuple[str, str]] = [("timeout", str(wait)), ("proxy", targets.proxy)]
    pairs += [("token", targets.token), ("resolver", targets.resolver)]
    pairs += [("control", targets.control)]
    pairs += [("docker0", each) for each in targets.docker0]
    pairs += [("gateway", each) for each in targets.gateway]
    pairs += [("hub", each) for each in targets.hub]
    pairs += [("cloister", each) for each in targets.others]
    pairs += [("service", each) for each in targets.services]
    pairs += [("check", each) for each in checks]
    for name, value in pairs:
        if any(character in value for character in "\t\r\n"):
            raise DoctorError(f"the probe's {name} {value!r} holds a tab or a line break")
    return "".join(f"{name}\t{value}\n" for name, value in pairs).encode() + b"end\n"


def parse_probe(output: str, expected: Sequence[str]) -> list[Check]:
    """The probe's lines as checks, in the order of *expected*; one it did not report (it
    died, or timed out), or reported twice, is a failure saying so. Lines of other ids are
    ignored."""
    found: dict[str, Check] = {}
    twice: set[str] = set()
    for line in output.splitlines():
        parts = line.split("\t", 2)
        if len(parts) != 3 or parts[0] not in expected or parts[1] not in ("pass", "fail"):
            continue
        if parts[0] in found:
            twice.add(parts[0])
        found[parts[0]] = Check.of(parts[0], parts[1] == "pass", printable(parts[2]))
    return [
        Check.of(check_id, False, "the probe reported it twice")
        if check_id in twice
        else found.get(check_id) or Check.of(check_id, False, "the probe did not report it")
        for check_id in expected
    ]


def sidecar_config(
    client: Engine, instance: stack.Instance, container: Container
) -> dict[str, Any]:
    """The low-level ``create_container``'s arguments for the probe's sidecar (it opens
    stdin once, so the probe sees its end): in *container*'s network namespace, nothing
    else of it; no privilege, a read-only root, bounded."""
    host_config = client.api.create_host_config(
        network_mode=f"container:{container.id}",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        pids_limit=64,
        mem_limit="64m",
    )
    return {
        "image": PROBE_IMAGE,
        # No environment of the image's (PERL5OPT and the like), perl by its full path.
        "entrypoint": ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "/usr/bin/perl"],
        "command": ["-e", probe_source()],
        "user": PROBE_USER,
        "stdin_open": True,
        "labels": {**instance.labels, stack.LABEL_DOCTOR: container.name or str(container.id)},
        "host_config": host_config,
    }


def run_probe(
    client: Engine,
    instance: stack.Instance,
    container: Container,
    parameters: bytes,
    timeout: float,
) -> str:
    """The probe's output, from a sidecar in *container*'s network namespace, removed
    afterwards whatever happens."""
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise ProbeUnavailableError("the docker command is not installed")
    try:
        client.images.get(PROBE_IMAGE)
    except docker.errors.ImageNotFound:
        raise ProbeUnavailableError(
            f"the probe's image {PROBE_IMAGE!r} is not built"
            f" (`cloister start --image {PROBE_IMAGE}` builds it)"
        ) from None
    sidecar = client.api.create_container(**sidecar_config(client, instance, container))["Id"]
    try:
        returncode, stdout, stderr = _attached(
            [docker_cli, "start", "--attach", "--interactive", sidecar], parameters, timeout
        )
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(sidecar, force=True)
    name = container.name or ""
    if returncode != 0:
        said = printable(stderr.decode("utf-8", "replace").strip()[-EVIDENCE_LIMIT:])
        raise DoctorError(f"the probe of {name!r} failed (exit {returncode}): {said!r}")
    return stdout.decode("utf-8", "replace")


def _attached(argv: list[str], given: bytes, timeout: float) -> tuple[int, bytes, bytes]:
    """Run *argv* with *given* on its stdin: its exit status, stdout and stderr, each read
    up to :data:`PROBE_OUTPUT_LIMIT` (more, or no end within *timeout*: DoctorError)."""
    deadline = time.monotonic() + timeout
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        if stdin is None or stdout is None or stderr is None:  # not with PIPE
            raise DoctorError("the docker command's pipes did not open")
        out, err = stdout.fileno(), stderr.fileno()
        read: dict[int, bytearray] = {out: bytearray(), err: bytearray()}
        try:
            with contextlib.suppress(BrokenPipeError):  # it ended first: its status says why
                stdin.write(given)  # a few hundred bytes: the pipe holds them
                stdin.close()
            with selectors.DefaultSelector() as selector:
                for stream in (stdout, stderr):
                    selector.register(stream, selectors.EVENT_READ)
                while selector.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DoctorError(f"the probe did not finish within {timeout:g}s")
                    for key, _ in selector.select(left):
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            selector.unregister(key.fileobj)
                            continue
                        read[key.fd] += chunk
                        if len(read[key.fd]) > PROBE_OUTPUT_LIMIT:
                            raise DoctorError(
                                f"the probe wrote more than {PROBE_OUTPUT_LIMIT} bytes"
                            )
            returncode = process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            raise DoctorError(f"the probe did not finish within {timeout:g}s") from None
        finally:
            if process.poll() is None:
                process.kill()
    return returncode, bytes(read[out]), bytes(read[err])


# -- what the engine says ------------------------------------------------------------------


def _gateways(attrs: Mapping[str, Any]) -> list[str]:
    """A network's IPv4 gateways; for a subnet without one, the address Docker keeps (its
    first)."""
    found = []
    for pool in (attrs.get("IPAM") or {}).get("Config") or []:
        gateway = pool.get("Gateway")
        with contextlib.suppress(ValueError, TypeError):
            if gateway and ipaddress.ip_address(gateway).version == 4:
                found.append(str(gateway))
                continue
            subnet = ipaddress.ip_network(pool.get("Subnet") or "", strict=False)
            if subnet.version == 4:
                found.append(str(next(subnet.hosts())))
    return found


def _network_attrs(client: Engine, name: str) -> dict[str, Any] | None:
    """The inspect document of the network called *name* exactly, or None."""
    for network in client.networks.list(names=[name]):
        if network.name == name:  # the engine's filter matches a part of the name too
            network.reload()  # a listed network does not say what is on it
            attrs: dict[str, Any] = network.attrs
            return attrs
    return None


def targets_for(
    client: Engine,
    instance: stack.Instance,
    config: GlobalConfig,
    container: Container,
) -> Targets:
    network = _network_attrs(client, container.name or "") or {}
    own_gateway = _gateways(network)
    bridge = _network_attrs(client, "bridge") or {}
    stack_networks = (instance.egress_net, instance.control_net, instance.ports_net)
    host_addresses = dict.fromkeys(
        [
            *_gateways(bridge),
            *own_gateway,
            *(
                gateway
                for name in stack_networks
                for gateway in _gateways(_network_attrs(client, name) or {})
            ),
        ]
    )
    ui_port = config.guardian.ui_port
    hub = [f"{address}:{ui_port}" for address in host_addresses]
    with contextlib.suppress(docker.errors.NotFound):
        approval = client.containers.get(instance.service("approval"))
        for settings in (
            (approval.attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ).values():
            if settings.get("IPAddress"):
                hub.append(f"{settings['IPAddress']}:{stack.APPROVAL_PORT}")
    others = []
    for other in client.containers.list(
        filters={"label": [instance.label_filter, stack.LABEL_CLOISTER]}
    ):
        if other.id != container.id:
            address = networks.cloister_address(other.attrs, other.name or "")
            if address:
                others.append(address)
    services = [
        f"{stack.PROXY_ALIAS}:{stack.PROXY_PORT}",
        f"{stack.HOSTEXEC_ALIAS}:{stack.HOSTEXEC_PORT}",
        f"{stack.CREDENTIALS_ALIAS}:{stack.CREDENTIALS_PORT}",
        f"approval:{stack.APPROVAL_PORT}",  # the hub's name on the guardian's network
        f"{instance.service('approval')}:{stack.APPROVAL_PORT}",
    ]
    return Targets(
        docker0=tuple(_gateways(bridge)),
        gateway=tuple(own_gateway),
        hub=tuple(hub),
        others=tuple(others),
        services=tuple(services),
        proxy=_proxy_address(network, instance),
        control=(container.id or "")[:12],
        token=_proxy_token(container),
    )


def _proxy_address(network: Mapping[str, Any], instance: stack.Instance) -> str:
    """The proxy's address:port on the cloister's network (empty: it is not on it)."""
    for endpoint in (network.get("Containers") or {}).values():
        if endpoint.get("Name") == instance.service("proxy"):
            with contextlib.suppress(ValueError):
                address = ipaddress.ip_interface(endpoint.get("IPv4Address") or "").ip
                return f"{address}:{stack.PROXY_PORT}"
    return ""


def _proxy_token(container: Container) -> str:
    """The token in the cloister's HTTPS_PROXY, as the engine made it (empty: none)."""
    for variable in (container.attrs.get("Config") or {}).get("Env") or []:
        name, _, value = str(variable).partition("=")
        if name == "HTTPS_PROXY":
            found = re.match(r"^https?://[^:/@]*:([^@/]*)@", value)
            return found.group(1) if found else ""
    return ""


_SOCKET_NAMES = ("docker.sock", "podman.sock", "containerd.sock")


def _is_engine_socket(source: str) -> bool:
    if Path(source).name in _SOCKET_NAMES:
        return True
    host = engine.docker_host()
    if host.startswith("unix://") and source == host.removeprefix("unix://"):
        return True
    try:
        return stat.S_ISSOCK(Path(source).stat().st_mode)
    except OSError:
        return False


def _under(path: str, directory: Path) -> bool:
    """Whether *path* is *directory*, holds it, or is inside it."""
    candidate, resolved = Path(path), directory.resolve()
    return candidate == resolved or candidate in resolved.parents or resolved in candidate.parents


def container_checks(
    client: Engine,
    instance: stack.Instance,
    paths: CloisterPaths,
    container: Container,
) -> list[Check]:
    """What the engine says of the cloister's container and its network."""
    attrs = container.attrs
    host = attrs.get("HostConfig") or {}
    own = container.name or ""
    checks = []
    network = _network_attrs(client, own)
    if network is None:
        checks.append(Check.of("engine.network", False, f"no network {own!r}"))
    else:
        options = network.get("Options") or {}
        facts = (
            f"internal={network.get('Internal')}, inhibit_ipv4="
            f"{options.get('com.docker.network.bridge.inhibit_ipv4', 'unset')},"
            f" IPv6={network.get('EnableIPv6')}"
        )
        services = {instance.service(service) for service, _ in stack.CLOISTER_SERVICES}
        forwarders = instance.service("port")
        strangers = sorted(
            str(endpoint.get("Name"))
            for endpoint in (network.get("Containers") or {}).values()
            if endpoint.get("Name") not in {*services, own}
            and not str(endpoint.get("Name")).startswith(f"{forwarders}-")
        )
        guarded = networks.is_guarded(network)
        evidence = facts + (f"; also on it: {', '.join(strangers)}" if strangers else "")
        checks.append(Check.of("engine.network", guarded and not strangers, evidence))
    attached = sorted((attrs.get("NetworkSettings") or {}).get("Networks") or {})
    checks.append(
        Check.of("engine.attached", attached == [own], f"networks: {', '.join(attached) or 'none'}")
    )
    added = list(host.get("CapAdd") or [])
    dropped = list(host.get("CapDrop") or [])
    checks.append(
        Check.of(
            "engine.capabilities",
            not added and "ALL" in dropped,
            f"CapAdd={added or 'none'}, CapDrop={dropped or 'none'}",
        )
    )
    security = list(host.get("SecurityOpt") or [])
    checks.append(
        Check.of(
            "engine.no-new-privileges",
            any(opt in ("no-new-privileges", "no-new-privileges:true") for opt in security),
            f"SecurityOpt={security or 'none'}",
        )
    )
    devices = [device.get("PathOnHost") for device in host.get("Devices") or []]
    checks.append(
        Check.of(
            "engine.privileged",
            not host.get("Privileged") and not devices,
            f"Privileged={bool(host.get('Privileged'))}, devices={devices or 'none'}",
        )
    )
    sources = [str(mount.get("Source") or "") for mount in attrs.get("Mounts") or []]
    sockets = [source for source in sources if _is_engine_socket(source)]
    checks.append(
        Check.of(
            "engine.docker-socket",
            not sockets,
            f"mounted: {', '.join(sockets)}" if sockets else f"none of {len(sources)} mounts",
        )
    )
    checks.append(_executor_check(paths, [s for s in sources if _under(s, run_dir(paths))]))
    mounts = list(attrs.get("Mounts") or [])
    return [*checks, _filesystem_check(mounts), _refs_check(mounts)]


def _inside(point: str, directory: str) -> bool:
    return point == directory or point.startswith(directory.rstrip("/") + "/")


def _filesystem_check(mounts: list[dict[str, Any]]) -> Check:
    """The cloister writes the host only in /work and the agents' state in its home."""
    writable = [
        str(mount.get("Destination") or "")
        for mount in mounts
        if mount.get("RW") and mount.get("Type") != "tmpfs"
    ]
    bad = [
        point
        for point in writable
        if not _inside(point, "/work") and not point.startswith(cloisters.HOME.rstrip("/") + "/")
    ]
    if bad:
        return Check.of("unreachable.filesystem", False, f"writable mounts: {', '.join(bad)}")
    return Check.of("unreachable.filesystem", True, f"writable mounts: {', '.join(writable)}")


def _refs_check(mounts: list[dict[str, Any]]) -> Check:
    refs = [mount for mount in mounts if _inside(str(mount.get("Destination") or ""), "/refs")]
    if not refs:
        return Check.of("unreachable.refs", True, "no refs mounted")
    bad = [f"{mount.get('Destination')} is writable" for mount in refs if mount.get("RW")]
    return Check.of(
        "unreachable.refs", not bad, "; ".join(bad) or f"{len(refs)} ref(s), all read-only"
    )


def _executor_check(paths: CloisterPaths, mounted: list[str]) -> Check:
    where = socket_path(paths)
    problems = [f"{source} is mounted into the cloister" for source in mounted]
    try:
        socket_stat = where.stat()
        directory_stat = where.parent.stat()
    except FileNotFoundError:
        evidence = "; ".join(problems) or f"{where} is not there (the executor is not running)"
        return Check.of("engine.executor", not problems, evidence)
    for what, found in (("socket", socket_stat), ("directory", directory_stat)):
        if found.st_uid != os.getuid():
            problems.append(f"its {what} is owned by uid {found.st_uid}, not {os.getuid()}")
    # Connecting needs write permission on the socket and search on its directory.
    open_to_others = socket_stat.st_mode & 0o022 and directory_stat.st_mode & 0o011
    if open_to_others:
        problems.append(
            f"others may connect (socket {stat.filemode(socket_stat.st_mode)},"
            f" directory {stat.filemode(directory_stat.st_mode)})"
        )
    evidence = "; ".join(problems) or (
        f"{where}: {stat.filemode(socket_stat.st_mode)} in"
        f" {stat.filemode(directory_stat.st_mode)}, uid {socket_stat.st_uid}"
    )
    return Check.of("engine.executor", not problems, evidence)


def guardian_checks(
    client: Engine,
    instance: stack.Instance,
    paths: CloisterPaths,
    config: GlobalConfig,
) -> list[Check]:
    """What the engine says of the guardian: its hub's ports, its containers, the quota."""
    checks = []
    problems, seen = [], []
    hub: Container | None = None
    for service in stack.SERVICES:
        try:
            found = client.containers.get(instance.service(service))
        except docker.errors.NotFound:
            problems.append(f"{service} is not there")
            continue
        if service == "approval":
            hub = found
        labels = found.labels
        if labels.get(stack.LABEL_OWNER) != str(instance.uid) or (
            labels.get(stack.LABEL_INSTANCE) != instance.id
        ):
            problems.append(
                f"{found.name} is not this user's (owner {labels.get(stack.LABEL_OWNER)!r})"
            )
        if found.status != "running":
            problems.append(f"{service} is {found.status}")
        seen.append(f"{service} {found.status}")
    if executor_process.running(paths) is None:
        problems.append("the host executor is not running")
    evidence = "; ".join(problems) or ", ".join(seen) + ", executor running"
    checks.append(Check.of("engine.guardian", not problems, evidence))
    if hub is None:
        checks.append(
            Check.of("engine.hub-published", True, "the hub is not running: nothing is published")
        )
    else:
        bound = (hub.attrs.get("NetworkSettings") or {}).get("Ports") or {}
        bindings = [
            f"{binding.get('HostIp') or '0.0.0.0'}:{binding.get('HostPort')}"  # noqa: S104 - an engine's default
            for each in bound.values()
            for binding in each or []
        ]
        wide = [binding for binding in bindings if not binding.startswith("127.0.0.1:")]
        checks.append(
            Check.of(
                "engine.hub-published",
                bool(bindings) and not wide,
                f"published on {', '.join(bindings) or 'nothing'}",
            )
        )
    checks.append(disk_check(config, client.info))
    return checks


def disk_check(config: GlobalConfig, engine_info: Any) -> Check:
    """Cloister relies on no disk quota unless ``defaults.disk`` asks for one: a limit
    asked for and not enforceable fails, none asked passes with what the engine could do."""
    why = no_disk_quota(engine_info())
    disk = config.defaults.disk
    if disk is None:
        can = f"the engine could not enforce one: {why}" if why else "the engine could enforce one"
        return Check.of("engine.disk-quota", True, f"no disk limit asked (defaults.disk); {can}")
    if why is not None:
        return Check.of("engine.disk-quota", False, f"defaults.disk is {disk}, but {why}")
    return Check.of("engine.disk-quota", True, f"defaults.disk {disk} is enforced by the engine")


# -- the audit -----------------------------------------------------------------------------


def choose(client: Engine, instance: stack.Instance, given: str | None, directory: Path) -> str:
    """NAME, else the cloister working in *directory*, else the only one running."""
    if given is not None:
        return given
    running = [
        info for info in listing.list_cloisters(client, instance) if info.status == "running"
    ]
    resolved = directory.resolve()
    inside = [
        info
        for info in running
        if resolved == Path(info.path) or Path(info.path) in resolved.parents
    ]
    if inside:
        return max(inside, key=lambda info: len(Path(info.path).parts)).name
    if len(running) == 1:
        return running[0].name
    if not running:
        raise DoctorError("no cloister runs (`cloister start` makes one)")
    raise DoctorError(
        f"no cloister works in {directory}; name one of {', '.join(info.name for info in running)}"
    )


def running_container(client: Engine, instance: stack.Instance, name: str) -> Container:
    container = cloisters.find(client, instance, name)
    if container is None:
        raise DoctorError(f"no cloister {name!r} (`cloister list`)")
    if container.status != "running":
        raise DoctorError(
            f"cloister {name!r} is {container.status}: only a running one can be audited"
        )
    return container


def probe(
    client: Engine,
    instance: stack.Instance,
    paths: CloisterPaths,
    config: GlobalConfig,
    container: Container,
    *,
    checks: Sequence[str] = PROBE_CHECKS,
) -> list[Check]:
    """The network checks of *checks*, from one run of the probe."""
    targets = targets_for(client, instance, config, container)
    output = run_probe(client, instance, container, probe_input(targets, checks), PROBE_TIMEOUT)
    return parse_probe(output, checks)


def diagnose(
    client: Engine,
    instance: stack.Instance,
    paths: CloisterPaths,
    config: GlobalConfig,
    name: str,
) -> Report:
    """Every check of cloister *name*: the probe's and the engine's."""
    started = time.monotonic()
    container = running_container(client, instance, name)
    network = probe(client, instance, paths, config, container)
    engine_checks = container_checks(client, instance, paths, container) + guardian_checks(
        client, instance, paths, config
    )
    found = {check.id: check for check in network + engine_checks}
    ordered = tuple(found[check_id] for check_id in CHECKS if check_id in found)
    return Report(name, container.name or "", ordered, time.monotonic() - started)


def audit(paths: CloisterPaths, given: str | None, directory: Path) -> Report:
    """``cloister doctor [NAME]`` run from *directory*, for this user."""
    # The engine as Context.docker connects, without the Context: it imports most of the
    # CLI, seconds on a busy machine.
    client = engine.connect()
    instance = stack.Instance.of(paths, os.getuid())
    name = choose(client, instance, given, directory)
    return diagnose(client, instance, paths, load_global_config(paths), name)


# -- once per engine, at a start -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """The engines whose start check passed (``<data>/engines.json``)."""

    engines: dict[str, str] = field(default_factory=dict)  # engine ID -> when (UTC, ISO)

    @classmethod
    def read(cls, paths: CloisterPaths) -> EngineRecord:
        try:
            document = json.loads((paths.data_dir / ENGINES_FILE).read_text("utf-8"))
        except (OSError, ValueError):
            return cls()
        engines = document.get("engines") if isinstance(document, dict) else None
        if not isinstance(engines, dict):
            return cls()
        return cls({str(key): str(value) for key, value in engines.items()})

    def with_engine(self, engine_id: str, when: str) -> EngineRecord:
        return EngineRecord({**self.engines, engine_id: when})

    def write(self, paths: CloisterPaths) -> None:
        text = json.dumps({"engines": self.engines}, indent=2, sort_keys=True) + "\n"
        atomic_write(paths.data_dir / ENGINES_FILE, text, mode=0o644)


def ask_engine_id(client: Engine) -> str:
    """The engine's ID (``GET /info``; empty when it gives none)."""
    return str(client.info().get("ID") or "")


def check_new_engine(
    client: Engine,
    instance: stack.Instance,
    paths: CloisterPaths,
    config: GlobalConfig,
    name: str,
    *,
    known_id: Future[str] | None = None,
) -> list[Check]:
    """On an engine this data directory has not seen pass: the cheap checks in cloister
    *name*; the failed ones (the engine is remembered when there are none). Raises
    :class:`DoctorError` when the probe cannot run (the engine is not remembered):
    :class:`ProbeUnavailableError` when it could not start at all. *known_id* is the
    engine's ID already being asked (a start asks while its container starts)."""
    engine_id = known_id.result() if known_id is not None else ask_engine_id(client)
    record = EngineRecord.read(paths)
    if engine_id and engine_id in record.engines:
        return []
    container = running_container(client, instance, name)
    checks = probe(client, instance, paths, config, container, checks=CHEAP)  # DoctorError: unknown
    failed = [check for check in checks if not check.passed]
    if not failed and engine_id:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record.with_engine(engine_id, when).write(paths)
    return failed


def start_failure(name: str, failed: Sequence[Check]) -> str:
    """What a start says when the once-per-engine check failed."""
    lines = [f"cloister {name} was stopped: this engine does not seal it"]
    lines += [f"  FAIL {check.id}: {check.title} ({check.evidence})" for check in failed]
    lines.append(
        "fix the engine (see each check's fix), then `cloister start` again and"
        " run `cloister doctor` for the whole audit"
    )
    return "\n".join(lines)
