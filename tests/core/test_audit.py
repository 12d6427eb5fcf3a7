"""The JSON-lines audit log."""

from __future__ import annotations

import io
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cloister_core.audit import AuditLog


def fixed_clock() -> datetime:
    return datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC)


def test_record_shape(tmp_path: Path) -> None:
    stream = io.StringIO()
    path = tmp_path / "logs" / "audit.log"
    with AuditLog(path, stream=stream, clock=fixed_clock) as log:
        line = log.write("proxy.tunnel", cloister="my-api", port=443, file=Path("/c/x.yaml"))
    assert line == stream.getvalue()
    assert path.read_text(encoding="utf-8") == line
    assert path.stat().st_mode & 0o777 == 0o600
    record = json.loads(line)
    assert list(record)[:2] == ["time", "event"]
    assert record == {
        "time": "2026-11-21T12:00:00.123Z",
        "event": "proxy.tunnel",
        "cloister": "my-api",
        "port": 443,
        "file": "/c/x.yaml",
    }


def test_appends_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path) as log:
        log.write("a")
    with AuditLog(path) as log:
        log.write("b", when=fixed_clock())
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [record["event"] for record in records] == ["a", "b"]
    assert records[1]["when"] == "2026-11-21T12:00:00.123+00:00"


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    logs = [AuditLog(path) for _ in range(4)]  # separate descriptors, like separate services

    def writer(index: int) -> None:
        for count in range(200):
            logs[index % 4].write("event", writer=index, count=count, padding="x" * 300)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for log in logs:
        log.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 8 * 200
    assert {(r["writer"], r["count"]) for r in map(json.loads, lines)} == {
        (w, c) for w in range(8) for c in range(200)
    }


# -- the per-cloister logs -------------------------------------------------------------------


def lines_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_cloisters_lines_also_go_to_its_own_log(tmp_path: Path) -> None:
    main, logs = tmp_path / "audit.log", tmp_path / "logs"
    with AuditLog(main, cloister_dir=logs, clock=fixed_clock) as log:
        first = log.write("proxy.request", cloister="api", host="a.example", port=443)
        log.write("hostexec.request", cloister="web", argv=["make"])
        log.write("proxy.request", cloister=None, reason="proxy-auth")  # nobody's
        log.write("approval.decision.undone", id="x")  # no cloister field
        last = log.write("hostexec.complete", cloister="api", exit_code=0)
    assert log.cloister_dir == logs
    assert len(lines_of(main)) == 5  # everything, as before
    assert (logs / "api.log").read_text(encoding="utf-8") == first + last
    assert [r["event"] for r in lines_of(logs / "web.log")] == ["hostexec.request"]
    assert sorted(path.name for path in logs.iterdir()) == ["api.log", "web.log"]
    assert (logs / "api.log").stat().st_mode & 0o777 == 0o600
    assert logs.stat().st_mode & 0o777 == 0o700


def test_without_a_main_file_only_the_cloisters_logs(tmp_path: Path) -> None:
    with AuditLog(cloister_dir=tmp_path) as log:
        log.write("guard.removed", cloister="api", path="/r/.git/x")
    assert [r["event"] for r in lines_of(tmp_path / "api.log")] == ["guard.removed"]


@pytest.mark.parametrize(
    "name",
    ["../escape", "..", "a/b", "/etc/passwd", "", "UPPER", ".hidden", "guardian-x", "x" * 64, 7],
)
def test_a_name_that_is_no_cloister_name_gets_no_file(tmp_path: Path, name: object) -> None:
    logs = tmp_path / "deep" / "logs"
    with AuditLog(tmp_path / "audit.log", cloister_dir=logs) as log:
        log.write("proxy.request", cloister=name)
    assert len(lines_of(tmp_path / "audit.log")) == 1
    assert list(logs.iterdir()) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["audit.log", "deep"]


def test_a_link_planted_at_a_cloisters_log_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine\n", encoding="utf-8")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "api.log").symlink_to(victim)
    (logs / "gone.log").symlink_to(tmp_path / "nothing-here")  # dangling: not created either
    reported: list[str] = []
    with AuditLog(tmp_path / "audit.log", cloister_dir=logs, report=reported.append) as log:
        line = log.write("proxy.request", cloister="api")
        log.write("proxy.request", cloister="api")  # reported once, not per line
        log.write("proxy.request", cloister="gone")
    assert victim.read_text(encoding="utf-8") == "mine\n"
    assert not (tmp_path / "nothing-here").exists()
    assert (tmp_path / "audit.log").read_text(encoding="utf-8").startswith(line)  # still there
    assert len(reported) == 2
    assert reported[0].startswith(f"audit: cannot append to {logs / 'api.log'}:")


def test_a_fifo_planted_at_a_cloisters_log_never_blocks(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    os.mkfifo(logs / "api.log")
    reader = os.open(logs / "api.log", os.O_RDONLY | os.O_NONBLOCK)  # so opening it works
    try:
        reported: list[str] = []
        with AuditLog(cloister_dir=logs, report=reported.append) as log:
            log.write("proxy.request", cloister="api")
            os.close(reader)
            reader = -1
            log.write("proxy.request", cloister="api")  # no reader: would block without O_NONBLOCK
        assert len(reported) == 1
        assert "not a regular file" in reported[0]
    finally:
        if reader >= 0:
            os.close(reader)


def test_a_failure_is_reported_again_after_a_success(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "api.log").mkdir()  # not a file
    reported: list[str] = []
    with AuditLog(cloister_dir=logs, report=reported.append) as log:
        log.write("a", cloister="api")
        (logs / "api.log").rmdir()
        log.write("b", cloister="api")
        (logs / "api.log").unlink()
        (logs / "api.log").mkdir()
        log.write("c", cloister="api")
    assert len(reported) == 2


def test_an_unwritable_directory_breaks_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    reported: list[str] = []
    stream = io.StringIO()
    with AuditLog(
        tmp_path / "audit.log", stream=stream, cloister_dir=blocker / "logs", report=reported.append
    ) as log:
        line = log.write("proxy.request", cloister="api")
    assert stream.getvalue() == line
    assert (tmp_path / "audit.log").read_text(encoding="utf-8") == line
    assert reported[0].startswith(f"audit: cannot create {blocker / 'logs'}:")
    assert reported[1].startswith(f"audit: cannot append to {blocker / 'logs' / 'api.log'}:")


def test_concurrent_writers_of_one_cloister_never_interleave(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    audits = [AuditLog(cloister_dir=logs) for _ in range(4)]  # like the four services

    def writer(index: int) -> None:
        for count in range(200):
            audits[index % 4].write("e", cloister="api", writer=index, count=count, pad="x" * 500)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = lines_of(logs / "api.log")
    assert len(records) == 8 * 200
    assert {(r["writer"], r["count"]) for r in records} == {
        (w, c) for w in range(8) for c in range(200)
    }
