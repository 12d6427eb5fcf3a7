"""The vocabulary of project images: constants, the error, the plan and its builds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cloister_core.errors import CloisterError
from cloister_core.names import validate_name

Progress = Callable[[str, str], None]  # (what is being built, one line of the builder)

KEY_LABEL = "org.cloister.image-key"  # the full key of a project image
PROJECT_LABEL = "org.cloister.image-project"  # the project it belongs to
TAG_PREFIX = "cloister-project-"
PROJECT_DOCKERFILE = Path(".cloister") / "Dockerfile"
HOSTEXEC_SOURCE = "images/hostexec/hostexec"  # in Cloister's source tree
BASE_ARG = "CLOISTER_BASE"
CLOISTER_HOME = "/home/cloister"  # cloisters.HOME: a Feature's _REMOTE_USER_HOME
# Bumped when the recipe changes meaning, so no image of the old recipe is reused.
RECIPE_VERSION = "cloister-project-image/1"

# The cloister layer: two COPYs and no RUN, so it needs nothing from the image (no
# shell). The classic builder keeps the modes the build context gives (0755 below).
CLOISTER_LAYER = f"""\
# The cloister layer: what every cloister needs from its image.
ARG {BASE_ARG}
FROM ${{{BASE_ARG}}}
COPY hostexec /usr/local/bin/hostexec
COPY work /work
"""

# Where a Dockerfile goes in the context Cloister sends: its own name, so a Dockerfile
# outside the context (allowed by devcontainer.json) or excluded by .dockerignore works.
DOCKERFILE_NAME = ".cloister-build.Dockerfile"


class ProjectImageError(CloisterError):
    """A project image that cannot be planned or built; one line says why and what to do."""


@dataclass(frozen=True, slots=True)
class ImagePlan:
    """What ``cloister start`` would run for a project, and how it is (or would be) made."""

    project: str
    tag: str  # the image the cloister runs
    key: str | None  # sha256 of every input; None: the base image as is, nothing built
    cached: bool  # nothing to build: an image with this key exists (or key is None)
    steps: tuple[str, ...]  # for people: "build .devcontainer/Dockerfile FROM ...", ...
    base: str | None  # the base (agent) image it uses, None when a devcontainer says
    # What ensure_project_image builds (empty when nothing is); not for display.
    builds: tuple[Build, ...] = field(default=(), repr=False, compare=False)
    start: str | None = field(default=None, repr=False, compare=False)  # image ID to build on


@dataclass(frozen=True, slots=True)
class Entry:
    """One path of a build context, as it is hashed and sent."""

    name: str  # relative to the context, "/"-separated
    kind: Literal["file", "dir", "link"]
    mode: int  # permission bits
    digest: str  # sha256 of a file's content; a link's target; "" for a directory


@dataclass(frozen=True, slots=True)
class Build:
    """One ``docker build`` of the chain."""

    what: str  # for progress lines: ".devcontainer/Dockerfile"
    dockerfile: bytes
    context: Path | None  # None: only the generated files
    entries: tuple[Entry, ...]
    generated: tuple[tuple[str, bytes], ...] = ()  # (name, content), mode 0755
    directories: tuple[str, ...] = ()  # empty directories to send, mode 0755
    # More folders sent under a name of the context: (name, folder, its scanned entries).
    folders: tuple[tuple[str, Path, tuple[Entry, ...]], ...] = ()
    args: Mapping[str, str] = field(default_factory=dict)
    target: str | None = None
    chained: bool = False  # receives --build-arg CLOISTER_BASE=<the image before>


def project_tag(project: str, key: str) -> str:
    """``cloister-project-<project>:<key[:12]>``."""
    return f"{TAG_PREFIX}{validate_name(project, what='project')}:{key[:12]}"
