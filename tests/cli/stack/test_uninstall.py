"""``cloister uninstall`` against a fake engine: never the real one, whose images are shared.

The cloisters are stopped by the real ``ending.stop`` (the fake engine holds their
containers; the hub and the guardian are fakes too), so what is checked is what
``cloister stop --all`` would have done.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands.main import cli
from cloister_cli.container.cloisters import Workspace
from cloister_cli.context import Context
from cloister_cli.repo import git, gitdirs, projects
from cloister_cli.repo.projects import Project
from cloister_cli.session import ending, sessions
from cloister_cli.session.ending import StopOutcome
from cloister_cli.stack import executor_process
from cloister_cli.stack import uninstall as library
from cloister_cli.start.worktree import make_worktree
from cloister_core import stack
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_executor.gitsync import SyncError, SyncOutcome
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine
from tests.git_support import hermetic_git, make_repo, run_git

OTHER = stack.Instance("4567cdef", INSTANCE.uid + 1, Path("/other"))
NETWORKS = (INSTANCE.egress_net, INSTANCE.control_net, INSTANCE.ports_net)


def add_cloister(engine: FakeEngine, name: str, path: Path) -> None:
    labels = {
        **INSTANCE.labels,
        stack.LABEL_CLOISTER: name,
        stack.LABEL_PROJECT: name,
        stack.LABEL_PATH: str(path),
        stack.LABEL_BRANCH: "",
    }
    engine.add_container(INSTANCE.cloister(name), labels)


@dataclass(frozen=True)
class FakeService:
    name: str
    state: str


@dataclass
class FakeGuardian:
    engine: FakeEngine
    fail: bool = False
    running: bool = True

    def services(self) -> list[FakeService]:
        return [FakeService("proxy", "running" if self.running else "absent")]

    def stop(self) -> None:
        if self.fail:
            raise CloisterError("docker compose down failed: boom")
        self.engine.log.append("guardian stop")

    def reload_proxy(self) -> None:
        self.engine.log.append("proxy reload")


@dataclass
class FakeHub:
    revoked: list[str] = field(default_factory=list)

    def revoke(self, name: str) -> None:
        self.revoked.append(name)


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
        "HOME": str(tmp_path / "home"),
    }


@pytest.fixture
def paths(env: dict[str, str]) -> CloisterPaths:
    return CloisterPaths.from_env(env)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEngine]:
    fake = FakeEngine()
    guardian = FakeGuardian(fake)
    hub = FakeHub()
    monkeypatch.setattr(Context, "docker", property(lambda self: fake))
    monkeypatch.setattr(Context, "guardian", property(lambda self: guardian))
    monkeypatch.setattr(Context, "hub", property(lambda self: hub))
    monkeypatch.setattr(Context, "instance", property(lambda self: INSTANCE))
    yield fake
    for listing in fake.called("containers.list"):  # by label, the stopped ones too
        assert listing["all"]
        assert "label" in listing["filters"]


@pytest.fixture
def installed(engine: FakeEngine, paths: CloisterPaths, tmp_path: Path) -> FakeEngine:
    """Two cloisters with their tokens, the images, the networks, config and data."""
    for name in ("api", "web"):
        add_cloister(engine, name, tmp_path / "src" / name)
        write(paths.token_file(name), "{}")
    for tag in library.IMAGES:
        engine.add_image(tag)
    for name in NETWORKS:
        engine.add_network(name, labels=INSTANCE.labels)
    # The network a stop kept for the cloister's next start, and another instance's stack.
    gone = {**INSTANCE.labels, stack.LABEL_CLOISTER: "gone"}
    engine.add_network(INSTANCE.cloister("gone"), labels=gone)
    write(paths.config_file, "defaults: {}\n")
    write(paths.audit_log, "")
    return engine


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run(env: dict[str, str], *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["uninstall", *args], env=env, input=stdin, prog_name="cloister")


def test_removes_cloisters_guardian_images_and_networks(
    env: dict[str, str], paths: CloisterPaths, installed: FakeEngine
) -> None:
    installed.add_network(OTHER.egress_net, labels=OTHER.labels)  # another guardian's
    result = run(env, "--yes")
    assert result.exit_code == 0, result.output
    # Each cloister killed, then removed while the proxy is told (both on threads).
    for start, name in ((0, "api"), (3, "web")):
        assert installed.log[start] == f"kill -s SIGKILL {INSTANCE.cloister(name)}"
        assert sorted(installed.log[start + 1 : start + 3]) == sorted(
            [f"rm {INSTANCE.cloister(name)}", "proxy reload"]
        )
    assert installed.log[6:] == [
        "guardian stop",
        # The images stay: another guardian on this engine (OTHER) still uses them.
        f"network rm {INSTANCE.cloister('gone')}",
        *(f"network rm {name}" for name in NETWORKS),
    ]
    assert OTHER.egress_net in installed.networks.by_name  # another's: left alone
    assert installed.images.tags() == set(library.IMAGES)
    assert "kept image cloister-proxy:latest: other guardians use it: user " in result.output
    assert OTHER.id in result.output
    assert not paths.token_file("api").exists()
    assert not paths.token_file("web").exists()
    assert paths.config_file.exists()  # no --purge
    for line in (
        "stopped cloister api",
        "stopped cloister web",
        "stopped the guardian stack",
        "the host executor was not running",
        f"removed network {INSTANCE.control_net}",
        "the `cloister` command stays: `uv tool uninstall cloister-cli` removes it",
    ):
        assert f"{line}\n" in result.output


def test_the_images_go_with_the_last_guardian_on_the_engine(
    env: dict[str, str], installed: FakeEngine
) -> None:
    result = run(env, "--yes")
    assert result.exit_code == 0, result.output
    assert [line for line in installed.log if line.startswith("rmi ")] == [
        f"rmi {tag}" for tag in library.IMAGES
    ]
    assert "removed image cloister-proxy:latest\n" in result.output


def test_removes_the_forwarders_of_cloister_port_before_the_images(
    env: dict[str, str], installed: FakeEngine
) -> None:
    for cloister, port in (("api", 8000), ("gone", 3000)):  # "gone": removed without stop
        labels = {
            **INSTANCE.labels,
            stack.LABEL_FORWARD: cloister,
            stack.LABEL_FORWARD_PORT: str(port),
        }
        installed.add_container(
            INSTANCE.forwarder(cloister, port), labels, image="cloister-proxy:latest"
        )
    result = run(env, "--yes")
    assert result.exit_code == 0, result.output
    log = installed.log
    # Stopping a cloister removes its own; the rest go before the image they run.
    api_forwarder = f"rm {INSTANCE.forwarder('api', 8000)}"
    assert log.index(api_forwarder) + 1 == log.index(f"kill -s SIGKILL {INSTANCE.cloister('api')}")
    gone_forwarder = f"rm {INSTANCE.forwarder('gone', 3000)}"
    assert log.index(gone_forwarder) < log.index("rmi cloister-proxy:latest")
    assert f"removed container {INSTANCE.forwarder('gone', 3000)}\n" in result.output
    assert f"network rm {INSTANCE.ports_net}" in log
    assert installed.containers.by_name == {}


def test_the_plan_is_shown_and_confirmed_first(
    env: dict[str, str], paths: CloisterPaths, installed: FakeEngine
) -> None:
    refused = run(env, "--purge", stdin="n\n")
    assert refused.exit_code == 1
    assert installed.log == []
    assert paths.config_dir.exists()
    for line in (
        "cloister uninstall will:",
        "  stop every cloister (api, web)",
        "  stop the guardian stack and the host executor",
        f"  remove the images {', '.join(library.IMAGES)}",
        f"  remove this guardian's networks ({INSTANCE.project}-...)",
        f"  delete {paths.config_dir}",
        f"  delete {paths.data_dir}",
        "Go ahead? [y/N]: n",
    ):
        assert f"{line}\n" in refused.output
    accepted = run(env, "--purge", stdin="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "guardian stop" in installed.log


def test_what_is_already_gone_is_said_and_is_no_failure(
    env: dict[str, str], engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    guardian = FakeGuardian(engine, running=False)
    monkeypatch.setattr(Context, "guardian", property(lambda self: guardian))
    result = run(env, "--yes", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["failed"] == 0
    assert document["unsynced"] == []
    outcomes = {(step["kind"], step["target"]): step["outcome"] for step in document["steps"]}
    assert outcomes == {
        ("guardian", INSTANCE.project): "absent",
        ("executor", ""): "absent",
        **{("image", tag): "absent" for tag in library.IMAGES},
        **{("network", name): "absent" for name in NETWORKS},
    }
    assert "image cloister:latest: not present\n" in result.stderr
    assert "the guardian stack was not running\n" in result.stderr


def test_a_failing_step_does_not_stop_the_others(
    env: dict[str, str], installed: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed.add_container("x", image="cloister-slim:latest")  # keeps it in use
    monkeypatch.setattr(Context, "guardian", property(lambda self: FakeGuardian(installed, True)))
    result = run(env, "--yes", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["failed"] == 2
    failed = [step["message"] for step in document["steps"] if step["outcome"] == "failed"]
    assert failed == [
        "could not stop the guardian: docker compose down failed: boom",
        "could not remove image cloister-slim:latest: cloister-slim:latest is used by container x",
    ]
    assert f"network rm {INSTANCE.egress_net}" in installed.log  # went on after both
    assert result.stderr.endswith("Error: uninstall incomplete: " + "; ".join(failed) + "\n"), (
        result.stderr
    )


def test_the_guardians_leftover_containers_and_the_executor(
    env: dict[str, str], engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    label = {library.COMPOSE_PROJECT_LABEL: INSTANCE.project, **INSTANCE.labels}
    engine.add_container(INSTANCE.service("proxy"), label)
    engine.add_container("unrelated", {"app": "db"})
    # Another user's guardian on the same engine: not this uninstall's.
    theirs = {library.COMPOSE_PROJECT_LABEL: OTHER.project, **OTHER.labels}
    engine.add_container(OTHER.service("proxy"), theirs)

    @dataclass
    class State:
        pid: int

    stopped: list[CloisterPaths] = []

    def stop(paths: CloisterPaths) -> bool:
        stopped.append(paths)
        return True

    monkeypatch.setattr(executor_process, "running", lambda paths: State(4242))
    monkeypatch.setattr(executor_process, "stop", stop)
    result = run(env, "--yes")
    assert result.exit_code == 0, result.output
    assert f"removed container {INSTANCE.service('proxy')}\n" in result.output
    assert "stopped the host executor (pid 4242)\n" in result.output
    assert list(engine.containers.by_name) == ["unrelated", OTHER.service("proxy")]
    assert len(stopped) == 1


def test_no_engine_is_one_clean_error_before_anything(
    env: dict[str, str], tmp_path: Path, paths: CloisterPaths
) -> None:
    write(paths.config_file, "")
    result = run({**env, "DOCKER_HOST": f"unix://{tmp_path / 'none.sock'}"}, "--yes", "--purge")
    assert result.exit_code == 1
    assert result.output.startswith("Error: no Docker engine is reachable (unix://")
    assert paths.config_file.exists()


def test_force_needs_purge(env: dict[str, str]) -> None:
    result = run(env, "--force")
    assert result.exit_code == 2
    assert "--force only applies to --purge" in result.output


# -- --purge ---------------------------------------------------------------------------------


def test_purge_deletes_config_and_data(
    env: dict[str, str], paths: CloisterPaths, installed: FakeEngine
) -> None:
    write(paths.data_dir / "credentials" / "claude.json", "{}")
    result = run(env, "--yes", "--purge")
    assert result.exit_code == 0, result.output
    assert f"deleted {paths.config_dir}\n" in result.output
    assert f"deleted {paths.data_dir}\n" in result.output
    assert not paths.config_dir.exists()
    assert not paths.data_dir.exists()


def test_purge_refuses_what_does_not_look_like_cloisters(
    env: dict[str, str], paths: CloisterPaths, installed: FakeEngine
) -> None:
    paths.config_file.unlink()
    for token in paths.tokens_dir.iterdir():
        token.unlink()
    paths.tokens_dir.rmdir()
    write(paths.config_dir / "thesis.tex", "precious")
    result = run(env, "--yes", "--purge")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {paths.config_dir} does not look like Cloister's config directory"
        " (none of config.yaml, tokens, projects, decisions); --force deletes anyway\n"
    )
    assert installed.log == []  # nothing stopped either
    forced = run(env, "--yes", "--purge", "--force")
    assert forced.exit_code == 0, forced.output
    assert not paths.config_dir.exists()


def test_an_empty_directory_may_go(
    env: dict[str, str], paths: CloisterPaths, engine: FakeEngine
) -> None:
    paths.config_dir.mkdir(parents=True)
    result = run(env, "--yes", "--purge")
    assert result.exit_code == 0, result.output
    assert not paths.config_dir.exists()
    assert f"{paths.data_dir}" not in result.output  # it never existed


@pytest.mark.parametrize("where", ["home", "parent of home"])
def test_purge_never_deletes_home(
    env: dict[str, str], tmp_path: Path, engine: FakeEngine, where: str
) -> None:
    home = tmp_path / "home"
    write(home / "config.yaml", "")
    directory = home if where == "home" else tmp_path
    result = run({**env, "CLOISTER_CONFIG_DIR": str(directory)}, "--yes", "--purge", "--force")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: will not delete the config directory {directory}:"
        " it is / or your home directory, or holds it\n"
    )
    assert (home / "config.yaml").exists()


def test_purge_never_follows_a_link(
    env: dict[str, str], tmp_path: Path, engine: FakeEngine
) -> None:
    real = tmp_path / "dotfiles" / "cloister"
    write(real / "config.yaml", "")
    link = tmp_path / "linked-config"
    link.symlink_to(real)
    result = run({**env, "CLOISTER_CONFIG_DIR": str(link)}, "--yes", "--purge", "--force")
    assert result.exit_code == 1
    assert "is a symbolic link" in result.output
    assert (real / "config.yaml").exists()


@pytest.fixture
def worktree(paths: CloisterPaths, tmp_path: Path) -> tuple[Path, Path]:
    """A worktree as `cloister start -b feature/login` makes it (its session recorded)."""
    repo = make_repo(tmp_path / "src" / "api")
    project = Project("api", repo, git=True)
    projects.register(paths, project)
    directory = paths.worktree("api", "feature-login")
    make_worktree(repo, directory, "feature/login")
    workspace = Workspace(project, directory, "feature/login")
    sessions.prepare(paths, workspace, "api-feature-login", home=tmp_path / "home")
    gitdirs.remove(paths, "api-feature-login")  # as its stop leaves it, synced
    return repo, directory


@pytest.mark.usefixtures("engine")
def test_purge_removes_worktrees(
    env: dict[str, str], paths: CloisterPaths, worktree: tuple[Path, Path]
) -> None:
    repo, directory = worktree
    result = run(env, "--yes", "--purge")
    assert result.exit_code == 0, result.output
    assert f"removed worktree {directory} (its branch stays in {repo})\n" in result.output
    assert git.branch_exists(repo, "feature/login")
    assert not paths.data_dir.exists()


@pytest.mark.usefixtures("engine")
def test_purge_makes_the_repository_forget_an_older_cloisters_worktree(
    env: dict[str, str], paths: CloisterPaths, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "src" / "api")
    projects.register(paths, Project("api", repo, git=True))
    old = paths.worktree("api", "old")
    old.parent.mkdir(parents=True)
    run_git(repo, "worktree", "add", "-q", "-b", "old", str(old))
    refused = run(env, "--yes", "--purge")  # Cloister cannot tell what it holds
    assert refused.exit_code == 1
    assert str(old) in refused.output
    result = run(env, "--yes", "--purge", "--force")
    assert result.exit_code == 0, result.output
    assert f"removed worktree {old} (its branch stays in {repo})\n" in result.output
    listed = run_git(repo, "worktree", "list", "--porcelain").splitlines()
    assert [line for line in listed if line.startswith("worktree ")] == [f"worktree {repo}"]
    assert git.branch_exists(repo, "old")


@pytest.mark.usefixtures("engine")
def test_purge_refuses_uncommitted_work_without_force(
    env: dict[str, str], paths: CloisterPaths, worktree: tuple[Path, Path]
) -> None:
    _, directory = worktree
    write(directory / "notes.txt", "unsaved thoughts")
    refused = run(env, "--yes", "--purge")
    assert refused.exit_code == 1
    assert refused.output == (
        f"Error: these worktrees have uncommitted changes, which would be lost: {directory}"
        " (commit them, or `cloister worktree remove` them); --force deletes anyway\n"
    )
    assert (directory / "notes.txt").exists()
    shown = run(env, "--purge", "--force", stdin="n\n")
    assert "(uncommitted changes are lost)\n" in shown.output
    forced = run(env, "--yes", "--purge", "--force")
    assert forced.exit_code == 0, forced.output
    assert not directory.exists()


def test_unsynced_commits_keep_the_directories(
    env: dict[str, str],
    paths: CloisterPaths,
    installed: FakeEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Their git directories, in the data directory, hold the only copy of them."""

    def stop(context: Context, name: str) -> StopOutcome:
        return StopOutcome(True, None, sync_error="boom" if name == "web" else None)

    monkeypatch.setattr(ending, "stop", stop)
    result = run(env, "--yes", "--purge", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["unsynced"] == ["web"]
    kept = [step for step in document["steps"] if step["outcome"] == "kept"]
    assert [step["target"] for step in kept] == [str(paths.config_dir), str(paths.data_dir)]
    assert "`cloister sync NAME` first" in kept[0]["message"]
    assert "the commits of cloister web could not be brought back" in result.stderr
    assert paths.config_dir.exists()
    assert paths.data_dir.exists()


@dataclass
class FakeSyncer:
    error: str | None = None
    synced: list[str] = field(default_factory=list)

    def sync(
        self,
        cloister: str,
        *,
        running: bool,
        assume_yes: bool = False,
        ready: Callable[[], None] | None = None,
    ) -> SyncOutcome:
        assert not running
        if ready is not None:
            ready()  # where the real one makes its export container
        if self.error is not None:
            raise SyncError(self.error)
        self.synced.append(cloister)
        return SyncOutcome(cloister, imported={"main": "a" * 40})


@pytest.fixture
def dead(paths: CloisterPaths, tmp_path: Path) -> Path:
    """Cloister api's git directory and session, its container gone without a stop."""
    repo = make_repo(tmp_path / "src" / "api")
    workspace = Workspace(Project("api", repo, git=True), repo)
    sessions.prepare(paths, workspace, "api", home=tmp_path / "home")
    return paths.cloister_git_dir("api")


@pytest.mark.usefixtures("engine")
def test_a_cloister_whose_container_is_gone_gets_its_last_sync(
    env: dict[str, str], paths: CloisterPaths, dead: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncer = FakeSyncer()
    monkeypatch.setattr(Context, "syncer", property(lambda self: syncer))
    result = run(env, "--yes", "--purge")
    assert result.exit_code == 0, result.output
    assert syncer.synced == ["api"]
    assert "stopped cloister api\n" in result.output
    assert not paths.data_dir.exists()


@pytest.mark.usefixtures("engine")
def test_a_cloister_whose_commits_cannot_be_brought_back_keeps_the_directories(
    env: dict[str, str], paths: CloisterPaths, dead: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its git directory holds the only copy of its last commits."""
    syncer = FakeSyncer(error="cloister api: the export failed")
    monkeypatch.setattr(Context, "syncer", property(lambda self: syncer))
    result = run(env, "--yes", "--purge", "--force", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["unsynced"] == ["api"]
    kept = [step["target"] for step in document["steps"] if step["outcome"] == "kept"]
    assert kept == [str(paths.data_dir)]
    assert (dead / "HEAD").is_file()


def test_sync_containers_a_killed_sync_left_are_removed(
    env: dict[str, str], installed: FakeEngine
) -> None:
    labels = {
        **INSTANCE.labels,
        stack.LABEL_SYNC: "gone",
    }  # of a cloister that is gone (a stop removes its own)
    installed.add_container("cloister-sync-api-1", labels)
    result = run(env, "--yes")
    assert result.exit_code == 0, result.output
    assert "removed container cloister-sync-api-1\n" in result.output
    assert installed.log.index("rm cloister-sync-api-1") < installed.log.index(
        "rmi cloister-proxy:latest"
    )


# -- the library on its own --------------------------------------------------------------------


def test_plan_purge_skips_what_does_not_exist(tmp_path: Path) -> None:
    paths = CloisterPaths(tmp_path / "c", tmp_path / "d")
    assert library.plan_purge(paths, tmp_path / "home", force=False) == library.Purge()


def test_plan_purge_counts_config_and_data_once_when_they_are_one(tmp_path: Path) -> None:
    both = tmp_path / "cloister"
    write(both / "config.yaml", "")
    plan = library.plan_purge(CloisterPaths(both, both), tmp_path / "home", force=False)
    assert plan.directories == (both,)


def test_purge_makes_read_only_directories_deletable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    locked = data / "agents" / "api" / "claude" / "locked"
    write(locked / "file", "x")
    locked.chmod(0o500)
    steps = list(library.purge(library.Purge((data,)), library.Summary()))
    assert [(step.outcome, step.message) for step in steps] == [("done", f"deleted {data}")]
    assert not data.exists()
