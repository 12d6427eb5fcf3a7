"""The daemon's watch: a running cloister whose refs (or the human's) change is synced.

A fake syncer records the calls; the files watched are plain files in a temporary data
directory and a stand-in for the human's ``.git`` (the watch only ``lstat``s them).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, write_session
from cloister_executor import syncwatch
from cloister_executor.gitsync import Syncer, SyncError, SyncOutcome
from cloister_executor.syncwatch import SyncWatch, signature


@dataclass
class FakeSyncer:
    """Records ``sync`` calls; answers with *outcome* or raises *error*."""

    calls: list[tuple[str, bool]] = field(default_factory=list)
    error: SyncError | None = None
    imported: dict[str, str] = field(default_factory=dict)

    def sync(self, cloister: str, *, running: bool, assume_yes: bool = False) -> SyncOutcome:
        assert not assume_yes  # the watch never says yes for the human
        self.calls.append((cloister, running))
        if self.error is not None:
            raise self.error
        return SyncOutcome(cloister, imported=dict(self.imported))


@dataclass
class Setup:
    root: Path
    paths: CloisterPaths
    syncer: FakeSyncer
    messages: list[str]
    watch: SyncWatch

    def cloister(self, name: str, *, running: bool = True, git: bool = True) -> SessionRecord:
        own = self.paths.cloister_git_dir(name)
        (own / "refs" / "heads").mkdir(parents=True, exist_ok=True)
        (own / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
        common = self.root / f"{name}-repo" / ".git"
        (common / "refs" / "heads").mkdir(parents=True, exist_ok=True)
        (common / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
        record = SessionRecord(
            cloister=name,
            project=name,
            worktree=str(common.parent),
            checkout=str(common.parent) if git else None,
            common_dir=str(common) if git else None,
            started_at=datetime.now(UTC),
            stopped_at=None if running else datetime.now(UTC),
        )
        write_session(self.paths, record)
        return record

    def tick(self) -> list[tuple[str, bool]]:
        """One tick; the syncs it made."""
        before = len(self.syncer.calls)
        asyncio.run(self.watch.tick())
        return self.syncer.calls[before:]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    monkeypatch.setattr(syncwatch, "MIN_GAP_SECONDS", 0.0)
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    syncer = FakeSyncer()
    messages: list[str] = []
    watch = SyncWatch(paths, cast(Syncer, syncer), messages.append)
    return Setup(tmp_path, paths, syncer, messages, watch)


def touch(path: Path, text: str) -> None:
    """Change *path* as git would (a new file renamed over it: a new inode)."""
    temporary = path.with_name(path.name + ".lock")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def test_a_running_cloister_is_synced_once_then_only_when_something_changes(
    setup: Setup,
) -> None:
    setup.cloister("demo")
    assert setup.tick() == [("demo", True)]  # the first look: whatever came before it
    assert setup.tick() == []
    assert setup.tick() == []
    # The agent commits on its checked-out branch.
    touch(setup.paths.cloister_git_dir("demo") / "refs" / "heads" / "main", "a" * 40 + "\n")
    assert setup.tick() == [("demo", True)]
    assert setup.tick() == []


@pytest.mark.parametrize(
    "changed",
    [
        "own HEAD",
        "own packed-refs",
        "own logs/HEAD",
        "own new branch",
        "human HEAD",
        "human branch",
    ],
)
def test_what_the_watch_sees(setup: Setup, changed: str) -> None:
    record = setup.cloister("demo")
    own = setup.paths.cloister_git_dir("demo")
    common = Path(str(record.common_dir))
    setup.tick()
    match changed:
        case "own HEAD":
            touch(own / "HEAD", "ref: refs/heads/other\n")
        case "own packed-refs":
            touch(own / "packed-refs", f"{'b' * 40} refs/heads/main\n")
        case "own logs/HEAD":
            (own / "logs").mkdir()
            (own / "logs" / "HEAD").write_text("a reflog line\n", encoding="utf-8")
        case "own new branch":
            (own / "refs" / "heads" / "topic").write_text("c" * 40 + "\n", encoding="utf-8")
        case "human HEAD":
            touch(common / "HEAD", "ref: refs/heads/other\n")
        case "human branch":
            (common / "refs" / "heads" / "x").write_text("d" * 40 + "\n", encoding="utf-8")
    assert setup.tick() == [("demo", True)]


def test_files_the_watch_does_not_look_at(setup: Setup) -> None:
    setup.cloister("demo")
    own = setup.paths.cloister_git_dir("demo")
    setup.tick()
    (own / "index").write_bytes(b"DIRC")
    (own / "objects").mkdir()
    (own / "objects" / "loose").write_bytes(b"x")
    assert setup.tick() == []


def test_the_watch_follows_no_link(setup: Setup, tmp_path: Path) -> None:
    record = setup.cloister("demo")
    own = setup.paths.cloister_git_dir("demo")
    outside = tmp_path / "outside"
    outside.write_text("x\n", encoding="utf-8")
    (own / "packed-refs").symlink_to(outside)
    before = signature(setup.paths, record)
    outside.write_text("changed, and longer than it was\n", encoding="utf-8")
    assert signature(setup.paths, record) == before  # lstat: the link, not its target


def test_the_minimum_gap_holds_a_change_for_a_later_tick(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup.cloister("demo")
    assert setup.tick() == [("demo", True)]
    monkeypatch.setattr(syncwatch, "MIN_GAP_SECONDS", 3600.0)
    touch(setup.paths.cloister_git_dir("demo") / "HEAD", "ref: refs/heads/other\n")
    assert setup.tick() == []  # too soon after the last sync
    assert setup.tick() == []
    monkeypatch.setattr(syncwatch, "MIN_GAP_SECONDS", 0.0)
    assert setup.tick() == [("demo", True)]  # not lost: synced once the gap passed
    assert setup.tick() == []


def test_stopped_and_non_git_sessions_are_not_watched_and_a_stopped_one_is_forgotten(
    setup: Setup,
) -> None:
    setup.cloister("demo")
    setup.cloister("plain", git=False)
    setup.cloister("old", running=False)
    assert setup.tick() == [("demo", True)]
    setup.cloister("demo", running=False)  # cloister stop
    assert setup.tick() == []
    assert "demo" not in setup.watch._seen
    assert "demo" not in setup.watch._last
    setup.cloister("demo")  # started again, the same files: synced anew
    assert setup.tick() == [("demo", True)]


def test_several_cloisters_are_watched_apart(setup: Setup) -> None:
    setup.cloister("one")
    setup.cloister("two")
    assert sorted(setup.tick()) == [("one", True), ("two", True)]
    touch(setup.paths.cloister_git_dir("two") / "HEAD", "ref: refs/heads/x\n")
    assert setup.tick() == [("two", True)]


def test_what_a_sync_did_is_reported(setup: Setup) -> None:
    setup.cloister("demo")
    setup.tick()
    assert setup.messages == []  # nothing changed: nothing said
    setup.syncer.imported = {"main": "a" * 40}
    touch(setup.paths.cloister_git_dir("demo") / "HEAD", "ref: refs/heads/x\n")
    setup.tick()
    (message,) = setup.messages
    assert message.startswith("git.sync demo: ")
    assert "a" * 40 in message


def test_a_failed_sync_is_reported_and_the_watch_goes_on(setup: Setup) -> None:
    setup.cloister("demo")
    setup.syncer.error = SyncError("the export failed")
    assert setup.tick() == [("demo", True)]
    (message,) = setup.messages
    assert message.startswith("git.sync.failed demo: ")
    assert "the export failed" in message
    # Not retried in a loop: the next attempt waits for the next change.
    assert setup.tick() == []
    setup.syncer.error = None
    touch(setup.paths.cloister_git_dir("demo") / "HEAD", "ref: refs/heads/x\n")
    assert setup.tick() == [("demo", True)]


def test_a_broken_session_record_is_skipped(setup: Setup) -> None:
    setup.cloister("demo")
    setup.paths.session_file("broken").write_text("{not json", encoding="utf-8")
    assert setup.tick() == [("demo", True)]


def test_an_unexpected_error_of_a_sync_does_not_stop_the_watch(setup: Setup) -> None:
    """The watch runs in the daemon's task group: an exception out of it would stop the
    daemon, hostexec with it."""
    setup.cloister("demo")
    setup.cloister("other")

    def broken(cloister: str, *, running: bool, assume_yes: bool = False) -> SyncOutcome:
        setup.syncer.calls.append((cloister, running))
        raise RuntimeError(f"something unforeseen in {cloister}")

    setup.syncer.sync = broken  # type: ignore[method-assign]
    assert sorted(setup.tick()) == [("demo", True), ("other", True)]  # the second still runs
    assert len(setup.messages) == 2
    assert all(message.startswith("git.sync.failed ") for message in setup.messages)
    assert any("something unforeseen in demo" in message for message in setup.messages)
