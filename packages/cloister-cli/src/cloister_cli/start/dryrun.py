"""``cloister start --dry-run``: the plan a start would carry out, for people and scripts.

The ``docker run`` equivalent is made from :meth:`ContainerPlan.run_kwargs` itself, key
by key (a key this module does not know is an error, so the two cannot drift apart),
with secrets masked: the cloister's token wherever it appears (``CLOISTER_TOKEN``, the
proxy URLs, an agent's key variable) and the value of any variable whose name looks
like a secret are shown as ``***``.
"""

from __future__ import annotations

import csv
import io
import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from docker.types import Mount

from cloister_core.errors import CloisterError
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.container.services import ServicePlan
    from cloister_cli.images.features.resolve import Installed
    from cloister_cli.start.plan import StartPlan

MASK = "***"
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|PRIVATE|API_?KEY|(?:^|_)KEYS?(?:_|$)",
    re.IGNORECASE,
)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")


def masked(name: str, value: str, secret: str) -> str:
    """*value* of variable *name* as shown: the token replaced, a secret's value hidden."""
    if _SECRET_NAME.search(name):
        return MASK
    value = _USERINFO.sub(rf"\1{MASK}@", value)  # https://user:pass@host -> https://***@host
    return value.replace(secret, MASK) if secret else value


def mount_argument(mount: Mount) -> str:
    """The ``--mount`` value of a docker SDK mount (CSV, quoted where needed)."""
    fields = [f"type={mount['Type']}"]
    if mount.get("Source"):
        fields.append(f"source={mount['Source']}")
    fields.append(f"target={mount['Target']}")
    if mount.get("ReadOnly"):
        fields.append("readonly")
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(fields)
    return buffer.getvalue()


def _cpus(nano: int) -> str:
    return f"{nano / 1_000_000_000:.9f}".rstrip("0").rstrip(".")


def _confinement(rest: dict[str, Any]) -> list[str]:
    """The capability, security and storage options, taken out of *rest*."""
    flags: list[str] = []
    for capability in rest.pop("cap_drop", []):
        flags += ["--cap-drop", capability]
    for capability in rest.pop("cap_add", []):
        flags += ["--cap-add", capability]
    for option in rest.pop("security_opt", []):
        flags += ["--security-opt", option]
    for key, value in rest.pop("storage_opt", {}).items():
        flags += ["--storage-opt", f"{key}={value}"]
    return flags


def docker_run_argv(kwargs: Mapping[str, Any], *, secret: str = "") -> list[str]:
    """``docker run …`` equivalent to ``containers.run(**kwargs)``; secrets masked.

    Raises :class:`CloisterError` for a keyword it cannot express (a programming error:
    the dry run must never show less than the start does).
    """
    flags: list[str] = []
    rest = dict(kwargs)
    image = rest.pop("image")
    command = rest.pop("command", [])
    if rest.pop("detach", False):
        flags.append("--detach")
    simple = {
        "name": "--name",
        "hostname": "--hostname",
        "user": "--user",
        "working_dir": "--workdir",
        "network": "--network",
        "network_mode": "--network",
        "mem_limit": "--memory",
        "pids_limit": "--pids-limit",
        "shm_size": "--shm-size",
    }
    for key, flag in simple.items():
        if key in rest:
            flags += [flag, str(rest.pop(key))]
    if rest.pop("init", False):
        flags.append("--init")
    flags += _confinement(rest)
    if "nano_cpus" in rest:
        flags += ["--cpus", _cpus(int(rest.pop("nano_cpus")))]
    for key, value in rest.pop("labels", {}).items():
        flags += ["--label", f"{key}={value}"]
    for target, options in rest.pop("tmpfs", {}).items():
        flags += ["--tmpfs", f"{target}:{options}" if options else target]
    for mount in rest.pop("mounts", []):
        flags += ["--mount", mount_argument(mount)]
    for name, value in rest.pop("environment", {}).items():
        flags += ["--env", f"{name}={masked(name, value, secret)}"]
    for name, address in rest.pop("extra_hosts", {}).items():
        flags += ["--add-host", f"{name}:{address}"]
    flags += _service_options(rest)
    entrypoint = list(rest.pop("entrypoint", None) or [])
    if entrypoint:  # docker run takes one word; the rest go before the command
        flags += ["--entrypoint", entrypoint[0]]
        command = [*entrypoint[1:], *command]
    if rest:
        raise CloisterError(f"the dry run cannot show docker run options {sorted(rest)}")
    return ["docker", "run", *flags, image, *command]


_BOOLEAN_FLAGS = frozenset({"--detach", "--init", "--no-healthcheck"})
_HEALTH_DURATIONS = {
    "interval": "--health-interval",
    "timeout": "--health-timeout",
    "start_period": "--health-start-period",
}


def _service_options(rest: dict[str, Any]) -> list[str]:
    """What only a compose service's container has: a network alias, a bounded log, a
    healthcheck; taken out of *rest*."""
    flags: list[str] = []
    for network in (rest.pop("networking_config", None) or {}).values():
        for alias in (network or {}).get("aliases") or []:
            flags += ["--network-alias", alias]
    log = rest.pop("log_config", None)
    if log is not None:
        flags += ["--log-driver", str(log["Type"])]
        flags += [
            item for key, value in log["Config"].items() for item in ("--log-opt", f"{key}={value}")
        ]
    health = rest.pop("healthcheck", None)
    if health is not None:
        test = list(health.get("test") or health.get("Test") or [])
        if test[:1] == ["NONE"]:
            flags.append("--no-healthcheck")
        elif test:
            shell = (
                test[1]
                if test[0] == "CMD-SHELL"
                else shlex.join(test[1:] if test[0] == "CMD" else test)
            )
            flags += ["--health-cmd", shell]
        for key, flag in _HEALTH_DURATIONS.items():
            if health.get(key):
                flags += [flag, f"{int(health[key]) / 1_000_000_000:g}s"]
        if health.get("retries"):
            flags += ["--health-retries", str(health["retries"])]
    return flags


def command_text(argv: list[str], *, multiline: bool = False) -> str:
    """*argv* quoted for a POSIX shell; one option per line when *multiline*."""
    if not multiline:
        return shlex.join(argv)
    lines: list[str] = [shlex.join(argv[:2])]
    index = 2
    while index < len(argv):
        item = argv[index]
        if item in _BOOLEAN_FLAGS:
            lines.append(item)
            index += 1
        elif item.startswith("--") and index + 1 < len(argv):
            lines.append(shlex.join(argv[index : index + 2]))
            index += 2
        else:  # the image and its command
            lines.append(shlex.join(argv[index:]))
            break
    return " \\\n    ".join(lines)


def service_argv(plan: ServicePlan) -> list[str]:
    """``docker run …`` of a compose service beside the cloister (whose container's id is
    known only once it runs: shown as ``<cloister>``)."""
    kwargs = plan.run_kwargs("<cloister>")
    if "network" in kwargs:  # as services.start adds it
        kwargs["networking_config"] = {kwargs["network"]: {"aliases": [plan.service.name]}}
    return docker_run_argv(kwargs)


def run_argv(start: StartPlan) -> list[str]:
    """The ``docker run`` of *start*'s cloister, its token masked."""
    return docker_run_argv(start.container.run_kwargs(), secret=start.secret)


def _services_json(start: StartPlan) -> list[dict[str, Any]]:
    return [
        {
            "name": plan.service.name,
            "container": plan.container,
            "image": plan.image.tag,
            "image_step": plan.image.step,
            "shares_cloister_network": plan.service.shares_cloister_network,
            "ports": list(plan.service.ports),
            "docker_run": service_argv(plan),
        }
        for plan in start.services
    ]


def _services_text(start: StartPlan) -> list[str]:
    out = []
    for plan in start.services:
        service = plan.service
        where = (
            "in the cloister's network namespace"
            if service.shares_cloister_network
            else f"on the cloister's network as {service.name!r}"
        )
        out.append(f"service    {service.name} ({plan.container}), {where}, nothing published")
        out.append(f"  - {plan.image.step}")
        out.append(f"  - {command_text(service_argv(plan))}")
    return out


def to_json(start: StartPlan) -> dict[str, Any]:
    """The dry run for scripts (``--dry-run --json``)."""
    argv = run_argv(start)
    devcontainer = start.devcontainer
    image = start.image
    return {
        "cloister": start.name,
        "container": start.container.container,
        "directory": str(start.workspace.directory),
        "project": start.workspace.project.name,
        "running": start.running,
        "guardian_running": start.guardian_running,
        "image": {
            "tag": image.tag,
            "key": image.key,
            "exists": image.cached,
            "steps": list(image.steps),
            "agent_image_built_first": start.agent_image,
        },
        "devcontainer": None
        if devcontainer is None
        else {
            "path": str(devcontainer.path),
            "overrides": [
                {
                    "field": item.field,
                    "value": item.value,
                    "outcome": item.outcome,
                    "why": item.why,
                    "line": item.line,
                }
                for item in devcontainer.overrides
            ],
            "lifecycle": [
                {"stage": item.stage, "name": item.name, "argv": list(item.argv)}
                for item in devcontainer.lifecycle
            ],
        },
        "features": _features_json(start),
        "shape": {
            "changed": bool(start.shape_difference),
            "difference": start.shape_difference,
        },
        "protected": [
            {
                "path": str(item.path.relative_to(start.workspace.directory)),
                "reason": item.reason,
                "stand_in": item.stand_in,
            }
            for item in start.protections
        ],
        "notes": list(start.notes),
        "warnings": list(start.warnings),
        "docker_run": argv,
        "command": command_text(argv),
        "services": _services_json(start),
    }


def header(start: StartPlan) -> str:
    """What the dry run did not do: it builds, starts and writes nothing (Features it
    fetched to show what they ask for go into Cloister's cache, and it says so)."""
    fetched = start.features is not None and any(
        item.feature.kind == "oci" and item.resolved is not None and not item.cached
        for item in start.features.installs
    )
    written = " (but Features fetched into Cloister's cache)" if fetched else ""
    return f"cloister start --dry-run: nothing was built, written{written} or started"


def render(start: StartPlan) -> str:
    """The dry run for people: what would be built, decided and run."""
    out: list[str] = [header(start), ""]
    plan = start.container
    out.append(f"cloister   {start.name} ({plan.container}) in {start.workspace.directory}")
    if start.running:
        out.append("           runs already: `cloister start` would attach to it")
    guardian = "running" if start.guardian_running else "would be started (and built if needed)"
    out.append(f"guardian   {guardian}")
    image = start.image
    state = "exists" if image.cached else "would be built"
    out.append(f"image      {image.tag} ({state})")
    if start.agent_image is not None:
        out.append(f"  - build Cloister's agent image {start.agent_image} first")
    out += [f"  - {step}" for step in image.steps]
    devcontainer = start.devcontainer
    if devcontainer is None:
        out.append("devcontainer.json  none used")
    else:
        out.append(f"devcontainer.json  {devcontainer.path}")
        width = max((len(item.outcome) for item in devcontainer.overrides), default=0)
        for item in devcontainer.overrides:
            where = f"  (line {item.line})" if item.line else ""
            if item.file is not None:  # a compose file's
                where = f"  ({item.file}:{item.line})" if item.line else f"  ({item.file})"
            out.append(f"  {item.outcome:<{width}}  {item.field} {item.value!r}: {item.why}{where}")
        for command in devcontainer.lifecycle:
            stage = command.stage if command.name is None else f"{command.stage}:{command.name}"
            out.append(f"  runs     {stage}: {shlex.join(command.argv)}")
    out += _features_lines(start)
    out += _services_text(start)
    if start.shape_difference:
        out.append("shape      changed since last approved: `cloister start` would ask")
        out += [f"  {line}" for line in start.shape_difference.rstrip("\n").split("\n")]
    else:
        out.append("shape      as approved")
    if start.protections:
        out.append("read-only  in the project (an empty stand-in where marked *):")
        for protection in start.protections:
            path = protection.path.relative_to(start.workspace.directory)
            star = " *" if protection.stand_in else ""
            out.append(f"  {path}{star}  ({protection.reason})")
    out += [f"note       {note}" for note in start.notes]
    out += [f"warning    {warning}" for warning in start.warnings]
    out += ["", f"docker run equivalent (secrets shown as {MASK}):", ""]
    # Every line may hold the agent's text (steps, env values, notes): escaped, so a
    # control character shows as an escape (printable is idempotent: the shape's
    # difference, already escaped, stays as it is).
    out = [printable(line) for line in out]
    argv = [printable(item) for item in run_argv(start)]
    out.append(command_text(argv, multiline=True))
    return "\n".join(out) + "\n"


def _feature_state(item: Installed) -> str:
    if item.resolved is None:
        return "not fetched" if item.feature.trusted else "refused"
    if item.feature.kind == "local":
        return "local"
    # A dry run may fetch (on the host): what it fetched is in the cache for the start.
    return "cached" if item.cached else "fetched now, into the cache"


def _features_lines(start: StartPlan) -> list[str]:
    """The Features in install order: what each resolves to, its options' environment,
    what its metadata asks for in the image (its other requests are overrides above)."""
    features = start.features
    if features is None:
        return []
    out = [f"features   in install order (lock file {features.lock.path})"]
    for number, item in enumerate(features.installs, start=1):
        added = ", added by dependsOn" if item.dependency else ""
        digest = f" {item.resolved.digest}" if item.resolved is not None else ""
        out.append(f"  {number}. {item.feature.id}{digest} ({_feature_state(item)}{added})")
        if item.resolved is not None and item.feature.kind != "local":
            out.append(f"       resolved  {item.resolved_as}")
        for name, value in item.environment.items():
            out.append(f"       option    {name}={masked(name, value, start.secret)}")
        for name, value in item.container_env.items():
            out.append(f"       ENV       {name}={masked(name, value, start.secret)}")
        out += [f"       note      {note}" for note in item.notes]
    if features.lock_text is not None:
        out.append("  `cloister start` would write the lock file (the new pins above)")
    return out


def _features_json(start: StartPlan) -> list[dict[str, Any]] | None:
    features = start.features
    if features is None:
        return None
    return [
        {
            "id": item.feature.id,
            "kind": item.feature.kind,
            "digest": item.resolved.digest if item.resolved is not None else None,
            "resolved": item.resolved_as,
            "state": _feature_state(item),
            "dependency": item.dependency,
            "options": dict(item.environment),
            "container_env": dict(item.container_env),
            "notes": list(item.notes),
        }
        for item in features.installs
    ]
