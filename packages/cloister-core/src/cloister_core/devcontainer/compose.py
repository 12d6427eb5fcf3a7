"""Compose-based devcontainers: the ``service`` becomes the cloister, ``runServices`` its sidecars.

Cloister does not run ``docker compose``: it reads the files itself
(:mod:`.composefile`) and decides every key as it decides devcontainer.json's, each an
:class:`~cloister_core.devcontainer.model.Override` naming the compose file and line.

The cloister's service gives the image (``image``, or ``build`` with its context inside
the project), the environment, the mounts (through the same rules as ``mounts``; a bind
of the project or a folder holding it is dropped, as Cloister mounts the project
itself) and the user. Its ``network_mode: service:X`` is honoured in reverse: X joins
the cloister's network namespace.

The other services run beside it on the cloister's own network, hardened: no published
ports, no host namespaces, no privileges, only the capabilities in
:data:`SIDECAR_CAPABILITIES`, bind mounts only inside the project and read-only, no
Docker socket. A service not started (not in ``runServices`` nor needed by one) is
noted and left out.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cloister_core.devcontainer.blocked import BlockedPaths
from cloister_core.devcontainer.composefile import (
    InterpolationError,
    Interpolator,
    Node,
    parse_env_file,
    read_bounded,
)
from cloister_core.devcontainer.model import (
    ComposeService,
    DevcontainerError,
    ImageSource,
    MountSpec,
    Outcome,
    Override,
    value_text,
)
from cloister_core.devcontainer.mounts import MountDecision, decide_mount, git_directory_reason
from cloister_core.devcontainer.runargs import cap_add, security_opt
from cloister_core.devcontainer.variables import Variables
from cloister_core.printable import printable
from cloister_core.stack import ALIASES, PREFIX

SIDECAR_CAPABILITIES = frozenset({"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"})
"""What a service's image needs to start as root and drop to its own user."""
MAX_PORTS = 64
"""The most container ports one ``ports``/``expose`` range may name."""

_SERVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?")
_PROXY_VARIABLES = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"})
_PORTS = "no published ports: `cloister port NAME PORT` publishes one"
_LIMITS = "the limits come from `defaults:` in Cloister's config.yaml"
_NETWORK = "each service is on the cloister's own network, under its name, and nowhere else"
_RUNS = "Cloister decides how the containers run"
_HOSTS = "names resolve at the proxy and on the cloister's network; host-gateway names the host"
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_MODE_FLAGS = frozenset({"ro", "rw", "cached", "delegated", "consistent", "nocopy", "z", "Z"})

# Keys decided the same way for the cloister's service and the others: key → (outcome, why).
_COMMON: dict[str, tuple[Outcome, str]] = {
    "privileged": (
        "dropped",
        "gives the container every capability and the host's devices: root on the host",
    ),
    "devices": ("dropped", "gives the container a host device"),
    "device_cgroup_rules": ("dropped", "lets the container open host devices"),
    "gpus": ("dropped", "gives the container the host's GPUs and their driver; not supported"),
    "pid": ("dropped", "shares a process namespace (host: sees and signals the host's processes)"),
    "ipc": ("dropped", "shares an IPC namespace (host: the host's shared memory)"),
    "uts": ("dropped", "shares a host name namespace with the host"),
    "userns_mode": ("dropped", "changes the user namespace (host: turns its remapping off)"),
    "cgroup": ("dropped", "shares a cgroup namespace (host: sees the host's cgroups)"),
    "cgroup_parent": ("dropped", "moves the container out of Docker's cgroup and its limits"),
    "group_add": ("dropped", "adds supplementary groups: a host group's id opens its files"),
    "sysctls": ("dropped", "changes kernel settings of the container's namespaces"),
    "runtime": ("dropped", "another runtime than the one Cloister hardens"),
    "isolation": ("dropped", "another isolation than the one Cloister hardens"),
    "volumes_from": ("dropped", "mounts another container's volumes"),
    "links": ("dropped", _NETWORK),
    "external_links": ("dropped", _NETWORK),
    "networks": ("ignored", _NETWORK),
    "mac_address": ("dropped", _NETWORK),
    "extra_hosts": ("dropped", _HOSTS),
    "dns": ("dropped", "names resolve at the proxy and on the cloister's network"),
    "dns_search": ("dropped", "names resolve at the proxy and on the cloister's network"),
    "dns_opt": ("dropped", "names resolve at the proxy and on the cloister's network"),
    "storage_opt": ("dropped", "Cloister decides how the containers store their files"),
    "ulimits": ("dropped", _LIMITS),
    "mem_limit": ("dropped", _LIMITS),
    "memswap_limit": ("dropped", _LIMITS),
    "mem_reservation": ("dropped", _LIMITS),
    "mem_swappiness": ("dropped", _LIMITS),
    "cpus": ("dropped", _LIMITS),
    "cpu_shares": ("dropped", _LIMITS),
    "cpu_quota": ("dropped", _LIMITS),
    "cpu_period": ("dropped", _LIMITS),
    "cpuset": ("dropped", _LIMITS),
    "pids_limit": ("dropped", _LIMITS),
    "oom_kill_disable": ("dropped", _LIMITS),
    "oom_score_adj": ("dropped", _LIMITS),
    "shm_size": ("ignored", _LIMITS),
    "deploy": ("ignored", _LIMITS),
    "scale": ("ignored", "one container per service"),
    "cap_drop": ("ignored", "every capability not needed is dropped already"),
    "read_only": ("ignored", "not supported"),
    "container_name": ("ignored", "Cloister names its containers"),
    "labels": ("ignored", "Cloister's labels identify its containers"),
    "restart": ("ignored", _RUNS),
    "stop_signal": ("ignored", _RUNS),
    "stop_grace_period": ("ignored", _RUNS),
    "tty": ("ignored", _RUNS),
    "stdin_open": ("ignored", _RUNS),
    "attach": ("ignored", _RUNS),
    "logging": ("ignored", "`cloister logs` shows the output"),
    "platform": ("ignored", "the image is used as it is"),
    "pull_policy": ("ignored", "Cloister pulls nothing: the image is local or built"),
    "profiles": ("ignored", "runServices chooses which services run"),
    "extends": ("ignored", "not supported: write the service out (YAML anchors work)"),
    "secrets": ("ignored", "Cloister does not pass secrets in"),
    "configs": ("ignored", "not supported"),
    "develop": ("ignored", "not supported"),
    "annotations": ("ignored", "not supported"),
    "credential_spec": ("ignored", "not supported"),
    "domainname": ("ignored", "not supported"),
    "init": ("ignored", _RUNS),
    "post_start": ("ignored", "not supported"),
    "pre_stop": ("ignored", "not supported"),
}
# Only for the cloister's service.
_CLOISTER: dict[str, tuple[Outcome, str]] = {
    "ports": ("ignored", "the cloister has " + _PORTS),
    "expose": ("ignored", "the cloister has " + _PORTS),
    "command": ("ignored", "Cloister runs its own command: the agent"),
    "entrypoint": ("ignored", "Cloister runs its own entrypoint"),
    "working_dir": ("ignored", "the cloister starts in the project"),
    "healthcheck": ("ignored", "Cloister watches the cloister itself"),
    "init": ("ignored", "the cloister always runs an init"),
    "hostname": ("ignored", "not supported (runArgs --hostname sets it)"),
}
_SIDECAR: dict[str, tuple[Outcome, str]] = {
    "hostname": ("ignored", "the service is reached by its name"),
}
_TOP: dict[str, tuple[Outcome, str]] = {
    "version": ("ignored", "obsolete in compose"),
    "name": ("ignored", "Cloister names the containers by the cloister"),
    "networks": ("ignored", _NETWORK),
    "secrets": ("ignored", "Cloister does not pass secrets in"),
    "configs": ("ignored", "not supported"),
    "include": ("ignored", "not supported: list the files in dockerComposeFile"),
}


@dataclass(frozen=True, slots=True)
class ComposeResult:
    """The cloister's part of the compose files, its sidecars, and every decision."""

    files: tuple[Path, ...]
    source: ImageSource
    environment: Mapping[str, str]
    mounts: tuple[MountSpec, ...]
    user: str | None  # as written (the loader checks it as it checks remoteUser)
    user_override: Override | None  # where the user was written, for the loader's note
    services: tuple[ComposeService, ...]
    inputs: tuple[Path, ...]  # env files and .env read, the services' Dockerfiles
    overrides: tuple[Override, ...]


_Handler = Callable[[Node, str, "_Service"], None]


@dataclass(slots=True)
class _Service:
    """What is being gathered for one service."""

    cloister: bool
    environment: dict[str, str] = field(default_factory=dict)
    mounts: list[MountSpec] = field(default_factory=list)
    user: str | None = None
    user_override: Override | None = None  # the cloister's: the loader decides it
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    working_dir: str | None = None
    ports: list[int] = field(default_factory=list)
    healthcheck: dict[str, object] | None = None
    depends_on: tuple[str, ...] = ()


class ComposeReader:
    """One pass over the merged compose files for one devcontainer.json."""

    def __init__(
        self,
        document: Node,
        *,
        files: tuple[Path, ...],
        project_root: Path,
        variables: Variables,
        blocked: BlockedPaths,
    ) -> None:
        self.document = document
        self.top: dict[str, Node] = document.mapping or {}
        self.files = files
        self.directory = files[0].parent  # compose's project directory
        self.project_root = project_root
        self.variables = variables
        self.blocked = blocked
        self.overrides: list[Override] = []
        self.shown_files: dict[Path, str] = {}
        self.inputs: list[Path] = []
        self.dotenv: dict[str, str] = {}
        dotenv_path = self.directory / ".env"
        dotenv_inside = self.inside(dotenv_path) if dotenv_path.is_file() else None
        if dotenv_inside is not None:
            self.inputs.append(dotenv_path)
            text = read_bounded(dotenv_inside, "an env file")  # the file checked, not a link
            for _line, name, value in parse_env_file(text):
                if value is not None:
                    self.dotenv[name] = value
        self.interpolator = Interpolator(variables.environ, self.dotenv)
        self.refused_volumes: dict[str, str] = {}
        self.services: dict[str, Node] = {}
        services = self.top.get("services")
        for name, node in ((services.mapping if services is not None else None) or {}).items():
            if not _SERVICE_NAME.fullmatch(name):
                raise self.error(
                    node,
                    f"services.{name}: a service name is a DNS label (letters, digits, '-'):"
                    " the cloister reaches the service by it",
                )
            if name.lower() in ALIASES or name.lower().startswith(PREFIX):
                raise self.error(
                    node, f"services.{name}: names starting with {PREFIX!r} are Cloister's own"
                )
            self.services[name] = node

    # --- errors and notes ----------------------------------------------------------------

    def error(self, node: Node, message: str) -> DevcontainerError:
        return DevcontainerError(node.file, message, node.line)

    def field_name(self, node: Node, where: str) -> str:
        """``.devcontainer/docker-compose.yml services.db.ports[0]``."""
        shown = self.shown_files.get(node.file)
        if shown is None:
            root = self.project_root.resolve()
            relative = node.file.is_relative_to(root)
            shown = str(node.file.relative_to(root) if relative else node.file.name)
            self.shown_files[node.file] = shown
        return printable(f"{shown} {where}")

    def note(self, node: Node, where: str, outcome: Outcome, why: str) -> None:
        self.overrides.append(
            Override(
                self.field_name(node, where),
                value_text(node.plain()),
                outcome,
                printable(why),
                node.line,
                node.file,
            )
        )

    def wrong(self, node: Node, where: str, expected: str) -> DevcontainerError:
        shown = repr(node.plain())
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return self.error(node, f"{where}: expected {expected}, got {shown}")

    def text(self, node: Node, where: str) -> str | None:
        """A scalar's text, interpolated; None (a refusal noted) if it reads a host secret."""
        value = node.scalar
        if node.mapping is not None or node.items is not None or value is None:
            raise self.wrong(node, where, "a string")
        raw = ("true" if value else "false") if isinstance(value, bool) else str(value)
        try:
            result = self.interpolator.interpolate(raw)
        except InterpolationError as error:
            raise self.error(node, f"{where}: {error}") from None
        if result.secrets:
            why = (
                f"it reads ${{{result.secrets[0]}}} from your environment, which looks like a"
                " secret; Cloister does not pass host secrets in"
            )
            self.note(node, where, "refused", why)
            return None
        return result.text

    def strings(self, node: Node, where: str) -> list[Node]:
        items = node.items
        if items is None:
            raise self.wrong(node, where, "a list")
        return items

    def inside(self, path: Path) -> Path | None:
        """*path* resolved, if it is inside the project."""
        resolved = path.resolve()
        root = self.project_root.resolve()
        return resolved if resolved == root or resolved.is_relative_to(root) else None

    # --- the whole file -----------------------------------------------------------------

    def names(self) -> tuple[str, ...]:
        return tuple(self.services)

    def read(self, primary: str, run_services: Sequence[str] | None) -> ComposeResult:
        """Decide the files for *primary* (the cloister) and *run_services* (None: all)."""
        for key, node in self.top.items():
            if key == "services":
                continue
            if key == "volumes":
                self.top_volumes(node)
            elif key in _TOP:
                self.note(node, key, *_TOP[key])
            elif key.startswith("x-"):
                self.note(node, key, "ignored", "an extension field: read where it is used")
            else:
                self.note(node, key, "ignored", "not a compose property Cloister knows")
        started = self.started(primary, run_services)
        joiners = self.joiners(primary, started)
        for name, node in self.services.items():
            if name not in started and name != primary:
                why = "not in runServices (nor needed by one): not started"
                self.note(node, f"services.{name}", "ignored", why)
        cloister = self.service(primary, joiners, cloister=True)
        source = self.image_source(primary, cloister=True)
        services = tuple(self.sidecar(name, joiners) for name in started if name != primary)
        return ComposeResult(
            files=self.files,
            source=source,
            environment=cloister.environment,
            mounts=tuple(cloister.mounts),
            user=cloister.user,
            user_override=cloister.user_override,
            services=services,
            inputs=tuple(dict.fromkeys(self.inputs)),
            overrides=tuple(self.overrides),
        )

    def dependencies(self, name: str) -> list[tuple[str, Node]]:
        mapping = self.services[name].mapping or {}
        found: list[tuple[str, Node]] = []
        if (depends := mapping.get("depends_on")) is not None:
            found.extend((other, node) for other, node in (depends.mapping or {}).items())
        mode = mapping.get("network_mode")
        if mode is not None and isinstance(mode.scalar, str) and mode.scalar.startswith("service:"):
            found.append((mode.scalar.removeprefix("service:"), mode))
        for other, node in found:
            if other not in self.services:
                raise self.error(node, f"services.{name}: it needs {other!r}, not a service here")
        return found

    def started(self, primary: str, run_services: Sequence[str] | None) -> list[str]:
        """The services started, dependencies first; errors for a cycle."""
        wanted = list(self.services) if run_services is None else [primary, *run_services]
        order: list[str] = []
        state: dict[str, str] = {}

        def visit(name: str, trail: tuple[str, ...]) -> None:
            if state.get(name) == "done":
                return
            if state.get(name) == "visiting":
                cycle = " -> ".join((*trail[trail.index(name) :], name))
                raise self.error(
                    self.services[name], f"services: the services depend on each other: {cycle}"
                )
            state[name] = "visiting"
            for other, _node in self.dependencies(name):
                visit(other, (*trail, name))
            state[name] = "done"
            order.append(name)

        for name in wanted:
            visit(name, ())
        if primary not in order:
            order.append(primary)
        return order

    def joiners(self, primary: str, started: list[str]) -> set[str]:
        """The services that share the cloister's network namespace."""
        joining: set[str] = set()
        cloister = self.services[primary].mapping or {}
        mode = cloister.get("network_mode")
        if mode is not None and isinstance(mode.scalar, str) and mode.scalar.startswith("service:"):
            joining.add(mode.scalar.removeprefix("service:"))
        for name in started:
            node = (self.services[name].mapping or {}).get("network_mode")
            if node is not None and node.scalar == f"service:{primary}":
                joining.add(name)
        joining.discard(primary)
        return joining

    # --- top-level volumes ------------------------------------------------------------

    def top_volumes(self, node: Node) -> None:
        mapping = node.mapping
        if mapping is None:
            if node.scalar is None:
                return
            raise self.wrong(node, "volumes", "a mapping of volumes")
        for name, volume in mapping.items():
            where = f"volumes.{name}"
            options = volume.mapping or {}
            if volume.mapping is None and volume.scalar is not None:
                raise self.wrong(volume, where, "a mapping")
            external = options.get("external")
            if external is not None and external.plain() not in (False, None):
                why = (
                    "an external volume is shared outside the project: every volume a"
                    " cloister uses is the project's own"
                )
                self.note(external, f"{where}.external", "refused", why)
                self.refused_volumes[name] = why
                continue
            driver = options.get("driver")
            if "driver_opts" in options or (driver is not None and driver.scalar != "local"):
                key = "driver_opts" if "driver_opts" in options else "driver"
                why = "a volume driver's options can bind any host path"
                self.note(options[key], f"{where}.{key}", "refused", why)
                self.refused_volumes[name] = why
                continue
            if "name" in options:
                why = "Cloister names the project's volumes itself (per project)"
                self.note(options["name"], f"{where}.name", "ignored", why)
            self.note(volume, where, "kept", "a Docker volume of this project")

    def declared_volume(self, name: str) -> str | None:
        """Why the named volume *name* is refused, '' if fine, None if it is not declared."""
        if name in self.refused_volumes:
            return self.refused_volumes[name]
        volumes = self.top.get("volumes")
        declared = volumes.mapping if volumes is not None else None
        return "" if declared is not None and name in declared else None

    # --- the cloister's service ---------------------------------------------------------

    def service(self, name: str, joiners: set[str], *, cloister: bool) -> _Service:
        """Every key of one service decided; what is kept gathered."""
        mapping = self.services[name].mapping or {}
        prefix = f"services.{name}"
        gathered = _Service(cloister=cloister)
        self.env_files(mapping, prefix, gathered)
        handlers = self.cloister_handlers() if cloister else self.sidecar_handlers(name in joiners)
        fixed = _CLOISTER if cloister else _SIDECAR
        for key, value in mapping.items():
            where = f"{prefix}.{key}"
            if key in ("image", "build", "env_file"):
                continue
            if key in handlers:
                handlers[key](value, where, gathered)
            elif key in fixed:
                self.note(value, where, *fixed[key])
            else:
                self.common(value, where, key)
        return gathered

    def cloister_handlers(self) -> dict[str, _Handler]:
        return {
            "environment": self.environment,
            "volumes": self.volumes,
            "tmpfs": self.volumes,
            "cap_add": self.cloister_capabilities,
            "security_opt": self.security_opts,
            "network_mode": lambda node, where, _: self.cloister_network(node, where),
            "user": self.cloister_user,
            "depends_on": self.cloister_depends_on,
        }

    def sidecar_handlers(self, joins: bool) -> dict[str, _Handler]:
        return {
            "environment": self.environment,
            "volumes": self.volumes,
            "tmpfs": self.volumes,
            "command": self.command,
            "entrypoint": self.command,
            "user": self.inside_setting,
            "working_dir": self.inside_setting,
            "ports": self.ports,
            "expose": self.ports,
            "healthcheck": self.healthcheck,
            "depends_on": self.depends_on,
            "cap_add": self.sidecar_capabilities,
            "security_opt": self.security_opts,
            "network_mode": lambda node, where, _: self.sidecar_network(node, where, joins),
        }

    def cloister_capabilities(self, node: Node, where: str, _gathered: _Service) -> None:
        for index, item in enumerate(self.strings(node, where)):
            text = self.text(item, f"{where}[{index}]")
            if text is not None:
                self.note(item, f"{where}[{index}]", *cap_add(text))

    def cloister_user(self, node: Node, where: str, gathered: _Service) -> None:
        text = self.text(node, where)
        if text is not None:
            gathered.user, gathered.user_override = text, self.make_override(node, where)

    def cloister_depends_on(self, node: Node, where: str, _gathered: _Service) -> None:
        others = ", ".join(node.mapping or {})
        self.note(node, where, "kept", f"{others} start with the cloister, before its commands")

    def make_override(self, node: Node, where: str) -> Override:
        """An Override at *node* to be completed by the loader (its outcome and reason)."""
        return Override(
            self.field_name(node, where), value_text(node.plain()), "kept", "", node.line, node.file
        )

    def cloister_network(self, node: Node, where: str) -> None:
        mode = node.scalar
        if isinstance(mode, str) and mode.startswith("service:"):
            other = mode.removeprefix("service:")
            why = (
                f"{other} joins the cloister's network namespace: reachable on localhost,"
                " and it reaches only what the cloister reaches"
            )
            self.note(node, where, "kept", why)
        elif mode == "host":
            why = "the host's network: every port on the host, no proxy in the way"
            self.note(node, where, "dropped", why)
        else:
            why = (
                "the cloister's only network is the guardian's internal one; its traffic"
                " leaves through the proxy"
            )
            self.note(node, where, "dropped", why)

    def common(self, node: Node, where: str, key: str) -> None:
        if key in _COMMON:
            outcome, why = _COMMON[key]
            if key == "privileged" and node.plain() is False:
                outcome, why = "ignored", "no container is ever privileged"
            self.note(node, where, outcome, why)
        elif key.startswith("x-"):
            self.note(node, where, "ignored", "an extension field")
        else:
            self.note(node, where, "ignored", "not a compose service property Cloister knows")

    def security_opts(self, node: Node, where: str, _gathered: _Service) -> None:
        for index, item in enumerate(self.strings(node, where)):
            text = self.text(item, f"{where}[{index}]")
            if text is not None:
                self.note(item, f"{where}[{index}]", *security_opt(text))

    # --- image and build ----------------------------------------------------------------

    def image_source(self, name: str, *, cloister: bool) -> ImageSource:
        node = self.services[name]
        mapping = node.mapping or {}
        prefix = f"services.{name}"
        image, build = mapping.get("image"), mapping.get("build")
        what = "the cloister's" if cloister else "the service's"
        if build is not None:
            if image is not None:
                why = "the build is used (Cloister names the images it builds)"
                self.note(image, f"{prefix}.image", "ignored", why)
            return self.build(build, f"{prefix}.build", what)
        if image is None:
            raise self.error(node, f"{prefix}: neither `image` nor `build` is given")
        image_name = self.text(image, f"{prefix}.image")
        if image_name is None or not image_name.strip():
            raise self.error(image, f"{prefix}.image: the image name is empty")
        why = f"{what} image" + ("" if cloister else ": it must exist locally (nothing is pulled)")
        self.note(image, f"{prefix}.image", "kept", why)
        return ImageSource(kind="image", image=image_name.strip())

    def build(self, node: Node, where: str, what: str) -> ImageSource:
        mapping = node.mapping
        if mapping is None:
            raise self.wrong(node, where, "a context or a mapping")
        context_node = mapping.get("context", Node(".", node.file, node.line))
        context_text = self.text(context_node, f"{where}.context")
        if context_text is None:
            raise self.error(context_node, f"{where}.context: it reads a host secret")
        if "://" in context_text or context_text.startswith("git@"):
            raise self.error(
                context_node,
                f"{where}.context: {context_text!r} is a remote context: Cloister builds only"
                " from the project's files",
            )
        context = self.inside(self.directory / context_text)
        if context is None or not context.is_dir():
            problem = "is not a folder" if context is not None else "is outside the project"
            raise self.error(
                context_node,
                f"{where}.context: {context_text!r} {problem}: every file under it would go to"
                " the build, where a Dockerfile could copy your secrets into the image",
            )
        dockerfile_node = mapping.get("dockerfile", Node("Dockerfile", node.file, node.line))
        dockerfile_text = self.text(dockerfile_node, f"{where}.dockerfile")
        if dockerfile_text is None:
            raise self.error(dockerfile_node, f"{where}.dockerfile: it reads a host secret")
        dockerfile = self.inside(context / dockerfile_text)
        if dockerfile is None:
            raise self.error(
                dockerfile_node,
                f"{where}.dockerfile: {dockerfile_text!r} is outside the project: the image"
                " may be built only from the project's files",
            )
        if not dockerfile.is_file():
            raise self.error(
                dockerfile_node, f"{where}.dockerfile: no such file: {str(dockerfile)!r}"
            )
        for at, node_at, path in (
            ("context", context_node, context),
            ("dockerfile", dockerfile_node, dockerfile),
        ):
            if (why := git_directory_reason(path, self.project_root)) is not None:
                raise self.error(node_at, f"{where}.{at}: {why}")
        self.inputs.append(dockerfile)
        self.note(dockerfile_node, f"{where}.dockerfile", "kept", f"{what} image is built from it")
        args, target = self.build_options(mapping, where)
        return ImageSource(
            kind="build", dockerfile=dockerfile, context=context, args=args, target=target
        )

    def build_options(
        self, mapping: dict[str, Node], where: str
    ) -> tuple[dict[str, str], str | None]:
        """``build.args`` and ``build.target``; the other options decided."""
        args: dict[str, str] = {}
        target: str | None = None
        for key, value in mapping.items():
            at = f"{where}.{key}"
            if key == "args":
                for name, arg in (value.mapping or {}).items():
                    text = self.env_value(arg, f"{at}.{name}", name)
                    if text is not None:
                        args[name] = text
                        self.note(arg, f"{at}.{name}", "kept", "a build argument")
            elif key == "target":
                target = self.text(value, at)
                self.note(value, at, "kept", "the build stage to use")
            elif key in ("ssh", "secrets"):
                why = "it hands the build your SSH agent or files: Cloister passes no secrets"
                self.note(value, at, "refused", why)
            elif key in ("network", "extra_hosts", "privileged", "entitlements", "isolation"):
                why = "Cloister builds with its own settings, without the host's network"
                self.note(value, at, "dropped", why)
            elif key == "additional_contexts":
                self.note(value, at, "dropped", "only the one context inside the project is sent")
            elif key not in ("context", "dockerfile"):
                self.note(value, at, "ignored", "Cloister chooses the `docker build` options")
        return args, target

    # --- environment --------------------------------------------------------------------

    def env_value(self, node: Node, where: str, name: str) -> str | None:
        """A variable's value; a missing one is the host's (never a secret's), as compose does."""
        if node.scalar is None and node.mapping is None and node.items is None:
            secrets: list[str] = []
            from_host = self.interpolator.lookup(name, secrets)
            if secrets:
                why = (
                    f"it takes {name} from your environment, and the name looks like a"
                    " secret; Cloister does not pass host secrets in"
                )
                self.note(node, where, "refused", why)
            return from_host
        return self.text(node, where)

    def environment(self, node: Node, where: str, gathered: _Service) -> None:
        mapping = node.mapping
        if mapping is None:
            raise self.wrong(node, where, "a mapping or a list")
        for name, value in mapping.items():
            at = f"{where}.{name}"
            if not name or "\0" in name or not re.fullmatch(r"[^=\s]+", name):
                raise self.error(value, f"{at}: {name!r} is not an environment variable name")
            upper = name.upper()
            if upper in _PROXY_VARIABLES or upper == "CLOISTER" or upper.startswith("CLOISTER_"):
                why = "Cloister sets it: the proxy is the only way out"
                self.note(value, at, "ignored", why)
                continue
            text = self.env_value(value, at, name)
            if text is None:
                continue
            gathered.environment[name] = text
            self.note(value, at, "kept", "set in the container")

    def env_files(self, mapping: dict[str, Node], prefix: str, gathered: _Service) -> None:
        node = mapping.get("env_file")
        if node is None:
            return
        where = f"{prefix}.env_file"
        for index, item in enumerate(self.strings(node, where)):
            at = f"{where}[{index}]"
            entry = item.mapping
            path_node = entry.get("path", item) if entry is not None else item
            required = entry.get("required") if entry is not None else None
            relative = self.text(path_node, at)
            if relative is None:
                continue
            path = self.inside(self.directory / relative)
            if path is None:
                why = (
                    f"{relative!r} is outside the project: Cloister reads only the project's files"
                )
                self.note(item, at, "refused", why)
                continue
            if not path.exists() and required is not None and required.plain() is False:
                self.note(item, at, "ignored", "it does not exist (required: false)")
                continue
            text = read_bounded(path, "an env file")
            self.inputs.append(path)
            self.note(item, at, "kept", "its variables are set in the container")
            for line, name, value in parse_env_file(text):
                line_node = Node(value, path, line)
                upper = name.upper()
                if upper in _PROXY_VARIABLES or upper.startswith("CLOISTER"):
                    self.note(line_node, name, "ignored", "Cloister sets it")
                    continue
                found = self.env_value(line_node, name, name) if value is None else value
                if found is not None:
                    gathered.environment[name] = found

    # --- mounts -------------------------------------------------------------------------

    def volume_fields(self, node: Node, where: str) -> dict[str, str] | MountDecision | None:
        """The ``mounts`` fields of one ``volumes`` entry, or the decision that ends it
        (None: a refusal is noted)."""
        if (mapping := node.mapping) is not None:
            written: dict[str, str] = {}
            for key in ("type", "source", "target"):
                if key in mapping:
                    text = self.text(mapping[key], f"{where}.{key}")
                    if text is None:
                        return None
                    written[key] = text
            read_only = mapping.get("read_only")
            if read_only is not None and read_only.plain() is True:
                written["readonly"] = "true"
            fields: dict[str, str] | MountDecision = written
        else:
            text = self.text(node, where)
            if text is None:
                return None
            fields = _short_volume(text)
        if isinstance(fields, MountDecision):
            return fields
        source = fields.get("source", "")
        kind = fields.setdefault("type", "bind" if source.startswith(("/", ".", "~")) else "volume")
        if kind == "bind" and source.startswith("."):
            # Not resolved: the mount rules refuse a link on the way (`./data -> .git`).
            fields["source"] = os.path.normpath(self.directory / source)
        if kind == "volume" and source:
            refused = self.declared_volume(source)
            if refused is None:
                raise self.error(
                    node, f"{where}: the volume {source!r} is not declared in the top-level volumes"
                )
            if refused:
                return MountDecision(None, "refused", f"the volume {source!r}: {refused}")
        return fields

    def volumes(self, node: Node, where: str, gathered: _Service) -> None:
        """``volumes`` and ``tmpfs``: through the rules of devcontainer.json's ``mounts``."""
        key, cloister = where.rsplit(".", 1)[-1], gathered.cloister
        for index, item in enumerate(self.strings(node, where)):
            at = f"{where}[{index}]"
            fields = (
                {"type": "tmpfs", "target": str(item.scalar).split(":", 1)[0]}
                if key == "tmpfs" and item.scalar is not None
                else self.volume_fields(item, at)
            )
            if fields is None:
                continue
            if isinstance(fields, MountDecision):
                self.note(item, at, fields.outcome, fields.why)
                continue
            if cloister and self.holds_project(fields):
                where_project = self.variables.container_workspace
                why = f"Cloister mounts the project itself at {where_project}"
                self.note(item, at, "dropped", why)
                continue
            decision = decide_mount(fields, variables=self.variables, blocked=self.blocked)
            if decision.mount is not None:
                gathered.mounts.append(decision.mount)
            self.note(item, at, decision.outcome, decision.why)

    def holds_project(self, fields: Mapping[str, str]) -> bool:
        if fields.get("type") != "bind" or not fields.get("source", "").startswith("/"):
            return False
        if self.blocked.reason(fields["source"]) is not None:
            return False  # `/` or the home directory: refused as such
        root = self.project_root.resolve()
        source = Path(fields["source"]).resolve()
        return root == source or root.is_relative_to(source)

    # --- the other services -------------------------------------------------------------

    def sidecar(self, name: str, joiners: set[str]) -> ComposeService:
        gathered = self.service(name, joiners, cloister=False)
        return ComposeService(
            name=name,
            source=self.image_source(name, cloister=False),
            environment=gathered.environment,
            command=gathered.command,
            entrypoint=gathered.entrypoint,
            user=gathered.user,
            working_dir=gathered.working_dir,
            mounts=tuple(gathered.mounts),
            ports=tuple(dict.fromkeys(gathered.ports)),
            healthcheck=gathered.healthcheck,
            depends_on=gathered.depends_on,
            shares_cloister_network=name in joiners,
        )

    def inside_setting(self, node: Node, where: str, gathered: _Service) -> None:
        """``user`` or ``working_dir`` of a service: kept as written."""
        text = self.text(node, where)
        if where.endswith(".user"):
            gathered.user = text
        else:
            gathered.working_dir = text
        if text is not None:
            self.note(node, where, "kept", "as written: it applies inside the service")

    def depends_on(self, node: Node, where: str, gathered: _Service) -> None:
        gathered.depends_on = tuple(node.mapping or {})
        self.note(node, where, "kept", "they start first")

    def sidecar_capabilities(self, node: Node, where: str, _gathered: _Service) -> None:
        for index, item in enumerate(self.strings(node, where)):
            self.sidecar_capability(item, f"{where}[{index}]")

    def sidecar_network(self, node: Node, where: str, joins: bool) -> None:
        if joins:
            why = (
                "it joins the cloister's network namespace: reachable on localhost, and it"
                " reaches only what the cloister reaches"
            )
            self.note(node, where, "kept", why)
        elif node.scalar == "host":
            why = "the host's network: every port on the host, no proxy in the way"
            self.note(node, where, "dropped", why)
        else:
            self.note(node, where, "dropped", _NETWORK)

    def sidecar_capability(self, node: Node, where: str) -> None:
        text = self.text(node, where)
        if text is None:
            return
        name = text.strip().upper().removeprefix("CAP_")
        if name in SIDECAR_CAPABILITIES:
            self.note(node, where, "kept", "a service keeps it anyway (to drop to its own user)")
        else:
            kept = ", ".join(sorted(SIDECAR_CAPABILITIES))
            why = f"adds the capability {name}; a service keeps only {kept}"
            self.note(node, where, "dropped", why)

    def command(self, node: Node, where: str, gathered: _Service) -> None:
        argv = self.argv(node, where)
        if where.endswith(".command"):
            gathered.command = argv
        else:
            gathered.entrypoint = argv

    def argv(self, node: Node, where: str) -> tuple[str, ...] | None:
        """A command as compose takes it: a list is the argv; a string is split like a shell
        would split it (no shell runs it)."""
        if node.items is not None:
            texts = [self.text(item, f"{where}[{index}]") for index, item in enumerate(node.items)]
            if any(text is None for text in texts):
                return None
            argv = tuple(text for text in texts if text is not None)
        else:
            text = self.text(node, where)
            if text is None:
                return None
            try:
                argv = tuple(shlex.split(text))
            except ValueError as error:
                raise self.error(node, f"{where}: cannot split {text!r}: {error}") from None
        self.note(node, where, "kept", "runs inside the service")
        return argv

    def ports(self, node: Node, where: str, gathered: _Service) -> None:
        """``ports`` and ``expose``: the container ports; a host port is not published."""
        published = where.endswith(".ports")
        found = gathered.ports
        for index, item in enumerate(self.strings(node, where)):
            at = f"{where}[{index}]"
            if (mapping := item.mapping) is not None:
                target = mapping.get("target")
                if target is None:
                    raise self.error(item, f"{at}: a port needs its target")
                container = self.text(target, f"{at}.target") or ""
                protocol = str((mapping.get("protocol") or Node("tcp", item.file, 0)).plain())
                host = "published" in mapping or "host_ip" in mapping
            else:
                text = self.text(item, at)
                if text is None:
                    continue
                spec, _, protocol = text.partition("/")
                host = ":" in spec
                container = spec.rsplit(":", 1)[-1]
                protocol = protocol or "tcp"
            numbers = self.port_range(item, at, container)
            if protocol.lower() != "tcp":
                self.note(item, at, "ignored", f"{protocol} ports are not supported: TCP only")
                continue
            found.extend(numbers)
            if host:
                why = f"{_PORTS}; the cloister reaches it at the service's name"
                self.note(item, at, "dropped" if published else "kept", why)
            else:
                self.note(item, at, "kept", "the cloister reaches it at the service's name")

    def port_range(self, node: Node, where: str, text: str) -> list[int]:
        first, _, last = text.strip().partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise self.error(node, f"{where}: {text!r} is not a port") from None
        if not 1 <= low <= high <= 65535 or high - low >= MAX_PORTS:
            raise self.error(
                node, f"{where}: {text!r} is not a port or a range of at most {MAX_PORTS}"
            )
        return list(range(low, high + 1))

    def healthcheck(self, node: Node, where: str, gathered: _Service) -> None:
        gathered.healthcheck = self.health(node, where)

    def health(self, node: Node, where: str) -> dict[str, object] | None:
        """The docker SDK's healthcheck (durations in nanoseconds), or None if refused."""
        mapping = node.mapping
        if mapping is None:
            raise self.wrong(node, where, "a mapping")
        disable = mapping.get("disable")
        if disable is not None and disable.plain() is True:
            self.note(node, where, "kept", "no health check")
            return {"test": ["NONE"]}
        result: dict[str, object] = {}
        for key, value in mapping.items():
            at = f"{where}.{key}"
            if key == "test":
                test = self.health_test(value, at)
                if test is None:
                    return None
                result["test"] = test
            elif key in ("interval", "timeout", "start_period"):
                text = self.text(value, at)
                nanoseconds = _duration(text) if text is not None else None
                if nanoseconds is None:
                    raise self.error(value, f"{at}: {text!r} is not a duration like '10s'")
                result[key] = nanoseconds
            elif key == "retries":
                if not isinstance(value.scalar, int) or isinstance(value.scalar, bool):
                    raise self.wrong(value, at, "a number")
                result[key] = value.scalar
            elif key != "disable":
                self.note(value, at, "ignored", "not supported by the engine Cloister drives")
        self.note(node, where, "kept", "runs inside the service")
        return result

    def health_test(self, node: Node, where: str) -> list[str] | None:
        if node.items is None:
            text = self.text(node, where)
            return None if text is None else ["CMD-SHELL", text]
        texts = [self.text(item, f"{where}[{index}]") for index, item in enumerate(node.items)]
        if any(text is None for text in texts):
            return None
        test = [text for text in texts if text is not None]
        if not test or test[0] not in ("NONE", "CMD", "CMD-SHELL"):
            raise self.error(node, f"{where}: a test list starts with CMD, CMD-SHELL or NONE")
        return test


def _short_volume(text: str) -> dict[str, str] | MountDecision:
    """``SOURCE:TARGET[:MODE]`` or ``TARGET`` (an anonymous volume) as ``mounts`` fields."""
    parts = text.split(":")
    if len(parts) > 3:
        return MountDecision(None, "dropped", "not understood: too many ':'")
    if len(parts) == 1:
        return {"type": "volume", "target": parts[0]}
    fields = {"source": parts[0], "target": parts[1]}
    flags = parts[2].split(",") if len(parts) == 3 else []
    if unknown := [flag for flag in flags if flag not in _MODE_FLAGS]:
        return MountDecision(None, "dropped", f"not understood: {unknown[0]!r}")
    if "ro" in flags:
        fields["readonly"] = "true"
    return fields


def _duration(text: str) -> int | None:
    """A compose duration (``1m30s``, ``500ms``) in nanoseconds, or None."""
    text = text.strip()
    position, total = 0, 0.0
    while position < len(text):
        match = _DURATION.match(text, position)
        if match is None:
            return None
        total += float(match.group(1)) * _NANOSECONDS[match.group(2)]
        position = match.end()
    return int(total) if text else None
