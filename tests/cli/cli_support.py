"""Driving the real ``cloister`` command as a person would, for the acceptance tests.

Everything goes through the console script installed in the uv environment, run as a
subprocess in a repository's directory, with ``CLOISTER_CONFIG_DIR`` and
``CLOISTER_DATA_DIR`` pointing at temporary directories; what happens inside a
cloister is seen with ``docker exec``, the way a user (or an agent) would see it.
Every subprocess is bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import docker
import docker.errors
import pytest

CLI_TIMEOUT = 120.0  # a start may build the slim image on a cold machine
GUARDIAN_TIMEOUT = 900.0  # the first guardian start may build the service images
EXEC_TIMEOUT = 60.0
SLIM_IMAGE = "cloister-slim:latest"
BASE_IMAGE = "debian:bookworm-slim"
PROXY_ADDRESS = "cloister-guardian-proxy:3128"
# Denied by the module's config: a CONNECT to it with a token the proxy accepts is
# answered 403 at once (no DNS, no upstream), one the proxy refuses is answered 407.
DENIED_HOST = "denied.cloister.test"
CONNECT_ACCEPTED = "403"
CONNECT_REFUSED = "407"

T = TypeVar("T")


def cloister_executable() -> Path:
    """The ``cloister`` console script of the environment running the tests."""
    candidate = Path(sys.executable).parent / "cloister"
    if candidate.exists():
        return candidate
    found = shutil.which("cloister")
    if found is None:
        raise FileNotFoundError("no `cloister` console script (run through `uv run`)")
    return Path(found)


def docker_executable() -> str:
    found = shutil.which("docker")
    if found is None:
        raise FileNotFoundError("the docker command is not installed")
    return found


def squash(text: str) -> str:
    """Whitespace runs as one space: rich wraps long lines at the terminal width."""
    return re.sub(r"\s+", " ", text)


def wait_until(
    probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    """The first truthy answer of *probe* within *timeout* seconds, else AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# --- the CLI ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """One finished ``cloister`` (or ``docker``/``git``) command."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\n(exit {self.returncode}, {self.seconds:.2f}s)\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_command(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = CLI_TIMEOUT,
    stdin: str | None = None,
) -> Result:
    """*argv* to its end; its input is *stdin*, else nothing."""
    started = time.perf_counter()
    completed = subprocess.run(
        argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
    )
    return Result(
        tuple(argv),
        completed.returncode,
        completed.stdout,
        completed.stderr,
        time.perf_counter() - started,
    )


@dataclass
class CloisterCli:
    """``cloister`` with its own config and data directories (one per test module)."""

    root: Path
    config_dir: Path = field(init=False)
    data_dir: Path = field(init=False)
    executable: Path = field(default_factory=cloister_executable)
    home: Path | None = None  # a home of its own (the docker CLI keeps the real ~/.docker)

    def __post_init__(self) -> None:
        self.config_dir = self.root / "config"
        self.data_dir = self.root / "data"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            CLOISTER_CONFIG_DIR=str(self.config_dir),
            CLOISTER_DATA_DIR=str(self.data_dir),
            COLUMNS="200",  # rich wraps at 80 columns when not on a terminal
            NO_COLOR="1",
        )
        if self.home is not None:
            env.setdefault("DOCKER_CONFIG", str(Path.home() / ".docker"))
            env["HOME"] = str(self.home)
        return env

    def write_config(self, text: str) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "config.yaml").write_text(text, encoding="utf-8")

    def write_project_config(self, project: str, text: str) -> None:
        path = self.config_dir / "projects" / f"{project}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def run(self, *args: str, cwd: Path | None = None, timeout: float = CLI_TIMEOUT) -> Result:
        """``cloister ARGS`` in *cwd* (default: the temporary root); never raises on failure."""
        return run_command(
            [str(self.executable), *args], cwd=cwd or self.root, env=self.env, timeout=timeout
        )

    def ok(self, *args: str, cwd: Path | None = None, timeout: float = CLI_TIMEOUT) -> Result:
        """``cloister ARGS`` that must succeed."""
        result = self.run(*args, cwd=cwd, timeout=timeout)
        assert result.returncode == 0, result.describe()
        return result

    def fails(self, *args: str, cwd: Path | None = None) -> Result:
        """``cloister ARGS`` that must fail (exit status 1: a clean error, no traceback)."""
        result = self.run(*args, cwd=cwd)
        assert result.returncode == 1, result.describe()
        assert "Traceback" not in result.output, result.describe()
        return result

    def json(self, *args: str, cwd: Path | None = None) -> Any:
        return self.ok(*args, cwd=cwd).json()

    # -- what the CLI left on disk ---------------------------------------------------

    def token_file(self, name: str) -> Path:
        return self.config_dir / "tokens" / name

    def token(self, name: str) -> str:
        document = json.loads(self.token_file(name).read_text(encoding="utf-8"))
        token: str = document["token"]
        return token

    def worktree(self, project: str, branch_dir: str) -> Path:
        return self.data_dir / "worktrees" / project / branch_dir

    # -- cloisters -------------------------------------------------------------------

    def listing(self) -> dict[str, dict[str, Any]]:
        """``cloister list --json``, by name."""
        return {item["name"]: item for item in self.json("list", "--json")}

    def mine(self) -> list[str]:
        """Running cloisters that work in a directory of this test module."""
        roots = (str(self.root), str(self.root.resolve()))
        return [
            name
            for name, item in self.listing().items()
            if any(str(item["path"]).startswith(root) for root in roots)
        ]


# --- repositories -------------------------------------------------------------------------


def git(repository: Path, *args: str) -> str:
    """``git -C repository ARGS``; its output (stripped); fails the test on error."""
    result = run_command(["git", "-C", str(repository), *args], timeout=60)
    assert result.returncode == 0, result.describe()
    return result.stdout.strip()


def make_repo(path: Path) -> Path:
    """A git repository at *path* with one commit (user name and email in its config)."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet")
    git(path, "config", "user.name", "Cloister Test")
    git(path, "config", "user.email", "test@cloister.invalid")
    git(path, "config", "commit.gpgsign", "false")
    (path / "README.md").write_text("hello\n", encoding="utf-8")
    git(path, "add", "README.md")
    git(path, "commit", "--quiet", "-m", "initial commit")
    return path


def unique(prefix: str) -> str:
    """A project-name-safe unique name: the guardian and container names are machine-wide."""
    return f"{prefix}-{secrets.token_hex(3)}"


# --- inside a cloister --------------------------------------------------------------------


def container(name: str) -> str:
    return f"cloister-{name}"


def exec_in(name: str, script: str, *, timeout: float = EXEC_TIMEOUT) -> Result:
    """``docker exec cloister-NAME bash -c SCRIPT`` (in /work, as the cloister's user)."""
    return run_command(
        [docker_executable(), "exec", container(name), "bash", "-c", script], timeout=timeout
    )


def exec_ok(name: str, script: str, *, timeout: float = EXEC_TIMEOUT) -> Result:
    result = exec_in(name, script, timeout=timeout)
    assert result.returncode == 0, result.describe()
    return result


def connect_status(name: str, token: str | None = None, *, max_time: float = 10) -> str:
    """The proxy's answer to a CONNECT from cloister *name*, with *token* or its own.

    ``403``: the proxy accepted the token and refused the (denied) destination;
    ``407``: it refused the token; ``000``: no answer at all.
    """
    proxy = f"http://cloister:{token}@{PROXY_ADDRESS}" if token else '"$HTTPS_PROXY"'
    script = (
        f"curl --silent --output /dev/null --max-time {max_time:g}"
        " --write-out '%{http_connect}'"
        f" --proxy {proxy} https://{DENIED_HOST}/"
    )
    return exec_in(name, script).stdout.strip()


def inspect(name: str) -> dict[str, Any]:
    """``docker inspect cloister-NAME``."""
    result = run_command([docker_executable(), "inspect", container(name)], timeout=30)
    assert result.returncode == 0, result.describe()
    (document,) = result.json()
    assert isinstance(document, dict)
    return document


def inspect_network(network: str) -> dict[str, Any]:
    result = run_command([docker_executable(), "network", "inspect", network], timeout=30)
    assert result.returncode == 0, result.describe()
    (document,) = result.json()
    assert isinstance(document, dict)
    return document


def network_gateway(network: str) -> str | None:
    """The IPv4 gateway of a Docker network, as ``docker network inspect`` reports it."""
    for pool in (inspect_network(network).get("IPAM") or {}).get("Config") or []:
        gateway = pool.get("Gateway")
        if gateway and ":" not in gateway:
            return str(gateway)
    return None


def environment(document: Mapping[str, Any]) -> dict[str, str]:
    """A container's environment (from ``docker inspect``) as a dict."""
    pairs = (entry.partition("=") for entry in document["Config"]["Env"] or [])
    return {key: value for key, _, value in pairs}


def remove_containers(names: list[str]) -> None:
    """``docker rm -f`` whatever of these cloister containers still exists."""
    if names:
        run_command([docker_executable(), "rm", "-f", *map(container, names)], timeout=60)


@contextlib.contextmanager
def guardian(
    client: docker.DockerClient,
    root: Path,
    config: str,
    skip: Callable[[str], NoReturn],
    home: Path | None = None,
) -> Iterator[CloisterCli]:
    """``cloister`` with its own directories under *root*, *config* written, and the
    machine-wide guardian started (stopped at the end, with every cloister of *root*)."""
    for image in (SLIM_IMAGE, BASE_IMAGE):
        try:
            client.images.get(image)
            break
        except docker.errors.ImageNotFound:
            continue
    else:
        skip(f"neither {SLIM_IMAGE} nor its base {BASE_IMAGE} is present locally")
    tool = CloisterCli(root, home=home)
    tool.write_config(config)
    try:
        started = tool.run("guardian", "start", timeout=GUARDIAN_TIMEOUT)
        if started.returncode != 0:
            pytest.fail(f"the guardian did not start:\n{started.describe()}", pytrace=False)
        yield tool
    finally:
        problems: list[str] = []
        leftovers: list[str] = []
        try:
            leftovers = tool.mine()
        except AssertionError as error:
            problems.append(f"cloister list failed: {error}")
        for name in leftovers:
            tool.run("stop", name)
        remove_containers(leftovers)
        stopped = tool.run("guardian", "stop")
        if stopped.returncode != 0:
            problems.append(stopped.describe())
        if problems:
            pytest.fail("cleanup failed: " + "\n".join(problems), pytrace=False)
