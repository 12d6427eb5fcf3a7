"""The record of a project's current image, and listing and pruning project images."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker.errors

from cloister_cli.container.engine import Engine
from cloister_cli.images.projectimages.model import KEY_LABEL, PROJECT_LABEL, TAG_PREFIX, ImagePlan
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write, locked
from cloister_core.names import validate_name
from cloister_core.paths import CloisterPaths


def record_path(paths: CloisterPaths, project: str) -> Path:
    """``<data>/cache/images/<project>.json``: the project's current image."""
    return paths.data_dir / "cache" / "images" / f"{validate_name(project, what='project')}.json"


def read_record(paths: CloisterPaths, project: str) -> dict[str, Any] | None:
    """The project's current image as last recorded (key, tag, image, built), or None."""
    try:
        document = json.loads(record_path(paths, project).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def write_record(client: Engine, record: Path, plan: ImagePlan) -> None:
    """Record *plan* as the project's current image (with the image's ID, if it exists)."""
    built = None
    image_id = None
    if plan.key is not None:
        with contextlib.suppress(docker.errors.ImageNotFound):
            image = client.images.get(plan.tag)
            image_id = image.id
            built = image.attrs.get("Created")
    document = {
        "project": plan.project,
        "key": plan.key,
        "tag": plan.tag,
        "image": image_id,
        "built": built,
        "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    atomic_write(record, json.dumps(document, indent=2) + "\n", mode=0o644)


@dataclass(frozen=True, slots=True)
class ProjectImage:
    """One of Cloister's project images on this machine."""

    project: str
    tags: tuple[str, ...]  # empty: replaced by a rebuild (--no-cache) of the same key
    key: str
    id: str
    size: int  # bytes
    created: str  # as the engine says (RFC 3339)
    current: bool  # the project's recorded image
    containers: tuple[str, ...]  # containers (any state) made from it

    @property
    def tag(self) -> str:
        return self.tags[0] if self.tags else "<none>"

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "tag": self.tag,
            "tags": list(self.tags),
            "key": self.key,
            "id": self.id,
            "size": self.size,
            "created": self.created,
            "current": self.current,
            "in_use": bool(self.containers),
            "containers": list(self.containers),
        }


def list_project_images(client: Engine, paths: CloisterPaths) -> list[ProjectImage]:
    """Cloister's project images, by project and newest first."""
    users: dict[str, list[str]] = {}
    for container in client.api.containers(all=True):
        name = (container.get("Names") or ["?"])[0].lstrip("/")
        users.setdefault(str(container.get("ImageID", "")), []).append(name)
    records: dict[str, str | None] = {}
    found = []
    for image in client.images.list(filters={"label": PROJECT_LABEL}):
        labels = image.labels or {}
        project = labels.get(PROJECT_LABEL, "")
        if project not in records:
            try:
                record = read_record(paths, project)
            except CloisterError:  # a label that is no project name: never current
                record = None
            records[project] = record.get("key") if record else None
        key = labels.get(KEY_LABEL, "")
        tags = tuple(tag for tag in image.tags if tag.startswith(TAG_PREFIX))
        found.append(
            ProjectImage(
                project=project,
                tags=tags,
                key=key,
                id=str(image.id),
                size=int(image.attrs.get("Size") or 0),
                created=str(image.attrs.get("Created") or ""),
                current=bool(tags) and records[project] == key,
                containers=tuple(sorted(users.get(str(image.id), []))),
            )
        )
    found.sort(key=lambda item: item.created, reverse=True)
    found.sort(key=lambda item: item.project)
    return found


@dataclass(frozen=True, slots=True)
class Prunable:
    image: ProjectImage
    why: str


def prunable(
    images: Sequence[ProjectImage], project_exists: Callable[[str], bool]
) -> list[Prunable]:
    """The images ``prune`` removes: no longer current, or of a removed project.

    A project with no record keeps its images (which one is current is not known), and
    an image a container was made from is never chosen: Docker could not remove it.
    """
    chosen = []
    for image in images:
        if image.containers:
            continue
        if not project_exists(image.project):
            chosen.append(Prunable(image, f"project {image.project!r} was removed"))
        elif not image.tags:
            chosen.append(Prunable(image, "replaced by a rebuild"))
        elif not image.current and _has_current(images, image.project):
            chosen.append(Prunable(image, f"no longer current for {image.project}"))
    return chosen


def _has_current(images: Sequence[ProjectImage], project: str) -> bool:
    return any(image.current for image in images if image.project == project)


@dataclass(frozen=True, slots=True)
class Removal:
    image: ProjectImage
    removed: bool
    message: str
    failed: bool = False  # Docker refused (kept because it became current is no failure)

    def to_json(self) -> dict[str, Any]:
        return {**self.image.to_json(), "removed": self.removed, "message": self.message}


def prune_project_images(
    client: Engine,
    paths: CloisterPaths,
    chosen: Sequence[Prunable],
    project_exists: Callable[[str], bool],
) -> list[Removal]:
    """Remove *chosen* (each under its project's record lock, as a build holds it).

    A removed project's record goes too once none of its images is left.
    """
    results = []
    for item in chosen:
        image = item.image
        try:
            record = record_path(paths, image.project)
        except CloisterError:
            record = None
        with locked(record) if record is not None else contextlib.nullcontext():
            # A build may have made it current since it was chosen (a removed project's
            # record is stale: its images go all the same).
            current = read_record(paths, image.project) if record is not None else None
            if (
                project_exists(image.project)
                and current is not None
                and current.get("key") == image.key
                and image.tags
            ):
                results.append(Removal(image, False, f"kept {image.tag}: it became current"))
                continue
            results.append(_remove(client, image, item.why))
    for project in {item.image.project for item in chosen}:
        if project_exists(project):
            continue
        with contextlib.suppress(CloisterError):
            if not client.images.list(filters={"label": f"{PROJECT_LABEL}={project}"}):
                record_path(paths, project).unlink(missing_ok=True)
    return results


def _remove(client: Engine, image: ProjectImage, why: str) -> Removal:
    try:
        # By tag: an image someone else tagged too keeps their tag (and stays).
        for tag in image.tags:
            client.images.remove(tag)
        if not image.tags:
            client.images.remove(image.id)
    except docker.errors.ImageNotFound:
        return Removal(image, True, f"already gone ({why})")
    except docker.errors.APIError as error:
        return Removal(image, False, f"kept {image.tag}: {error.explanation or error}", True)
    return Removal(image, True, f"removed {image.tag} ({why})")
