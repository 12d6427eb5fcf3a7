"""What a loaded devcontainer.json adds to a cloister's ``docker run``.

The loader (:mod:`cloister_core.devcontainer`) has already decided what is kept; this
turns the kept parts into :class:`~cloister_cli.container.cloisters.Extras`:

* mounts: bind mounts read-only (the loader made them so), tmpfs as they are (with
  their size and mode), named volumes as ``cloister-<project>-<name>-<tag>``, so two
  projects asking for ``cache`` do not share one (an agent could leave something in a
  volume for another project's agent to run);
* ``--shm-size`` and ``--hostname`` of ``runArgs`` as the SDK's keyword arguments;
* ``containerEnv``, then ``remoteEnv`` (a ``null`` unsets a ``containerEnv`` one;
  ``${containerEnv:X}`` is read from ``containerEnv``, else the image's environment);
* a compose file's services: their names in ``NO_PROXY`` (the cloister reaches them
  directly, on its own network), and 127.0.0.1 for those in its network namespace.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from docker.types import Mount

from cloister_cli.container.cloisters import Extras
from cloister_core.names import validate_name

if TYPE_CHECKING:
    from cloister_core.devcontainer import Devcontainer, MountSpec

_CONTAINER_ENV = re.compile(r"\$\{containerEnv:([^}:]+)(?::([^}]*))?\}")


def volume_name(project: str, name: str) -> str:
    """The Docker volume a devcontainer's named volume *name* is, for *project*."""
    project = validate_name(project, what="project")
    # The digest makes the name unambiguous: ``web`` + ``admin-x`` and ``web-admin`` + ``x``
    # would otherwise both be ``cloister-web-admin-x``.
    tag = hashlib.sha256(f"{project}\0{name}".encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"cloister-{project}-{name}-{tag}"


def mount_for(spec: MountSpec, project: str) -> Mount:
    if spec.kind == "volume":
        source = volume_name(project, spec.source) if spec.source else None
        return Mount(
            spec.target, source, type="volume", read_only=spec.read_only, no_copy=spec.no_copy
        )
    if spec.kind == "tmpfs":
        return Mount(
            spec.target,
            None,
            type="tmpfs",
            tmpfs_size=spec.tmpfs_size,
            tmpfs_mode=spec.tmpfs_mode,
        )
    return Mount(spec.target, spec.source, type="bind", read_only=True)  # always, see mounts


def image_environment(entries: list[str] | None) -> dict[str, str]:
    """An image's ``Config.Env`` (``NAME=value`` entries) as a mapping."""
    pairs = (entry.partition("=") for entry in entries or [])
    return {name: value for name, _, value in pairs}


def extras_for(
    devcontainer: Devcontainer, *, project: str, image_env: Mapping[str, str] | None
) -> tuple[Extras, tuple[str, ...]]:
    """The devcontainer's extras, and notes on what could not be used.

    *image_env* is the image's environment (None when the image does not exist yet, as
    in a dry run of a start that would build it): ``${containerEnv:X}`` in ``remoteEnv``
    reads it.
    """
    notes: list[str] = []
    environment = dict(devcontainer.container_env)
    for name, value in devcontainer.remote_env.items():
        if value is None:
            environment.pop(name, None)
            continue
        resolved = _resolve(value, environment, image_env)
        if resolved is None:
            notes.append(
                f"remoteEnv.{name} not set: it reads ${{containerEnv:…}}, which is known only"
                " once the image is built"
            )
            continue
        environment[name] = resolved
    hostname: str | None = None
    shm_size: str | None = None
    for argument in devcontainer.run_args:
        option, _, value = argument.partition("=")
        if option == "--hostname":
            hostname = value
        elif option == "--shm-size":
            shm_size = value
    mounts = tuple(mount_for(spec, project) for spec in devcontainer.mounts)
    services = tuple(service.name for service in devcontainer.services)
    local = tuple(item.name for item in devcontainer.services if item.shares_cloister_network)
    return Extras(mounts, environment, hostname, shm_size, services, local), tuple(notes)


def _resolve(
    value: str, container_env: Mapping[str, str], image_env: Mapping[str, str] | None
) -> str | None:
    """*value* with ``${containerEnv:NAME[:default]}`` replaced; None if it cannot be."""
    missing = False

    def replace(match: re.Match[str]) -> str:
        nonlocal missing
        name, default = match.group(1), match.group(2)
        if name in container_env:
            return container_env[name]
        if image_env is None:
            missing = True
            return ""
        return image_env.get(name, default or "")

    text = _CONTAINER_ENV.sub(replace, value)
    return None if missing else text
