"""The snapshot record format, its checks and the expiry rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from cloister_core.config.models import SnapshotsConfig, parse_duration
from cloister_core.paths import CloisterPaths
from cloister_core.snapshots import (
    SnapshotError,
    SnapshotRecord,
    all_records,
    expired,
    find_record,
    needed_files,
    new_snapshot_id,
    read_records,
    write_record,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
COMMIT = "a" * 40


def record(
    cloister: str = "api",
    *,
    age: timedelta = timedelta(0),
    files: tuple[str, ...] = (),
    number: int = 0,
    project: str = "api",
) -> SnapshotRecord:
    created = NOW - age
    return SnapshotRecord(
        id=f"{created:%Y%m%dT%H%M%S}Z-{number:04x}",
        cloister=cloister,
        project=project,
        created_at=created,
        worktree="/src/api",
        git_dir="/src/api/.git",
        common_dir="/src/api/.git",
        head_ref="refs/heads/main",
        head_commit=COMMIT,
        refs={"refs/heads/main": COMMIT},
        files=files,
    )


def test_an_id_sorts_by_time_and_is_checked() -> None:
    first, second = new_snapshot_id(NOW), new_snapshot_id(NOW + timedelta(seconds=1))
    assert first.startswith("20261125T120000Z-")
    assert first < second
    with pytest.raises(ValidationError, match="not a snapshot id"):
        SnapshotRecord.model_validate(record().model_dump() | {"id": "../../etc"})


@pytest.mark.parametrize(
    "name", ["../x", "pack/../../x", "ab/../cd", "info/alternates", "pack/pack-x.pack", "zz/12"]
)
def test_pool_files_are_only_object_files(name: str) -> None:
    with pytest.raises(ValidationError, match="not a pool file"):
        SnapshotRecord.model_validate(record().model_dump() | {"files": [name]})


@pytest.mark.parametrize(
    "refs", [{"HEAD": COMMIT}, {"refs/heads/a b": COMMIT}, {"refs/heads/x": "nothex"}]
)
def test_refs_are_checked(refs: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        SnapshotRecord.model_validate(record().model_dump() | {"refs": refs})


def test_records_round_trip_and_list_oldest_first(tmp_path: Path) -> None:
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    newer, older = record(number=1), record(age=timedelta(days=1), number=2)
    for each in (newer, older, record(project="web", number=3)):
        write_record(paths, each)
    (paths.snapshot_dir("api") / "records" / "broken.json").write_text("{", encoding="utf-8")
    assert [each.id for each in read_records(paths, "api")] == [older.id, newer.id]
    assert len(all_records(paths)) == 3
    mode = (paths.snapshot_dir("api") / "records" / f"{newer.id}.json").stat().st_mode
    assert mode & 0o777 == 0o600


def test_expiry_keeps_the_newest_and_each_cloisters_last_start() -> None:
    records = [
        record("api", age=timedelta(days=40), number=1),  # too old, and not api's newest
        record("web", age=timedelta(days=50), number=2),  # old, but web's last start
        record("api", age=timedelta(days=1), number=3),
        record("api", age=timedelta(hours=1), number=4),  # api's last start
    ]
    gone = expired(records, keep=10, max_age=timedelta(days=30), now=NOW)
    assert [each.id for each in gone] == [records[0].id]
    gone = expired(records, keep=2, max_age=timedelta(days=30), now=NOW)
    assert {each.id for each in gone} == {records[0].id}
    gone = expired(records, keep=1, max_age=timedelta(days=30), now=NOW)
    assert {each.id for each in gone} == {records[0].id, records[2].id}


def test_restores_never_push_out_the_last_start() -> None:
    start = record("api", age=timedelta(days=40), number=1)
    befores = [
        record("api", age=timedelta(minutes=minutes), number=10 + minutes).model_copy(
            update={"kind": "before-restore"}
        )
        for minutes in range(5)
    ]
    gone = expired([start, *befores], keep=3, max_age=timedelta(days=30), now=NOW)
    assert start not in gone
    assert len(gone) == 2  # the two oldest restores' snapshots


def test_needed_files_and_prefixes() -> None:
    pack = "pack/pack-" + "1" * 40 + ".pack"
    loose = "ab/" + "c" * 38
    records = [record(files=(pack,), number=1), record(files=(pack, loose), number=2)]
    assert needed_files(records) == {pack, loose}
    assert find_record(records, records[1].id).id == records[1].id
    with pytest.raises(SnapshotError, match="names 2 snapshots"):
        find_record(records, "2026")
    with pytest.raises(SnapshotError, match="no snapshot 'x'"):
        find_record(records, "x")


def test_config_takes_days_and_sizes() -> None:
    assert parse_duration("30d") == timedelta(days=30)
    settings = SnapshotsConfig.model_validate({"untracked_file_limit": "512k", "max_age": "7d"})
    assert settings.untracked_file_bytes == 512 * 1024
    assert settings.max_age == timedelta(days=7)
    with pytest.raises(ValidationError, match="not a size"):
        SnapshotsConfig.model_validate({"untracked_file_limit": "lots"})
    with pytest.raises(ValidationError):
        SnapshotsConfig.model_validate({"keep": 0})
