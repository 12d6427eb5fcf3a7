"""``cloister gc``'s survey with no engine: which cloisters are dead, which worktrees
orphaned, which snapshots expired (the clean-up itself runs in
tests/cli/test_acceptance_restore.py, on a real engine)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import docker.errors
import pytest

from cloister_cli import gc, projects, starting
from cloister_cli.lifecycle import Context
from cloister_cli.projects import Project
from cloister_cli.snapshots import Target, take
from cloister_core import beneath, stack
from cloister_core.config.models import SnapshotsConfig
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, write_session
from tests.cli.engine_support import INSTANCE
from tests.git_support import hermetic_git, make_repo, run_git
from tests.tree_support import deep_tree


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

    def list(self, all: bool = False, filters: dict[str, list[str]] | None = None) -> list[Any]:
        wanted = [label.partition("=") for label in (filters or {}).get("label", [])]
        return [item for item in self.running.values() if _matches(item.labels, wanted)]


def _matches(labels: dict[str, str], wanted: list[tuple[str, str, str]]) -> bool:
    return all(key in labels and value in ("", labels[key]) for key, _, value in wanted)


@dataclass
class FakeNetwork:
    name: str
    attrs: dict[str, Any]
    removed: list[str]

    def reload(self) -> None:
        pass

    def remove(self) -> None:
        self.removed.append(self.name)


@dataclass
class FakeNetworks:
    """The instance's cloister networks, by name."""

    present: dict[str, FakeNetwork] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def add(self, cloister: str, created: datetime) -> None:
        name = INSTANCE.cloister(cloister)
        labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: cloister}
        attrs = {"Labels": labels, "Created": created.isoformat().replace("+00:00", "Z")}
        self.present[name] = FakeNetwork(name, attrs, self.removed)

    def list(self, names: list[str] | None = None, **_: Any) -> list[FakeNetwork]:
        return [net for name, net in self.present.items() if names is None or name in names]


@dataclass
class FakeEngine:
    containers: FakeContainers = field(default_factory=FakeContainers)
    networks: FakeNetworks = field(default_factory=FakeNetworks)


def context_for(tmp_path: Path, engine: FakeEngine) -> Context:
    context = Context(CloisterPaths(tmp_path / "config", tmp_path / "data"), home=tmp_path)
    context.__dict__["docker"] = engine
    context.__dict__["instance"] = INSTANCE
    return context


def running(name: str, path: Path) -> FakeContainer:
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: name, stack.LABEL_PATH: str(path)}
    return FakeContainer(labels)


def test_networks_whose_cloister_is_gone_are_removed_once_old(tmp_path: Path) -> None:
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    engine.containers.running[INSTANCE.cloister("alive")] = running("alive", tmp_path)
    now = datetime.now(UTC)
    engine.networks.add("alive", now - timedelta(hours=1))
    engine.networks.add("gone", now - timedelta(hours=1))
    engine.networks.add("starting", now)  # a start that has not run its container yet
    found = gc.survey(context)
    assert found.stale_networks == [INSTANCE.cloister("gone")]
    assert not found.empty
    assert gc.collect(context, found).networks == [INSTANCE.cloister("gone")]
    assert engine.networks.removed == [INSTANCE.cloister("gone")]


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
    engine.containers.running[INSTANCE.cloister("alive")] = running("alive", tmp_path)
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
    engine.containers.running[INSTANCE.cloister("repo-busy")] = running("repo-busy", base / "busy")
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


def test_collect_removes_trees_deeper_than_pythons_recursion_limit_through_no_link(
    tmp_path: Path,
) -> None:
    context = context_for(tmp_path, FakeEngine())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("human\n", encoding="utf-8")
    scratch = context.paths.snapshot_dir("repo") / "tmp" / "20200101T000000Z-dead"
    worktree = context.paths.worktrees_dir / "repo" / "gone"
    with deep_tree(scratch, depth=3), deep_tree(worktree) as bottom:
        (bottom / "to-outside").symlink_to(outside)
        (worktree / "to-outside").symlink_to(outside)
        found = gc.Survey(
            scratch=[scratch], orphans=[gc.Orphan(worktree, "repo", "it has no .git file")]
        )
        done = gc.collect(context, found, remove_worktree=lambda orphan: True)
        assert done.scratch == 1
        assert done.worktrees == [worktree]
        assert not scratch.exists()
        assert not worktree.exists()
    assert (outside / "keep").read_text(encoding="utf-8") == "human\n"


# -- cloisters with a git directory of their own ------------------------------------------------


def test_a_git_directory_its_stop_could_not_sync_makes_a_dead_cloister(tmp_path: Path) -> None:
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    now = datetime.now(UTC)
    git_dirs = context.paths.git_dirs_dir
    for name in ("unsynced", "alive", "half-made"):
        (git_dirs / name).mkdir(parents=True)
    for name in ("unsynced", "alive"):
        write_session(
            context.paths,
            SessionRecord(
                cloister=name, project="p", worktree="/src/p", started_at=now, stopped_at=now
            ),
        )
    (git_dirs / "unsynced.pointer").write_text("gitdir: /opt/cloister/git\n", encoding="utf-8")
    (git_dirs / "alive.unsynced-20260101T000000").mkdir()  # kept aside by a later start
    (git_dirs / ".sync-unsynced-1").mkdir()  # a sync's scratch
    (git_dirs / ".unsynced.sync.lock").write_text("", encoding="utf-8")
    engine.containers.running[INSTANCE.cloister("alive")] = running("alive", tmp_path)
    assert gc.dead_cloisters(context) == ["unsynced"]


@pytest.fixture
def made(repo: Path, tmp_path: Path) -> tuple[Context, FakeEngine, Path]:
    """A worktree as `cloister start -b feature` makes it, of project repo."""
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    projects.register(context.paths, Project("repo", repo, git=True))
    directory = context.paths.worktree("repo", "feature")
    starting.make_worktree(repo, directory, "feature")
    return context, engine, directory


def test_a_worktree_whose_repository_is_there_is_no_orphan(
    made: tuple[Context, FakeEngine, Path],
) -> None:
    context, _, _ = made
    assert gc.orphan_worktrees(context) == []


def test_a_worktree_whose_repository_is_gone_is_an_orphan(
    made: tuple[Context, FakeEngine, Path], repo: Path
) -> None:
    context, engine, directory = made
    beneath.remove_tree(repo)
    assert [(orphan.path, orphan.project) for orphan in gc.orphan_worktrees(context)] == [
        (directory, "repo")
    ]
    assert gc.orphan_worktrees(context)[0].reason == f"its repository ({repo}) is gone"
    engine.containers.running[INSTANCE.cloister("repo-feature")] = running(
        "repo-feature", directory
    )
    assert gc.orphan_worktrees(context) == []  # a cloister works in it


def test_a_worktree_no_project_names_is_an_orphan(
    made: tuple[Context, FakeEngine, Path],
) -> None:
    context, _, directory = made
    context.paths.project_config("repo").unlink()
    (orphan,) = gc.orphan_worktrees(context)
    assert orphan.path == directory
    assert orphan.reason == "no project 'repo' names a repository any more"


def test_collect_removes_an_orphan_worktree_only_when_told(
    made: tuple[Context, FakeEngine, Path], repo: Path
) -> None:
    context, _, directory = made
    beneath.remove_tree(repo)
    found = gc.survey(context)
    assert [orphan.path for orphan in found.orphans] == [directory]
    kept = gc.collect(context, found, remove_worktree=lambda orphan: False)
    assert kept.worktrees == []
    assert directory.is_dir()
    done = gc.collect(context, found, remove_worktree=lambda orphan: True)
    assert done.worktrees == [directory]
    assert not directory.exists()


def test_an_interrupted_syncs_scratch_directory_goes_once_old(tmp_path: Path) -> None:
    context = context_for(tmp_path, FakeEngine())
    git_dirs = context.paths.git_dirs_dir
    old, fresh = git_dirs / ".sync-api-old", git_dirs / ".sync-api-fresh"
    for directory in (old, fresh):
        (directory / "objects").mkdir(parents=True)
    os.utime(old, (0, 0))
    found = gc.survey(context)
    assert found.scratch == [old]
    done = gc.collect(context, found)
    assert done.scratch == 1
    assert not old.exists()
    assert fresh.is_dir()


@dataclass
class SyncContainer:
    name: str
    status: str
    engine: SyncEngine
    labels: dict[str, str] = field(
        default_factory=lambda: {**INSTANCE.labels, stack.LABEL_SYNC: "api"}
    )
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def attrs(self) -> dict[str, str]:
        return {"Created": self.created.replace("+00:00", "Z")}

    @property
    def short_id(self) -> str:
        return self.name[:10]

    def remove(self, force: bool = False) -> None:
        assert force
        self.engine.containers.items.remove(self)


@dataclass
class SyncContainers:
    items: list[SyncContainer] = field(default_factory=list)
    filters: list[dict[str, str]] = field(default_factory=list)

    def get(self, name: str) -> SyncContainer:
        for item in self.items:
            if item.name == name:
                return item
        raise docker.errors.NotFound(name)

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[SyncContainer]:
        assert all
        keys = (filters or {})["label"]
        assert INSTANCE.label_filter in keys  # the instance's own, never another's
        return [
            item for item in self.items if _matches(item.labels, [k.partition("=") for k in keys])
        ]


@dataclass
class SyncEngine:
    containers: SyncContainers = field(default_factory=SyncContainers)
    networks: FakeNetworks = field(default_factory=FakeNetworks)


def test_sync_containers_a_killed_sync_left_are_removed(tmp_path: Path) -> None:
    engine = SyncEngine()
    context = context_for(tmp_path, cast("FakeEngine", engine))
    long_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    engine.containers.items = [
        SyncContainer("cloister-sync-api-1", "exited", engine),
        SyncContainer("cloister-sync-web-2", "running", engine),  # a sync in progress
        SyncContainer("cloister-sync-api-3", "running", engine, created=long_ago),  # abandoned
    ]
    found = gc.survey(context)
    assert found.syncs == ["cloister-sync-api-1", "cloister-sync-api-3"]
    assert not found.empty
    done = gc.collect(context, found)
    assert done.syncs == 2
    assert [item.name for item in engine.containers.items] == ["cloister-sync-web-2"]
    # Gone meanwhile: no error, nothing counted.
    assert gc.collect(context, found).syncs == 0
