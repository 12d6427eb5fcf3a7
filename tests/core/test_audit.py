"""The JSON-lines audit log."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime
from pathlib import Path

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
