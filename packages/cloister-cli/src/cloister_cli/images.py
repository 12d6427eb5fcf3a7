"""Building Cloister's service images from this source tree.

A build context is a temporary directory with the image's Dockerfile, the files it
copies, and ``site-packages/``: the service's package and its locked dependencies,
installed on the host by uv for the image's Python (CPython 3.11 on Debian bookworm)
and CPU (``--python-platform``). So the Docker build needs no package index, which is
what machines without one (and reproducible builds) want, and it uses the classic
builder only.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from cloister_core import stack
from cloister_core.errors import CloisterError

IMAGE_PYTHON = "3.11"
PLATFORMS = {"x86_64": "x86_64-manylinux_2_28", "aarch64": "aarch64-manylinux_2_28"}


class ImageBuildError(CloisterError):
    """An image could not be built; the message says which step failed and why."""


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One image: its tag, Dockerfile, Python package (if any) and extra files."""

    tag: str
    dockerfile: str
    package: str | None
    files: tuple[tuple[str, str], ...] = ()  # (source in the tree, name in the context)


# Workspace packages every service image needs besides its own.
WORKSPACE_DEPENDENCIES = ("cloister-core",)

PROXY_IMAGE = ImageSpec(
    tag="cloister-proxy:latest",
    dockerfile="images/proxy/Dockerfile",
    package="cloister-proxy",
    files=(("services/healthcheck.py", "healthcheck.py"),),
)

GATEWAY_IMAGE = ImageSpec(
    tag="cloister-gateway:latest",
    dockerfile="images/gateway/Dockerfile",
    package="cloister-executor",
    files=(("services/healthcheck.py", "healthcheck.py"),),
)

GIT_IMAGE = ImageSpec(
    tag=stack.GIT_IMAGE,
    dockerfile="images/git/Dockerfile",
    package=None,
    files=(("images/git/cloister-git-export", "cloister-git-export"),),
)

AGENT_IMAGE = ImageSpec(
    tag="cloister:latest",
    dockerfile="images/cloister/Dockerfile",
    package=None,
    files=(("images/hostexec/hostexec", "hostexec"),),
)

SLIM_AGENT_IMAGE = ImageSpec(
    tag="cloister-slim:latest",
    dockerfile="images/cloister-slim/Dockerfile",
    package=None,
    files=(("images/hostexec/hostexec", "hostexec"),),
)

APPROVAL_IMAGE = ImageSpec(
    tag="cloister-approval:latest",
    dockerfile="images/approval/Dockerfile",
    package="cloister-approval",
    files=(("services/healthcheck.py", "healthcheck.py"),),
)


SOURCE_LABEL = "org.cloister.source"


def _package_dir(workspace: Path, package: str) -> Path:
    return workspace / "packages" / package


def source_fingerprint(workspace: Path, spec: ImageSpec) -> str:
    """A digest of everything *spec*'s image is built from, kept as a label on it.

    An image whose label differs was built from another version of this tree (or by an
    older Cloister, without the label), so it is rebuilt instead of run stale.
    """
    inputs = [workspace / spec.dockerfile, *(workspace / source for source, _ in spec.files)]
    if spec.package is not None:
        inputs.append(workspace / "uv.lock")
        for package in (*WORKSPACE_DEPENDENCIES, spec.package):
            directory = _package_dir(workspace, package)
            inputs.append(directory / "pyproject.toml")
            inputs += sorted(
                path
                for path in (directory / "src").rglob("*")
                if path.is_file() and "__pycache__" not in path.parts
            )
    digest = hashlib.sha256()
    for path in inputs:
        digest.update(str(path.relative_to(workspace)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def is_current(client: docker.DockerClient, tag: str, fingerprint: str | None) -> bool:
    """Whether *tag* exists and (when the source is known) was built from it."""
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return fingerprint is None or (image.labels or {}).get(SOURCE_LABEL) == fingerprint


def _run(argv: list[str], cwd: Path, what: str) -> None:
    uv = shutil.which(argv[0])
    if uv is None:
        raise ImageBuildError(f"{what}: {argv[0]!r} is not on PATH")
    result = subprocess.run([uv, *argv[1:]], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageBuildError(f"{what} failed ({' '.join(argv)}):\n{result.stderr.strip()}")


def assemble_context(workspace: Path, spec: ImageSpec, into: Path, architecture: str) -> Path:
    """Write the build context of *spec* into *into* (which must not exist yet)."""
    platform = PLATFORMS.get(architecture)
    if platform is None:
        raise ImageBuildError(f"no Python wheels platform known for CPU {architecture!r}")
    into.mkdir(parents=True)
    shutil.copyfile(workspace / spec.dockerfile, into / "Dockerfile")
    for source, name in spec.files:
        shutil.copy2(workspace / source, into / name)  # keeps the mode (scripts stay executable)
    if spec.package is None:
        return into
    # Third-party packages exactly as locked; Cloister's own packages freshly built
    # from this tree (an installer's cache could hold a stale build of a local path).
    requirements = into / "requirements.txt"
    wheels = into / "wheels"
    _run(
        [
            "uv", "export", "--frozen", "--package", spec.package, "--no-default-groups",
            "--no-emit-workspace", "--no-hashes", "--no-header", "--no-annotate",
            "--format", "requirements-txt", "--output-file", str(requirements),
        ],
        workspace,
        "exporting the locked requirements",
    )  # fmt: skip
    for package in (*WORKSPACE_DEPENDENCIES, spec.package):
        _run(
            ["uv", "build", "--quiet", "--wheel", "--package", package, "--out-dir", str(wheels)],
            workspace,
            f"building {package}",
        )
    _run(
        [
            "uv", "pip", "install", "--quiet", "--no-deps", "--no-installer-metadata",
            "--target", str(into / "site-packages"),
            "--python-version", IMAGE_PYTHON, "--python-platform", platform,
            "--requirements", str(requirements), *map(str, sorted(wheels.glob("*.whl"))),
        ],
        workspace,
        "installing the packages for the image",
    )  # fmt: skip
    shutil.rmtree(wheels)
    return into


def build_image(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    on_line: Callable[[str], None] = lambda line: None,
    *,
    fingerprint: str | None = None,
) -> None:
    """``docker build`` of *context* as *tag*, streaming the builder's output lines."""
    labels = {SOURCE_LABEL: fingerprint} if fingerprint else None
    try:
        stream: Iterator[dict[str, Any]] = client.api.build(
            path=str(context), tag=tag, rm=True, forcerm=True, decode=True, labels=labels
        )
        for chunk in stream:
            if "error" in chunk:
                raise ImageBuildError(f"building {tag}: {str(chunk['error']).strip()}")
            text = chunk.get("stream")
            if text and text.strip():
                on_line(text.rstrip())
    except docker.errors.APIError as error:
        raise ImageBuildError(f"building {tag}: {error}") from None


AGENT_IMAGES = {spec.tag: spec for spec in (AGENT_IMAGE, SLIM_AGENT_IMAGE)}
