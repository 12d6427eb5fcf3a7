"""Reading a cloister's own log: parsing, --since, --tail, following, and showing it
safely. Files only; the lines are written by the real AuditLog, as the services do."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.container import cloisterlogs
from cloister_cli.container.cloisterlogs import LogsError, Shown, parse_since, read_log, render
from cloister_core.audit import AuditLog
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, write_session

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def clock_at(*moments: datetime) -> Callable[[], datetime]:
    times = iter(moments)
    return lambda: next(times)


def write(path: Path, *records: tuple[str, dict[str, Any]], at: datetime = NOW) -> None:
    """*records* through the real AuditLog, one minute apart from *at* on."""
    moments = [at + timedelta(minutes=index) for index in range(len(records))]
    with AuditLog(cloister_dir=path.parent, clock=clock_at(*moments)) as log:
        for event, fields in records:
            log.write(event, cloister=path.stem, **fields)


def events(shown: Shown) -> list[str]:
    return [record["event"] for record in shown.records]


# -- --since -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("10m", timedelta(minutes=10)),
        ("30s", timedelta(seconds=30)),
        ("1h30m", timedelta(minutes=90)),
        ("2d", timedelta(days=2)),
        ("1d12h", timedelta(hours=36)),
        ("250ms", timedelta(milliseconds=250)),
        (" 5m ", timedelta(minutes=5)),
    ],
)
def test_since_a_duration_ago(text: str, delta: timedelta) -> None:
    assert parse_since(text, NOW) == NOW - delta


def test_since_a_time() -> None:
    assert parse_since("2026-04-30T08:15:00+02:00", NOW) == datetime(2026, 4, 30, 6, 15, tzinfo=UTC)
    assert parse_since("2026-04-30T08:15Z", NOW) == datetime(2026, 4, 30, 8, 15, tzinfo=UTC)
    # Without a zone: the local time of this machine (whatever it is).
    local = parse_since("2026-04-30T08:15", NOW)
    assert local == datetime(2026, 4, 30, 8, 15).astimezone()
    assert parse_since("2026-04-30", NOW) == datetime(2026, 4, 30).astimezone()


@pytest.mark.parametrize("text", ["", "2x", "m", "-5m", "5m ago", "yesterday", "10m5"])
def test_since_something_else_says_what_it_takes(text: str) -> None:
    with pytest.raises(LogsError) as caught:
        parse_since(text, NOW)
    assert str(caught.value).startswith(f"--since {text!r} is neither a duration")


# -- reading -------------------------------------------------------------------------------


def test_reads_every_record_with_tail_and_since(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    write(log, *[("proxy.request", {"n": index}) for index in range(5)])
    assert [r["n"] for r in read_log(log).records] == [0, 1, 2, 3, 4]
    assert [r["n"] for r in read_log(log, tail=2).records] == [3, 4]
    assert [r["n"] for r in read_log(log, tail=50).records] == [0, 1, 2, 3, 4]
    assert read_log(log, tail=0).records == []
    since = NOW + timedelta(minutes=3)
    assert [r["n"] for r in read_log(log, since=since).records] == [3, 4]
    assert [r["n"] for r in read_log(log, since=since, tail=1).records] == [4]
    shown = read_log(log, tail=0)
    assert shown.offset == log.stat().st_size  # --follow goes on from the end
    info = log.stat()
    assert shown.identity == (info.st_dev, info.st_ino)


def test_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert read_log(tmp_path / "nothing.log") == Shown([], 0, None)


def test_tail_of_a_long_file_reads_back_across_blocks(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    write(log, *[("hostexec.request", {"n": i, "pad": "x" * 900}) for i in range(300)])
    assert log.stat().st_size > 4 * cloisterlogs.BLOCK
    assert [r["n"] for r in read_log(log, tail=120).records] == list(range(180, 300))
    assert len(read_log(log, tail=300).records) == 300


def test_what_is_no_record_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    write(log, ("first", {}))
    good = log.read_bytes()
    junk = [
        b"not json\n",
        b"[1, 2]\n",
        b'{"time": "2026-05-01T12:00:00Z"}\n',  # no event
        b'{"time": "noon", "event": "x"}\n',
        b'{"time": 5, "event": "x"}\n',
        b'{"event": "x"}\n',
        b"\xff\xfe\n",
        b'{"time": "2026-05-01T12:00:00Z", "event": "' + b"x" * cloisterlogs.MAX_LINE + b'"}\n',
        b"\n",
    ]
    with log.open("ab") as file:
        file.write(b"".join(junk))
        file.write(good.replace(b"first", b"last"))
    assert events(read_log(log)) == ["first", "last"]
    assert events(read_log(log, tail=2)) == ["last"]  # the last two lines: one is junk


def test_a_line_being_written_is_left_for_later(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    write(log, ("done", {}))
    complete = log.stat().st_size
    with log.open("ab") as file:
        file.write(b'{"time": "2026-05-01T12:00:00Z", "ev')
    shown = read_log(log)
    assert events(shown) == ["done"]
    assert shown.offset == complete


def test_a_link_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"time": "2026-05-01T12:00:00Z", "event": "secret"}\n', encoding="utf-8")
    (tmp_path / "api.log").symlink_to(secret)
    with pytest.raises(LogsError) as caught:
        read_log(tmp_path / "api.log")
    assert str(caught.value) == f"{tmp_path / 'api.log'} is a symbolic link; not followed"


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "api.log")  # nobody writes it: reading would block
    with pytest.raises(LogsError, match="is not a regular file"):
        read_log(tmp_path / "api.log")


# -- following -----------------------------------------------------------------------------


class Writer:
    """A sleep for follow() that, instead of waiting, makes the next thing happen."""

    def __init__(self, *steps: Callable[[], None]) -> None:
        self.steps = list(steps)
        self.sleeps = 0

    def __call__(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps += 1
        if self.steps:
            self.steps.pop(0)()


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as file:
        file.write(data)


def take(iterator: Any, count: int) -> list[str]:
    return [record["event"] for record in itertools.islice(iterator, count)]


def test_follow_prints_what_is_appended(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    write(log, ("old", {}))
    half = b'{"time":"2026-05-01T12:09:00Z","event":"split","cloister":"api"}\n'
    sleep = Writer(
        lambda: write(log, ("new", {}), ("newer", {})),
        lambda: None,  # nothing new for a while
        lambda: append(log, half[:20]),  # a line in two writes
        lambda: append(log, half[20:]),
    )
    followed = cloisterlogs.follow(log, read_log(log), sleep=sleep)
    assert take(followed, 3) == ["new", "newer", "split"]
    assert sleep.sleeps == 4


def test_follow_waits_for_a_log_that_does_not_exist_yet(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    sleep = Writer(lambda: None, lambda: write(log, ("first", {})))
    assert take(cloisterlogs.follow(log, read_log(log), sleep=sleep), 1) == ["first"]


def test_follow_starts_again_on_a_replaced_or_cut_log(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    write(log, ("one", {}), ("two", {}))

    def replace() -> None:
        fresh = tmp_path / "fresh.log"
        write(fresh, ("three", {}))
        fresh.rename(log)

    def cut() -> None:
        log.write_bytes(b"")

    sleep = Writer(replace, lambda: None, cut, lambda: write(log, ("four", {})))
    followed = cloisterlogs.follow(log, read_log(log), sleep=sleep)
    assert take(followed, 2) == ["three", "four"]


# -- showing -------------------------------------------------------------------------------


def record(event: str, **fields: Any) -> dict[str, Any]:
    return {"time": "2026-05-01T12:00:00.123Z", "event": event, "cloister": "api", **fields}


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (
            record(
                "proxy.request",
                method="CONNECT",
                host="denied.cloister.test",
                port=443,
                status=403,
                verdict="deny",
                reason=None,
                rule="denied.cloister.test",
                file="/c/config.yaml",
            ),
            "CONNECT denied.cloister.test:443 deny 403 rule denied.cloister.test in /c/config.yaml",
        ),
        (
            record(
                "proxy.request", method="GET", host="a.test", port=80, status=200, verdict="allow"
            ),
            "GET a.test:80 allow 200",
        ),
        (
            record(
                "proxy.request",
                host="b.test",
                port=443,
                verdict="deny",
                status=403,
                reason="timeout",
            ),
            "b.test:443 deny 403 (timeout)",
        ),
        (
            record("hostexec.request", id="ab12", argv=["echo", "hi"], command="echo hi"),
            "[ab12] echo hi",
        ),
        (
            record(
                "hostexec.decision",
                id="ab12",
                command="echo hi",
                status="auto_approved",
                pattern="^echo( .*)?$",
            ),
            "[ab12] auto_approved: echo hi (pattern ^echo( .*)?$)",
        ),
        (
            record("hostexec.decision", id="c", command="rm x", status="denied", reason="no rule"),
            "[c] denied: rm x (no rule)",
        ),
        (
            record("hostexec.complete", id="ab12", exit_code=0, timed_out=False, duration_ms=5.5),
            "[ab12] exit 0 in 5.5 ms",
        ),
        (
            record("hostexec.complete", id="d", exit_code=137, timed_out=True, duration_ms=9),
            "[d] exit 137 (timed out, killed) in 9 ms",
        ),
        (
            record("hostexec.complete", id="e", status="error", reason="host executor unavailable"),
            "[e] error: host executor unavailable",
        ),
        (
            record("approval.domain.requested", id="x", host="example.com", port=443),
            "example.com:443 waits for a human",
        ),
        (
            record(
                "approval.domain.decided",
                id="x",
                host="example.com",
                action="allow",
                scope="session",
                rule="*.example.com",
            ),
            "allow *.example.com (session)",
        ),
        (
            record("approval.command.requested", id="y", argv=["make", "deploy"], cwd="/src/api"),
            "make deploy in /src/api waits for a human",
        ),
        (
            record(
                "approval.command.decided",
                id="y",
                action="deny",
                scope="once",
                reason="not now",
                command="make deploy",
            ),
            "deny make deploy (once): not now",
        ),
        (record("approval.domain.expired", id="x"), "x: nobody decided in time"),
        (record("approval.command.dropped", id="y"), "y: dropped, its cloister stopped"),
        (
            record(
                "approval.decision.undone",
                id="z",
                action="allow",
                subject="example.com:443",
                scope="project",
                file="/c/decisions/projects/api.yaml",
            ),
            "allow example.com:443 (project) undone, removed from /c/decisions/projects/api.yaml",
        ),
        (
            record("guard.quarantined", path="/r/sub/.git", detail="a repository", moved_to="/q"),
            "/r/sub/.git: a repository (now /q)",
        ),
        (
            record(
                "credentials.request",
                agent="claude",
                method="POST",
                path="/v1/messages",
                upstream="api.anthropic.com",
                status=200,
            ),
            "claude POST /v1/messages -> api.anthropic.com 200",
        ),
        (record("something.new", project="api", a=1, b=None, c="x y"), "a=1 c=x y"),
    ],
)
def test_render_shows_what_matters(given: dict[str, Any], shown: str) -> None:
    assert render(given, UTC) == f"2026-05-01 12:00:00  {given['event']:<26} {shown}"


def test_render_is_in_local_time() -> None:
    east = timezone(timedelta(hours=2))
    assert render(record("x"), east).startswith("2026-05-01 14:00:00  x")


def test_the_agents_text_is_escaped() -> None:
    hostile = record(
        "hostexec.request",
        id="a",
        command="echo \x1b]0;owned\x07 \u202etxt.exe\r\nfake line",
    )
    line = render(hostile, UTC)
    for character in ("\x1b", "\x07", "\u202e", "\n", "\r"):
        assert character not in line
    assert "\\x1b]0;owned\\x07 \\u202etxt.exe\\x0d\\x0afake line" in line
    text = cloisterlogs.as_json(hostile)
    assert text.isascii()
    assert "\n" not in text
    assert json.loads(text) == hostile


def test_fields_of_an_unexpected_type_are_still_shown() -> None:
    odd = record("proxy.request", host={"a": [1]}, port=[443], status="x", verdict=7)
    assert '{"a": [1]}:[443] 7 x' in render(odd, UTC)
    odd = record("hostexec.complete", id=["x"], exit_code={"no": 1})
    assert render(odd, UTC).endswith('[x] exit {"no": 1}')


# -- which cloister ------------------------------------------------------------------------


def session(paths: CloisterPaths, name: str, worktree: Path, *, stopped: bool = False) -> None:
    worktree.mkdir(parents=True, exist_ok=True)
    write_session(
        paths,
        SessionRecord(
            cloister=name,
            project=name.split("-", maxsplit=1)[0],
            worktree=str(worktree),
            started_at=NOW,
            stopped_at=NOW if stopped else None,
        ),
    )


def test_the_cloister_of_a_directory_running_or_stopped(
    paths: CloisterPaths, tmp_path: Path
) -> None:
    session(paths, "api", tmp_path / "src" / "api", stopped=True)
    session(paths, "api-feature", tmp_path / "src" / "api" / "wt" / "feature")
    find = cloisterlogs.cloister_for_directory
    assert find(paths, tmp_path / "src" / "api") == "api"
    assert find(paths, tmp_path / "src" / "api" / "docs") == "api"
    assert find(paths, tmp_path / "src" / "api" / "wt" / "feature" / "x") == "api-feature"
    assert find(paths, tmp_path / "src") is None
    assert find(paths, tmp_path / "src" / "api-other") is None


def test_known_cloisters(paths: CloisterPaths, tmp_path: Path) -> None:
    assert not cloisterlogs.is_known(paths, "api")
    session(paths, "api", tmp_path / "api", stopped=True)
    assert cloisterlogs.is_known(paths, "api")
    paths.tokens_dir.mkdir(parents=True)
    paths.token_file("web").write_text("{}", encoding="utf-8")
    assert cloisterlogs.is_known(paths, "web")
    write(paths.cloister_log("gone"), ("x", {}))
    assert cloisterlogs.is_known(paths, "gone")


def test_fields_at_the_edges_of_numbers_and_the_calendar_never_stop_the_listing() -> None:
    huge = {"event": "proxy.request", "time": "2026-01-01T00:00:00Z", "duration_ms": 10**400}
    assert "proxy.request" in render(huge)
    edge = {"event": "hostexec.request", "time": "0001-01-01T00:00:00+00:00", "command": "ls"}
    assert render(edge, timezone(timedelta(hours=-5))).startswith("?")
