"""``cloister gc``'s survey with no engine: which cloisters are dead, which worktrees
orphaned, which snapshots expired (the clean-up itself runs in
tests/cli/test_acceptance_restore.py, on a real engine)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from cloister_cli import gc
from cloister_cli.lifecycle import Context
from cloister_cli.snapshots import Target, take
from cloister_core import stack
from cloister_core.config.models import SnapshotsConfig
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, write_session
from tests.git_support import hermetic_git, make_repo, run_git


@dataclass
class FakeContainer:
    labels: dict[str, str]
    status: str = "running"
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeContainers:
    running: dict[str, FakeContainer] = field(default_factory=dict)

    def get(self, name: str) -> FakeContainer:
        if name not in self.running:
            raise docker.errors.NotFound(name)
        return self.running[name]

    def list(self, **_: Any) -> list[FakeContainer]:
        return list(self.running.values())


@dataclass
class FakeEngine:
    containers: FakeContainers = field(default_factory=FakeContainers)


def context_for(tmp_path: Path, engine: FakeEngine) -> Context:
    context = Context(CloisterPaths(tmp_path / "config", tmp_path / "data"), home=tmp_path)
    context.__dict__["docker"] = engine
    return context


def running(name: str, path: Path) -> FakeContainer:
    return FakeContainer({stack.LABEL_CLOISTER: name, stack.LABEL_PATH: str(path)})


def test_dead_cloisters_have_a_token_or_an_unfinished_session_and_no_container(
    tmp_path: Path,
) -> None:
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    tokens = context.paths.tokens_dir
    tokens.mkdir(parents=True)
    for name in ("alive", "dead-token", ".hidden", "Not A Name"):
        (tokens / name).write_text("{}", encoding="utf-8")
    now = datetime.now(UTC)
    for name, stopped in (("dead-session", None), ("finished", now)):
        write_session(
            context.paths,
            SessionRecord(
                cloister=name, project="p", worktree="/src/p", started_at=now, stopped_at=stopped
            ),
        )
    markers = context.paths.data_dir / "markers"
    markers.mkdir(parents=True)
    (markers / "dead-marker.json").write_text("{}", encoding="utf-8")
    (context.paths.data_dir / "accounts" / "dead-accounts").mkdir(parents=True)
    engine.containers.running["cloister-alive"] = running("alive", tmp_path)
    assert gc.dead_cloisters(context) == [
        "dead-accounts",
        "dead-marker",
        "dead-session",
        "dead-token",
    ]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hermetic_git(monkeypatch)
    return make_repo(tmp_path / "repo")


def test_orphan_worktrees_are_those_their_repository_forgot(repo: Path, tmp_path: Path) -> None:
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    base = context.paths.worktrees_dir / "repo"
    for branch in ("kept", "pruned", "busy"):
        run_git(repo, "worktree", "add", "-q", "-b", branch, str(base / branch))
    engine.containers.running["cloister-repo-busy"] = running("repo-busy", base / "busy")
    (base / "loose").mkdir()  # no .git file at all
    run_git(repo, "worktree", "remove", "--force", str(base / "pruned"))
    (base / "pruned").mkdir()
    (base / "pruned" / ".git").write_text(
        f"gitdir: {repo / '.git' / 'worktrees' / 'pruned'}\n", encoding="utf-8"
    )
    found = {orphan.path.name: orphan.reason for orphan in gc.orphan_worktrees(context)}
    assert set(found) == {"loose", "pruned"}
    assert "no .git file" in found["loose"]
    assert "is gone" in found["pruned"]

    moved_away = base / "kept"
    run_git(repo, "worktree", "move", str(moved_away), str(tmp_path / "moved"))
    moved_away.mkdir()
    (moved_away / ".git").write_text(
        f"gitdir: {repo / '.git' / 'worktrees' / 'kept'}\n", encoding="utf-8"
    )
    reason = {orphan.path.name: orphan.reason for orphan in gc.orphan_worktrees(context)}["kept"]
    assert "another worktree" in reason


def test_the_survey_lists_expired_snapshots_and_abandoned_scratch(
    repo: Path, tmp_path: Path
) -> None:
    context = context_for(tmp_path, FakeEngine())
    context.__dict__["config"] = context.config.model_copy(
        update={"snapshots": SnapshotsConfig(keep=1)}
    )
    now = datetime.now(UTC)
    target = Target.of("repo", "repo", repo)
    old = take(context.paths, target, SnapshotsConfig(), now=now - timedelta(hours=1))
    take(context.paths, target, SnapshotsConfig(), now=now)
    scratch = context.paths.snapshot_dir("repo") / "tmp" / "20200101T000000Z-dead"
    scratch.mkdir(parents=True)
    os.utime(scratch, (0, 0))
    found = gc.survey(context)
    assert [record.id for record in found.expired["repo"]] == [old.id]
    assert found.scratch == [scratch]
    assert not found.empty
