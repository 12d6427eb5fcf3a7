"""The guardian stack: images, networks, the host executor and ``docker compose``.

``start`` is idempotent: it builds the service images that are missing (with a
progress display), creates the three networks if needed (outside compose, so that
stopping the stack never disconnects running cloisters), starts the executor daemon,
renders ``<data>/guardian/compose.yaml`` from ``compose/guardian.yaml.j2`` and runs
``docker compose up -d``, then waits until every service answers. ``stop`` takes the
stack down and stops the executor; the networks stay.

cloister-net is created ``internal`` with ``com.docker.network.bridge.inhibit_ipv4``
and without IPv6: checked on this engine, a plain internal network still lets a
container reach every host service bound to 0.0.0.0, through its gateway or the
host's own addresses; with the option the host is unreachable while containers on the
network still reach each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from cloister_cli import executor_process
from cloister_cli.hub_client import hub_secret_path
from cloister_cli.images import (
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
from cloister_core import stack
from cloister_core.config.models import GlobalConfig
from cloister_core.credentials import credentials_dir
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.hubauth import generate_secret
from cloister_core.paths import CloisterPaths
from cloister_core.stack import CLOISTER_NET, CONTROL_NET, EGRESS_NET, PROJECT, SERVICES
from cloister_executor.locations import run_dir

PROXY_CONTAINER = stack.container("proxy")
READY_TIMEOUT = 60.0
INHIBIT_IPV4 = {"com.docker.network.bridge.inhibit_ipv4": "true"}


class GuardianError(CloisterError):
    """The stack could not be started, stopped or inspected."""


def is_guarded(attrs: dict[str, Any]) -> bool:
    """cloister-net as DESIGN.md wants it: internal, inhibit_ipv4, no IPv6.

    An IPv6 gateway would be a route to the host that inhibit_ipv4 does not close.
    """
    options = attrs.get("Options") or {}
    return (
        attrs.get("Internal") is True
        and options.get("com.docker.network.bridge.inhibit_ipv4") == "true"
        and not attrs.get("EnableIPv6")
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
    client: docker.DockerClient
    source: Path | None
    tags: ImageTags = field(default_factory=ImageTags)

    # -- files -----------------------------------------------------------------------

    @property
    def credential_file(self) -> Path:
        return self.paths.guardian_dir / "service.credential"

    @property
    def hub_secret_file(self) -> Path:
        return hub_secret_path(self.paths)

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.config.guardian.ui_port}/"

    def _ensure_files(self) -> None:
        for directory in (self.paths.config_dir, self.paths.guardian_dir):
            directory.mkdir(parents=True, exist_ok=True)
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
        # A bind mount of a missing file would create a directory in its place.
        self.paths.audit_log.touch(mode=0o600, exist_ok=True)
        # The cloisters' own logs: every service appends there (cloister_core.audit).
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def render(self) -> Path:
        """Write ``<data>/guardian/compose.yaml`` from the template in the source tree."""
        if self.source is None:
            raise GuardianError("no source tree to render the stack from")
        import jinja2  # noqa: PLC0415 - only when the stack starts; see cloister_cli.main

        environment = jinja2.Environment(
            loader=jinja2.FileSystemLoader(self.source / "compose"),
            undefined=jinja2.StrictUndefined,
            autoescape=False,  # noqa: S701 - YAML, not HTML; every value is ours
            keep_trailing_newline=True,
        )
        text = environment.get_template("guardian.yaml.j2").render(
            project=PROJECT,
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
            networks={"cloister": CLOISTER_NET, "egress": EGRESS_NET, "control": CONTROL_NET},
        )
        atomic_write(self.paths.compose_file, text, mode=0o644)
        return self.paths.compose_file

    # -- images and networks -----------------------------------------------------------

    def stale_images(self) -> list[tuple[ImageSpec, str]]:
        """The service images that are missing, or were built from another source."""
        return [
            (spec, tag)
            for spec, tag in self.tags.specs()
            if not is_current(
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

    def ensure_networks(self) -> None:
        """Create the networks that are missing; refuse a cloister-net without its guard."""
        existing = {network.name: network for network in self.client.networks.list()}
        for name, internal, options in (
            (CLOISTER_NET, True, INHIBIT_IPV4),
            (EGRESS_NET, False, {}),
            (CONTROL_NET, False, {}),
        ):
            network = existing.get(name)
            if network is None:
                self.client.networks.create(
                    name,
                    driver="bridge",
                    internal=internal,
                    options=options,
                    enable_ipv6=False,
                    labels={stack.LABEL_GUARDIAN: "true"},
                )
                continue
            if name == CLOISTER_NET and not is_guarded(network.attrs):
                raise GuardianError(
                    f"network {name!r} exists but is not internal with inhibit_ipv4 and"
                    f" without IPv6; remove it (`docker network rm {name}`) and start again"
                )

    # -- compose ---------------------------------------------------------------------

    def _compose(self, *args: str, capture: bool = True) -> subprocess.CompletedProcess[str]:
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise GuardianError("the docker command is not installed")
        argv = [docker_cli, "compose", "-p", PROJECT, "-f", str(self.paths.compose_file), *args]
        result = subprocess.run(argv, capture_output=capture, text=True, check=False)
        if result.returncode != 0:
            detail = (result.stderr or "").strip()
            raise GuardianError(
                port_taken(detail, self.config.guardian.ui_port, self.paths.config_file)
                or f"docker compose {' '.join(args)} failed: {detail}"
            )
        return result

    def services(self) -> tuple[ServiceStatus, ...]:
        statuses = []
        for name in SERVICES:
            try:
                container = self.client.containers.get(stack.container(name))
            except docker.errors.NotFound:
                statuses.append(ServiceStatus(name, "absent", "-"))
                continue
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
                container = self.client.containers.get(stack.container(name))
                if marker in container.logs(stdout=False, stderr=True, tail=50):
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
        self.ensure_networks()
        executor_process.start(self.paths)
        self.render()
        self._compose("up", "-d", "--remove-orphans")
        self._wait_ready()
        return self.status()

    def stop(self) -> None:
        if self.paths.compose_file.exists():
            self._compose("down", "--remove-orphans")
        executor_process.stop(self.paths)

    def reload_proxy(self) -> None:
        """SIGHUP: re-read tokens now (and close the tunnels of revoked ones)."""
        # Not running: it reads the token files when it starts.
        with contextlib.suppress(docker.errors.APIError):
            self.client.containers.get(PROXY_CONTAINER).kill(signal="SIGHUP")

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
        )

    def logs(self, *, follow: bool, tail: int | None) -> int:
        """``docker compose logs`` straight to the terminal."""
        args = ["logs", *(["--follow"] if follow else []), *(["--tail", str(tail)] if tail else [])]
        return self._compose(*args, capture=False).returncode


def port_taken(detail: str, ui_port: int, config_file: Path) -> str | None:
    """The one line to say when compose failed because the UI's port is taken."""
    if "address already in use" not in detail and "port is already allocated" not in detail:
        return None
    return (
        f"port {ui_port} on 127.0.0.1 (the approval UI) is taken by another program;"
        f" free it, or set `guardian: {{ui_port: PORT}}` in {config_file} to a free port,"
        " then run `cloister guardian start` again"
    )


def load_json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
