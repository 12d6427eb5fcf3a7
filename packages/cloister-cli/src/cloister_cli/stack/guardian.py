"""The guardian stack: images, networks, the host executor and ``docker compose``.

One stack per instance (:class:`cloister_core.stack.Instance`: this user and this data
directory): its compose project, containers and networks are named after the
instance's id and carry its labels, so guardians of other users (or other data
directories) on the same engine are never touched. One that is not this instance's
in the way (its hub on ``guardian.ui_port``, say) is refused with whose it is.

``start`` is idempotent: it builds the service images that are missing (with a
progress display), creates the egress, control and ports networks if needed
(outside compose, so that stopping the stack never disconnects running cloisters),
starts the executor daemon, renders ``<data>/guardian/compose.yaml`` from
``compose/guardian.yaml.j2`` and runs ``docker compose up -d``, puts the services back
on every cloister's own network (:mod:`cloister_cli.container.networks`: a recreated container
is on none), then waits until every service answers. ``stop`` takes the stack down and
stops the executor; the networks stay.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import pwd
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from cloister_cli.container import networks, ports
from cloister_cli.container.engine import Engine
from cloister_cli.images.builds import (
    APPROVAL_IMAGE,
    GATEWAY_IMAGE,
    GIT_IMAGE,
    PROXY_IMAGE,
    ImageSpec,
    assemble_context,
    build_image,
    is_current,
    source_fingerprint,
)
from cloister_cli.stack import executor_process
from cloister_core import stack
from cloister_core.config.models import GlobalConfig
from cloister_core.credentials import credentials_dir
from cloister_core.decisions import migrate_approvals
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.hubauth import generate_secret, sessions_dir
from cloister_core.paths import CloisterPaths
from cloister_core.stack import SERVICES, Instance
from cloister_executor.locations import run_dir

READY_TIMEOUT = 60.0
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"


def started_at(attrs: dict[str, Any]) -> float:
    """When the container's current run began (``State.StartedAt``), in Unix seconds; 0
    (its whole log) when the engine does not say."""
    text = str((attrs.get("State") or {}).get("StartedAt") or "")
    # RFC 3339 with nanoseconds: Python's parser takes microseconds at most.
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text)
    if found is None:
        return 0.0
    fraction = (found.group(2) or ".0")[:7]
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    moment = datetime.fromisoformat(found.group(1) + fraction + zone)
    return max(moment.timestamp(), 0.0)


_logger = logging.getLogger(__name__)


class GuardianError(CloisterError):
    """The stack could not be started, stopped or inspected."""


def whose(labels: Mapping[str, str]) -> str:
    """An engine object's owner as a person reads it: user name and data directory."""
    owner = labels.get(stack.LABEL_OWNER, "")
    try:
        user = pwd.getpwuid(int(owner)).pw_name
    except (ValueError, KeyError):
        user = f"uid {owner}" if owner else "an unknown user"
    data_dir = labels.get(stack.LABEL_DATA_DIR) or "an unknown data directory"
    return f"user {user}'s (data directory {data_dir})"


def legacy_hint() -> str:
    networks_list = " ".join(stack.LEGACY_NETWORKS)
    return (
        f"remove it with `docker compose -p {stack.LEGACY_PROJECT} down` and"
        f" `docker network rm {networks_list}` once its cloisters are stopped"
    )


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    name: str
    state: str
    health: str


@dataclass(frozen=True, slots=True)
class GuardianStatus:
    running: bool
    services: tuple[ServiceStatus, ...]
    executor_pid: int | None
    tokens: int
    ui: str
    compose_file: str
    project: str = ""  # the instance's compose project, cloister-<id>

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "services": [
                {"name": s.name, "state": s.state, "health": s.health} for s in self.services
            ],
            "executor_pid": self.executor_pid,
            "tokens": self.tokens,
            "ui": self.ui,
            "compose_file": self.compose_file,
            "project": self.project,
        }


@dataclass(frozen=True, slots=True)
class ImageTags:
    proxy: str = PROXY_IMAGE.tag
    approval: str = APPROVAL_IMAGE.tag
    gateway: str = GATEWAY_IMAGE.tag
    git: str = GIT_IMAGE.tag  # `cloister sync`'s throwaway container, not a service

    def specs(self) -> list[tuple[ImageSpec, str]]:
        return [
            (PROXY_IMAGE, self.proxy),
            (APPROVAL_IMAGE, self.approval),
            (GATEWAY_IMAGE, self.gateway),
            (GIT_IMAGE, self.git),
        ]


@dataclass
class Guardian:
    """The stack of one machine (one config and data directory)."""

    paths: CloisterPaths
    config: GlobalConfig
    client: Engine
    source: Path | None
    instance: Instance
    tags: ImageTags = field(default_factory=ImageTags)

    # -- files -----------------------------------------------------------------------

    @property
    def credential_file(self) -> Path:
        return self.paths.guardian_dir / "service.credential"

    @property
    def hub_secret_file(self) -> Path:
        # Only to start the stack: `stop` and a start with the stack up need no hub client.
        from cloister_cli.stack.hub_client import hub_secret_path  # noqa: PLC0415

        return hub_secret_path(self.paths)

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.config.guardian.ui_port}/"

    def _ensure_files(self) -> None:
        for directory in (self.paths.config_dir, self.paths.guardian_dir):
            directory.mkdir(parents=True, exist_ok=True)
        migrate_approvals(self.paths)  # the Go implementation's approvals/, before the mount
        (self.paths.decisions_dir / "projects").mkdir(parents=True, exist_ok=True)
        self.paths.tokens_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Only the credential gateway mounts it; the user's alone (0700) on the host.
        credentials_dir(self.paths).mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.credential_file.exists():
            atomic_write(self.credential_file, secrets.token_hex(32) + "\n", mode=0o600)
        # The human's credential: the CLI sends it, the hub alone mounts it. Made once
        # and kept, so browser logins survive restarts; a new one logs every browser out.
        if not self.hub_secret_file.exists():
            atomic_write(self.hub_secret_file, generate_secret() + "\n", mode=0o600)
        # `cloister guardian logout` writes revoked-before here; the hub mounts the
        # directory (not the file: a file mount would keep the replaced file's inode).
        sessions_dir(self.hub_secret_file).mkdir(mode=0o755, exist_ok=True)
        # A bind mount of a missing file would create a directory in its place.
        self.paths.audit_log.touch(mode=0o600, exist_ok=True)
        if self.config.log.file is not None:
            problem = link_audit_log(self.paths.audit_log, Path(self.config.log.file))
            if problem is not None:
                _logger.warning("%s", problem)
        # The cloisters' own logs: every service appends there (cloister_core.audit).
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def render(self, guardian_networks: list[str]) -> Path:
        """Write ``<data>/guardian/compose.yaml`` from the template in the source tree.

        *guardian_networks* are the CIDRs the proxy and the credential gateway must never
        dial (:meth:`ensure_networks`).
        """
        if self.source is None:
            raise GuardianError("no source tree to render the stack from")
        import jinja2  # noqa: PLC0415 - only when the stack starts; see cloister_cli.commands.main

        environment = jinja2.Environment(
            loader=jinja2.FileSystemLoader(self.source / "compose"),
            undefined=jinja2.StrictUndefined,
            autoescape=False,  # noqa: S701 - YAML, not HTML; every value is ours
            keep_trailing_newline=True,
        )
        text = environment.get_template("guardian.yaml.j2").render(
            project=self.instance.project,
            instance=self.instance,
            uid=os.getuid(),
            gid=os.getgid(),
            images=self.tags,
            config_dir=self.paths.config_dir,
            run_dir=run_dir(self.paths),
            credential_file=self.credential_file,
            hub_secret_file=self.hub_secret_file,
            audit_log=self.paths.audit_log,
            logs_dir=self.paths.logs_dir,
            ui_port=self.config.guardian.ui_port,
            credentials_dir=credentials_dir(self.paths),
            stack=stack,
            networks={"egress": self.instance.egress_net, "control": self.instance.control_net},
            guardian_networks=json.dumps(guardian_networks),
        )
        atomic_write(self.paths.compose_file, text, mode=0o644)
        return self.paths.compose_file

    # -- images and networks -----------------------------------------------------------

    def stale_images(self, *, git_only: bool = False) -> list[tuple[ImageSpec, str]]:
        """The images (the services' and the git image, or the git image alone with
        *git_only*) that are missing, or were built from another source. Each one asked
        about is fingerprinted (its source files read): a start with the stack up asks
        about the git image alone."""
        return [
            (spec, tag)
            for spec, tag in self.tags.specs()
            if (not git_only or tag == self.tags.git)
            and not is_current(
                self.client, tag, source_fingerprint(self.source, spec) if self.source else None
            )
        ]

    def build_images(
        self,
        specs: list[tuple[ImageSpec, str]],
        on_line: Callable[[str, str], None],
        scratch: Path,
    ) -> None:
        """Build *specs*; *on_line(tag, line)* sees the builder's output."""
        if self.source is None:
            raise GuardianError("no source tree to build images from")
        architecture = self.client.info()["Architecture"]
        for spec, tag in specs:
            on_line(tag, "assembling the build context")
            context = assemble_context(
                self.source, spec, scratch / tag.replace(":", "-"), architecture
            )
            build_image(
                self.client,
                context,
                tag,
                on_line=partial(on_line, tag),
                fingerprint=source_fingerprint(self.source, spec),
            )

    def ensure_networks(self) -> list[str]:
        """Create the stack's networks that are missing (and the ports network); the
        CIDRs the proxy and the credential gateway must never dial: the pool of the
        cloisters' networks, and the subnets of these three."""
        instance = self.instance
        ports.ensure_network(self.client, instance)
        existing = {network.name: network for network in self.client.networks.list()}
        for name in (instance.egress_net, instance.control_net):
            network = existing.get(name)
            if network is None:
                self.client.networks.create(
                    name,
                    driver="bridge",
                    internal=False,
                    enable_ipv6=False,
                    check_duplicate=True,
                    labels={stack.LABEL_GUARDIAN: "true", **instance.labels},
                )
                continue
            self._check_owned(name, network.attrs.get("Labels") or {})
        found = [ipaddress.IPv4Network(self.config.guardian.network_pool)]
        for name in (instance.egress_net, instance.control_net, instance.ports_net):
            found += networks.subnets(self.client.networks.get(name).attrs)
        return [str(network) for network in dict.fromkeys(found)]

    def _check_owned(self, what: str, labels: dict[str, str]) -> None:
        if labels.get(stack.LABEL_INSTANCE) != self.instance.id or labels.get(
            stack.LABEL_OWNER
        ) != str(self.instance.uid):
            raise GuardianError(
                f"{what} is {whose(labels)}, not this guardian's; Cloister leaves it alone"
            )

    # -- other guardians on the engine ------------------------------------------------

    def legacy_containers(self) -> list[str]:
        """The containers of a guardian from before instances (one fixed stack per engine)."""
        found = self.client.containers.list(
            all=True, filters={"label": f"{COMPOSE_PROJECT_LABEL}={stack.LEGACY_PROJECT}"}
        )
        return sorted(str(container.name) for container in found)

    def check_ownership(self) -> None:
        """Refuse a stack of this instance's names that is not its own."""
        for name in SERVICES:
            try:
                container = self.client.containers.get(self.instance.service(name))
            except docker.errors.NotFound:
                continue
            self._check_owned(f"container {container.name}", container.labels)

    def check_hub_port(self) -> None:
        """Refuse to start when another guardian's hub publishes ``guardian.ui_port``
        (compose would only say the port is taken)."""
        ui_port = str(self.config.guardian.ui_port)
        for container in self.client.containers.list(filters={"label": stack.LABEL_GUARDIAN}):
            if container.labels.get(stack.LABEL_INSTANCE) == self.instance.id:
                continue
            bound = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
            host_ports = {
                str(binding.get("HostPort"))
                for bindings in bound.values()
                for binding in bindings or []
            }
            if ui_port not in host_ports:
                continue
            fix = f"set `guardian: {{ui_port: PORT}}` in {self.paths.config_file} to a free port"
            if stack.LABEL_INSTANCE not in container.labels:
                raise GuardianError(
                    f"port {ui_port} is published by {container.name}, the guardian of an older"
                    f" Cloister; {legacy_hint()}, or {fix}"
                )
            raise GuardianError(
                f"port {ui_port} is published by {container.name}, the approval hub of"
                f" {whose(container.labels)} guardian; {fix}"
            )

    def check_agents_were_not_there(self) -> None:
        """The hub never goes on a port where `cloister port` served an agent's page: the
        browser may keep what that page left in the origin (cached answers, a service
        worker), and the hub's page would run it."""
        ui_port = self.config.guardian.ui_port
        if ui_port in ports.served_agents(self.paths):
            raise GuardianError(
                f"guardian.ui_port {ui_port} is a port where `cloister port` served an"
                " agent's page; what that page left in your browser for"
                f" http://127.0.0.1:{ui_port}/ (cached files, a service worker) would run in"
                f" the approval UI. Set `guardian: {{ui_port: PORT}}` in"
                f" {self.paths.config_file} to another port"
            )

    def _forwarder_on_ui_port(self) -> str | None:
        """Which `cloister port` forward holds ``guardian.ui_port``, and how to free it."""
        forwarder = ports.forwarder_on(self.client, self.config.guardian.ui_port)
        if forwarder is None:
            return None
        labels = forwarder.labels
        cloister, port = labels.get(stack.LABEL_FORWARD), labels.get(stack.LABEL_FORWARD_PORT)
        if labels.get(stack.LABEL_INSTANCE) == self.instance.id:
            return (
                f"`cloister port`: port {port} of cloister {cloister};"
                f" `cloister port {cloister} {port} --remove` frees it"
            )
        return (
            f"`cloister port` of {whose(labels)} guardian ({forwarder.name}, port {port} of"
            f" its cloister {cloister}); its owner can remove it"
        )

    # -- compose ---------------------------------------------------------------------

    def _compose(self, *args: str, capture: bool = True) -> subprocess.CompletedProcess[str]:
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise GuardianError("the docker command is not installed")
        argv = [
            docker_cli,
            "compose",
            "-p",
            self.instance.project,
            "-f",
            str(self.paths.compose_file),
            *args,
        ]
        result = subprocess.run(argv, capture_output=capture, text=True, check=False)
        if result.returncode != 0:
            detail = (result.stderr or "").strip()
            raise GuardianError(
                port_taken(
                    detail,
                    self.config.guardian.ui_port,
                    self.paths.config_file,
                    self._forwarder_on_ui_port,
                )
                or f"docker compose {' '.join(args)} failed: {detail}"
            )
        return result

    def services(self) -> tuple[ServiceStatus, ...]:
        statuses = []
        for name in SERVICES:
            try:
                container = self.client.containers.get(self.instance.service(name))
            except docker.errors.NotFound:
                statuses.append(ServiceStatus(name, "absent", "-"))
                continue
            self._check_owned(f"container {container.name}", container.labels)
            state = container.attrs.get("State", {})
            health = state.get("Health", {}).get("Status", "-")
            statuses.append(ServiceStatus(name, state.get("Status", "?"), health))
        return tuple(statuses)

    def is_running(self) -> bool:
        # A stack without the hub secret predates it: start it again (it is written then).
        return (
            self.hub_secret_file.exists()
            and all(service.state == "running" for service in self.services())
            and executor_process.running(self.paths) is not None
        )

    def _wait_ready(self) -> None:
        """Until the hub answers and the other services have said they listen."""
        deadline = time.monotonic() + READY_TIMEOUT
        pending = {name: b"listening on" for name in SERVICES if name != "approval"}
        hub_ready = False
        while time.monotonic() < deadline:
            for name, marker in list(pending.items()):
                container = self.client.containers.get(self.instance.service(name))
                # Only what this run of it said: a container that crashed and was started
                # again keeps the "listening" line of its earlier run in its log.
                since = started_at(container.attrs)
                if marker in container.logs(stdout=False, stderr=True, tail=50, since=since):
                    del pending[name]
                elif container.status == "exited":
                    raise GuardianError(f"{name} exited: {container.logs(tail=20).decode()}")
            if not hub_ready:
                try:
                    health = requests.get(self.ui_url + "api/v1/health", timeout=1)
                    hub_ready = health.status_code == 200
                except requests.RequestException:
                    hub_ready = False
            if hub_ready and not pending:
                return
            time.sleep(0.1)
        raise GuardianError(
            f"the guardian did not become ready within {READY_TIMEOUT:g}s;"
            " see `cloister guardian logs`"
        )

    def start(self) -> GuardianStatus:
        """Bring the stack up (building missing images first is the caller's choice)."""
        self._ensure_files()
        self.check_ownership()
        self.check_hub_port()
        self.check_agents_were_not_there()
        guardian_networks = self.ensure_networks()
        executor_process.start(self.paths)
        self.render(guardian_networks)
        self._compose("up", "-d", "--remove-orphans")
        networks.reconnect_all(self.client, self.instance)
        self._wait_ready()
        return self.status()

    def stop(self) -> None:
        self.check_ownership()
        if self.paths.compose_file.exists():
            self._compose("down", "--remove-orphans")
        executor_process.stop(self.paths)

    def reload_proxy(self) -> None:
        """SIGHUP: re-read tokens now (and close the tunnels of revoked ones)."""
        # Not running: it reads the token files when it starts.
        with contextlib.suppress(docker.errors.APIError):
            self.client.containers.get(self.instance.service("proxy")).kill(signal="SIGHUP")

    def status(self) -> GuardianStatus:
        services = self.services()
        state = executor_process.running(self.paths)
        tokens = (
            sum(1 for path in self.paths.tokens_dir.glob("*") if not path.name.startswith("."))
            if self.paths.tokens_dir.exists()
            else 0
        )
        return GuardianStatus(
            running=all(s.state == "running" for s in services) and state is not None,
            services=services,
            executor_pid=state.pid if state else None,
            tokens=tokens,
            ui=self.ui_url,
            compose_file=str(self.paths.compose_file),
            project=self.instance.project,
        )

    def logs(self, *, follow: bool, tail: int | None) -> int:
        """``docker compose logs`` straight to the terminal."""
        args = ["logs", *(["--follow"] if follow else []), *(["--tail", str(tail)] if tail else [])]
        return self._compose(*args, capture=False).returncode


def link_audit_log(audit_log: Path, wanted: Path) -> str | None:
    """A link at *wanted* (``log.file``) to *audit_log*; what stands in the way, if any.

    Never replaces a file or another link found there: the Go implementation's own log
    may be at that path, and it is the human's.
    """
    wanted = wanted.expanduser()
    if not wanted.is_absolute():
        return f"log.file {str(wanted)!r} is not an absolute path (nor ~/…): no link made"
    if wanted.is_symlink() and wanted.readlink() == audit_log:
        return None
    if wanted.exists() or wanted.is_symlink():
        return (
            f"log.file {str(wanted)!r}: something is there already (kept), so no link to"
            f" the audit log {str(audit_log)!r} was made; move it away to get one"
        )
    try:
        wanted.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        wanted.symlink_to(audit_log)
    except OSError as error:
        return f"log.file {str(wanted)!r}: cannot link the audit log there: {error.strerror}"
    return None


def port_taken(
    detail: str,
    ui_port: int,
    config_file: Path,
    holder: Callable[[], str | None] = lambda: None,
) -> str | None:
    """The one line to say when compose failed because the UI's port is taken; *holder*
    says by whom and how to free it, if it knows."""
    if "address already in use" not in detail and "port is already allocated" not in detail:
        return None
    return (
        f"port {ui_port} on 127.0.0.1 (the approval UI) is taken by"
        f" {holder() or 'another program; free it'}, or set `guardian: {{ui_port: PORT}}`"
        f" in {config_file} to a free port, then run `cloister guardian start` again"
    )


def load_json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
