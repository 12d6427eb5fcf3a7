"""Session records: written atomically, read back, changed under a lock, old ones still read."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from cloister_core.paths import CloisterPaths
from cloister_core.sessions import (
    SessionError,
    SessionRecord,
    deepest_worktree,
    list_sessions,
    read_session,
    update_session,
    write_session,
)

A = "a" * 40
B = "b" * 40


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def record(name: str = "api", **changes: object) -> SessionRecord:
    values: dict[str, object] = {
        "cloister": name,
        "project": "api",
        "worktree": "/src/api",
        "checkout": "/src/api",
        "common_dir": "/src/api/.git",
        "started_at": datetime(2026, 11, 23, tzinfo=UTC),
    }
    values.update(changes)
    return SessionRecord.model_validate(values)


def test_round_trip_of_every_field(paths: CloisterPaths) -> None:
    written = record(
        branch="feature-x",
        stopped_at=datetime(2026, 11, 24, tzinfo=UTC),
        synced_at=datetime(2026, 11, 23, 12, tzinfo=UTC),
        bases={"main": A, "feature-x": B},
        host_heads={"main": A},
        protected=(".envrc", ".husky"),
        nested=("vendor/lib",),
        findings_at_start=("abc", "def"),
        placeholders=(".envrc",),
    )
    path = write_session(paths, written)
    assert path == paths.data_dir / "sessions" / "api.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    back = read_session(paths, "api")
    assert back == written
    assert back is not None
    assert back.bases == {"main": A, "feature-x": B}
    assert back.protected == (".envrc", ".husky")
    assert back.synced_at == datetime(2026, 11, 23, 12, tzinfo=UTC)
    assert read_session(paths, "other") is None


def test_defaults_of_a_minimal_record() -> None:
    minimal = SessionRecord(
        cloister="api",
        project="api",
        worktree="/src/api",
        started_at=datetime(2026, 11, 23, tzinfo=UTC),
    )
    assert minimal.checkout is None
    assert minimal.common_dir is None
    assert minimal.branch is None
    assert minimal.stopped_at is None
    assert minimal.synced_at is None
    assert minimal.bases == {}
    assert minimal.host_heads == {}
    assert minimal.protected == minimal.nested == minimal.placeholders == ()
    assert minimal.findings_at_start == ()


def test_running() -> None:
    assert record().running
    assert not record(stopped_at=datetime.now(UTC)).running


@pytest.mark.parametrize(
    ("checkout", "common_dir", "is_git"),
    [
        ("/src/api", "/src/api/.git", True),
        (None, "/src/api/.git", False),
        ("/src/api", None, False),
        (None, None, False),
    ],
)
def test_is_git(checkout: str | None, common_dir: str | None, is_git: bool) -> None:
    assert record(checkout=checkout, common_dir=common_dir).is_git is is_git


def test_shared_means_the_humans_own_checkout() -> None:
    assert record().shared
    worktree = record(worktree="/data/worktrees/api/feature-x", branch="feature-x")
    assert worktree.checkout == "/src/api"
    assert not worktree.shared
    assert not record(checkout=None).shared


@pytest.mark.parametrize("field", ["worktree", "checkout", "common_dir"])
def test_relative_paths_are_refused(field: str) -> None:
    with pytest.raises(ValidationError, match="must be absolute"):
        record(**{field: "src/api"})


def test_an_invalid_cloister_name_is_refused() -> None:
    with pytest.raises(ValidationError):
        record("../api")


def test_a_record_is_frozen() -> None:
    with pytest.raises(ValidationError):
        record().project = "other"  # type: ignore[misc]


def test_a_record_of_an_older_cloister_still_loads(paths: CloisterPaths) -> None:
    """Fields this Cloister no longer knows (the guard of the human's .git, …) are
    ignored: an old cloister can still be stopped."""
    old = {
        "cloister": "api",
        "project": "api",
        "worktree": "/src/api",
        "git_dir": "/src/api/.git",
        "common_dir": "/src/api/.git",
        "started_at": "2026-11-23T00:00:00Z",
        "git_baseline": {
            "special": [{"path": "info/exclude", "kind": "symlink", "target": "/x"}],
            "alternates": {"objects/info/alternates": "/ref/objects\n"},
        },
        "gitlinks": ["vendor/lib"],
        "pins": {"refs/heads/main": A},
        "guard_held": True,
        "identities": [[1, 2]],
        "events": ["removed"],
        "findings_at_start": ["abc"],
    }
    paths.sessions_dir.mkdir(parents=True)
    paths.session_file("api").write_text(json.dumps(old), encoding="utf-8")
    loaded = read_session(paths, "api")
    assert loaded is not None
    assert loaded.cloister == "api"
    assert loaded.common_dir == "/src/api/.git"
    assert loaded.checkout is None  # not in the old record
    assert loaded.findings_at_start == ("abc",)
    assert "pins" not in loaded.model_dump()
    assert [item.cloister for item in list_sessions(paths)] == ["api"]
    # Written back, the unknown fields are gone.
    write_session(paths, loaded)
    assert "git_baseline" not in json.loads(paths.session_file("api").read_text("utf-8"))


def test_a_broken_record_names_its_file(paths: CloisterPaths) -> None:
    paths.sessions_dir.mkdir(parents=True)
    paths.session_file("api").write_text("{not json", encoding="utf-8")
    with pytest.raises(SessionError, match=r"sessions/api\.json"):
        read_session(paths, "api")
    paths.session_file("api").write_text('{"cloister": "api"}', encoding="utf-8")
    with pytest.raises(SessionError, match="cannot read the session record"):
        read_session(paths, "api")


def test_list_skips_broken_records(paths: CloisterPaths) -> None:
    assert list_sessions(paths) == []
    write_session(paths, record("web", project="web"))
    write_session(paths, record("api"))
    paths.session_file("bad").write_text("[]", encoding="utf-8")
    assert [item.cloister for item in list_sessions(paths)] == ["api", "web"]


def test_update_changes_and_writes(paths: CloisterPaths) -> None:
    write_session(paths, record())
    synced = datetime(2026, 11, 23, 13, tzinfo=UTC)
    changed = update_session(
        paths,
        "api",
        lambda current: current.model_copy(update={"bases": {"main": B}, "synced_at": synced}),
    )
    assert changed is not None
    assert changed.bases == {"main": B}
    assert read_session(paths, "api") == changed
    assert changed.synced_at == synced


def test_update_of_no_record_writes_nothing(paths: CloisterPaths) -> None:
    calls: list[SessionRecord] = []

    def change(current: SessionRecord) -> SessionRecord:
        calls.append(current)
        return current

    assert update_session(paths, "api", change) is None
    assert calls == []
    assert read_session(paths, "api") is None


def test_concurrent_updates_from_threads_lose_nothing(paths: CloisterPaths) -> None:
    write_session(paths, record())
    start = threading.Barrier(8)

    def adding(branch: str) -> Callable[[SessionRecord], SessionRecord]:
        return lambda current: current.model_copy(update={"bases": {**current.bases, branch: A}})

    def writer(number: int) -> None:
        start.wait()
        for index in range(25):
            update_session(paths, "api", adding(f"t{number}-{index}"))

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = read_session(paths, "api")
    assert final is not None
    assert len(final.bases) == 8 * 25
    assert set(final.bases) == {f"t{n}-{i}" for n in range(8) for i in range(25)}


_WRITER = """
import sys
from pathlib import Path
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import update_session

paths = CloisterPaths(config_dir=Path(sys.argv[1]), data_dir=Path(sys.argv[2]))
number = sys.argv[3]
for index in range(20):
    branch = f"p{number}-{index}"
    update_session(
        paths,
        "api",
        lambda current: current.model_copy(
            update={"bases": {**current.bases, branch: "a" * 40}}
        ),
    )
"""


def test_concurrent_updates_from_processes_lose_nothing(paths: CloisterPaths) -> None:
    write_session(paths, record())
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                str(paths.config_dir),
                str(paths.data_dir),
                str(number),
            ]
        )
        for number in range(4)
    ]
    assert [writer.wait(timeout=60) for writer in writers] == [0] * 4
    final = read_session(paths, "api")
    assert final is not None
    assert set(final.bases) == {f"p{n}-{i}" for n in range(4) for i in range(20)}


def test_deepest_worktree_holding_a_directory(tmp_path: Path) -> None:
    outer, inner = tmp_path / "repo", tmp_path / "repo" / "sub" / "wt"
    inner.mkdir(parents=True)
    pairs = [(str(outer), "outer"), (str(inner), "inner"), (str(tmp_path / "other"), "other")]
    assert deepest_worktree(inner / "deeper", pairs) == "inner"
    assert deepest_worktree(outer / "sub", pairs) == "outer"
    assert deepest_worktree(outer, pairs) == "outer"
    assert deepest_worktree(tmp_path, pairs) is None
