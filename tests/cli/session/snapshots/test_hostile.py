"""What an agent can leave in the repository, against snapshots and restores (each case
found by an attacker's read, and tried here with real git)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cloister_cli.session.snapshots import restore, take
from cloister_cli.session.snapshots.choose import chosen, records_of
from cloister_core.config.models import SnapshotsConfig
from cloister_core.snapshots import SnapshotError, pool_dir, read_records, records_dir
from tests.cli.session.snapshots.conftest import Scene
from tests.git_support import GIT, run_git
from tests.tree_support import deep_tree


def fsck(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GIT, "-C", str(repo), "fsck", "--no-progress"], capture_output=True, text=True, check=False
    )


def test_a_restore_never_expires_the_snapshot_it_restores(scene: Scene) -> None:
    old = take(scene.paths, scene.target(), scene.settings, now=datetime.now(UTC) - timedelta(60))
    shutil.rmtree(scene.repo / ".git" / "objects")
    restore(scene.paths, old, scene.settings)
    assert scene.git("log", "-1", "--format=%s") == "commit 4"
    assert old.id in {record.id for record in read_records(scene.paths, "api")}
    # Failed restores (each snapshotting what was there) never push the start out either.
    settings = SnapshotsConfig(keep=2)
    for _ in range(3):
        restore(scene.paths, old, settings)
    assert chosen(records_of(scene.paths, "api"), None).id == old.id


def test_no_filter_of_the_humans_runs_on_the_agents_files(scene: Scene, tmp_path: Path) -> None:
    log = tmp_path / "filter.log"
    script = tmp_path / "filter.sh"
    script.write_text(f'#!/bin/sh\necho "$1 $2" >> {log}\ncat\n', encoding="utf-8")
    script.chmod(0o755)
    scene.git("config", "filter.lfs.clean", f"{script} clean %f")
    scene.git("config", "filter.lfs.smudge", f"{script} smudge %f")
    scene.git("config", "filter.lfs.required", "true")
    (scene.repo / ".gitattributes").write_text("* filter=lfs\n", encoding="utf-8")  # the agent's
    (scene.repo / "notes.txt").write_text("the agent chose this file\n", encoding="utf-8")
    record = take(scene.paths, scene.target(), scene.settings)
    (scene.repo / "notes.txt").write_text("changed since\n", encoding="utf-8")
    restore(scene.paths, record, scene.settings)
    assert not log.exists()
    assert (scene.repo / "notes.txt").read_text(encoding="utf-8") == "the agent chose this file\n"


def test_what_a_restore_overwrites_is_kept_whatever_its_size_and_ignored_files_move_aside(
    scene: Scene,
) -> None:
    settings = SnapshotsConfig(untracked_file_limit="1k")
    record = take(scene.paths, scene.target(), settings)
    (scene.repo / "file3.txt").write_bytes(b"big tracked change " * 200)
    (scene.repo / "notes.txt").write_bytes(b"big untracked change " * 200)
    (scene.repo / ".gitignore").write_text("build/\nsecret.env\n", encoding="utf-8")
    (scene.repo / "secret.env").write_text("KEY=1\n", encoding="utf-8")
    scene.git("add", "-f", ".gitignore")
    outcome = restore(scene.paths, record, settings)
    assert outcome.before is not None
    assert outcome.before.skipped_count == 0
    assert scene.kept("show", f"{outcome.before.worktree_tree}:file3.txt").startswith("big")
    assert scene.kept("show", f"{outcome.before.worktree_tree}:notes.txt").startswith("big")
    # secret.env is ignored (so in no snapshot) but not in the snapshot's way: it stays.
    assert (scene.repo / "secret.env").exists()


def test_an_ignored_file_in_the_way_is_moved_aside(scene: Scene) -> None:
    (scene.repo / "cfg").write_text("a tracked file\n", encoding="utf-8")
    scene.git("add", "cfg")
    scene.git("commit", "-qm", "cfg")
    record = take(scene.paths, scene.target(), scene.settings)
    scene.git("rm", "-q", "cfg")
    (scene.repo / "cfg").mkdir()
    (scene.repo / "cfg" / ".env").write_text("ignored, nowhere else\n", encoding="utf-8")
    (scene.repo / ".git" / "info" / "exclude").write_text(".env\n", encoding="utf-8")
    outcome = restore(scene.paths, record, scene.settings)
    assert (scene.repo / "cfg").read_text(encoding="utf-8") == "a tracked file\n"
    assert outcome.displaced is not None
    kept = outcome.displaced / "worktree" / "cfg" / ".env"
    assert kept.read_text(encoding="utf-8") == "ignored, nowhere else\n"


def test_an_object_file_swapped_by_the_agent_is_replaced_from_the_pool(scene: Scene) -> None:
    record = take(scene.paths, scene.target(), scene.settings)
    pack = next(name for name in record.files if name.endswith(".pack"))
    original = scene.repo / ".git" / "objects" / pack
    damaged = bytearray(original.read_bytes())
    damaged[100] ^= 0xFF
    swapped = original.with_name("swap")
    swapped.write_bytes(bytes(damaged))
    swapped.replace(original)  # a new file under the old name (the pool's link is intact)
    assert fsck(scene.repo).returncode != 0
    outcome = restore(scene.paths, record, scene.settings)
    assert fsck(scene.repo).returncode == 0
    assert outcome.displaced is not None
    assert (outcome.displaced / "objects" / pack).read_bytes() == bytes(damaged)


def test_symbolic_refs_after_a_fetch(scene: Scene, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    run_git(tmp_path, "clone", "-q", str(scene.repo), str(clone))
    target = type(scene.target()).of("api", "api", clone)
    record = take(scene.paths, target, scene.settings)
    assert record.symrefs == {"refs/remotes/origin/HEAD": "refs/remotes/origin/main"}
    scene.git("commit", "-q", "--allow-empty", "-m", "upstream moved")
    run_git(clone, "fetch", "-q")
    restore(scene.paths, record, scene.settings)
    assert run_git(clone, "symbolic-ref", "refs/remotes/origin/HEAD") == "refs/remotes/origin/main"
    assert run_git(clone, "log", "-1", "--format=%s", "origin/main") == "commit 4"


@pytest.mark.parametrize("kind", ["sparse", "link", "fifo"])
def test_an_index_git_did_not_write_is_refused_quickly(
    scene: Scene, tmp_path: Path, kind: str
) -> None:
    index = scene.repo / ".git" / "index"
    index.unlink()
    if kind == "sparse":
        with index.open("wb") as handle:
            handle.truncate(4 * 1024**3)
    elif kind == "link":
        index.symlink_to("/dev/zero")
    else:
        os.mkfifo(index)
    with pytest.raises(SnapshotError, match="index"):
        take(scene.paths, scene.target(), scene.settings)
    assert not any((scene.paths.snapshot_dir("api") / "tmp").iterdir())


def test_a_branch_checked_out_in_another_worktree_is_left_alone(
    scene: Scene, tmp_path: Path
) -> None:
    worktree = tmp_path / "feature"
    scene.git("worktree", "add", "-q", "-b", "feature", str(worktree))
    target = type(scene.target()).of("api-feature", "api", worktree)
    record = take(scene.paths, target, scene.settings)
    scene.git("commit", "-q", "--allow-empty", "-m", "the human's commit on main")
    outcome = restore(scene.paths, record, scene.settings)
    assert scene.git("log", "-1", "--format=%s", "main") == "the human's commit on main"
    assert any("refs/heads/main" in note for note in outcome.notes)


def test_refs_in_the_way_locks_and_links_do_not_stop_a_restore(
    scene: Scene, tmp_path: Path
) -> None:
    record = take(scene.paths, scene.target(), scene.settings)
    scene.git("checkout", "-q", "--detach")
    scene.git("branch", "-q", "-D", "main")
    scene.git("branch", "main/x")  # main cannot be made while main/x exists
    (scene.repo / ".git" / "index.lock").write_text("", encoding="utf-8")
    victim = tmp_path / "victim"
    victim.mkdir()
    shutil.rmtree(scene.repo / ".git" / "logs")
    (scene.repo / ".git" / "logs").symlink_to(victim)
    outcome = restore(scene.paths, record, scene.settings)
    assert scene.git("symbolic-ref", "HEAD") == "refs/heads/main"
    assert "refs/heads/main/x" in outcome.changed  # deleted; in the snapshot made first
    assert list(victim.iterdir()) == []
    assert not (scene.repo / ".git" / "index.lock").exists()


def test_a_forged_index_path_stops_the_restore_before_any_ref_moves(scene: Scene) -> None:
    record = take(scene.paths, scene.target(), scene.settings)
    blob = scene.git("hash-object", "-w", "--stdin")
    tree, loose = _tree_with(scene, "../evil", blob)
    forged = record.model_copy(update={"worktree_tree": tree, "files": (*record.files, loose)})
    scene.git("reset", "-q", "--hard", "HEAD~1")
    with pytest.raises(SnapshotError, match="invalid path"):
        restore(scene.paths, forged, scene.settings)
    assert scene.git("log", "-1", "--format=%s") == "commit 3"


def _tree_with(scene: Scene, path: str, blob: str) -> tuple[str, str]:
    """A tree naming *path*, written raw into the pool (``git mktree`` refuses it), and
    its pool file."""
    body = b"100644 " + path.encode() + b"\0" + bytes.fromhex(blob)
    header = f"tree {len(body)}\0".encode()
    oid = hashlib.sha1(header + body, usedforsecurity=False).hexdigest()
    pool = pool_dir(scene.paths, "api")
    loose = pool / oid[:2] / oid[2:]
    loose.parent.mkdir(exist_ok=True)
    loose.write_bytes(zlib.compress(header + body))
    return oid, f"{oid[:2]}/{oid[2:]}"


def test_shallow_clones_stash_entries_and_unborn_branches(scene: Scene, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    run_git(tmp_path, "clone", "-q", "--depth=1", f"file://{scene.repo}", str(shallow))
    target = type(scene.target()).of("shallow", "shallow", shallow)
    record = take(scene.paths, target, scene.settings)
    for entry in (shallow / ".git").iterdir():
        if entry.name not in ("config", "hooks"):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    restore(scene.paths, record, scene.settings)
    assert fsck(shallow).returncode == 0

    for number in range(3):
        (scene.repo / "file0.txt").write_text(f"stashed {number}\n", encoding="utf-8")
        scene.git("stash", "-q")
    entries = scene.git("stash", "list")
    record = take(scene.paths, scene.target(), scene.settings)
    assert len(record.stash) == 3
    scene.git("stash", "drop", "-q", "stash@{1}")
    scene.git("stash", "drop", "-q", "stash@{1}")
    restore(scene.paths, record, scene.settings)
    assert scene.git("stash", "list") == entries

    empty = tmp_path / "empty"
    run_git(tmp_path, "init", "-q", "-b", "trunk", str(empty))
    record = take(scene.paths, type(scene.target()).of("e", "e", empty), scene.settings)
    run_git(empty, "commit", "-q", "--allow-empty", "-m", "the agent's")
    restore(scene.paths, record, scene.settings)
    assert run_git(empty, "for-each-ref") == ""


def test_a_repository_around_the_project_is_never_taken_for_it(
    tmp_path: Path, scene: Scene
) -> None:
    around = tmp_path / "home"
    run_git(tmp_path, "init", "-q", "-b", "main", str(around))
    run_git(around, "commit", "-q", "--allow-empty", "-m", "dotfiles")
    project = around / "code" / "proj"
    shutil.copytree(scene.repo, project)
    target = type(scene.target()).of("proj", "proj", project)
    record = take(scene.paths, target, scene.settings)
    (project / ".git" / "HEAD").unlink()
    outcome = restore(scene.paths, record, scene.settings)
    assert outcome.before is not None
    assert outcome.before.refs["refs/heads/main"] == record.refs["refs/heads/main"]


def test_an_unreadable_record_keeps_the_pool_files(scene: Scene) -> None:
    settings = SnapshotsConfig(keep=1)
    now = datetime.now(UTC)
    first = take(scene.paths, scene.target(), settings, now=now - timedelta(hours=2))
    newer = records_dir(scene.paths, "api") / "20991231T000000Z-ffff.json"
    newer.write_text('{"from": "a newer Cloister"}', encoding="utf-8")
    (scene.repo / "notes.txt").write_text("changed\n", encoding="utf-8")
    take(scene.paths, scene.target(), settings, now=now - timedelta(hours=1))
    take(scene.paths, scene.target(), settings, now=now)
    assert first.id not in {record.id for record in read_records(scene.paths, "api")}
    pool = pool_dir(scene.paths, "api")
    assert all((pool / name).exists() for name in first.files)


def test_a_ref_name_that_is_not_utf8_is_counted_not_mangled(scene: Scene) -> None:
    refs = scene.repo / ".git" / "refs" / "heads"
    (refs / os.fsdecode(b"caf\xe9")).write_text(scene.git("rev-parse", "HEAD") + "\n")
    record = take(scene.paths, scene.target(), scene.settings)
    assert record.unsupported_refs == 1
    assert all(name.isprintable() for name in record.refs)


def test_a_tree_deeper_than_pythons_recursion_limit_in_the_git_directory(
    scene: Scene, tmp_path: Path
) -> None:
    # Where a restore walks (links, FIFOs and locks are cleared there), the agent can
    # nest directories deeper than Python's recursion limit.
    victim = tmp_path / "victim"
    victim.mkdir()
    with deep_tree(scene.repo / ".git" / "deep") as planted:
        record = take(scene.paths, scene.target(), scene.settings)
        (planted / "link").symlink_to(victim)
        (planted / "index.lock").write_text("", encoding="utf-8")
        scene.git("reset", "-q", "--hard", "HEAD~1")

        outcome = restore(scene.paths, record, scene.settings)

        assert scene.git("log", "-1", "--format=%s") == "commit 4"
        assert not (planted / "link").is_symlink()
        assert not (planted / "index.lock").exists()
        assert (planted / "f").is_file()
        assert any(str(planted / "link") in note for note in outcome.notes)
        assert list(victim.iterdir()) == []
