"""What a devcontainer.json becomes once Cloister has read it: frozen values, and its error.

A :class:`Devcontainer` holds only what the cloister will do. Everything the file asked
for, kept or not, is an :class:`Override` with the reason, so ``cloister start
--dry-run`` can show the whole story and the rest can be printed as warnings.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cloister_core.errors import CloisterError, ConfigProblem
from cloister_core.printable import printable

Outcome = Literal["kept", "dropped", "refused", "ignored"]
"""``kept``: honoured (perhaps made safer, the reason says how); ``dropped``: it would
weaken the container's isolation; ``refused``: it reaches for the host's secrets or runs
code on the host; ``ignored``: it has no meaning in a cloister, or Cloister does it itself."""

LifecycleStage = Literal[
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
]
LIFECYCLE_STAGES: tuple[LifecycleStage, ...] = (
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
)

MountKind = Literal["bind", "volume", "tmpfs"]


class DevcontainerError(CloisterError):
    """A devcontainer.json (or a compose file it names) Cloister cannot use: malformed,
    of the wrong types, or asking for what Cloister never does (a build outside the project).

    ``str()`` is ``<file>:<line>:<column>: <message>`` when the spot is known; the file's
    text in it goes through :func:`~cloister_core.printable.printable`.
    """

    def __init__(
        self, path: Path, message: str, line: int | None = None, column: int | None = None
    ) -> None:
        self.path = path
        self.message = printable(message)
        self.line = line
        self.column = column
        super().__init__(printable(ConfigProblem(message, line, column).render(path)))


@dataclass(frozen=True, slots=True)
class Override:
    """One thing the file asked for, and what Cloister did with it.

    ``field``, ``value`` and ``why`` may hold the file's text (the agent's): shown, they
    go through :func:`~cloister_core.printable.printable` (:meth:`describe` does it).
    """

    field: str  # where in the file: "runArgs[2]", "mounts[0]", "containerEnv.TOKEN"
    value: str  # what it said, as text
    outcome: Outcome
    why: str
    line: int | None = None  # 1-based, when it could be found
    file: Path | None = None  # the file the line is in, when not the devcontainer.json

    def describe(self) -> str:
        """``runArgs[0] '--privileged': dropped: gives the container …``."""
        return printable(f"{self.field} {self.value!r}: {self.outcome}: {self.why}")

    def render(self, path: Path) -> str:
        """:meth:`describe` after ``<file>:<line>:``, as a warning names its spot.

        ``path`` is the devcontainer.json; an override from a compose file names that file.
        """
        where = self.file if self.file is not None else path
        return printable(ConfigProblem(self.describe(), self.line).render(where))


@dataclass(frozen=True, slots=True)
class ImageSource:
    """Where the image comes from: a named ``image``, or a ``build`` of a Dockerfile.

    Paths are absolute: the Dockerfile and the context are resolved against the
    devcontainer.json's directory, as the specification says.
    """

    kind: Literal["image", "build"]
    image: str | None = None
    dockerfile: Path | None = None
    context: Path | None = None
    args: Mapping[str, str] = field(default_factory=dict)
    target: str | None = None


FeatureKind = Literal["oci", "local"]


@dataclass(frozen=True, slots=True)
class Feature:
    """A dev container Feature the file asks for: its id as written, and its options.

    ``kind`` is ``"oci"`` (a registry reference: ``id`` as written, see
    :func:`cloister_core.devcontainer.features.parse_oci_reference`) or ``"local"`` (a
    folder under the project's ``.devcontainer/``: ``local_path`` is it, resolved).
    ``trusted``: an OCI Feature from the default prefix or ``devcontainer.trusted_features``
    (a local Feature is the project's own code, like its Dockerfile: always True).
    ``line`` is where the id is in the devcontainer.json, when found.
    """

    id: str
    options: Mapping[str, str | bool]
    trusted: bool
    kind: FeatureKind = "oci"
    local_path: Path | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class MountSpec:
    """A mount Cloister keeps. ``source`` is a host path (bind), a volume name, or None;
    ``target`` is normalised (``//work/.`` is ``/work``); the options are the harmless
    ones kept: a tmpfs's size (bytes) and mode, a volume's ``volume-nocopy``."""

    kind: MountKind
    source: str | None
    target: str
    read_only: bool
    tmpfs_size: int | None = None
    tmpfs_mode: int | None = None
    no_copy: bool = False

    def docker_argument(self) -> str:
        """The value of ``docker run --mount`` (CSV, quoted where a value needs it)."""
        fields = [f"type={self.kind}"]
        if self.source is not None:
            fields.append(f"source={self.source}")
        fields.append(f"target={self.target}")
        if self.read_only:
            fields.append("readonly")
        if self.tmpfs_size is not None:
            fields.append(f"tmpfs-size={self.tmpfs_size}")
        if self.tmpfs_mode is not None:
            fields.append(f"tmpfs-mode={self.tmpfs_mode:o}")
        if self.no_copy:
            fields.append("volume-nocopy")
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="").writerow(fields)
        return buffer.getvalue()


@dataclass(frozen=True, slots=True)
class ComposeService:
    """A compose service other than the cloister, started beside it (one of ``runServices``).

    Holds only what is kept: the overrides say what was dropped and why. ``source`` is an
    image that must exist locally, or a build whose context is inside the project.
    ``ports`` are container ports (nothing is published: ``cloister port`` publishes
    one); ``healthcheck`` is the docker SDK's dict (durations in nanoseconds).
    """

    name: str
    source: ImageSource
    environment: Mapping[str, str]
    command: tuple[str, ...] | None
    entrypoint: tuple[str, ...] | None
    user: str | None
    working_dir: str | None
    mounts: tuple[MountSpec, ...]  # named/anonymous volumes, tmpfs, read-only binds inside
    ports: tuple[int, ...]
    healthcheck: Mapping[str, object] | None
    depends_on: tuple[str, ...]
    shares_cloister_network: bool  # the cloister's service said network_mode: service:<this>


@dataclass(frozen=True, slots=True)
class LifecycleCommand:
    """One command of a lifecycle stage, as argv.

    The string form becomes ``("/bin/sh", "-c", text)``; the list form is the argv
    itself (no shell); each entry of the object form is one named command, and the
    commands of one stage run in parallel (``name`` is None for the other forms).
    """

    stage: LifecycleStage
    name: str | None
    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Devcontainer:
    """A devcontainer.json with Cloister's overrides applied."""

    path: Path
    name: str | None
    source: ImageSource
    features: tuple[Feature, ...]
    mounts: tuple[MountSpec, ...]  # only the kept ones; bind mounts are read-only
    run_args: tuple[str, ...]  # the few harmless `docker run` options kept from runArgs
    container_env: Mapping[str, str]
    remote_env: Mapping[str, str | None]  # None: unset it; ${containerEnv:X} is left as is
    user: str | None  # a non-root user name, or None
    lifecycle: tuple[LifecycleCommand, ...]
    overrides: tuple[Override, ...]
    compose_files: tuple[Path, ...] = ()  # absolute, in the order they merge
    services: tuple[ComposeService, ...] = ()  # the runServices other than the cloister
    compose_inputs: tuple[Path, ...] = ()  # env files read, the services' Dockerfiles
    override_feature_order: tuple[str, ...] = ()  # overrideFeatureInstallOrder, as written

    @property
    def has_features(self) -> bool:
        """Whether the file installs Features (OCI ones are fetched on the host)."""
        return bool(self.features)

    @property
    def untrusted_features(self) -> tuple[Feature, ...]:
        """The OCI Features from sources nobody trusted: never fetched nor installed.

        Each has a ``refused`` override saying what to do; ``cloister start`` stops on it.
        """
        return tuple(feature for feature in self.features if not feature.trusted)

    @property
    def refused_features(self) -> tuple[Override, ...]:
        """The refusals of Features (untrusted, from a URL, a retired short name, a path
        outside ``.devcontainer/``): each says what to do; ``cloister start`` stops on them.
        """
        return tuple(
            item
            for item in self.overrides
            if item.outcome == "refused" and item.field.startswith("features")
        )

    @property
    def warnings(self) -> tuple[Override, ...]:
        """The overrides that were not simply kept."""
        return tuple(item for item in self.overrides if item.outcome != "kept")

    def commands(self, stage: LifecycleStage) -> tuple[LifecycleCommand, ...]:
        return tuple(command for command in self.lifecycle if command.stage == stage)

    def input_files(self) -> tuple[Path, ...]:
        """The files the cloister depends on, for change detection: this file, its
        Dockerfile, and for a compose-based file the compose files, the env files read
        and the services' Dockerfiles.

        The build contexts' other files are not listed: a Dockerfile that copies them
        is the CLI's to notice (docker's own cache does).
        """
        found = [self.path]
        if self.source.dockerfile is not None:
            found.append(self.source.dockerfile)
        found.extend(self.compose_files)
        found.extend(self.compose_inputs)
        return tuple(dict.fromkeys(found))


def value_text(value: object) -> str:
    """A JSON value as the text an override shows: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
