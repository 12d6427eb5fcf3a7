"""Building Cloister's service images from this source tree.

A build context is a temporary directory with the image's Dockerfile, the files it
copies, and ``site-packages/``: the service's package and its locked dependencies,
installed on the host by uv for the image's Python (CPython 3.11 on Debian bookworm)
and CPU (``--python-platform``). So the Docker build needs no package index, which is
what machines without one (and reproducible builds) want, and it uses the classic
builder only.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

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
) -> None:
    """``docker build`` of *context* as *tag*, streaming the builder's output lines."""
    try:
        stream: Iterator[dict[str, Any]] = client.api.build(
            path=str(context), tag=tag, rm=True, forcerm=True, decode=True
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
