"""Which cloisters exist: the containers with Cloister's label, as a person waits for them.

``cloister list`` and shell completion ask through :func:`connect`, which gives the
engine port's light reader (:class:`~cloister_cli.container.engine.UnixEngine`: the
standard library on the engine's Unix socket, without the docker SDK's 0.2 s import)
where it can, and the SDK's client otherwise; :func:`list_cloisters` takes either
(any :class:`~cloister_cli.container.engine.Reader`), and the tests' fake engines too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloister_cli.container import engine
from cloister_cli.container.engine import (
    ContainerView,
    DockerUnavailableError,
    Reader,
    UnixEngine,
    check_engine_socket,
    docker_host,
)
from cloister_core import stack
from cloister_core.errors import CloisterError

# check_engine_socket and docker_host belong to the engine module; stack/doctor.py still
# asks them here.
__all__ = [
    "LABEL",
    "CloisterInfo",
    "DockerUnavailableError",
    "age",
    "check_engine_socket",
    "connect",
    "docker_host",
    "list_cloisters",
    "name_for_directory",
]

LABEL = stack.LABEL_CLOISTER


# -- the cloisters -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CloisterInfo:
    name: str
    project: str
    branch: str | None
    path: str
    status: str
    image: str
    created: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "branch": self.branch,
            "path": self.path,
            "status": self.status,
            "image": self.image,
            "created": self.created,
        }


def _info(container: ContainerView) -> CloisterInfo:
    labels = container.labels
    image = container.attrs.get("Config", {}).get("Image", "")
    return CloisterInfo(
        name=labels[LABEL],
        project=labels.get(stack.LABEL_PROJECT, ""),
        branch=labels.get(stack.LABEL_BRANCH) or None,
        path=labels.get(stack.LABEL_PATH, ""),
        status=container.status,
        image=str(image),
        created=str(container.attrs.get("Created", ""))[:19],
    )


def list_cloisters(client: Reader, instance: stack.Instance) -> list[CloisterInfo]:
    """The cloisters of *instance* (another user's, or another data directory's, are not)."""
    containers = client.containers.list(all=True, filters={"label": [LABEL, instance.label_filter]})
    return sorted((_info(container) for container in containers), key=lambda info: info.name)


def name_for_directory(client: Reader, instance: stack.Instance, directory: Path) -> str:
    """The cloister of *instance* whose working tree contains *directory* (the deepest)."""
    resolved = directory.resolve()
    best: tuple[int, str] | None = None
    for info in list_cloisters(client, instance):
        path = Path(info.path)
        if resolved == path or path in resolved.parents:
            depth = len(path.parts)
            if best is None or depth > best[0]:
                best = (depth, info.name)
    if best is None:
        raise CloisterError(f"no cloister works in {directory}; name one (`cloister list`)")
    return best[1]


def age(created: str) -> str:
    try:
        started = datetime.fromisoformat(created).replace(tzinfo=UTC)
    except ValueError:
        return created
    minutes = int((datetime.now(UTC) - started).total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


# -- reaching the engine -------------------------------------------------------------------


def connect(timeout: float = engine.TIMEOUT) -> Reader:
    """A client for listing: the light reader on a Unix socket, else the docker SDK's."""
    host = docker_host()
    if host.startswith("unix://"):
        check_engine_socket(host)
        return UnixEngine(host.removeprefix("unix://"), timeout)
    return engine.connect(timeout)
