"""Issue 6 acceptance: the ``cloister`` command against a real Docker engine.

Everything is driven the way a person drives it: the installed ``cloister`` console
script, run in a repository's directory, with its config and data directories in a
temporary directory; what a cloister can and cannot do is tried from inside it with
``docker exec``, and what it did is checked on the host (git, files, a TCP listener).

The module starts ONE guardian with ``cloister guardian start`` (an instance of its own:
its temporary data directory's, named ``cloister-<id>-...``, so other guardians on the
engine run on) and stops it at the end with ``cloister guardian stop``; every cloister a
test starts is stopped by that test (and any left over is removed at the end). Project
names carry a random suffix, so that a cloister is found by its name alone. (A guardian
restart under a running cloister is tests/e2e/test_faults.py's.)
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import docker
import docker.errors
import httpx
import pytest

from cloister_cli.inside.guardrails import BIN, PROFILE, PROFILE_SNIPPET, WRAPPER_DIR
from cloister_core.config.models import DEFAULT_PROTECTED_PATHS
from tests.cli.cli_support import (
    DENIED_HOST,
    SLIM_IMAGE,
    CloisterCli,
    Result,
    environment,
    exec_in,
    exec_ok,
    git,
    guardian,
    inspect,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
)
from tests.waiting import free_port

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker

MEMORY_BYTES = 512 * 1024 * 1024
NANO_CPUS = 1_500_000_000
PIDS = 256
CONFIG = f"""\
# Written by tests/cli/test_acceptance.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  cpus: 1.5
  pids: {PIDS}
proxy:
  deny:
    - domain: {DENIED_HOST}
hostexec:
  auto_approve:
    - pattern: "^echo( .*)?$"
"""
SERVICES = {"proxy", "approval", "gateway", "credentials"}
TOKEN_KEYS = {"token", "cloister", "project", "branch", "path", "created_at", "address"}


# --- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    """``cloister`` with temporary config and data directories, and the guardian up (its
    UI on a free port: other guardians on the engine have theirs)."""
    config = CONFIG + f"guardian:\n  ui_port: {free_port()}\n"
    with guardian(
        docker_client, tmp_path_factory.mktemp("cloister-cli"), config, skip_or_fail
    ) as tool:
        yield tool


def ui_port(cli: CloisterCli) -> int:
    """The guardian.ui_port the module's config sets."""
    text = (cli.config_dir / "config.yaml").read_text(encoding="utf-8")
    found = re.search(r"ui_port: (\d+)", text)
    assert found is not None, text
    return int(found.group(1))


class Cloisters:
    """Starts cloisters with ``cloister start -d`` and stops what is left at the end."""

    def __init__(self, cli: CloisterCli) -> None:
        self.cli = cli
        self.names: list[str] = []

    def start(self, cwd: Path, name: str, *args: str) -> Result:
        """``cloister start -d ARGS`` in *cwd*; it must start cloister *name*."""
        self.names.append(name)
        result = self.cli.ok("start", "-d", *args, cwd=cwd)
        assert f"cloister {name} " in squash(result.stderr), result.describe()
        return result

    def close(self) -> None:
        running = set(self.cli.listing())
        for name in self.names:
            if name in running:
                self.cli.run("stop", name)
        remove_containers(self.names)


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()


def new_repo(tmp_path: Path, prefix: str) -> tuple[Path, str]:
    """A fresh repository named ``<prefix>-<random>``, and that (project) name."""
    name = unique(prefix)
    return make_repo(tmp_path / name), name


def mounts_by_target(document: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """The bind mounts of an inspected container: target → (source, writable)."""
    return {
        mount["Destination"]: (mount["Source"], mount["RW"])
        for mount in document["Mounts"]
        if mount["Type"] == "bind"
    }


# --- 1. start / list / path / stop --------------------------------------------------------


def test_two_cloisters_start_list_path_stop(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    alpha, alpha_name = new_repo(tmp_path, "alpha")
    beta, beta_name = new_repo(tmp_path, "beta")
    cloisters.start(alpha, alpha_name)
    cloisters.start(beta, beta_name)

    listing = cli.listing()
    for name, repo in ((alpha_name, alpha), (beta_name, beta)):
        assert name in listing, listing
        assert listing[name]["status"] == "running"
        assert listing[name]["path"] == str(repo.resolve())
        assert listing[name]["project"] == name
        assert listing[name]["branch"] is None
        assert cli.ok("path", name).stdout.strip() == str(repo.resolve())
        assert cli.token_file(name).exists()

    # Entering a running cloister again: the same container, the same token.
    token = cli.token(alpha_name)
    container_id = inspect(alpha_name)["Id"]
    again = cli.ok("start", "-d", cwd=alpha)
    assert "already running" in squash(again.stderr), again.describe()
    assert cli.token(alpha_name) == token
    assert inspect(alpha_name)["Id"] == container_id

    for name in (alpha_name, beta_name):
        stopped = cli.ok("stop", name)
        assert f"stopped {name}" in stopped.stdout
        assert not cli.token_file(name).exists()
    listing = cli.listing()
    assert alpha_name not in listing
    assert beta_name not in listing
    assert cli.mine() == []
    unknown = cli.fails("path", alpha_name)
    assert alpha_name in unknown.stderr


def on_a_terminal(
    cli: CloisterCli, cwd: Path, *args: str, keys: bytes, timeout: float = 60
) -> tuple[int, str]:
    """``cloister ARGS`` with a pseudo-terminal for its stdin and output, *keys* typed.

    The keys wait in the terminal until the attached shell reads them, as when a person
    types ahead; what the terminal showed and the exit status come back.
    """
    controller, terminal = os.openpty()
    process = subprocess.Popen(
        [str(cli.executable), *args],
        cwd=cwd,
        env={**cli.env, "TERM": "dumb"},
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    shown = bytearray()
    try:
        os.write(controller, keys)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: every process holding the terminal has gone
                    break
                if not chunk:
                    break
                shown += chunk
            elif process.poll() is not None:
                break
        else:
            process.kill()
            pytest.fail(f"cloister {' '.join(args)} still runs after {timeout:g}s: {shown!r}")
        return process.wait(timeout=10), shown.decode(errors="replace")
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()
            process.wait()


def test_start_attaches_a_shell_and_entering_again_keeps_the_token(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "attach")
    cloisters.names.append(name)
    # $((6*7)) is echoed as typed; only a shell that ran it prints 42.
    status, shown = on_a_terminal(
        cli, repo, "start", keys=b"echo attached-$((6*7))-$CLOISTER_CLOISTER-$PWD; exit 3\n"
    )
    assert f"attached-42-{name}-/work" in shown, shown
    assert status == 3, shown  # the shell's own status
    assert f"left cloister {name}" in shown, shown
    token = cli.token(name)

    status, shown = on_a_terminal(cli, repo, "start", keys=b"echo again-$((6*7)); exit\n")
    assert "again-42" in shown, shown
    assert status == 0, shown
    assert "already running" in shown, shown
    assert cli.token(name) == token


# --- 2. worktrees ---------------------------------------------------------------------------


def test_worktree_of_a_new_branch(cli: CloisterCli, cloisters: Cloisters, tmp_path: Path) -> None:
    repo, project = new_repo(tmp_path, "wt")
    head = git(repo, "rev-parse", "HEAD")
    name = f"{project}-feature-x"
    cloisters.start(repo, name, "-b", "feature/x")

    worktree = cli.worktree(project, "feature-x")
    assert worktree.is_dir()
    # No repository on the host: its .git names the cloister's own git directory, which
    # exists only inside (the human's git there is told so, and reads nothing).
    assert (worktree / ".git").read_text(encoding="utf-8") == "gitdir: /opt/cloister/git\n"
    assert git(repo, "rev-parse", "feature/x") == head  # new, from HEAD
    assert str(worktree) not in git(repo, "worktree", "list")
    listed = cli.listing()[name]
    assert listed["path"] == str(worktree)
    assert listed["branch"] == "feature/x"
    assert cli.ok("path", name).stdout.strip() == str(worktree)

    status = exec_ok(name, "git status")
    assert "On branch feature/x" in status.stdout
    exec_ok(
        name,
        "echo 'made inside' > inside.txt && git add inside.txt"
        " && git commit --quiet -m 'commit made inside the cloister'",
    )
    cli.ok("sync", name)  # the watch does it too, within seconds
    assert git(repo, "log", "--format=%s", "-1", "feature/x") == "commit made inside the cloister"
    assert git(repo, "show", "feature/x:inside.txt") == "made inside"
    assert git(repo, "rev-parse", "HEAD") == head  # the main checkout did not move
    assert git(repo, "rev-parse", f"refs/cloister/{name}/feature/x") == git(
        repo, "rev-parse", "feature/x"
    )

    def entry() -> dict[str, Any]:
        listed = cli.json("worktree", "list", "--json")
        rows = [row for row in listed if row["path"] == str(worktree)]
        assert len(rows) == 1, rows
        row: dict[str, Any] = rows[0]
        return row

    row = entry()
    assert row["project"] == project
    assert row["branch"] == "feature/x"
    assert row["dirty"] is False

    exec_ok(name, "echo scratch > uncommitted.txt")
    assert entry()["dirty"] is True
    busy = cli.fails("worktree", "remove", project, "feature/x")
    assert "stop" in busy.stderr, busy.describe()

    cli.ok("stop", name)
    dirty = cli.fails("worktree", "remove", project, "feature/x")
    assert "-f" in dirty.stderr, dirty.describe()
    assert worktree.is_dir()
    assert (worktree / "uncommitted.txt").exists()

    removed = cli.ok("worktree", "remove", project, "feature/x", "-f")
    assert str(worktree) in removed.stdout
    assert not worktree.exists()
    assert git(repo, "log", "--format=%s", "-1", "feature/x") == "commit made inside the cloister"


def test_worktree_of_an_existing_branch(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, project = new_repo(tmp_path, "wtold")
    main_head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "-b", "existing")
    (repo / "existing.txt").write_text("on the branch\n", encoding="utf-8")
    git(repo, "add", "existing.txt")
    git(repo, "commit", "--quiet", "-m", "commit on existing")
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "-")
    assert git(repo, "rev-parse", "HEAD") == main_head != tip

    name = f"{project}-existing"
    cloisters.start(repo, name, "-b", "existing")
    worktree = cli.worktree(project, "existing")
    assert exec_ok(name, "git rev-parse HEAD").stdout.strip() == tip
    assert exec_ok(name, "git rev-parse --abbrev-ref HEAD").stdout.strip() == "existing"
    assert exec_ok(name, "cat existing.txt").stdout == "on the branch\n"
    assert (worktree / "existing.txt").read_text(encoding="utf-8") == "on the branch\n"
    assert "On branch existing" in exec_ok(name, "git status").stdout

    cli.ok("stop", name)
    cli.ok("worktree", "remove", project, "existing")  # clean: no -f needed
    assert not worktree.exists()
    assert git(repo, "rev-parse", "existing") == tip  # the branch stays


# --- 5. what the container is made of -----------------------------------------------------


def test_container_is_hardened_as_configured(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "inspect")
    reference = tmp_path / "reference-docs"
    reference.mkdir()
    (reference / "notes.txt").write_text("read me\n", encoding="utf-8")
    cli.write_project_config(name, f"# refs for the test\nrefs:\n  - {reference}\n")
    cloisters.start(repo, name)
    document = inspect(name)
    host = document["HostConfig"]

    assert host["CapDrop"] == ["ALL"]
    assert not host.get("CapAdd")
    assert host["Privileged"] is False
    assert any(option.startswith("no-new-privileges") for option in host["SecurityOpt"] or [])
    assert host["Init"] is True
    assert host["PidsLimit"] == PIDS
    assert host["Memory"] == MEMORY_BYTES
    assert host["NanoCpus"] == NANO_CPUS
    assert document["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
    own_network = cli.container(name)  # alone on a network of its own
    assert host["NetworkMode"] == own_network
    assert set(document["NetworkSettings"]["Networks"]) == {own_network}

    root = repo.resolve()
    own = cli.data_dir / "gitdirs" / name  # the cloister's own git directory, never yours
    assert mounts_by_target(document) == {
        "/work": (str(root), True),
        "/work/.git": (str(own), True),
        "/work/.git/hooks": (str(own / "hooks"), False),
        "/work/.git/config": (str(own / "config"), False),
        # your objects, read-only (its alternates name them)
        "/opt/cloister/origin/objects": (str(root / ".git" / "objects"), False),
        # The protected paths (the defaults; missing here: empty stand-ins), and the
        # directory on the way to one, a mount point of its own.
        **{f"/work/{path}": (str(root / path), False) for path in DEFAULT_PROTECTED_PATHS},
        "/work/.vscode": (str(root / ".vscode"), True),
        "/.cloister": (str(cli.data_dir / "markers" / f"{name}.json"), False),
        f"/refs/{reference.name}": (str(reference.resolve()), False),
        # the host user's account (read-only), and each agent's state (the agent's)
        "/etc/passwd": (str(cli.data_dir / "accounts" / name / "passwd"), False),
        "/etc/group": (str(cli.data_dir / "accounts" / name / "group"), False),
        # the git guardrails: the guarded git, and what puts it first in a login shell
        BIN: (str(WRAPPER_DIR), False),
        PROFILE: (str(PROFILE_SNIPPET), False),
        "/home/cloister/.claude": (str(cli.data_dir / "agents" / name / "claude"), True),
        "/home/cloister/.codex": (str(cli.data_dir / "agents" / name / "codex"), True),
        "/home/cloister/.gemini": (str(cli.data_dir / "agents" / name / "gemini"), True),
    }
    everything = [*(host.get("Binds") or []), *(str(m) for m in document["Mounts"])]
    assert not [entry for entry in everything if "docker.sock" in entry]

    env = environment(document)
    token = cli.token(name)
    assert env["CLOISTER_TOKEN"] == token
    assert env["CLOISTER_GUARDIAN_HOST"]
    assert env["CLOISTER_REQUEST_PORT"] == "9998"
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[key].startswith("http://"), (key, env[key])
        assert env[key].endswith(f":{token}@cloister-guardian-proxy:3128"), (key, env[key])
    assert env["NO_PROXY"] == env["no_proxy"]
    assert env["CLOISTER_GUARDIAN_HOST"] in env["NO_PROXY"].split(",")

    token_file = cli.token_file(name)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    record = json.loads(token_file.read_text(encoding="utf-8"))
    assert set(record) == TOKEN_KEYS
    assert record["cloister"] == name
    assert record["project"] == name
    assert record["path"] == str(root)
    # Bound to the container's own address on its network (the services check it).
    networks = inspect(name)["NetworkSettings"]["Networks"]
    assert record["address"] == networks[cli.container(name)]["IPAddress"]


# --- 7. git's code-running files are out of reach --------------------------------------------


def test_git_hooks_and_config_are_read_only(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, project = new_repo(tmp_path, "gitro")
    config_before = (repo / ".git" / "config").read_bytes()
    entries_before = {path.name for path in (repo / ".git").iterdir()}
    cloisters.start(repo, project)
    branch_name = f"{project}-side"
    cloisters.start(repo, branch_name, "-b", "side")
    gitdir = repo.resolve() / ".git"

    attempts = {
        project: [".git/hooks/pre-commit", ".git/config"],
        # The worktree's .git is a read-only file naming its own git directory.
        branch_name: [".git", "/opt/cloister/git/hooks/pre-commit", "/opt/cloister/git/config"],
    }
    for name, targets in attempts.items():
        for target in targets:
            written = exec_in(name, f"echo '#!/bin/sh' >> {shlex.quote(target)}")
            assert written.returncode != 0, written.describe()
        hooks_path = exec_in(name, "git config core.hooksPath /work/hooks")
        assert hooks_path.returncode != 0, hooks_path.describe()
        exec_ok(
            name,
            f"echo {name} > {name}.txt && git add {name}.txt"
            f" && git commit --quiet -m 'normal commit in {name}'",
        )
    assert not (gitdir / "hooks" / "pre-commit").exists()
    # Stopped, their commits come back (the checked-out branch and the worktree's
    # fast-forward), and they leave nothing in your git directory but the agent's refs.
    cli.ok("stop", project)
    cli.ok("stop", branch_name)
    assert git(repo, "log", "--format=%s", "-1") == f"normal commit in {project}"
    assert git(repo, "log", "--format=%s", "-1", "side") == f"normal commit in {branch_name}"
    left = {path.name for path in gitdir.iterdir()} - entries_before
    assert left <= {"ORIG_HEAD", "logs", "packed-refs"}, left
    assert (gitdir / "config").read_bytes() == config_before  # to the byte
    assert git(repo, "status", "--porcelain") == ""


# --- names, git, hostexec, status, approvals ---------------------------------------------------


def test_project_name_collision_suggests_p(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    name = unique("twin")
    first = make_repo(tmp_path / "one" / name)
    second = make_repo(tmp_path / "two" / name)
    cloisters.start(first, name)

    refused = cli.fails("start", "-d", cwd=second)
    assert "-p" in refused.stderr, refused.describe()
    assert cli.listing()[name]["path"] == str(first.resolve())

    other = f"{name}-other"
    cloisters.start(second, other, "-p", other)
    listing = cli.listing()
    assert listing[other]["path"] == str(second.resolve())
    assert listing[other]["project"] == other
    assert listing[name]["path"] == str(first.resolve())

    # The name stays bound to the first directory even when nothing runs there.
    cli.ok("stop", name)
    assert "-p" in cli.fails("start", "-d", cwd=second).stderr


def test_outside_git_needs_allow_no_git(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    name = unique("plain")
    directory = tmp_path / name
    directory.mkdir()
    (directory / "file.txt").write_text("not in git\n", encoding="utf-8")

    refused = cli.fails("start", "-d", cwd=directory)
    assert "--allow-no-git" in refused.stderr, refused.describe()
    assert name not in cli.listing()

    started = cloisters.start(directory, name, "--allow-no-git")
    warning = squash(started.stderr).lower()
    assert "warning" in warning, started.describe()
    assert "not a git repository" in warning, started.describe()
    assert cli.listing()[name]["path"] == str(directory.resolve())
    assert exec_ok(name, "cat file.txt").stdout == "not in git\n"


def test_hostexec_auto_approved_command(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "hostexec")
    cloisters.start(repo, name)
    result = exec_ok(name, "hostexec echo hi")
    assert result.stdout == "hi\n"


def test_guardian_status_and_idempotent_start(cli: CloisterCli) -> None:
    status = cli.json("guardian", "status", "--json")
    assert status["running"] is True, status
    services = {service["name"]: service for service in status["services"]}
    assert set(services) == SERVICES
    assert all(service["state"] == "running" for service in services.values()), services
    pid = status["executor_pid"]
    assert isinstance(pid, int)
    assert b"cloister_executor" in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert status["ui"] == f"http://127.0.0.1:{ui_port(cli)}/"
    assert status["project"] == cli.instance.project
    assert status["compose_file"] == str(cli.data_dir / "guardian" / "compose.yaml")
    assert Path(status["compose_file"]).is_file()

    again = cli.ok("guardian", "start")
    assert "already running" in squash(again.output), again.describe()
    assert cli.json("guardian", "status", "--json")["executor_pid"] == pid


HUB_PROBE = """
import json, sys, urllib.error, urllib.request
answers = {}
for host in ("approval:9999", "127.0.0.1:%d"):
    for path in ("/api/v1/pending", "/api/v1/decisions", "/api/v1/health"):
        request = urllib.request.Request("http://approval:9999" + path, headers={"Host": host})
        try:
            status = urllib.request.urlopen(request, timeout=5).status
        except urllib.error.HTTPError as error:
            status = error.code
        answers[host + path] = status
print(json.dumps(answers))
"""


def test_the_hub_answers_only_its_human(
    cli: CloisterCli, docker_client: docker.DockerClient
) -> None:
    """Issue 11: without the hub secret every route but health is a 401, from the host
    and from a container on the control network; the CLI and a browser logged in by
    `cloister guardian open` get in; every answer forbids framing."""
    port = ui_port(cli)
    ui = f"http://127.0.0.1:{port}"
    secret_file = cli.data_dir / "guardian" / "hub.secret"
    assert secret_file.stat().st_mode & 0o777 == 0o600
    secret = secret_file.read_text(encoding="utf-8").strip()
    with httpx.Client(base_url=ui, timeout=10) as anyone:
        for path in ("/api/v1/pending", "/api/v1/decisions", "/fragments/pending"):
            response = anyone.get(path)
            assert response.status_code == 401, (path, response.text)
            assert response.headers["x-frame-options"] == "DENY"
            assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        # The page and its script are a shell that holds no data: open, never framed.
        for path in ("/", "/static/app.js"):
            response = anyone.get(path)
            assert response.status_code == 200, (path, response.text)
            assert response.headers["x-frame-options"] == "DENY"
            assert "set-cookie" not in response.headers
        assert anyone.get("/api/v1/health").status_code == 200
        human = {"Authorization": f"Bearer {secret}"}
        assert anyone.get("/api/v1/pending", headers=human).status_code == 200

    # A container on the control network (where the proxy and the gateway are).
    output = docker_client.containers.run(
        "cloister-approval:latest",
        entrypoint=["python3", "-c", HUB_PROBE % port],
        network=cli.instance.control_net,
        labels={"org.cloister.test": "tests/cli/test_acceptance.py"},
        remove=True,
    )
    answers = json.loads(output)
    assert answers == {
        "approval:9999/api/v1/pending": 401,
        "approval:9999/api/v1/decisions": 401,
        "approval:9999/api/v1/health": 403,  # open, but only under the hub's own names
        f"127.0.0.1:{port}/api/v1/pending": 401,
        f"127.0.0.1:{port}/api/v1/decisions": 401,
        f"127.0.0.1:{port}/api/v1/health": 200,
    }, answers

    # The browser's way in: a one-time URL whose ticket the page trades for a token.
    url = cli.ok("guardian", "open", "--no-browser").stdout.strip()
    assert url.startswith(f"{ui}/login?ticket="), url
    ticket = parse_qs(urlsplit(url).query)["ticket"][0]
    with httpx.Client(base_url=ui, timeout=10) as browser:
        page = browser.get(url)
        assert page.status_code == 200
        assert "Cloister approvals</title>" in page.text
        traded = browser.post("/api/v1/login", json={"ticket": ticket})
        assert traded.status_code == 200, traded.text
        assert not browser.cookies
        session = {"Authorization": f"Bearer {traded.json()['token']}"}
        assert browser.get("/api/v1/pending", headers=session).status_code == 200
        assert browser.post("/api/v1/login", json={"ticket": ticket}).status_code == 401  # once


# --- the host's own git must never run what an agent planted --------------------------------

HIJACKS = {
    # Rename the protected .git away and put a fresh one (with any config) in its place.
    "main: replace .git": (
        None,
        "mv .git .git-moved && mkdir .git"
        " && cp -r .git-moved/HEAD .git-moved/objects .git-moved/refs .git/"
        ' && cp .git-moved/config .git/config && git config core.fsmonitor "$HOOK"',
    ),
    # A `commondir` file in .git makes git read its config from another directory.
    "main: .git/commondir": (
        None,
        "mkdir .evil && cp -r .git/HEAD .git/objects .git/refs .git/config .evil/"
        ' && git config -f .evil/config core.fsmonitor "$HOOK"'
        " && echo ../.evil > .git/commondir",
    ),
    # A worktree's .git is a file in /work: point it at a git dir the agent made.
    "worktree: .git file": (
        "hijack",
        "common=$(git rev-parse --git-common-dir) && mkdir .evil"
        ' && cp -r "$common/objects" "$common/refs" "$common/config" .evil/'
        " && echo 'ref: refs/heads/hijack' > .evil/HEAD"
        ' && git config -f .evil/config core.fsmonitor "$HOOK"'
        " && echo 'gitdir: .evil' > .git",
    ),
    # The worktree's own git dir (writable) has a `commondir` file too.
    "worktree: commondir": (
        "hijack",
        "common=$(git rev-parse --git-common-dir) && own=$(git rev-parse --absolute-git-dir)"
        ' && mkdir "$common/evil"'
        ' && cp -r "$common/HEAD" "$common/objects" "$common/refs" "$common/config"'
        ' "$common/evil/" && git config -f "$common/evil/config" core.fsmonitor "$HOOK"'
        ' && echo "$common/evil" > "$own/commondir"',
    ),
}


@pytest.mark.parametrize("vector", list(HIJACKS))
def test_host_git_never_runs_what_the_agent_planted(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path, vector: str
) -> None:
    """docs/architecture.md: hooks and config are read-only because an agent that could change
    them "would run code on the host the next time the human uses git". That must hold
    for every way of changing the configuration the host's git reads, not just for
    writing those two files."""
    branch, script = HIJACKS[vector]
    repo, project = new_repo(tmp_path, "hijack")
    name = f"{project}-{branch}" if branch else project
    cloisters.start(repo, name, *(["-b", branch] if branch else []))
    workspace = cli.worktree(project, branch) if branch else repo
    marker = tmp_path / "host-git-ran-planted-code"
    # Each script is known to complete when nothing stops it (checked: every vector
    # planted its hook before a fix); if the product makes a step fail, the vector is
    # defeated, and the marker below stays absent.
    hook = f"touch {marker}; false"
    try:
        exec_in(name, f"HOOK={shlex.quote(hook)}; {script}")
        cli.ok("stop", name)
        # The human, later, on the host:
        for directory in (workspace, repo):
            run_command(["git", "-C", str(directory), "status"], timeout=30)
        assert not marker.exists(), (
            f"{vector}: after the agent's changes, `git status` on the host ran {hook!r}"
        )
    finally:
        if branch:  # leave no poisoned worktree for `cloister worktree list`
            shutil.rmtree(workspace, ignore_errors=True)
            shutil.rmtree(repo / ".git" / "worktrees", ignore_errors=True)
