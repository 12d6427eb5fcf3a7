"""``mounts`` entries: parsed, their variables substituted, checked against the project.

What is kept:

- ``type=volume``: named (or anonymous) Docker volumes, as asked; they hold no host
  files. ``volume-nocopy`` is kept. Driver options are not: the local driver's
  ``volume-opt=o=bind`` with ``volume-opt=device=PATH`` is a bind mount of any host
  path in disguise (refused, with what that path is); any other ``volume-opt`` and any
  driver but ``local`` are dropped.
- ``type=bind`` of a file or directory *inside the project* (an allowlist): kept, but
  always read-only, since a cloister may write only its project. Everything outside
  the project is refused (the message names a blocked path, :mod:`.blocked`, when it is
  one); so is a source with a symbolic link in any component below the project root
  (docker would resolve it again when it creates the container, and the agent can
  re-point a link) and a source that is a socket (a read-only bind still allows
  ``connect()``), or anything else that is not a file or a directory. A git directory
  never goes into a cloister (its ``config`` may hold credentials in remote URLs, its
  hooks run on the host): refused are the project root itself, a source that is or
  sits inside a git directory (a ``.git``, or a folder git would take for one: a
  nested repository's, a worktree's, the one a ``.git`` file names) and a folder that
  holds one, searched to :data:`MAX_SEARCHED` entries (a bigger folder is refused).
- ``type=tmpfs``: kept, with ``tmpfs-size`` and ``tmpfs-mode``.

Paths are normalised before any check (``//work``, ``/work/.``, ``/x/../work`` are
``/work``), and the kept mount has the normalised target. A mount whose target is or
holds the project's place in the container is dropped (it would hide the project), and
so is anything not understood: a field with a line break or another control character,
an option not listed here. ``consistency`` (a macOS speed hint) and ``bind-propagation``
(no effect: nothing in a cloister can mount) are read and ignored.
"""

from __future__ import annotations

import csv
import os
import posixpath
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cloister_core.devcontainer.blocked import BlockedPaths, normalize
from cloister_core.devcontainer.model import MountKind, MountSpec, Outcome
from cloister_core.devcontainer.variables import Variables, secret_reason

_KEY_ALIASES = {
    "src": "source",
    "dst": "target",
    "destination": "target",
    "ro": "readonly",
}
_IGNORED_KEYS = frozenset({"consistency", "bind-propagation"})
_KNOWN_KEYS = frozenset(
    {"type", "source", "target", "readonly", "tmpfs-size", "tmpfs-mode", "volume-nocopy"}
    | _IGNORED_KEYS
)
_DRIVER_KEYS = frozenset({"volume-driver", "volume-opt"})
_TRUE = frozenset({"", "1", "true"})
_FALSE = frozenset({"0", "false"})
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SIZE = re.compile(r"([0-9]+)([kmg]?)b?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_MODE = re.compile(r"0?[0-7]{1,4}")
# ``volume-opt`` may be given more than once: its values are kept joined by this
# character, which no parsed field can hold (control characters are refused first).
OPTION_SEPARATOR = "\0"


class MountParseError(ValueError):
    """A mount string or object that is not understood (the message says why)."""


@dataclass(frozen=True, slots=True)
class MountDecision:
    """What becomes of one mount: the kept spec (or None) and the outcome with its reason."""

    mount: MountSpec | None
    outcome: Outcome
    why: str


def _control_problem(what: str, value: str) -> None:
    if (found := _CONTROL.search(value)) is not None:
        raise MountParseError(
            f"{what} holds the control character {found.group()!r}:"
            " a mount's fields are one line of text"
        )


def _add(fields: dict[str, str], key: str, value: str) -> None:
    key = _KEY_ALIASES.get(key, key)
    _control_problem(f"{key!r}", key + value)
    if key == "volume-opt" and key in fields:
        fields[key] += OPTION_SEPARATOR + value
    elif key in fields:
        raise MountParseError(f"{key!r} is given twice")
    else:
        fields[key] = value


def parse_mount_string(text: str) -> dict[str, str]:
    """``type=bind,source=/x,target=/y,readonly`` → a mapping of canonical keys.

    Split as docker splits ``--mount``: comma-separated, CSV-quoted fields.
    ``volume-opt``, which docker takes more than once, holds its values joined by
    :data:`OPTION_SEPARATOR`.
    """
    _control_problem("the mount string", text)
    fields: dict[str, str] = {}
    try:
        rows = list(csv.reader([text]))
    except csv.Error as error:  # an unclosed quote, a field over csv's size limit
        raise MountParseError(f"its fields cannot be split ({error})") from None
    for row in rows:
        for item in row:
            key, _, value = item.strip().partition("=")
            _add(fields, key.strip().lower(), value)
    return fields


def parse_mount_object(value: Mapping[str, object]) -> dict[str, str]:
    """The object form ``{"source": …, "target": …, "type": …}``."""
    fields: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool) and key in ("readonly", "volume-nocopy"):
            _add(fields, key, "true" if item else "false")
        elif isinstance(item, str):
            _add(fields, key, item)
        elif (
            isinstance(item, list)
            and key == "volume-opt"
            and all(isinstance(option, str) for option in item)
        ):
            for option in item:
                _add(fields, key, str(option))
        else:
            raise MountParseError(f"{key!r} must be a string, got {item!r}")
    return fields


def _flag(fields: Mapping[str, str], key: str) -> bool:
    if key not in fields:
        return False
    flag = fields[key].strip().lower()
    if flag in _TRUE:
        return True
    if flag in _FALSE:
        return False
    raise MountParseError(f"{key}={fields[key]!r} is neither true nor false")


def _hides(target: str, container_workspace: str) -> bool:
    workspace = normalize(container_workspace)
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


def _driver_decision(values: Mapping[str, str], blocked: BlockedPaths) -> MountDecision | None:
    """The decision for a mount with volume driver settings (None when it has none)."""
    options = values["volume-opt"].split(OPTION_SEPARATOR) if "volume-opt" in values else []
    pairs = [
        (key.strip().lower(), value.strip())
        for key, _, value in (o.partition("=") for o in options)
    ]
    device = next((value for key, value in pairs if key == "device"), None)
    if device is not None or any(
        (key == "o" and "bind" in value.lower()) or (key == "type" and value.lower() == "none")
        for key, value in pairs
    ):
        what = f"{device} is mounted" if device is not None else "a host path is mounted"
        if device is not None and device.startswith("/"):
            what = blocked.reason(device) or f"{device} is mounted"
        return MountDecision(
            None,
            "refused",
            f"a host bind mount in disguise (the local volume driver's volume-opt device= and"
            f" o=bind): {what}; {OUTSIDE_PROJECT}",
        )
    if options:
        return MountDecision(
            None,
            "dropped",
            f"volume-opt {options[0]!r}: Cloister passes no options to a volume driver"
            " (they can mount host paths and network shares)",
        )
    driver = values.get("volume-driver", "local").strip().lower()
    if driver != "local":
        return MountDecision(
            None,
            "dropped",
            f"volume-driver {driver!r}: a volume plugin runs on the host; only Docker's own"
            " local volumes are used",
        )
    return None


def _checked(
    fields: Mapping[str, str], variables: Variables, blocked: BlockedPaths
) -> dict[str, str] | MountDecision:
    """The fields substituted, or the decision that ends the mount: an option not
    understood, a secret read, a control character, a volume driver's setting."""
    if unknown := sorted(fields.keys() - _KNOWN_KEYS - _DRIVER_KEYS):
        return MountDecision(None, "dropped", f"not understood: {', '.join(unknown)}")
    values = _substitute(fields, variables)
    if isinstance(values, MountDecision):
        return values
    for key, value in values.items():  # a variable's value may hold one too
        if (found := _CONTROL.search(value.replace(OPTION_SEPARATOR, ""))) is not None:
            why = f"not understood: {key} holds the control character {found.group()!r}"
            return MountDecision(None, "dropped", why)
    return _driver_decision(values, blocked) or values


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
    values = _checked(fields, variables, blocked)
    if isinstance(values, MountDecision):
        return values
    target = values.get("target", "").strip()
    if not target.startswith("/"):
        return MountDecision(None, "dropped", f"the target {target!r} is not an absolute path")
    target = normalize(target)
    if _hides(target, variables.container_workspace):
        why = f"a mount on {target} would hide the project at {variables.container_workspace}"
        return MountDecision(None, "dropped", why)
    kind = values.get("type", default_type).strip().lower()
    source = values.get("source", "").strip() or None
    try:
        options = _options(kind, values)
        read_only = _flag(values, "readonly")
    except MountParseError as error:
        return MountDecision(None, "dropped", f"not understood: {error}")
    decision = _by_kind(
        kind,
        source,
        target,
        read_only=read_only,
        blocked=blocked,
        project=variables.local_workspace,
    )
    if decision.mount is None:
        return decision
    tmpfs_size, tmpfs_mode, no_copy = options
    mount = MountSpec(
        decision.mount.kind,
        decision.mount.source,
        decision.mount.target,
        decision.mount.read_only,
        tmpfs_size=tmpfs_size,
        tmpfs_mode=tmpfs_mode,
        no_copy=no_copy,
    )
    ignored = sorted(key for key in values if key in _IGNORED_KEYS)
    why = decision.why + "".join(f"; {key} ignored: {_IGNORED_WHY[key]}" for key in ignored)
    return MountDecision(mount, decision.outcome, why)


_IGNORED_WHY = {
    "consistency": "a macOS speed hint",
    "bind-propagation": "nothing in a cloister can mount, so nothing propagates",
}


def _options(kind: str, values: Mapping[str, str]) -> tuple[int | None, int | None, bool]:
    """(tmpfs size in bytes, tmpfs mode, volume-nocopy) as asked; an option of another
    type than the mount's is not understood."""
    for key in ("tmpfs-size", "tmpfs-mode", "volume-nocopy"):
        if key in values and not key.startswith(f"{kind}-"):
            raise MountParseError(f"{key} is an option of a {key.split('-')[0]} mount")
    size: int | None = None
    mode: int | None = None
    if "tmpfs-size" in values:
        found = _SIZE.fullmatch(values["tmpfs-size"].strip())
        if found is None:
            raise MountParseError(f"tmpfs-size={values['tmpfs-size']!r} is not a size")
        size = int(found.group(1)) * _UNITS[found.group(2).lower()]
    if "tmpfs-mode" in values:
        if not _MODE.fullmatch(values["tmpfs-mode"].strip()):
            raise MountParseError(f"tmpfs-mode={values['tmpfs-mode']!r} is not an octal mode")
        mode = int(values["tmpfs-mode"].strip(), 8)
    return size, mode, _flag(values, "volume-nocopy")


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


def _bind_problem(
    normalized: str, project: str, blocked: BlockedPaths
) -> tuple[Outcome, str] | None:
    """Why the bind source *normalized* (absolute, ``..`` collapsed) is refused, or None.

    Inside the project, as written or against the project's real path; no component
    below the project root a symbolic link (each is lstat'ed: docker resolves links
    again at create time, after this check); the source itself a file or a directory;
    no git directory in it, around it or the project itself (:func:`_git_problem`).
    """
    written_root = normalize(project)
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
    if (git := _git_problem(normalized, relative, real_root, blocked)) is not None:
        return "refused", git
    return None


MAX_SEARCHED = 10_000
"""The most entries of one bind source searched for a git directory (more: refused)."""
_GIT_WHY = "its config may hold credentials in remote URLs, its hooks run on the host"
_GIT_DIRECTORY = f"a git directory ({_GIT_WHY}): no cloister gets one but its own"


def _is_git_directory(names: Mapping[str, bool]) -> bool:
    """Whether a folder holding *names* (name → is a directory) is one git would use as
    a git directory: ``HEAD`` and ``objects``/``refs``, or a linked worktree's ``commondir``."""
    if names.get("HEAD") is not False:
        return False
    return (names.get("objects") and names.get("refs")) is True or names.get("commondir") is False


def _names(folder: str) -> dict[str, bool]:
    """What :func:`_is_git_directory` needs of *folder*, by lstat (not a listing: the
    project root may hold thousands of entries, and each mount asks of its ancestors)."""
    found: dict[str, bool] = {}
    for name in ("HEAD", "objects", "refs", "commondir"):
        try:
            found[name] = stat.S_ISDIR(os.lstat(posixpath.join(folder, name)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found


def _listing(path: str) -> dict[str, bool]:
    """*path*'s entries, name → whether it is a directory (links are not)."""
    with os.scandir(path) as entries:
        return {entry.name: entry.is_dir(follow_symlinks=False) for entry in entries}


def _git_problem(
    normalized: str, relative: str, real_root: str, blocked: BlockedPaths
) -> str | None:
    """Why the bind source *normalized* (checked link-free below the project root, whose
    real path is *real_root*) would give the cloister a git directory, or None."""
    if not relative:
        return (
            f"{normalized} is the project itself: Cloister mounts it already, with a git"
            f" directory of its own; yours goes into no cloister ({_GIT_WHY})"
        )
    if (
        around := _git_around(normalized, relative, real_root, blocked.git_directories)
    ) is not None:
        return around
    source = posixpath.join(real_root, relative)
    if not stat.S_ISDIR(os.lstat(source).st_mode):
        return None
    if source not in blocked.searched:
        blocked.searched[source] = _search(source, blocked)
    return blocked.searched[source] or None


def _git_around(
    shown: str, relative: str, real_root: str, known: dict[str, bool] | None = None
) -> str | None:
    """Why *relative* (below *real_root*, '' for the root) is or sits inside a git
    directory, or None; *known* keeps what was found of each folder."""
    known = {} if known is None else known
    parts = relative.split("/") if relative else []
    for depth in range(len(parts), -1, -1):
        if depth and parts[depth - 1].casefold() == ".git":
            return f"{shown} is inside {_GIT_DIRECTORY}"
        folder = posixpath.join(real_root, *parts[:depth])
        if folder not in known:
            known[folder] = _is_git_directory(_names(folder))
        if known[folder]:
            return f"{shown} is or is inside {_GIT_DIRECTORY}"
    return None


def git_directory_reason(path: Path, project_root: Path) -> str | None:
    """Why *path* (a build's context or Dockerfile, inside the project) is or sits inside
    a git directory, or None: every file under a context goes to the build, where a
    Dockerfile can copy it into an image the cloister runs. (A context's own top-level
    ``.git`` is never sent.)"""
    real_root = os.path.realpath(project_root)
    resolved = os.path.realpath(path)
    relative = _relative_to(resolved, real_root)
    if relative is None:
        return None  # outside: the caller refuses it as such
    return _git_around(str(path), relative, real_root)


def _search(source: str, blocked: BlockedPaths) -> str:
    """Why the folder *source* holds a git directory ('' if it holds none)."""
    too_big = (
        f"{source} holds more than {MAX_SEARCHED} entries: Cloister cannot tell that it holds"
        f" no {_GIT_DIRECTORY}; mount a smaller folder"
    )
    pending, searched = [source], 0
    while pending:
        folder = pending.pop()
        names = _listing(folder)
        searched += len(names)
        blocked.search_left -= len(names)
        if searched > MAX_SEARCHED or blocked.search_left < 0:
            return too_big
        if _is_git_directory(names):
            return f"{source} holds {folder}, {_GIT_DIRECTORY}"
        for name, is_directory in names.items():
            path = posixpath.join(folder, name)
            if name.casefold() == ".git":
                return f"{source} holds {path}, {_GIT_DIRECTORY}"
            if is_directory:
                pending.append(path)
    return ""


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
    normalized = normalize(expanded)
    try:
        problem = _bind_problem(normalized, project, blocked)
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
