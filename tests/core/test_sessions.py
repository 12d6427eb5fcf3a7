"""Session records and guard events: written atomically, read back, broken ones reported."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from cloister_core.gitdir import GitDirBaseline, SpecialEntry
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import (
    SessionError,
    SessionRecord,
    append_event,
    clear_events,
    list_sessions,
    read_events,
    read_session,
    write_session,
)


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def record(name: str = "api", **changes: object) -> SessionRecord:
    values: dict[str, object] = {
        "cloister": name,
        "project": "api",
        "worktree": "/src/api",
        "git_dir": "/src/api/.git",
        "common_dir": "/src/api/.git",
        "started_at": datetime(2026, 11, 23, tzinfo=UTC),
        "git_baseline": GitDirBaseline(
            special=(SpecialEntry(path="info/exclude", kind="symlink", target="/x"),),
            alternates={"objects/info/alternates": "/ref/objects\n"},
        ),
        "gitlinks": ("vendor/lib",),
        "findings_at_start": ("abc",),
    }
    values.update(changes)
    return SessionRecord.model_validate(values)


def test_round_trip(paths: CloisterPaths) -> None:
    written = record()
    path = write_session(paths, written)
    assert path == paths.data_dir / "sessions" / "api.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_session(paths, "api") == written
    assert read_session(paths, "other") is None
    assert written.running
    assert not record(stopped_at=datetime.now(UTC)).running


def test_relative_paths_are_refused() -> None:
    with pytest.raises(ValidationError, match="must be absolute"):
        record(worktree="src/api")


def test_a_broken_record_names_its_file(paths: CloisterPaths) -> None:
    paths.sessions_dir.mkdir(parents=True)
    paths.session_file("api").write_text("{not json", encoding="utf-8")
    with pytest.raises(SessionError, match=r"sessions/api\.json"):
        read_session(paths, "api")


def test_list_skips_broken_records(paths: CloisterPaths) -> None:
    write_session(paths, record("api"))
    write_session(paths, record("web", project="web"))
    paths.session_file("bad").write_text("[]", encoding="utf-8")
    assert [item.cloister for item in list_sessions(paths)] == ["api", "web"]


def test_events_from_concurrent_writers_never_interleave(paths: CloisterPaths) -> None:
    def writer(number: int) -> None:
        for index in range(50):
            append_event(paths, "api", "removed", f"/src/api/.git/x{number}-{index}", "d" * 500)

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = read_events(paths, "api")
    assert len(events) == 400
    assert {event.action for event in events} == {"removed"}
    clear_events(paths, "api")
    assert read_events(paths, "api") == []


def test_unreadable_event_lines_are_skipped(paths: CloisterPaths) -> None:
    append_event(paths, "api", "paused", "cloister-api", "it planted a link")
    with paths.session_events("api").open("a", encoding="utf-8") as handle:
        handle.write("garbage\n")
    assert [event.action for event in read_events(paths, "api")] == ["paused"]
