"""The images the agent tests run: the fake APIs, and the real agent CLIs.

Both are built with the docker SDK's classic builder from a context assembled in a
temporary directory, so they need no registry and no BuildKit:

* ``cloister-fakeapi:test``: ``debian:bookworm-slim``, Debian's python3 (apt works
  inside a build) and ``fakeapi.py``.
* ``cloister-agents:test``: a base agent image (``cloister-slim:latest`` unless told
  otherwise) with the real Claude Code, Codex and Gemini CLI copied in. Containers cannot
  reach a package registry, so the host fetches every package with ``npm pack`` (npm
  finds its registry) and the files are copied into the context: Claude Code's native
  binary, Codex's native binary with its helpers (not its voice add-on), Gemini CLI's
  self-contained bundle, and a Node.js binary for Gemini CLI from npm's ``node-linux-*``
  packages (the image's own Node, not the host's, which may be older or linked to a
  newer C library). The CLI versions are the ones ``images/cloister/Dockerfile`` pins,
  so the tests prove what the default image ships.

Tarballs are kept in ``$CLOISTER_TEST_CACHE`` (default ``~/.cache/cloister-tests``),
named by package and version, so a machine downloads each version once. Each image
carries a label with a digest of everything it is built from and is rebuilt only when
that changes (a new ``fakeapi.py``, another pinned version, a rebuilt base image).

:class:`AgentLab` runs them: the fake API and an agents container, hardened as a
cloister is, on a private network of their own.

Used by pytest fixtures but independent of pytest: what cannot be fetched (no ``npm``, a
failing ``npm pack``) goes to the *unavailable* callable the caller passes (the suite's
skip-or-fail); everything else raises :class:`AgentImageError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.networks import Network

from tests.executor.docker_support import ExecResult, logs_of, run_in

ROOT = Path(__file__).resolve().parents[2]
FAKEAPI_SCRIPT = Path(__file__).resolve().parent / "fakeapi.py"
DEFAULT_IMAGE_DOCKERFILE = ROOT / "images" / "cloister" / "Dockerfile"

FAKEAPI_IMAGE = "cloister-fakeapi:test"
AGENTS_IMAGE = "cloister-agents:test"
DEFAULT_BASE = "cloister-slim:latest"
FAKEAPI_BASE = "debian:bookworm-slim"
FAKEAPI_PORT = 8080
FAKEAPI_LOG = "/log/requests.jsonl"

INPUTS_LABEL = "org.cloister.test.inputs"  # the digest of what the image was built from
TEST_LABEL = "org.cloister.test"
LABELS = {TEST_LABEL: "tests/agents"}

CACHE_VARIABLE = "CLOISTER_TEST_CACHE"
DEFAULT_CACHE = Path("~/.cache/cloister-tests")

# Gemini CLI needs Node.js >= 20. The default image's NODE_VERSION comes from
# the Node.js project's archives, and npm's node-linux-* packages (the same official builds)
# do not publish every release, so this one is pinned here: the newest 24 LTS there.
NODE_VERSION = "24.21.0"
NPM_TIMEOUT = 600  # seconds for one `npm pack` (a Codex tarball is 170 MB)
BUILD_TIMEOUT = 1800  # seconds the engine may take for a build (the context is ~1 GB)

# Docker's CPU names, npm's, and Codex's Rust target triples.
ARCHITECTURES = {
    "x86_64": ("x64", "x86_64-unknown-linux-musl"),
    "aarch64": ("arm64", "aarch64-unknown-linux-musl"),
}

# What Codex's native package holds that `codex` does not need.
CODEX_SKIPPED = ("codex-resources/voice/",)

Unavailable = Callable[[str], NoReturn]


class AgentImageError(Exception):
    """An image could not be built; the message says which step failed and why."""


def _raise(reason: str) -> NoReturn:
    raise AgentImageError(reason)


# --- versions and the cache -------------------------------------------------------------


@dataclass(frozen=True)
class AgentVersions:
    claude_code: str
    codex: str
    gemini_cli: str
    node: str = NODE_VERSION


def pinned_versions(dockerfile: Path = DEFAULT_IMAGE_DOCKERFILE) -> AgentVersions:
    """The CLI versions the default agent image pins (its ``ARG NAME=version`` lines)."""
    text = dockerfile.read_text(encoding="utf-8")

    def arg(name: str) -> str:
        match = re.search(rf"^ARG {name}=(\S+)\s*$", text, re.MULTILINE)
        if match is None:
            raise AgentImageError(f"{dockerfile} has no `ARG {name}=<version>` line")
        return match.group(1)

    return AgentVersions(
        claude_code=arg("CLAUDE_CODE_VERSION"),
        codex=arg("CODEX_VERSION"),
        gemini_cli=arg("GEMINI_CLI_VERSION"),
    )


def cache_dir() -> Path:
    """``$CLOISTER_TEST_CACHE``, else ``~/.cache/cloister-tests``."""
    configured = os.environ.get(CACHE_VARIABLE)
    return Path(configured).expanduser() if configured else DEFAULT_CACHE.expanduser()


def _tarball_name(spec: str) -> str:
    """A file name for the tarball of ``name@version`` (``@scope/x@1`` → ``scope-x-1.tgz``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", spec.lstrip("@")) + ".tgz"


def npm_pack(spec: str, cache: Path, unavailable: Unavailable = _raise) -> Path:
    """The tarball of *spec* (``name@version``), fetched with ``npm pack`` the first time.

    The download lands in a scratch directory of the cache and is renamed into place, so
    an interrupted fetch never leaves a truncated tarball under the final name.
    """
    target = cache / "npm" / _tarball_name(spec)
    if target.is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        unavailable(f"npm is not on PATH: it fetches the agent CLIs ({spec}) for the test image")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pack-") as scratch:
        try:
            # npm's own cache goes with the scratch directory: the tarball is kept once.
            result = subprocess.run(
                [npm, "pack", spec, "--pack-destination", scratch, "--cache", f"{scratch}/.npm"],
                cwd=scratch,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            unavailable(f"npm pack {spec} took more than {NPM_TIMEOUT} s")
        if result.returncode != 0:
            unavailable(f"npm pack {spec} failed ({result.returncode}): {result.stderr.strip()}")
        packed = sorted(Path(scratch).glob("*.tgz"))
        if len(packed) != 1:
            raise AgentImageError(f"npm pack {spec} left {len(packed)} tarballs, not one")
        packed[0].replace(target)
    return target


# --- tarballs into the build context ----------------------------------------------------


def _members(
    archive: tarfile.TarFile, prefix: str, skip: tuple[str, ...] = ()
) -> Iterator[tuple[tarfile.TarInfo, str]]:
    """The regular files and directories below *prefix*, with their path relative to it."""
    for member in archive.getmembers():
        name = member.name.removeprefix("./")
        if not name.startswith(prefix):
            continue
        relative = name[len(prefix) :]
        if not relative or relative.startswith(skip):
            continue
        if ".." in Path(relative).parts or relative.startswith("/"):
            raise AgentImageError(f"unsafe member {member.name!r} in an npm tarball")
        if member.isfile() or member.isdir():
            yield member, relative


def _directories(into: Path, relative: Path) -> None:
    """Make *relative*'s directories below *into*, each ``rwxr-xr-x`` whatever the umask."""
    current = into
    for part in relative.parts:
        current = current / part
        if not current.is_dir():
            current.mkdir()
            current.chmod(0o755)


def extract(tarball: Path, prefix: str, into: Path, skip: tuple[str, ...] = ()) -> None:
    """Copy the files below *prefix* of an npm tarball to *into* (no links, devices or
    owners: an npm package has no business shipping those). Whatever the umask, every
    user may read each file and directory, and run what the package marks executable:
    the image's user is any uid."""
    into.mkdir(mode=0o755, parents=True, exist_ok=True)
    into.chmod(0o755)
    with tarfile.open(tarball, "r:gz") as archive:
        for member, relative in _members(archive, prefix, skip):
            if member.isdir():
                _directories(into, Path(relative))
                continue
            _directories(into, Path(relative).parent)
            destination = into / relative
            source = archive.extractfile(member)
            if source is None:
                raise AgentImageError(f"{tarball}: cannot read {member.name!r}")
            with source, destination.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1024 * 1024)
            destination.chmod(0o755 if member.mode & 0o111 else 0o644)
    if not any(into.iterdir()):
        raise AgentImageError(f"{tarball} has nothing below {prefix!r}")


# --- building ---------------------------------------------------------------------------


def _digest(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def _is_current(client: docker.DockerClient, tag: str, inputs: str) -> bool:
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(INPUTS_LABEL) == inputs


def build(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    inputs: str,
    on_line: Callable[[str], None] = lambda line: None,
) -> None:
    """``docker build`` of *context* as *tag* (classic builder), labelled with *inputs*."""
    try:
        stream: Iterator[dict[str, Any]] = client.api.build(
            path=str(context),
            tag=tag,
            rm=True,
            forcerm=True,
            decode=True,
            labels={INPUTS_LABEL: inputs, **LABELS},
            timeout=BUILD_TIMEOUT,
        )
        for chunk in stream:
            if "error" in chunk:
                raise AgentImageError(f"building {tag}: {str(chunk['error']).strip()}")
            text = chunk.get("stream")
            if text and text.strip():
                on_line(text.rstrip())
    except docker.errors.APIError as error:
        raise AgentImageError(f"building {tag}: {error}") from None


FAKEAPI_DOCKERFILE = f"""\
FROM {FAKEAPI_BASE}
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 \\
    && rm -rf /var/lib/apt/lists/* \\
    && install -d -m 0777 /log
COPY fakeapi.py /opt/fakeapi/fakeapi.py
# The server runs as nobody, and the copy has the mode the host's umask gave it.
RUN chmod 0644 /opt/fakeapi/fakeapi.py
USER nobody
EXPOSE {FAKEAPI_PORT}
HEALTHCHECK --interval=1s --timeout=3s --retries=30 CMD ["python3", "-c", \\
    "import urllib.request as r; r.urlopen('http://127.0.0.1:{FAKEAPI_PORT}/__requests')"]
CMD ["python3", "/opt/fakeapi/fakeapi.py", "--port", "{FAKEAPI_PORT}", "--log", "{FAKEAPI_LOG}"]
"""


def fakeapi_image(
    client: docker.DockerClient, on_line: Callable[[str], None] = lambda line: None
) -> str:
    """``cloister-fakeapi:test``, built when missing or when ``fakeapi.py`` changed."""
    script = FAKEAPI_SCRIPT.read_bytes()
    try:
        base_id = client.images.get(FAKEAPI_BASE).id or ""
    except docker.errors.ImageNotFound:
        raise AgentImageError(f"{FAKEAPI_BASE} is not present (.ci/run makes it)") from None
    inputs = _digest(FAKEAPI_DOCKERFILE, script, base_id)
    if _is_current(client, FAKEAPI_IMAGE, inputs):
        return FAKEAPI_IMAGE
    with tempfile.TemporaryDirectory(prefix="cloister-fakeapi-") as scratch:
        context = Path(scratch)
        (context / "Dockerfile").write_text(FAKEAPI_DOCKERFILE, encoding="utf-8")
        (context / "fakeapi.py").write_bytes(script)
        build(client, context, FAKEAPI_IMAGE, inputs, on_line)
    return FAKEAPI_IMAGE


def agents_dockerfile(base: str, user: str, workdir: str) -> str:
    """The agents image's Dockerfile: the CLIs copied onto *base* as root, then the
    base's own user and working directory again."""
    lines = [
        f"FROM {base}",
        "USER root",
        "COPY node /usr/local/bin/node",
        "COPY claude /usr/local/bin/claude",
        "COPY codex /opt/codex",
        "COPY gemini-cli /opt/gemini-cli",
        # Codex finds its helpers (rg, bwrap) next to the binary it was started as: the
        # link's target, which the kernel reports as its executable.
        # No chmod here: a layer that changes a mode holds a copy of the file. The
        # context's modes are set when it is assembled (see extract).
        "RUN ln -s /opt/codex/bin/codex /usr/local/bin/codex \\",
        "    && ln -s /opt/gemini-cli/bundle/gemini.js /usr/local/bin/gemini \\",
        "    && node --version",
        "ENV DISABLE_AUTOUPDATER=1",
    ]
    if user:
        lines.append(f"USER {user}")
    if workdir:
        lines.append(f"WORKDIR {workdir}")
    return "\n".join(lines) + "\n"


def agents_image(
    client: docker.DockerClient,
    base: str = DEFAULT_BASE,
    *,
    versions: AgentVersions | None = None,
    unavailable: Unavailable = _raise,
    on_line: Callable[[str], None] = lambda line: None,
) -> str:
    """``cloister-agents:test``: *base* with the real agent CLIs, built when its inputs
    (the versions, the base image, this recipe) changed since the last build."""
    versions = versions or pinned_versions()
    try:
        base_image = client.images.get(base)
    except docker.errors.ImageNotFound:
        raise AgentImageError(f"the base image {base} is not present") from None
    architecture = str(client.info().get("Architecture", ""))
    if architecture not in ARCHITECTURES:
        raise AgentImageError(f"no agent packages known for CPU {architecture!r}")
    npm_cpu, triple = ARCHITECTURES[architecture]
    config = base_image.attrs.get("Config") or {}
    dockerfile = agents_dockerfile(
        base, str(config.get("User") or ""), str(config.get("WorkingDir") or "")
    )
    specs = {
        "claude": f"@anthropic-ai/claude-code-linux-{npm_cpu}@{versions.claude_code}",
        "codex": f"@openai/codex@{versions.codex}-linux-{npm_cpu}",
        "gemini-cli": f"@google/gemini-cli@{versions.gemini_cli}",
        "node": f"node-linux-{npm_cpu}@{versions.node}",
    }
    inputs = _digest(
        dockerfile, base_image.id or "", json.dumps(specs, sort_keys=True), *CODEX_SKIPPED
    )
    if _is_current(client, AGENTS_IMAGE, inputs):
        return AGENTS_IMAGE
    cache = cache_dir()
    tarballs = {name: npm_pack(spec, cache, unavailable) for name, spec in specs.items()}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cloister-agents-") as scratch:
        context = Path(scratch)
        (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        extract(tarballs["claude"], "package/", context / "claude-package")
        (context / "claude-package" / "claude").replace(context / "claude")
        extract(tarballs["node"], "package/bin/", context / "node-package")
        (context / "node-package" / "node").replace(context / "node")
        extract(tarballs["codex"], f"package/vendor/{triple}/", context / "codex", CODEX_SKIPPED)
        extract(tarballs["gemini-cli"], "package/", context / "gemini-cli")
        (context / "gemini-cli" / "bundle" / "gemini.js").chmod(0o755)
        for leftover in ("claude-package", "node-package"):
            shutil.rmtree(context / leftover)
        build(client, context, AGENTS_IMAGE, inputs, on_line)
    on_line(f"built {AGENTS_IMAGE} in {time.monotonic() - started:.0f} s")
    return AGENTS_IMAGE


# --- running them -----------------------------------------------------------------------

FAKEAPI_ALIAS = "fakeapi"
FAKEAPI_URL = f"http://{FAKEAPI_ALIAS}:{FAKEAPI_PORT}"
AGENT_HOME = "/home/cloister"
START_DEADLINE = 60.0  # seconds for the fake API to report healthy
EXEC_LIMIT = 180  # seconds an agent's run may take before `timeout` ends it


class AgentLab:
    """The fake API and one agents container on a private network of their own.

    The network is internal, so an agent reaches the fake API (at ``FAKEAPI_URL``) and
    nothing else. The agent container runs as a cloister does: as *uid* (gid the same),
    every capability dropped, ``no-new-privileges``, an init, ``HOME`` a tmpfs the user
    owns; ``/work`` is a tmpfs the user owns too. Every object has a unique name and the
    test's labels, and :meth:`close` removes all of them, whatever state setup reached.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        fakeapi: str,
        agents: str,
        *,
        uid: int = 1000,
        bash_command: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.images = (fakeapi, agents)
        self.uid = uid
        self.bash_command = bash_command
        self.labels = {**LABELS, **(labels or {})}
        self.suffix = secrets.token_hex(4)
        self.network: Network | None = None
        self.fakeapi: Container | None = None
        self.agent: Container | None = None
        # Its own engine client, whose socket timeout outlasts an agent's whole run
        # (exec_run waits for the output without a timeout of its own).
        self._exec_client = docker.from_env(timeout=EXEC_LIMIT + 60)
        self._containers: list[Container] = []

    def __enter__(self) -> AgentLab:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        problems = self.close()
        if problems and exc[0] is None:
            raise AgentImageError("cleanup failed: " + "; ".join(problems))

    def _name(self, purpose: str) -> str:
        return f"cloister-test-agents-{purpose}-{self.suffix}"

    def _create(self, image: str, purpose: str, **kwargs: Any) -> Container:
        container = self.client.containers.create(
            image, name=self._name(purpose), labels=self.labels, **kwargs
        )
        self._containers.append(container)
        container.start()
        return container

    def start(self) -> None:
        fakeapi, agents = self.images
        self.network = self.client.networks.create(
            self._name("net"), driver="bridge", internal=True, labels=self.labels
        )
        environment = {"FAKEAPI_BASH_COMMAND": self.bash_command} if self.bash_command else {}
        self.fakeapi = self._create(
            fakeapi,
            "fakeapi",
            detach=True,
            network=self.network.name,
            networking_config={
                self.network.name: self.client.api.create_endpoint_config(aliases=[FAKEAPI_ALIAS])
            },
            environment=environment,
        )
        owner = f"uid={self.uid},gid={self.uid}"
        self.agent = self._create(
            agents,
            "agent",
            command=["sleep", "infinity"],
            detach=True,
            user=f"{self.uid}:{self.uid}",
            working_dir="/work",
            environment={"HOME": AGENT_HOME},
            tmpfs={AGENT_HOME: f"{owner},mode=0700", "/work": f"{owner},mode=0755"},
            network=self.network.name,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            init=True,
            pids_limit=1024,
        )
        self._wait_healthy(self.fakeapi)

    def _wait_healthy(self, container: Container) -> None:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            container.reload()
            state = container.attrs.get("State") or {}
            if container.status != "running":
                raise AgentImageError(f"the fake API exited: {logs_of(container)}")
            if (state.get("Health") or {}).get("Status") == "healthy":
                return
            if time.monotonic() > deadline:
                raise AgentImageError(f"the fake API not healthy: {logs_of(container)}")
            time.sleep(0.2)

    def close(self) -> list[str]:
        """Remove the containers and the network; returns what could not be removed."""
        problems: list[str] = []
        for container in reversed(self._containers):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as error:
                problems.append(f"container {container.name}: {error}")
        self._containers.clear()
        if self.network is not None:
            try:
                self.network.remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as error:
                problems.append(f"network {self.network.name}: {error}")
            self.network = None
        self._exec_client.close()
        return problems

    # -- use ---------------------------------------------------------------------------

    def _running(self, container: Container | None) -> Container:
        if container is None or container.id is None:
            raise AgentImageError("the lab is not started")
        return self._exec_client.containers.get(container.id)

    def run(
        self,
        argv: list[str],
        *,
        environment: dict[str, str] | None = None,
        user: str | None = None,
        limit: int = EXEC_LIMIT,
    ) -> ExecResult:
        """*argv* in the agent container (in ``/work``, under ``timeout``: a hung agent
        ends with exit 124 rather than stalling the test)."""
        return run_in(
            self._running(self.agent),
            ["timeout", "-k", "5", str(limit), *argv],
            environment=environment or {},
            user=user or "",
            workdir="/work",
        )

    def write(self, path: str, text: str) -> None:
        """Write *text* to *path* in the agent container, as its user (``docker cp``
        cannot write below a tmpfs mount: the files would land under it, unseen)."""
        result = self.run(
            ["sh", "-c", 'mkdir -p "$(dirname "$FILE")" && printf %s "$TEXT" > "$FILE"'],
            environment={"FILE": path, "TEXT": text},
        )
        if result.exit_code != 0:
            raise AgentImageError(f"writing {path}: {result}")

    def read(self, path: str) -> str | None:
        """The text of *path* in the agent container, or None when it does not exist."""
        result = self.run(
            ["sh", "-c", 'test -f "$FILE" && cat "$FILE"'], environment={"FILE": path}
        )
        return result.out if result.exit_code == 0 else None

    def requests(self) -> list[dict[str, Any]]:
        """The fake API's request log."""
        return fakeapi_requests(self._running(self.fakeapi))


def fakeapi_requests(container: Container) -> list[dict[str, Any]]:
    """The request log of a fake API container (``GET /__requests``, fetched inside it:
    its network may be internal, so the host cannot reach it)."""
    fetch = (
        "import sys, urllib.request; "
        f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{FAKEAPI_PORT}"
        "/__requests', timeout=10).read().decode())"
    )
    result = run_in(container, ["python3", "-c", fetch])
    if result.exit_code != 0:
        raise AgentImageError(f"reading the fake API's log: {result}")
    entries: list[dict[str, Any]] = json.loads(result.out)
    return entries
