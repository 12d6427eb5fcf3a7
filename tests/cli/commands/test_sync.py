"""``cloister sync`` through click's runner: a session as ``cloister start`` records it,
a fake engine that says whether its container runs, and a fake syncer in place of the
export container (:mod:`cloister_executor.gitsync` is tested on its own)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands.main import cli
from cloister_cli.container.cloisters import Workspace
from cloister_cli.context import Context
from cloister_cli.repo.projects import Project
from cloister_cli.session import sessions
from cloister_core import stack
from cloister_core.owngit import Head
from cloister_core.paths import CloisterPaths
from cloister_executor.gitsync import SyncError, SyncOutcome
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine
from tests.git_support import hermetic_git, make_repo


def add_cloister(engine: FakeEngine, cloister: str, status: str) -> None:
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: cloister}
    engine.add_container(INSTANCE.cloister(cloister), labels, status=status)


@dataclass
class FakeSyncer:
    """Answers with *outcome*, or raises *error*; records each call."""

    outcome: SyncOutcome | None = None
    error: SyncError | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def sync(self, cloister: str, *, running: bool, assume_yes: bool = False) -> SyncOutcome:
        self.calls.append({"cloister": cloister, "running": running, "assume_yes": assume_yes})
        if self.error is not None:
            raise self.error
        return self.outcome or SyncOutcome(cloister)


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine()
    monkeypatch.setattr(Context, "instance", property(lambda self: INSTANCE))
    monkeypatch.setattr(Context, "docker", property(lambda self: fake))
    return fake


@pytest.fixture
def syncer(monkeypatch: pytest.MonkeyPatch) -> FakeSyncer:
    fake = FakeSyncer()
    monkeypatch.setattr(Context, "syncer", property(lambda self: fake))
    return fake


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "home" / "api")


@pytest.fixture
def started(paths: CloisterPaths, repo: Path, tmp_path: Path) -> Path:
    """Cloister api's session and git directory, as `cloister start` leaves them."""
    workspace = Workspace(Project("api", repo, git=True), repo)
    sessions.prepare(paths, workspace, "api", home=tmp_path / "home")
    return paths.cloister_git_dir("api")


def invoke(paths: CloisterPaths, *args: str, cwd: Path | None = None) -> Result:
    env = {"CLOISTER_CONFIG_DIR": str(paths.config_dir), "CLOISTER_DATA_DIR": str(paths.data_dir)}
    with pytest.MonkeyPatch.context() as patch:
        if cwd is not None:
            patch.chdir(cwd)
        return CliRunner().invoke(cli, ["sync", *args], env=env, prog_name="cloister")


OUTCOME = SyncOutcome(
    "api",
    imported={"main": "a" * 40, "feature": "b" * 40},
    removed=["gone"],
    fast_forwarded=("main", "c" * 40, "a" * 40),
    to_cloister={"docs": "d" * 40},
    notes=["your \x1b[31mfeature\x1b[0m was not fast-forwarded"],
    head=Head(branch="main"),
    seconds=0.25,
)


@pytest.mark.usefixtures("started")
def test_a_running_cloister_is_synced_and_keeps_its_git_directory(
    paths: CloisterPaths, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    add_cloister(engine, "api", "running")
    syncer.outcome = OUTCOME
    result = invoke(paths, "api")
    assert result.exit_code == 0, result.output
    assert syncer.calls == [{"cloister": "api", "running": True, "assume_yes": False}]
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"refs/cloister/api/feature is now {'b' * 12}",
        f"refs/cloister/api/main is now {'a' * 12}",
        "refs/cloister/api/gone removed",
        f"your main fast-forwarded to the agent's ({'c' * 12} -> {'a' * 12})",
        f"the cloister's docs moved to your {'d' * 12}",
        "your \\x1b[31mfeature\\x1b[0m was not fast-forwarded",  # the agent's text: escaped
    ]
    assert paths.cloister_git_dir("api").is_dir()


def test_a_stopped_cloisters_git_directory_goes_once_synced(
    paths: CloisterPaths, started: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    """The last sync its stop could not do: the container is gone."""
    result = invoke(paths, "api")
    assert result.exit_code == 0, result.output
    assert syncer.calls == [{"cloister": "api", "running": False, "assume_yes": False}]
    assert result.output == "cloister api: nothing new\n"
    assert not started.exists()
    assert not paths.git_pointer("api").exists()


def test_an_exited_container_is_synced_as_stopped_and_keeps_its_git_directory(
    paths: CloisterPaths, started: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    add_cloister(engine, "api", "exited")
    result = invoke(paths, "api", "--yes")
    assert result.exit_code == 0, result.output
    assert syncer.calls == [{"cloister": "api", "running": False, "assume_yes": True}]
    assert started.is_dir()  # its stop syncs once more, and removes it


def test_a_failed_sync_is_one_clean_error_and_keeps_the_git_directory(
    paths: CloisterPaths, started: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    syncer.error = SyncError("cloister api: the export failed: boom")
    result = invoke(paths, "api")
    assert result.exit_code == 1
    assert result.output == "Error: cloister api: the export failed: boom\n"
    assert started.is_dir()


@pytest.mark.usefixtures("started")
def test_json(paths: CloisterPaths, engine: FakeEngine, syncer: FakeSyncer) -> None:
    add_cloister(engine, "api", "running")
    syncer.outcome = OUTCOME
    result = invoke(paths, "api", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "cloister": "api",
        "imported": {"main": "a" * 40, "feature": "b" * 40},
        "removed": ["gone"],
        "fast_forwarded": {"branch": "main", "from": "c" * 40, "to": "a" * 40},
        "to_cloister": {"docs": "d" * 40},
        "notes": ["your \x1b[31mfeature\x1b[0m was not fast-forwarded"],
        "seconds": 0.25,
    }
    assert result.stderr == ""
    syncer.outcome = SyncOutcome("api")
    nothing = json.loads(invoke(paths, "api", "--json").stdout)
    assert nothing["fast_forwarded"] is None
    assert nothing["imported"] == {}


@pytest.mark.usefixtures("started")
def test_the_cloister_of_this_directory(
    paths: CloisterPaths, repo: Path, engine: FakeEngine, syncer: FakeSyncer
) -> None:
    add_cloister(engine, "api", "running")
    (repo / "src").mkdir()
    result = invoke(paths, cwd=repo / "src")
    assert result.exit_code == 0, result.output
    assert [call["cloister"] for call in syncer.calls] == ["api"]


@pytest.mark.usefixtures("engine")
def test_no_cloister(paths: CloisterPaths, tmp_path: Path, syncer: FakeSyncer) -> None:
    named = invoke(paths, "nobody")
    assert named.exit_code == 1
    assert named.output == "Error: no cloister 'nobody' (`cloister list`)\n"
    here = invoke(paths, cwd=tmp_path)
    assert here.exit_code == 1
    assert here.output == "Error: no cloister works here\n"
    assert syncer.calls == []


@pytest.mark.usefixtures("engine")
def test_a_cloister_without_git_has_nothing_to_sync(
    paths: CloisterPaths, tmp_path: Path, syncer: FakeSyncer
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    workspace = Workspace(Project("notes", notes, git=False), notes)
    sessions.prepare(paths, workspace, "notes", home=tmp_path / "home")
    result = invoke(paths, "notes")
    assert result.exit_code == 1
    assert result.output == "Error: cloister notes does not work in a git repository\n"
    assert syncer.calls == []
