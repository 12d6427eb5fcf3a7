"""Building Cloister's service images from this source tree.

A build context is a temporary directory with the image's Dockerfile, the files it
copies, and ``site-packages/``: the service's package and its locked dependencies,
installed on the host by uv for the image's Python (CPython 3.11 on Debian bookworm)
and CPU (``--python-platform``). So the Docker build needs no package index, which is
what machines without one (and reproducible builds) want, and it uses the classic
builder only.

:class:`BuildOutput` reads the classic builder's stream for every build Cloister runs
(these images and projects' own): whole lines to the progress display, and a failing
step's ``Step N/M`` line and last lines of output in the error, since the builder's own
error only says the command "returned a non-zero code".
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from cloister_cli.container.engine import Engine
from cloister_core import stack
from cloister_core.errors import CloisterError

IMAGE_PYTHON = "3.11"
PLATFORMS = {"x86_64": "x86_64-manylinux_2_28", "aarch64": "aarch64-manylinux_2_28"}


class ImageBuildError(CloisterError):
    """An image could not be built; the message says which step failed and why."""


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One image: its tag, Dockerfile, Python package (if any) and extra files.

    *stage* is a Dockerfile several images share: the context's Dockerfile is it, then
    *dockerfile*, which starts ``FROM`` the stage it names.
    """

    tag: str
    dockerfile: str
    package: str | None
    files: tuple[tuple[str, str], ...] = ()  # (source in the tree, name in the context)
    stage: str | None = None


# The guardian's services: Python, their site-packages, the health check, the user.
SERVICE_STAGE = "images/service/Dockerfile"

# ``${PROXY_PORT}`` in a Dockerfile is cloister_core.stack.PROXY_PORT, and so for each of
# its ports: written in when the context is assembled, since the classic builder puts
# no build argument into HEALTHCHECK (nor ENTRYPOINT), and the ports are in them.
STACK_PORTS = {
    name: str(value)
    for name, value in vars(stack).items()
    if name.endswith("_PORT") and isinstance(value, int)
}
_PORT_PLACEHOLDER = re.compile(r"\$\{([A-Z0-9_]+_PORT)\}")


# Workspace packages every service image needs besides its own.
WORKSPACE_DEPENDENCIES = ("cloister-core",)

PROXY_IMAGE = ImageSpec(
    tag="cloister-proxy:latest",
    dockerfile="images/proxy/Dockerfile",
    package="cloister-proxy",
    files=(("services/healthcheck.py", "healthcheck.py"),),
    stage=SERVICE_STAGE,
)

GATEWAY_IMAGE = ImageSpec(
    tag="cloister-gateway:latest",
    dockerfile="images/gateway/Dockerfile",
    package="cloister-executor",
    files=(("services/healthcheck.py", "healthcheck.py"),),
    stage=SERVICE_STAGE,
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
    stage=SERVICE_STAGE,
)


SOURCE_LABEL = "org.cloister.source"


def _package_dir(workspace: Path, package: str) -> Path:
    return workspace / "packages" / package


def dockerfile_text(workspace: Path, spec: ImageSpec) -> str:
    """The Dockerfile of *spec*'s context: its stage, then its own, ports written in."""

    def port(match: re.Match[str]) -> str:
        if match.group(1) not in STACK_PORTS:
            raise ImageBuildError(
                f"{spec.dockerfile}: {match.group(0)!r} is no port of cloister_core.stack"
                f" (it has {', '.join(sorted(STACK_PORTS))})"
            )
        return STACK_PORTS[match.group(1)]

    parts = (spec.dockerfile,) if spec.stage is None else (spec.stage, spec.dockerfile)
    text = "\n".join((workspace / part).read_bytes().decode("utf-8") for part in parts)
    return _PORT_PLACEHOLDER.sub(port, text)


def source_fingerprint(workspace: Path, spec: ImageSpec) -> str:
    """A digest of everything *spec*'s image is built from, kept as a label on it.

    An image whose label differs was built from another version of this tree (or by an
    older Cloister, without the label), so it is rebuilt instead of run stale. The
    Dockerfile counts as the context gets it: with its stage and the stack's ports.
    """
    digest = hashlib.sha256()
    digest.update(spec.dockerfile.encode() + b"\0")
    digest.update(dockerfile_text(workspace, spec).encode() + b"\0")
    inputs = [workspace / source for source, _ in spec.files]
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
    for path in inputs:
        digest.update(str(path.relative_to(workspace)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def is_current(client: Engine, tag: str, fingerprint: str | None) -> bool:
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
    (into / "Dockerfile").write_text(dockerfile_text(workspace, spec), encoding="utf-8")
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


TAIL_LINES = 40  # of a failing step's output, in the error
LINE_LIMIT = 500  # characters of one output line kept for the error

# The classic builder's own lines: a step's header, and its notes between steps.
_STEP = re.compile(r"Step \d+/\d+ : ")
_BUILDER_NOTE = re.compile(r" ---> |Removing intermediate container ")
# The builder wraps what a step writes to stderr in red; those codes are its, not output.
_STDERR_COLOUR = re.compile(r"\x1b\[(?:91|0)m")
_BUILT = re.compile(r"Successfully built ([0-9a-f]+)")


class BuildOutput:
    """What a classic-builder build streams, read to its end.

    The ``stream`` text goes to *on_line* in whole, non-blank lines. The header of the
    step being run and the last :data:`TAIL_LINES` lines it printed (stdout and stderr,
    which the builder merges) are kept, so that :attr:`error` says where and why a
    failed build stopped; :attr:`image` is the ID of the image it made.
    """

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._partial = ""  # a line whose end has not come yet
        self._step = ""
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._printed = 0  # lines of the current step
        self._named: str | None = None  # the ID in the builder's ``aux`` message
        self._built: str | None = None  # the last "Successfully built" line's
        self.error: str | None = None  # the builder's error, the step, its output

    @property
    def image(self) -> str | None:
        """The ID of the image built; a step can print "Successfully built" too, but
        the builder's own line is the last."""
        return self._named or self._built

    def read(self, stream: Iterator[dict[str, Any]]) -> None:
        """Take every message of *stream*: the builder ends it after an error, and a
        stream left unread would hold its connection open."""
        for chunk in stream:
            if "error" in chunk and self.error is None:
                self.error = self.failure(str(chunk["error"]))
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                self._named = str(aux["ID"])
            text = chunk.get("stream")
            if text:
                self.feed(str(text))
        if self._partial:
            self._line(self._partial)
            self._partial = ""

    def feed(self, text: str) -> None:
        """Take one ``stream`` chunk (the builder splits lines across chunks)."""
        *lines, self._partial = (self._partial + _STDERR_COLOUR.sub("", text)).split("\n")
        for line in lines:
            self._line(line)

    def _line(self, raw: str) -> None:
        line = raw.rstrip("\r").rpartition("\r")[2].rstrip()  # what a terminal would show
        if not line.strip():
            return
        if _STEP.match(line):
            self._step, self._printed = line, 0
            self._tail.clear()
        elif not _BUILDER_NOTE.match(line):
            self._printed += 1
            self._tail.append(line[:LINE_LIMIT])
            built = _BUILT.fullmatch(line)
            if built:
                self._built = built.group(1)
        self._on_line(line)

    def failure(self, error: str) -> str:
        """The builder's *error*, the failing step and the end of what it printed."""
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        lines = [error.strip()]
        if self._step:
            lines.append(f"  at {self._step}")
        if self._tail:
            shown = len(self._tail)
            lines.append(
                "  its output:"
                if shown == self._printed
                else f"  the last {shown} of its {self._printed} lines of output:"
            )
            lines += (f"  | {line}" for line in self._tail)
        elif self._step:
            lines.append("  (it printed nothing)")
        return "\n".join(lines)


def build_image(
    client: Engine,
    context: Path,
    tag: str,
    on_line: Callable[[str], None] = lambda line: None,
    *,
    fingerprint: str | None = None,
) -> None:
    """``docker build`` of *context* as *tag*, streaming the builder's output lines."""
    labels = {SOURCE_LABEL: fingerprint} if fingerprint else None
    output = BuildOutput(on_line)
    try:
        output.read(
            client.api.build(
                path=str(context), tag=tag, rm=True, forcerm=True, decode=True, labels=labels
            )
        )
    except docker.errors.APIError as error:
        raise ImageBuildError(f"building {tag}: {error}") from None
    if output.error is not None:
        raise ImageBuildError(f"building {tag}: {output.error}")


AGENT_IMAGES = {spec.tag: spec for spec in (AGENT_IMAGE, SLIM_AGENT_IMAGE)}
