"""``cloister gc``'s survey with no engine: which cloisters are dead, which worktrees
orphaned, which snapshots expired (the clean-up itself runs in
tests/cli/test_acceptance_restore.py, on a real engine)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cloister_cli.context import Context
from cloister_cli.repo import projects
from cloister_cli.repo.projects import Project
from cloister_cli.session import gc
from cloister_cli.session.snapshots import Target, take
from cloister_cli.start.worktree import make_worktree
from cloister_core import beneath, stack
from cloister_core.config.models import SnapshotsConfig
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, read_session, write_session
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine
from tests.git_support import hermetic_git, make_repo, run_git
from tests.tree_support import deep_tree


def context_for(tmp_path: Path, engine: FakeEngine) -> Context:
    context = Context(CloisterPaths(tmp_path / "config", tmp_path / "data"), home=tmp_path)
    context.__dict__["docker"] = engine
    context.__dict__["instance"] = INSTANCE
    return context


def run_cloister(engine: FakeEngine, name: str, path: Path) -> None:
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: name, stack.LABEL_PATH: str(path)}
    engine.add_container(INSTANCE.cloister(name), labels)


def add_network(engine: FakeEngine, cloister: str, created: datetime) -> None:
    """Cloister *cloister*'s network, made at *created*."""
    labels = {**INSTANCE.labels, stack.LABEL_CLOISTER: cloister}
    engine.add_network(
        INSTANCE.cloister(cloister),
        labels=labels,
        Created=created.isoformat().replace("+00:00", "Z"),
    )


def test_networks_whose_cloister_no_longer_exists_are_removed_once_old(tmp_path: Path) -> None:
    """A stop keeps the network for the next start: a stopped cloister of a registered
    project still exists; one whose project is gone, or never had a session, does not."""
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    run_cloister(engine, "alive", tmp_path)
    now = datetime.now(UTC)
    projects.register(context.paths, Project("kept", tmp_path, git=False))
    for name, project in (("stopped", "kept"), ("orphaned", "unregistered")):
        write_session(
            context.paths,
            SessionRecord(
                cloister=name, project=project, worktree="/src/p", started_at=now, stopped_at=now
            ),
        )
    for name in ("alive", "stopped", "orphaned", "gone"):
        add_network(engine, name, now - timedelta(hours=1))
    add_network(engine, "starting", now)  # a start that has not run its container yet
    found = gc.survey(context)
    stale = [INSTANCE.cloister("gone"), INSTANCE.cloister("orphaned")]
    assert found.stale_networks == stale
    assert not found.empty
    assert gc.collect(context, found).networks == stale
    removed = [line for line in engine.log if line.startswith("network rm ")]
    assert removed == [f"network rm {name}" for name in stale]
    assert INSTANCE.cloister("stopped") in engine.networks.by_name


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
    run_cloister(engine, "alive", tmp_path)
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
    run_cloister(engine, "repo-busy", base / "busy")
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
    run_cloister(engine, "alive", tmp_path)
    assert gc.dead_cloisters(context) == ["unsynced"]


@pytest.fixture
def made(repo: Path, tmp_path: Path) -> tuple[Context, FakeEngine, Path]:
    """A worktree as `cloister start -b feature` makes it, of project repo."""
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    projects.register(context.paths, Project("repo", repo, git=True))
    directory = context.paths.worktree("repo", "feature")
    make_worktree(repo, directory, "feature")
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
    run_cloister(engine, "repo-feature", directory)
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


def test_sync_containers_a_killed_sync_left_are_removed(tmp_path: Path) -> None:
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    labels = {**INSTANCE.labels, stack.LABEL_SYNC: "api"}
    now = datetime.now(UTC)
    for name, status, created in (
        ("cloister-sync-api-1", "exited", now),
        ("cloister-sync-web-2", "running", now),  # a sync in progress
        ("cloister-sync-api-3", "running", now - timedelta(hours=1)),  # abandoned
    ):
        engine.add_container(
            name, labels, status=status, created=created.isoformat().replace("+00:00", "Z")
        )
    found = gc.survey(context)
    assert found.syncs == ["cloister-sync-api-1", "cloister-sync-api-3"]
    assert not found.empty
    done = gc.collect(context, found)
    assert done.syncs == 2
    assert list(engine.containers.by_name) == ["cloister-sync-web-2"]
    # Gone meanwhile: no error, nothing counted.
    assert gc.collect(context, found).syncs == 0
    for listing in engine.called("containers.list"):  # the instance's own, never another's
        assert listing["all"]
        assert INSTANCE.label_filter in listing["filters"]["label"]


def test_probe_containers_a_killed_doctor_left_are_removed(tmp_path: Path) -> None:
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    labels = {**INSTANCE.labels, stack.LABEL_DOCTOR: "cloister-x-api"}
    now = datetime.now(UTC)
    for name, status, created in (
        ("probe-exited", "exited", now),
        ("probe-probing", "running", now),  # a doctor at work
        ("probe-abandoned", "running", now - timedelta(minutes=10)),
    ):
        engine.add_container(
            name, labels, status=status, created=created.isoformat().replace("+00:00", "Z")
        )
    engine.add_container(  # another instance's: never this gc's
        "probe-of-another", {stack.LABEL_DOCTOR: "cloister-y-api"}, status="exited"
    )
    found = gc.survey(context)
    assert found.probes == ["probe-exited", "probe-abandoned"]
    assert not found.empty
    done = gc.collect(context, found)
    assert done.probes == 2
    assert sorted(engine.containers.by_name) == ["probe-of-another", "probe-probing"]
    assert gc.collect(context, found).probes == 0  # gone meanwhile: nothing counted


def test_stand_ins_a_killed_stop_left_are_listed_then_removed(tmp_path: Path) -> None:
    """Those of a stopped session (a stop killed after it recorded the end), if still
    empty; never a running cloister's. An open session's are its stop's to remove (gc
    stops a dead cloister first, review included)."""
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    now = datetime.now(UTC)
    made: dict[str, list[Path]] = {}
    for name, stopped in (("killed", now), ("dead", None), ("alive", now)):
        root = tmp_path / name
        made[name] = [root / ".vscode", root / ".vscode" / "tasks.json", root / ".envrc"]
        for path in made[name]:
            path.mkdir(parents=True)
        write_session(
            context.paths,
            SessionRecord(
                cloister=name,
                project=name,
                worktree=str(root),
                started_at=now,
                stopped_at=stopped,
                placeholders=tuple(str(path) for path in made[name]),
            ),
        )
    run_cloister(engine, "alive", tmp_path / "alive")
    (tmp_path / "killed" / ".envrc" / "yours").write_text("now the human's\n", encoding="utf-8")
    found = gc.survey(context)
    killed = tmp_path / "killed"
    assert found.stand_ins == {"killed": [killed / ".envrc", killed / ".vscode" / "tasks.json"]}
    assert not found.empty
    assert all(path.is_dir() for paths in made.values() for path in paths)  # survey only
    done = gc.collect(context, found)
    assert done.stand_ins == [killed / ".vscode" / "tasks.json"]
    assert not (killed / ".vscode").exists()
    assert (killed / ".envrc" / "yours").is_file()
    assert found.dead == ["dead"]
    assert all(path.is_dir() for path in made["alive"])
    assert not (tmp_path / "dead" / ".vscode").exists()  # by its stop
    assert gc.survey(context).stand_ins == {}


def test_a_stand_in_a_live_cloister_mounts_is_not_collected(tmp_path: Path) -> None:
    """Two cloisters on one work tree: the stopped one made ``.envrc``, the live one
    found it and mounts it read-only. Removing it would detach that mount, so gc leaves
    it, listed, until the live one stops too."""
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    now = datetime.now(UTC)
    root = tmp_path / "shared"
    (root / ".envrc").mkdir(parents=True)
    write_session(
        context.paths,
        SessionRecord(
            cloister="maker",
            project="maker",
            worktree=str(root),
            started_at=now,
            stopped_at=now,
            placeholders=(str(root / ".envrc"),),
        ),
    )
    write_session(
        context.paths,
        SessionRecord(
            cloister="mounter",
            project="mounter",
            worktree=str(root),
            started_at=now,
            protected=(".envrc",),
        ),
    )
    run_cloister(engine, "mounter", root)
    assert gc.survey(context).stand_ins == {}
    gc.collect(context, gc.survey(context))
    assert (root / ".envrc").is_dir()
    maker = read_session(context.paths, "maker")
    assert maker is not None
    assert maker.placeholders == (str(root / ".envrc"),)  # still listed, for later
