"""``mounts`` entries: parsed, their variables substituted, checked against the project.

What is kept:

- ``type=volume``: named (or anonymous) Docker volumes, as asked; they hold no host
  files. Driver options are refused: the local driver's ``o=bind`` mounts any host path.
- ``type=bind`` of a file or directory *inside the project* (an allowlist): kept, but
  always read-only, since a cloister may write only its project. Everything outside
  the project is refused (the message names a blocked path, :mod:`.blocked`, when it is
  one); so is a source with a symbolic link in any component below the project root
  (docker would resolve it again when it creates the container, and the agent can
  re-point a link) and a source that is a socket (a read-only bind still allows
  ``connect()``), or anything else that is not a file or a directory.
- ``type=tmpfs``: kept.

A mount whose target is or holds the project's place in the container is dropped (it
would hide the project), and so is anything not understood: only ``type``, ``source``,
``target``, ``readonly`` and ``consistency`` (a macOS speed hint, ignored) are read.
"""

from __future__ import annotations

import csv
import os
import posixpath
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from cloister_core.devcontainer.blocked import BlockedPaths
from cloister_core.devcontainer.model import MountKind, MountSpec, Outcome
from cloister_core.devcontainer.variables import Variables, secret_reason

_KEY_ALIASES = {
    "src": "source",
    "dst": "target",
    "destination": "target",
    "ro": "readonly",
}
_KNOWN_KEYS = frozenset({"type", "source", "target", "readonly", "consistency"})
_DRIVER_KEYS = frozenset({"volume-driver", "volume-opt"})
_TRUE = frozenset({"", "1", "true"})
_FALSE = frozenset({"0", "false"})
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class MountParseError(ValueError):
    """A mount string or object that is not understood (the message says why)."""


@dataclass(frozen=True, slots=True)
class MountDecision:
    """What becomes of one mount: the kept spec (or None) and the outcome with its reason."""

    mount: MountSpec | None
    outcome: Outcome
    why: str


def parse_mount_string(text: str) -> dict[str, str]:
    """``type=bind,source=/x,target=/y,readonly`` → a mapping of canonical keys.

    Split as docker splits ``--mount``: comma-separated, CSV-quoted fields.
    """
    fields: dict[str, str] = {}
    for row in csv.reader([text]):
        for item in row:
            key, _, value = item.strip().partition("=")
            key = _KEY_ALIASES.get(key.strip().lower(), key.strip().lower())
            if key in fields:
                raise MountParseError(f"{key!r} is given twice")
            fields[key] = value
    return fields


def parse_mount_object(value: Mapping[str, object]) -> dict[str, str]:
    """The object form ``{"source": …, "target": …, "type": …}``."""
    fields: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool) and key == "readonly":
            fields[key] = "true" if item else "false"
        elif isinstance(item, str):
            fields[_KEY_ALIASES.get(key, key)] = item
        else:
            raise MountParseError(f"{key!r} must be a string, got {item!r}")
    return fields


def _read_only(fields: Mapping[str, str]) -> bool:
    if "readonly" not in fields:
        return False
    flag = fields["readonly"].strip().lower()
    if flag in _TRUE:
        return True
    if flag in _FALSE:
        return False
    raise MountParseError(f"readonly={fields['readonly']!r} is neither true nor false")


def _hides(target: str, container_workspace: str) -> bool:
    workspace = posixpath.normpath(container_workspace)
    return workspace == target or workspace.startswith(target.rstrip("/") + "/")


def _substitute(fields: Mapping[str, str], variables: Variables) -> dict[str, str] | MountDecision:
    """The fields with their variables replaced, or the decision that ends the mount."""
    values: dict[str, str] = {}
    for key, raw in fields.items():
        result = variables.substitute(raw)
        if result.secrets:
            return MountDecision(None, "refused", secret_reason(result.secrets[0]))
        if result.unknown:
            why = f"it uses {result.unknown[0]}, a variable Cloister does not substitute"
            return MountDecision(None, "dropped", why)
        values[key] = result.text
    return values


def decide_mount(
    fields: Mapping[str, str],
    *,
    variables: Variables,
    blocked: BlockedPaths,
    default_type: str = "volume",
) -> MountDecision:
    """Substitute, check and decide one parsed mount (see the module's docstring).

    A bind mount's source must be inside ``variables.local_workspace`` (the project).
    """
    if driver := sorted(_DRIVER_KEYS & fields.keys()):
        why = f"{driver[0]} is refused: a volume driver's options can bind any host path"
        return MountDecision(None, "refused", why)
    if unknown := sorted(fields.keys() - _KNOWN_KEYS - _DRIVER_KEYS):
        return MountDecision(None, "dropped", f"not understood: {', '.join(unknown)}")
    values = _substitute(fields, variables)
    if isinstance(values, MountDecision):
        return values
    target = values.get("target", "").strip()
    if not target.startswith("/"):
        return MountDecision(None, "dropped", f"the target {target!r} is not an absolute path")
    target = posixpath.normpath(target)
    if _hides(target, variables.container_workspace):
        why = f"a mount on {target} would hide the project at {variables.container_workspace}"
        return MountDecision(None, "dropped", why)
    kind = values.get("type", default_type).strip().lower()
    source = values.get("source", "").strip() or None
    return _by_kind(
        kind,
        source,
        target,
        read_only=_read_only(values),
        blocked=blocked,
        project=variables.local_workspace,
    )


def _by_kind(
    kind: str,
    source: str | None,
    target: str,
    *,
    read_only: bool,
    blocked: BlockedPaths,
    project: str,
) -> MountDecision:
    if kind == "bind":
        return _bind(source, target, read_only=read_only, blocked=blocked, project=project)
    if kind == "volume":
        if source is not None and not _VOLUME_NAME.fullmatch(source):
            return MountDecision(None, "dropped", f"{source!r} is not a volume name")
        why = "a Docker volume holds no host files"
        return MountDecision(MountSpec("volume", source, target, read_only), "kept", why)
    if kind == "tmpfs":
        why = "memory-backed, no host files"
        return MountDecision(MountSpec("tmpfs", None, target, read_only=False), "kept", why)
    return MountDecision(None, "dropped", f"mount type {kind!r} is not supported")


OUTSIDE_PROJECT = (
    "only paths inside the project may be mounted;"
    " list another repository in the project's `refs:` instead"
)


def _relative_to(path: str, root: str) -> str | None:
    """*path* relative to *root* (both normalised, absolute), or None if it is not inside."""
    if path == root:
        return ""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def _bind_problem(normalized: str, project: str) -> tuple[Outcome, str] | None:
    """Why the bind source *normalized* (absolute, ``..`` collapsed) is refused, or None.

    Inside the project, as written or against the project's real path; no component
    below the project root a symbolic link (each is lstat'ed: docker resolves links
    again at create time, after this check); the source itself a file or a directory.
    """
    written_root = posixpath.normpath(project)
    real_root = os.path.realpath(written_root)
    relative = _relative_to(normalized, written_root)
    if relative is None:
        relative = _relative_to(normalized, real_root)
    if relative is None:
        return "refused", f"{normalized} is outside the project ({written_root}): {OUTSIDE_PROJECT}"
    current = real_root
    mode = os.lstat(real_root).st_mode if not relative else 0
    for part in relative.split("/") if relative else ():
        current = posixpath.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return "dropped", f"{normalized} does not exist (docker would refuse to mount it)"
        if stat.S_ISLNK(mode):
            return "refused", (
                f"{current} is a symbolic link: docker would follow it when it creates the"
                f" cloister, wherever it points then; {OUTSIDE_PROJECT}"
            )
    if stat.S_ISSOCK(mode):
        why = f"{normalized} is a socket: a read-only mount still lets the cloister connect to it"
        return "refused", why
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        return "refused", f"{normalized} is neither a file nor a directory"
    return None


def _bind(
    source: str | None, target: str, *, read_only: bool, blocked: BlockedPaths, project: str
) -> MountDecision:
    if source is None:
        return MountDecision(None, "dropped", "a bind mount needs a source")
    if "\0" in source:
        return MountDecision(None, "refused", "the source has a NUL character")
    expanded = blocked.expand(source)
    if not expanded.startswith("/"):
        return MountDecision(None, "dropped", f"the source {source!r} is not an absolute path")
    if (reason := blocked.reason(source)) is not None:
        return MountDecision(None, "refused", f"{reason}: no cloister may mount it")
    normalized = posixpath.normpath(expanded)
    try:
        problem = _bind_problem(normalized, project)
    except (OSError, ValueError) as error:
        problem = "refused", f"{normalized} cannot be checked ({error})"
    if problem is not None:
        return MountDecision(None, *problem)
    kind: MountKind = "bind"
    spec = MountSpec(kind, normalized, target, read_only=True)
    if read_only:
        return MountDecision(spec, "kept", "read-only, as asked")
    return MountDecision(spec, "kept", "made read-only: a cloister writes only its project")


def volume_flag_source(value: str) -> str | None:
    """The host path of a ``-v SRC:DST[:OPTS]`` value, or None for a named volume."""
    source = value.split(":", 1)[0] if ":" in value else ""
    if source.startswith(("/", "~", ".")):
        return source
    return None
