"""What a cloister container is made of: mounts, limits, environment, refused paths.

Pure: :func:`cloisters.plan` and :class:`Forbidden` against real temporary git
repositories and a fake home directory; nothing here talks to Docker.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import docker.errors
import pytest
from docker.types import Mount

from cloister_cli.container import cloisters, networks
from cloister_cli.container.cloisters import (
    CloisterStartError,
    ContainerPlan,
    Forbidden,
    Workspace,
    environment_for,
)
from cloister_cli.launch import wire
from cloister_cli.repo import gitmounts
from cloister_cli.repo.projects import Project
from cloister_cli.session import sessions
from cloister_cli.start import dryrun
from cloister_cli.start.worktree import make_worktree
from cloister_core import stack
from cloister_core.config.models import DefaultsConfig, GuardianConfig
from cloister_core.owngit import GIT_DIR_ELSEWHERE, ORIGIN_OBJECTS, POINTER
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from cloister_core.tokens import TokenRecord, write_token_file
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeContainer, FakeEngine
from tests.git_support import GIT, hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@dataclass(frozen=True)
class Host:
    """A fake home and Cloister's directories, with the paths a cloister must not see."""

    home: Path
    paths: CloisterPaths

    @property
    def forbidden(self) -> Forbidden:
        return Forbidden.for_host(self.paths, self.home)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    """Config and data outside the home directory (as CLOISTER_*_DIR would put them)."""
    home = tmp_path / "home"
    home.mkdir()
    return Host(home, CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data"))


@pytest.fixture
def default_host(tmp_path: Path) -> Host:
    """Config and data where they are by default: ~/.config and ~/.local/share."""
    home = tmp_path / "home"
    home.mkdir()
    return Host(home, CloisterPaths.from_env({"HOME": str(home)}))


@pytest.fixture
def repo(host: Host) -> Path:
    return make_repo(host.home / "src" / "api")


LIMITS = DefaultsConfig(memory="512m", cpus=1.5, pids=64)


def record_for(workspace: Workspace, name: str) -> TokenRecord:
    return cloisters.new_token(workspace, name)


def plan_for(
    host: Host, workspace: Workspace, name: str = "api", refs: tuple[Path, ...] = ()
) -> ContainerPlan:
    """The plan a start makes: its git directory made, its git mounts planned."""
    git_plan = sessions.prepare(host.paths, workspace, name, home=host.home).git_plan
    return cloisters.plan(
        workspace,
        name,
        record_for(workspace, name),
        instance=INSTANCE,
        image="cloister:latest",
        limits=LIMITS,
        refs=refs,
        forbidden=host.forbidden,
        git_plan=git_plan,
    )


def layout(mounts: list[Mount]) -> list[tuple[str, str, bool]]:
    """(target, source, read-only) of each mount; every one must be a bind mount."""
    assert {mount["Type"] for mount in mounts} <= {"bind"}
    return [(mount["Target"], mount["Source"], mount["ReadOnly"]) for mount in mounts]


def main_checkout(repo: Path) -> Workspace:
    return Workspace(Project("api", repo, git=True), repo)


def worktree_of(repo: Path, host: Host, branch: str = "feature") -> Workspace:
    destination = host.paths.worktree("api", branch)
    make_worktree(repo, destination, branch)
    return Workspace(Project("api", repo, git=True), destination, branch)


# -- mounts ------------------------------------------------------------------------------


def test_main_checkout_mounts(host: Host, repo: Path) -> None:
    own = host.paths.cloister_git_dir("api")
    plan = plan_for(host, main_checkout(repo))
    assert layout(plan.mounts) == [
        ("/work", str(repo), False),
        # The cloister's own git directory where the project's is; the human's .git is
        # never mounted, only its objects (read-only: new ones go to the cloister's).
        ("/work/.git", str(own), False),
        ("/work/.git/config", str(own / "config"), True),
        ("/work/.git/hooks", str(own / "hooks"), True),
        (ORIGIN_OBJECTS, str(repo / ".git" / "objects"), True),
    ]
    assert plan.labels["org.cloister.git-common-dir"] == str(repo / ".git")
    assert (own / "HEAD").read_text(encoding="utf-8") == "ref: refs/heads/main\n"


def test_the_humans_git_directory_is_never_writable(host: Host, repo: Path) -> None:
    (repo / ".git" / "modules" / "lib").mkdir(parents=True)
    for workspace, name in ((main_checkout(repo), "api"), (worktree_of(repo, host), "api-f")):
        plan = plan_for(host, workspace, name=name)
        human = [
            mount for mount in plan.mounts if Path(mount["Source"]).is_relative_to(repo / ".git")
        ]
        assert {mount["Target"] for mount in human} >= {ORIGIN_OBJECTS}
        assert all(mount["ReadOnly"] for mount in human), layout(human)


def test_linked_worktree_mounts(host: Host, repo: Path) -> None:
    workspace = worktree_of(repo, host)
    own = host.paths.cloister_git_dir("api-feature")
    plan = plan_for(host, workspace, name="api-feature")
    assert layout(plan.mounts) == [
        ("/work", str(workspace.directory), False),
        # Its .git file names the cloister's git directory, which exists only inside.
        ("/work/.git", str(host.paths.git_pointer("api-feature")), True),
        (GIT_DIR_ELSEWHERE, str(own), False),
        (f"{GIT_DIR_ELSEWHERE}/config", str(own / "config"), True),
        (f"{GIT_DIR_ELSEWHERE}/hooks", str(own / "hooks"), True),
        (ORIGIN_OBJECTS, str(repo / ".git" / "objects"), True),
    ]
    assert (workspace.directory / ".git").read_text(encoding="utf-8") == POINTER
    assert host.paths.git_pointer("api-feature").read_text(encoding="utf-8") == POINTER
    assert (workspace.directory / "README").read_text(encoding="utf-8") == "hello\n"
    assert plan.labels["org.cloister.git-common-dir"] == str(repo / ".git")


def test_a_project_that_is_a_linked_worktree_gets_the_pointer(host: Host, repo: Path) -> None:
    """Its .git is a file of the human's: a read-only pointer covers it inside."""
    checkout = host.home / "src" / "api-linked"
    run_git(repo, "worktree", "add", "-q", "-b", "linked", str(checkout))
    human_file = (checkout / ".git").read_text(encoding="utf-8")
    workspace = Workspace(Project("api-linked", checkout, git=True), checkout)
    plan = plan_for(host, workspace, name="api-linked")
    by_target = {target: (source, ro) for target, source, ro in layout(plan.mounts)}
    assert by_target["/work/.git"] == (str(host.paths.git_pointer("api-linked")), True)
    assert by_target[GIT_DIR_ELSEWHERE] == (str(host.paths.cloister_git_dir("api-linked")), False)
    assert by_target[ORIGIN_OBJECTS] == (str(repo / ".git" / "objects"), True)
    assert (checkout / ".git").read_text(encoding="utf-8") == human_file  # untouched
    own_head = host.paths.cloister_git_dir("api-linked") / "HEAD"
    assert own_head.read_text(encoding="utf-8") == "ref: refs/heads/linked\n"


def test_a_project_without_git_gets_only_work(host: Host) -> None:
    notes = host.home / "notes"
    notes.mkdir()
    plan = plan_for(host, Workspace(Project("notes", notes, git=False), notes), name="notes")
    assert layout(plan.mounts) == [("/work", str(notes), False)]


def test_refs_are_read_only_under_refs(host: Host, repo: Path, tmp_path: Path) -> None:
    refs = []
    for parent in ("a", "b", "c"):
        ref = tmp_path / "refs" / parent / "docs"
        ref.mkdir(parents=True)
        refs.append(ref)
    manual = tmp_path / "refs" / "manual.pdf"
    manual.write_bytes(b"%PDF")
    plan = plan_for(host, main_checkout(repo), refs=(*refs, manual))
    assert [mount for mount in layout(plan.mounts) if mount[0].startswith("/refs/")] == [
        ("/refs/docs", str(refs[0]), True),
        ("/refs/docs-2", str(refs[1]), True),
        ("/refs/docs-3", str(refs[2]), True),
        ("/refs/manual.pdf", str(manual), True),
    ]


def test_disambiguated_ref_names_never_collide(host: Host, repo: Path, tmp_path: Path) -> None:
    """A ref whose own name is what disambiguation would produce must not be shadowed."""
    refs = [tmp_path / "a" / "docs", tmp_path / "b" / "docs-2", tmp_path / "c" / "docs"]
    for ref in refs:
        ref.mkdir(parents=True)
    plan = plan_for(host, main_checkout(repo), refs=tuple(refs))
    targets = [mount["Target"] for mount in plan.mounts]
    assert len(targets) == len(set(targets)), targets  # docker refuses duplicate targets


def test_a_missing_ref_is_refused(host: Host, repo: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(CloisterStartError) as caught:
        plan_for(host, main_checkout(repo), refs=(missing,))
    assert str(caught.value) == f"ref {str(missing)!r} of project api does not exist"


def test_a_forbidden_ref_is_refused(host: Host, repo: Path) -> None:
    ssh = host.home / ".ssh"
    ssh.mkdir()
    link = host.home / "src" / "innocent"
    link.symlink_to(ssh)
    for ref in (ssh, link):
        with pytest.raises(CloisterStartError, match="refusing to mount the ref"):
            plan_for(host, main_checkout(repo), refs=(ref,))


def test_a_forbidden_project_is_refused(host: Host) -> None:
    with pytest.raises(CloisterStartError) as caught:
        plan_for(host, Workspace(Project("me", host.home, git=False), host.home), name="me")
    message = str(caught.value)
    # Which of the forbidden places it names (home, ~/.ssh, ...) is not specified.
    assert message.startswith(
        f"refusing to mount the project {str(host.home)!r}: it is, holds or sits inside '"
    )
    assert message.endswith("', which a cloister must never see")


def test_a_worktree_of_a_repository_in_a_forbidden_place_is_refused(host: Host) -> None:
    """The worktree lives in <data>, but the repository's objects (mounted read-only)
    do not; refused before the cloister's git directory is made."""
    dotfiles = make_repo(host.home / ".config" / "nvim")
    workspace = worktree_of(dotfiles, host)
    with pytest.raises(CloisterStartError, match="refusing to mount the repository '"):
        plan_for(host, workspace, name="api-feature")
    assert not host.paths.cloister_git_dir("api-feature").exists()
    assert not (workspace.directory / "README").exists()


def test_a_git_directory_in_a_forbidden_place_is_refused(host: Host) -> None:
    """A checkout whose .git file names a git directory in ~/.local."""
    checkout = host.home / "src" / "split"
    checkout.mkdir(parents=True)
    store = host.home / ".local" / "git" / "split"
    store.parent.mkdir(parents=True)
    run_git(checkout, "init", "-q", "-b", "main", f"--separate-git-dir={store}")
    workspace = Workspace(Project("split", checkout, git=True), checkout)
    message = f"refusing to mount the repository {str(store)!r}"
    with pytest.raises(CloisterStartError, match=re.escape(message)):
        plan_for(host, workspace, name="split")


def test_alternates_in_a_forbidden_place_are_refused(host: Host, repo: Path) -> None:
    shared = make_repo(host.home / ".local" / "objects-cache")
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{shared / '.git' / 'objects'}\n", encoding="utf-8")
    with pytest.raises(CloisterStartError, match="alternate object store"):
        plan_for(host, main_checkout(repo))


# -- the container -----------------------------------------------------------------------


def test_run_kwargs(host: Host, repo: Path) -> None:
    workspace = main_checkout(repo)
    record = record_for(workspace, "api")
    plan = cloisters.plan(
        workspace,
        "api",
        record,
        instance=INSTANCE,
        image="cloister-slim:latest",
        limits=LIMITS,
        refs=(),
        forbidden=host.forbidden,
        git_plan=gitmounts.plan(repo, repository=HumanRepository.of(repo), home=host.home),
    )
    uid, gid = os.getuid(), os.getgid()
    assert plan.run_kwargs() == {
        "image": "cloister-slim:latest",
        "entrypoint": ["sleep"],
        "command": ["infinity"],
        "name": "cloister-0123abcd-api",
        "hostname": "api",
        "detach": True,
        "user": f"{uid}:{gid}",
        "working_dir": "/work",
        "environment": environment_for(record),
        "mounts": plan.mounts,
        "tmpfs": {"/home/cloister": f"uid={uid},gid={gid},mode=0700"},
        "labels": {
            "org.cloister.instance": "0123abcd",
            "org.cloister.owner": str(uid),
            "org.cloister.data-dir": "/data",
            "org.cloister.cloister": "api",
            "org.cloister.project": "api",
            "org.cloister.path": str(repo),
            "org.cloister.branch": "",
            "org.cloister.git-common-dir": str(repo / ".git"),
        },
        "network": "cloister-0123abcd-api",  # its own
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "init": True,
        "mem_limit": "512m",
        "nano_cpus": 1_500_000_000,
        "pids_limit": 64,
        "shm_size": "64m",  # defaults.shm_size, Docker's own default
    }


def test_worktree_labels_name_the_branch(host: Host, repo: Path) -> None:
    workspace = worktree_of(repo, host, branch="feature")
    labels = plan_for(host, workspace, name="api-feature").run_kwargs()["labels"]
    assert labels == {
        **INSTANCE.labels,
        "org.cloister.cloister": "api-feature",
        "org.cloister.project": "api",
        "org.cloister.path": str(workspace.directory),
        "org.cloister.branch": "feature",
        "org.cloister.git-common-dir": str(repo / ".git"),
    }


@pytest.mark.parametrize(
    ("cpus", "nano_cpus"),
    [(2.0, 2_000_000_000), (1.5, 1_500_000_000), (0.25, 250_000_000), (0.57, 570_000_000)],
)
def test_cpu_limit_in_nano_cpus(host: Host, repo: Path, cpus: float, nano_cpus: int) -> None:
    workspace = main_checkout(repo)
    plan = cloisters.plan(
        workspace,
        "api",
        record_for(workspace, "api"),
        instance=INSTANCE,
        image="cloister:latest",
        limits=DefaultsConfig(cpus=cpus),
        refs=(),
        forbidden=host.forbidden,
        git_plan=gitmounts.GitPlan(),
    )
    kwargs = plan.run_kwargs()
    assert kwargs["nano_cpus"] == nano_cpus
    assert (kwargs["mem_limit"], kwargs["pids_limit"]) == ("8g", 1024)  # the defaults


def test_environment_for() -> None:
    record = TokenRecord.create(cloister="api-feature", project="api", path=Path("/w"))
    proxy = f"http://cloister:{record.secret}@cloister-guardian-proxy:3128"
    no_proxy = ",".join(
        (
            "cloister-guardian",
            "cloister-guardian-proxy",
            "cloister-guardian-credentials",
            "localhost",
            "127.0.0.1",
        )
    )
    assert environment_for(record) == {
        "CLOISTER": "1",
        "CLOISTER_NAME": "api-feature",
        "CLOISTER_TOKEN": record.secret,
        "CLOISTER_CLOISTER": "api-feature",
        "CLOISTER_PROJECT": "api",
        "CLOISTER_GUARDIAN_HOST": "cloister-guardian",
        "CLOISTER_REQUEST_PORT": "9998",
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
        "HOME": "/home/cloister",
    }


# -- sensitive host paths ----------------------------------------------------------------

PathOf = Callable[[Host], Path]

REFUSED: list[tuple[str, PathOf]] = [
    ("root", lambda h: Path("/")),
    ("home itself", lambda h: h.home),
    ("what holds home (and ~/.ssh)", lambda h: h.home.parent),
    ("~/.ssh", lambda h: h.home / ".ssh"),
    ("inside ~/.ssh", lambda h: h.home / ".ssh" / "keys"),
    ("~/.config", lambda h: h.home / ".config"),
    ("inside ~/.config", lambda h: h.home / ".config" / "gh"),
    ("~/.aws", lambda h: h.home / ".aws"),
    ("~/.gnupg", lambda h: h.home / ".gnupg"),
    ("~/.docker", lambda h: h.home / ".docker"),
    ("~/.kube", lambda h: h.home / ".kube"),
    ("~/.netrc", lambda h: h.home / ".netrc"),
    ("~/.local", lambda h: h.home / ".local"),
    ("~/.claude", lambda h: h.home / ".claude"),
    ("inside ~/.claude", lambda h: h.home / ".claude" / "projects"),
    ("~/.claude.json", lambda h: h.home / ".claude.json"),
    ("~/.codex", lambda h: h.home / ".codex"),
    ("~/.gemini", lambda h: h.home / ".gemini"),
    ("<data>/credentials", lambda h: h.paths.data_dir / "credentials"),
    ("<data>/agents", lambda h: h.paths.data_dir / "agents"),
    ("<config>", lambda h: h.paths.config_dir),
    ("<config>/tokens", lambda h: h.paths.tokens_dir),
    ("what holds <config>", lambda h: h.paths.config_dir.parent),
    ("<data>/run", lambda h: h.paths.data_dir / "run"),
    ("inside <data>/run", lambda h: h.paths.data_dir / "run" / "x"),
    ("<data>/guardian", lambda h: h.paths.guardian_dir),
    ("<data> (holds run)", lambda h: h.paths.data_dir),
    ("<data>/logs", lambda h: h.paths.logs_dir),
    ("<data>/worktrees itself", lambda h: h.paths.data_dir / "worktrees"),
    ("/var/run/docker.sock", lambda h: Path("/var/run/docker.sock")),
    ("/run/docker.sock", lambda h: Path("/run/docker.sock")),
    ("/var/run (holds the socket)", lambda h: Path("/var/run")),
    ("/etc", lambda h: Path("/etc")),
    ("/etc/ssh", lambda h: Path("/etc/ssh")),
    ("/proc", lambda h: Path("/proc")),
    ("/proc/self", lambda h: Path("/proc/self")),
    ("/sys", lambda h: Path("/sys")),
    ("/dev", lambda h: Path("/dev")),
    ("the command server's directory", lambda h: Path(wire.directories(os.environ)[-1])),
    ("inside it", lambda h: Path(wire.directories(os.environ)[-1], "x")),
    ("$TMPDIR, /tmp (holds it)", lambda h: Path(wire.directories(os.environ)[-1]).parent),
]

ALLOWED: list[tuple[str, PathOf]] = [
    ("a project in home", lambda h: h.home / "src" / "x"),
    ("a subdirectory of it", lambda h: h.home / "src" / "x" / "pkg"),
    ("a dotted project name", lambda h: h.home / "src" / ".sshx"),
    ("a worktree", lambda h: h.paths.worktree("api", "feature")),
]


@pytest.mark.parametrize("path_of", [p for _, p in REFUSED], ids=[i for i, _ in REFUSED])
def test_forbidden_refuses(host: Host, path_of: PathOf) -> None:
    path = path_of(host)
    with pytest.raises(CloisterStartError, match=f"refusing to mount the project {str(path)!r}"):
        host.forbidden.check(path, "the project")


@pytest.mark.parametrize("path_of", [p for _, p in ALLOWED], ids=[i for i, _ in ALLOWED])
def test_forbidden_allows(host: Host, path_of: PathOf) -> None:
    host.forbidden.check(path_of(host), "the project")


@pytest.mark.parametrize("path_of", [p for _, p in REFUSED], ids=[i for i, _ in REFUSED])
def test_forbidden_refuses_with_the_default_layout(default_host: Host, path_of: PathOf) -> None:
    with pytest.raises(CloisterStartError):
        default_host.forbidden.check(path_of(default_host), "the project")


def test_the_runtime_directory_holding_the_command_servers_socket_is_refused(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    for path in (tmp_path / "run", tmp_path / "run" / "cloister" / "x"):
        with pytest.raises(CloisterStartError, match="which a cloister must never see"):
            host.forbidden.check(path, "the project")
    host.forbidden.check(tmp_path / "elsewhere", "the project")


def test_default_layout_puts_config_and_data_in_home(default_host: Host) -> None:
    assert default_host.paths.config_dir == default_host.home / ".config" / "cloister"
    assert default_host.paths.data_dir == default_host.home / ".local" / "share" / "cloister"


def test_worktrees_are_allowed_with_the_default_layout(default_host: Host) -> None:
    """`cloister start -b BRANCH` mounts <data>/worktrees/<p>/<b>; by default <data> is
    ~/.local/share/cloister, so refusing all of ~/.local refuses every worktree."""
    default_host.forbidden.check(default_host.paths.worktree("api", "feature"), "the project")


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("to-ssh", lambda h: h.home / ".ssh"),
        ("to-inside-ssh", lambda h: h.home / ".ssh" / "keys"),
        ("to-home", lambda h: h.home),
        ("to-socket", lambda h: Path("/var/run/docker.sock")),
        ("to-etc", lambda h: Path("/etc")),
        ("to-run", lambda h: h.paths.data_dir / "run"),
    ],
)
def test_symlinks_into_forbidden_places_are_refused(host: Host, name: str, target: PathOf) -> None:
    (host.home / ".ssh" / "keys").mkdir(parents=True)
    (host.paths.data_dir / "run").mkdir(parents=True)
    link = host.home / "src" / name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(target(host))
    with pytest.raises(CloisterStartError, match=f"refusing to mount the project {str(link)!r}"):
        host.forbidden.check(link, "the project")


def test_a_symlink_to_an_allowed_place_is_allowed(host: Host) -> None:
    project = host.home / "src" / "real"
    project.mkdir(parents=True)
    (host.home / "work").symlink_to(project)
    host.forbidden.check(host.home / "work", "the project")


# -- what the agent can write must not run code on the host ----------------------------------


def writable(plan: ContainerPlan, target: str) -> Path | None:
    """The host path behind container path *target* if the plan lets the agent write it."""
    best: Mount | None = None
    for mount in plan.mounts:
        mounted = PurePosixPath(mount["Target"])
        path = PurePosixPath(target)
        covers = path == mounted or mounted in path.parents
        if covers and (
            best is None or len(mounted.parts) > len(PurePosixPath(best["Target"]).parts)
        ):
            best = mount
    if best is None or best["ReadOnly"]:
        return None
    return Path(best["Source"]) / PurePosixPath(target).relative_to(best["Target"])


def evil_git_dir(at: Path, source: Path, marker: Path) -> Path:
    """A git directory (a copy of *source*'s) whose config runs a hook that leaves *marker*."""
    run_git(source, "clone", "-q", "--bare", str(source), str(at))
    hook = at / "fsmonitor-hook"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    run_git(at, "config", "core.bare", "false")
    run_git(at, "config", "core.fsmonitor", str(hook))
    return at


CONFIG = "[core]\n\tfsmonitor = {evil}/fsmonitor-hook\n"


def host_git_status(directory: Path) -> None:
    """What the human (or `cloister worktree list`) runs on the host afterwards."""
    subprocess.run([GIT, "-C", str(directory), "status"], capture_output=True, check=False)


@pytest.mark.parametrize(
    ("kind", "target", "content"),
    [
        # The cloister's config: read-only (git runs core.fsmonitor at every status).
        ("main", "/work/.git/config", CONFIG),
        ("worktree", "/opt/cloister/git/config", CONFIG),
        # git reads the repository config from $GIT_DIR/commondir/config when that exists:
        # writable, but in the cloister's own git directory, which the host never reads.
        ("main", "/work/.git/commondir", "../.agent/evil.git\n"),
        ("worktree", "/opt/cloister/git/commondir", "{evil}\n"),
        # A worktree's .git is a file naming its git directory: a read-only one.
        ("worktree", "/work/.git", "gitdir: .agent/evil.git\n"),
        # A config the agent writes where the human's checkout would pick it up.
        ("main", "/work/.git/config.worktree", CONFIG),
    ],
    ids=[
        "main-config",
        "worktree-config",
        "main-commondir",
        "worktree-commondir",
        "worktree-gitfile",
        "main-config-worktree",
    ],
)
def test_the_agent_cannot_make_host_git_run_its_code(
    host: Host, repo: Path, tmp_path: Path, kind: str, target: str, content: str
) -> None:
    """Nothing the agent writes makes the human's next git command run code: the
    cloister's git directory is its own, its config read-only, and the human's .git is
    not mounted at all."""
    run_git(repo, "config", "extensions.worktreeConfig", "true")
    workspace = main_checkout(repo) if kind == "main" else worktree_of(repo, host)
    plan = plan_for(host, workspace, name="api" if kind == "main" else "api-feature")
    marker = tmp_path / "code-ran-on-the-host"
    # The agent may create anything inside /work: its own git directory, for example.
    agent_files = writable(plan, "/work/.agent")
    assert agent_files is not None
    evil = evil_git_dir(agent_files / "evil.git", repo, marker)
    path = writable(plan, target.format(common=repo / ".git"))
    if path is not None:  # the plan lets the agent write it: so write it
        path.write_text(content.format(evil=evil), encoding="utf-8")
    host_git_status(workspace.directory)
    assert not marker.exists(), f"the agent could write {target} and run code on the host"


# -- markers, protected paths and limits ------------------------------------------------------


def test_markers_and_limits_in_the_plan(host: Host, repo: Path, tmp_path: Path) -> None:
    workspace = main_checkout(repo)
    record = record_for(workspace, "api")
    marker = tmp_path / "marker.json"
    extras = cloisters.Extras(
        mounts=(
            Mount(target="/work/.vscode", source="vscode", type="volume"),  # covers tasks.json
            Mount(target="/work/.devcontainer", source="dev", type="volume"),
            Mount(target="/.cloister", source="fake", type="volume"),
            Mount(target="/work/node_modules", source="modules", type="volume"),
        ),
        environment={"CLOISTER": "0", "CLOISTER_NAME": "other", "Cloister": "x", "MODE": "dev"},
        shm_size="1g",
    )
    plan = cloisters.plan(
        workspace,
        "api",
        record,
        instance=INSTANCE,
        image="cloister:latest",
        limits=DefaultsConfig(shm_size="256m", disk="20g"),
        refs=(),
        forbidden=host.forbidden,
        git_plan=gitmounts.plan(
            repo,
            repository=HumanRepository.of(repo),
            home=host.home,
            protect=(".devcontainer", ".vscode/tasks.json"),
        ),
        extras=extras,
        marker=marker,
        storage_opt={"size": "20g"},
    )
    by_target = {mount["Target"]: mount for mount in plan.mounts}
    assert by_target["/.cloister"]["Source"] == str(marker)
    assert by_target["/.cloister"]["ReadOnly"] is True
    assert by_target["/work/.vscode/tasks.json"]["ReadOnly"] is True
    # No mount of the devcontainer's may cover a protected path or the marker.
    assert by_target["/work/.devcontainer"]["Source"] == str(repo / ".devcontainer")
    assert by_target["/work/.vscode"]["Type"] == "bind"
    assert "/work/node_modules" in by_target
    dropped = [note for note in plan.notes if "dropped" in note]
    assert len(dropped) == 3, plan.notes
    env = plan.environment
    assert (env["CLOISTER"], env["CLOISTER_NAME"], env["CLOISTER_PROJECT"]) == ("1", "api", "api")
    assert "Cloister" not in env  # any case of CLOISTER is Cloister's
    assert env["MODE"] == "dev"
    kwargs = plan.run_kwargs()
    assert kwargs["shm_size"] == "1g"  # the devcontainer's wins over defaults.shm_size
    assert kwargs["storage_opt"] == {"size": "20g"}


def test_without_a_quota_there_is_no_storage_option(host: Host, repo: Path) -> None:
    kwargs = plan_for(host, main_checkout(repo)).run_kwargs()
    assert "storage_opt" not in kwargs
    assert kwargs["shm_size"] == "64m"


class _RefusingContainers:
    def run(self, **kwargs: object) -> None:
        raise docker.errors.APIError(
            "--storage-opt is supported only for overlay over xfs with 'pquota' mount option"
        )


class _RefusingEngine:
    containers = _RefusingContainers()


def _networks(log: list[str]) -> Any:
    """cloister_cli.container.networks as a start uses it, recording what it is asked."""

    class Networks:
        @staticmethod
        def create(client: object, instance: object, name: str, config: object) -> str:
            log.append(f"create {name}")
            return name

        @staticmethod
        def run_with_services(
            client: object, instance: object, network: str, run: Callable[[], object]
        ) -> object:
            log.append(f"connect {network}")
            return run()

        @staticmethod
        def remove_unused(client: object, instance: object, name: str) -> None:
            log.append(f"remove {name}")

        @staticmethod
        def cloister_address_on(network: str) -> str:
            return "10.213.0.30"

        @staticmethod
        def endpoint_config(client: object, network: str) -> dict[str, object]:
            return {network: {"IPAMConfig": {"IPv4Address": "10.213.0.30"}}}

    return Networks


def test_a_quota_the_engine_refuses_says_what_to_change(
    host: Host, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[str] = []
    monkeypatch.setattr(cloisters, "networks", _networks(log))
    workspace = main_checkout(repo)
    record = record_for(workspace, "api")
    plan = cloisters.plan(
        workspace,
        "api",
        record,
        instance=INSTANCE,
        image="cloister:latest",
        limits=DefaultsConfig(disk="20g"),
        refs=(),
        forbidden=host.forbidden,
        git_plan=gitmounts.GitPlan(),
        storage_opt={"size": "20g"},
    )
    engine: Any = _RefusingEngine()
    with pytest.raises(CloisterStartError, match=r"pquota.*remove it from config\.yaml"):
        cloisters.create(
            engine, host.paths, plan, record, instance=INSTANCE, guardian=GuardianConfig()
        )
    # Its network was made, the services put on it, and removed with the failed start.
    assert log == ["create api", "connect api", "remove api"]


def test_compose_services_are_reached_directly_and_a_shared_one_on_localhost(
    host: Host, repo: Path
) -> None:
    """A service's name goes around the proxy (which could not reach it); one in the
    cloister's network namespace is 127.0.0.1, since no DNS knows its name."""
    workspace = main_checkout(repo)
    git_plan = sessions.prepare(host.paths, workspace, "api", home=host.home).git_plan
    plan = cloisters.plan(
        workspace,
        "api",
        record_for(workspace, "api"),
        instance=INSTANCE,
        image="cloister:latest",
        limits=LIMITS,
        refs=(),
        forbidden=host.forbidden,
        git_plan=git_plan,
        extras=cloisters.Extras(services=("db", "cache"), local_services=("cache",)),
    )
    for name in ("NO_PROXY", "no_proxy"):
        assert plan.environment[name].split(",")[-2:] == ["db", "cache"]
        assert stack.PROXY_ALIAS in plan.environment[name].split(",")
    assert plan.run_kwargs()["extra_hosts"] == {"cache": "127.0.0.1"}
    assert "--add-host" in dryrun.docker_run_argv(plan.run_kwargs())
    assert "extra_hosts" not in plan_for(host, workspace, "other").run_kwargs()


# -- stop ------------------------------------------------------------------------------------


def stopping(host: Host, repo: Path, engine: FakeEngine) -> tuple[Any, FakeContainer, Path]:
    """Cloister api running on its network with the services, and its token."""
    for service, _ in stack.CLOISTER_SERVICES:
        engine.add_container(INSTANCE.service(service))
    network: Any = networks.create(engine.client, INSTANCE, "api", GuardianConfig())
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api", stack.LABEL_PROJECT: "api"}
    box = engine.add_container(INSTANCE.cloister("api"), labels)
    network.members[box.id] = box.name
    networks.connect_services(engine.client, INSTANCE, network)
    tokens = write_token_file(
        host.paths.tokens_dir, record_for(main_checkout(repo), "api").bound_to("10.213.0.30")
    )
    engine.log.clear()
    return network, box, tokens


def test_stop_kills_revokes_the_token_then_removes_on_the_pool_and_keeps_the_network(
    host: Host, repo: Path
) -> None:
    engine = FakeEngine()
    network, box, tokens = stopping(host, repo, engine)
    removing = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(removing.wait, 10)  # the pool is busy: the removal waits its turn
        result = cloisters.stop(engine.client, host.paths, INSTANCE, "api", pool=pool)
        assert result.stopped
        assert result.project == "api"
        assert not tokens.exists()
        # Not running any more when it returns (the sync reads its git directory next).
        assert engine.log == [f"kill -s SIGKILL {box.name}"]
        assert box.status == "exited"
        removing.set()
        assert result.removed is not None
        result.removed.result()
    assert engine.log[-1] == f"rm {box.name}"
    assert INSTANCE.cloister("api") not in engine.containers.by_name
    # Its network stays for the next start, with the services alone on it.
    assert engine.networks.by_name[INSTANCE.cloister("api")] is network
    assert sorted(network.members.values()) == sorted(
        INSTANCE.service(service) for service, _ in stack.CLOISTER_SERVICES
    )


@pytest.mark.parametrize("status", ["paused", "exited"])
def test_a_container_not_running_is_removed_before_stop_returns(
    host: Host, repo: Path, status: str
) -> None:
    engine = FakeEngine()
    _, box, _ = stopping(host, repo, engine)
    box.status = status  # paused by the git guard, or stopped
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = cloisters.stop(engine.client, host.paths, INSTANCE, "api", pool=pool)
    assert result.removed is None
    assert engine.log == [f"rm {box.name}"]


def test_a_start_on_the_network_its_last_stop_kept_makes_and_joins_nothing(
    host: Host, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine()
    network, box, _ = stopping(host, repo, engine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        cloisters.stop(engine.client, host.paths, INSTANCE, "api", pool=pool)
    engine.log.clear()
    engine.calls.clear()
    original = engine.containers.run

    def run(image: str, **kwargs: Any) -> FakeContainer:
        made = original(image, **kwargs)  # at the fixed address it was given
        made.attrs["NetworkSettings"]["Networks"][network.name] = {"IPAddress": "10.213.0.30"}
        return made

    monkeypatch.setattr(engine.containers, "run", run)
    workspace = main_checkout(repo)
    ahead = networks.Ahead.start(engine.client, INSTANCE, "api", GuardianConfig())
    ahead.join_services()
    started = cloisters.create(
        engine.client,
        host.paths,
        plan_for(host, workspace),
        record_for(workspace, "api"),
        instance=INSTANCE,
        guardian=GuardianConfig(),
        ahead=ahead,
    )
    assert started.name == box.name
    assert engine.log == [f"create {box.name}", f"start {box.name}"]
    asked = [name for name, _ in engine.calls if "networks" in name]
    assert asked == ["api.networks", "networks.get"]  # one list, one inspect


def test_a_token_left_at_the_address_a_start_takes_back_is_gone_before_its_container_runs(
    host: Host, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cloister old went without `cloister stop` (its container exited at a reboot): its
    # token is still bound to its address. The pool is full: api's start takes old's
    # network back and is given its subnet, so its address too. The image's entrypoint
    # runs at once: old's token must not be served from there, even for a moment.
    engine = FakeEngine()
    for service, _ in stack.CLOISTER_SERVICES:
        engine.add_container(INSTANCE.service(service))
    one = GuardianConfig(network_pool="10.213.0.0/27", network_prefix=27)
    left: Any = networks.create(engine.client, INSTANCE, "old", one)
    networks.connect_services(engine.client, INSTANCE, left)
    workspace = main_checkout(repo)
    old = write_token_file(
        host.paths.tokens_dir, record_for(workspace, "old").bound_to("10.213.0.30")
    )
    original = engine.containers.run
    served_at_run: list[bool] = []

    def run(image: str, **kwargs: Any) -> FakeContainer:
        served_at_run.append(old.exists())
        made = original(image, **kwargs)
        made.attrs["NetworkSettings"]["Networks"][INSTANCE.cloister("api")] = {
            "IPAddress": "10.213.0.30"
        }
        return made

    monkeypatch.setattr(engine.containers, "run", run)
    cloisters.create(
        engine.client,
        host.paths,
        plan_for(host, workspace),
        record_for(workspace, "api"),
        instance=INSTANCE,
        guardian=one,
    )
    assert INSTANCE.cloister("old") not in engine.networks.by_name  # taken back
    assert served_at_run == [False]
    assert not old.exists()
    assert (host.paths.tokens_dir / "api").exists()


def test_stop_without_a_container_or_token_says_so_whatever_network_is_kept(host: Host) -> None:
    engine = FakeEngine()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    engine.add_network(INSTANCE.cloister("api"), labels=labels)  # a stop kept it
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = cloisters.stop(engine.client, host.paths, INSTANCE, "api", pool=pool)
    assert not result.stopped
    assert result.removed is None
    assert engine.log == []
    assert INSTANCE.cloister("api") in engine.networks.by_name
