"""What a cloister gets besides its mounts of git: protected paths, markers and limits.

* **Protected paths**: ``protect.paths`` of config.yaml, less a project's
  ``protect.except``, plus its own ``protect.paths``; :func:`cloister_cli.repo.gitmounts.plan`
  mounts them read-only.
* **Markers**, so tools can tell they run inside a cloister: the variables ``CLOISTER=1``,
  ``CLOISTER_NAME`` and ``CLOISTER_PROJECT``
  (:func:`cloister_cli.container.cloisters.environment_for`)
  and the read-only file ``/.cloister`` (a small JSON document written here, under
  ``<data>/markers/``, removed at stop).
* **A disk quota** (``defaults.disk``) as ``--storage-opt size=``, only where the
  engine's storage driver has one; ``/dev/shm`` is ``defaults.shm_size`` unless the
  devcontainer asks for its own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloister_core.config.models import DefaultsConfig, GlobalConfig, ProjectConfig
from cloister_core.fileio import atomic_write
from cloister_core.paths import CloisterPaths

MARKER = "/.cloister"  # where the marker file is inside every cloister
MARKER_VERSION = 1

# Storage drivers whose ``size`` option limits a container's writable layer. btrfs
# needs quotas enabled on the filesystem and overlay2 an xfs mounted with ``pquota``:
# the engine refuses the container otherwise, and the start says why.
_QUOTA_DRIVERS = frozenset({"btrfs", "zfs", "devicemapper"})


# -- protected paths -----------------------------------------------------------------------


def protected_paths(config: GlobalConfig, project: ProjectConfig) -> tuple[str, ...]:
    """The paths a cloister of *project* gets read-only (relative to its work tree)."""
    return project.protect.applied_to(config.protect.paths)


def unused_exceptions(config: GlobalConfig, project: ProjectConfig) -> list[str]:
    """Warnings for each ``protect.except`` entry that drops nothing (a typo, likely)."""
    return [
        f"protect.except {entry!r} in the project's file drops nothing: it is not in"
        f" protect.paths of config.yaml ({', '.join(config.protect.paths) or 'empty'})"
        for entry in project.protect.except_
        if entry not in config.protect.paths
    ]


# -- the marker file -----------------------------------------------------------------------


def marker_file(paths: CloisterPaths, cloister: str) -> Path:
    """Where :func:`write_marker` puts the ``/.cloister`` file of *cloister*."""
    return paths.data_dir / "markers" / f"{cloister}.json"


def marker_text(cloister: str, project: str, branch: str | None) -> str:
    document = {"version": MARKER_VERSION, "name": cloister, "project": project, "branch": branch}
    return json.dumps(document, indent=2) + "\n"


def write_marker(paths: CloisterPaths, cloister: str, project: str, branch: str | None) -> Path:
    """Write the file mounted read-only at ``/.cloister`` (world-readable: any uid inside)."""
    path = marker_file(paths, cloister)
    atomic_write(path, marker_text(cloister, project, branch), mode=0o644)
    return path


def remove_marker(paths: CloisterPaths, cloister: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        marker_file(paths, cloister).unlink()


# -- limits --------------------------------------------------------------------------------


def _driver_status(info: Mapping[str, Any]) -> dict[str, str]:
    pairs = info.get("DriverStatus") or []
    return {
        str(pair[0]): str(pair[1])
        for pair in pairs
        if isinstance(pair, list | tuple) and len(pair) == 2
    }


def no_disk_quota(info: Mapping[str, Any]) -> str | None:
    """Why the engine described by *info* (``docker info``) cannot limit a container's
    disk, or None when its storage driver has a quota."""
    driver = str(info.get("Driver") or "")
    if driver in _QUOTA_DRIVERS:
        return None
    if driver == "overlay2":
        backing = _driver_status(info).get("Backing Filesystem", "")
        if backing == "xfs":
            return None
        where = f"on {backing}" if backing else "on this filesystem"
        return (
            f"Docker's storage driver overlay2 {where} has no disk quota (only on xfs with pquota)"
        )
    return f"Docker's storage driver {driver or '(unknown)'} has no disk quota"


def storage_options(
    limits: DefaultsConfig, engine_info: Callable[[], Mapping[str, Any]]
) -> tuple[dict[str, str], str | None]:
    """``storage_opt`` for ``docker run`` and a warning when ``defaults.disk`` cannot be
    applied; *engine_info* (``docker info``) is asked only when a quota is configured."""
    if limits.disk is None:
        return {}, None
    why = no_disk_quota(engine_info())
    if why is not None:
        return {}, f"defaults.disk is {limits.disk}, but no quota applies: {why}"
    return {"size": limits.disk}, None


def shm_size(limits: DefaultsConfig, requested: str | None) -> str:
    """``/dev/shm``'s size: the devcontainer's ``--shm-size`` when it asks (it knows its
    browser tests; the memory limit bounds it either way), else ``defaults.shm_size``."""
    return requested or limits.shm_size


# -- all of it, for a start ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Safeguards:
    """What :func:`plan` decided for one cloister (nothing written yet)."""

    protect: tuple[str, ...]  # the protected paths, relative to the work tree
    marker: Path  # the file for /.cloister (written by :func:`write_marker`)
    storage_opt: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def plan(
    paths: CloisterPaths,
    config: GlobalConfig,
    project: ProjectConfig,
    cloister: str,
    engine_info: Callable[[], Mapping[str, Any]],
) -> Safeguards:
    """The protected paths, the marker's place and the disk quota of *cloister*."""
    storage, why = storage_options(config.defaults, engine_info)
    warnings = unused_exceptions(config, project) + ([why] if why else [])
    return Safeguards(
        protected_paths(config, project), marker_file(paths, cloister), storage, tuple(warnings)
    )
