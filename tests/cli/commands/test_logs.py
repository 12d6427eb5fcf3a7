"""``cloister logs`` through click's runner: logs as the services write them (the real
AuditLog), session records as ``cloister start`` leaves them; no Docker engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands.main import cli
from cloister_cli.container import cloisterlogs
from cloister_cli.context import Context
from cloister_core.audit import AuditLog
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, write_session


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def invoke(paths: CloisterPaths, *args: str, cwd: Path | None = None) -> Result:
    env = {
        "CLOISTER_CONFIG_DIR": str(paths.config_dir),
        "CLOISTER_DATA_DIR": str(paths.data_dir),
    }
    with pytest.MonkeyPatch.context() as patch:
        if cwd is not None:
            patch.chdir(cwd)
        return CliRunner().invoke(cli, list(args), env=env)


def log(paths: CloisterPaths, at: datetime, event: str, **fields: Any) -> None:
    with AuditLog(paths.audit_log, cloister_dir=paths.logs_dir, clock=lambda: at) as audit:
        audit.write(event, **fields)


NOW = datetime.now(UTC)
EARLIER = NOW - timedelta(hours=3)


@pytest.fixture
def two(paths: CloisterPaths) -> None:
    """Lines of two cloisters, as the proxy and the gateway write them."""
    log(paths, EARLIER, "proxy.request", cloister="api", method="CONNECT", host="old.test",
        port=443, status=403, verdict="deny")  # fmt: skip
    log(paths, NOW, "proxy.request", cloister="web", method="CONNECT", host="web.test",
        port=443, status=403, verdict="deny")  # fmt: skip
    log(paths, NOW, "hostexec.request", cloister="api", id="a1", argv=["echo", "hi"],
        command="echo hi")  # fmt: skip
    log(paths, NOW, "hostexec.complete", cloister="api", id="a1", exit_code=0, duration_ms=4)


@pytest.mark.usefixtures("two")
def test_shows_one_cloisters_lines(paths: CloisterPaths) -> None:
    result = invoke(paths, "logs", "api")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 3
    assert lines[0].endswith("proxy.request              CONNECT old.test:443 deny 403")
    assert lines[0].startswith(EARLIER.astimezone().strftime("%Y-%m-%d %H:%M:%S"))  # local
    assert lines[1].endswith("hostexec.request           [a1] echo hi")
    assert lines[2].endswith("hostexec.complete          [a1] exit 0 in 4 ms")
    assert "web.test" not in result.output


@pytest.mark.usefixtures("two")
def test_json_tail_and_since(paths: CloisterPaths) -> None:
    result = invoke(paths, "logs", "api", "--json")
    records = [json.loads(line) for line in result.output.splitlines()]
    assert [r["event"] for r in records] == [
        "proxy.request",
        "hostexec.request",
        "hostexec.complete",
    ]
    assert {r["cloister"] for r in records} == {"api"}
    expected = paths.cloister_log("api").read_text(encoding="utf-8").splitlines()
    assert records == [json.loads(line) for line in expected]

    tail = invoke(paths, "logs", "api", "-n", "1", "--json")
    assert [json.loads(line)["event"] for line in tail.output.splitlines()] == ["hostexec.complete"]
    recent = invoke(paths, "logs", "api", "--since", "1h")
    assert "old.test" not in recent.output
    assert len(recent.output.splitlines()) == 2
    since = (EARLIER - timedelta(minutes=1)).isoformat()
    assert len(invoke(paths, "logs", "api", "--since", since).output.splitlines()) == 3


@pytest.mark.usefixtures("two")
def test_the_cloister_of_this_directory_even_stopped(paths: CloisterPaths, tmp_path: Path) -> None:
    worktree = tmp_path / "src" / "api"
    (worktree / "lib").mkdir(parents=True)
    write_session(
        paths,
        SessionRecord(
            cloister="api",
            project="api",
            worktree=str(worktree),
            started_at=EARLIER,
            stopped_at=NOW,
        ),
    )
    result = invoke(paths, "logs", "--json", cwd=worktree / "lib")
    assert result.exit_code == 0, result.output
    assert {json.loads(line)["cloister"] for line in result.output.splitlines()} == {"api"}


def test_a_directory_no_cloister_worked_in(
    paths: CloisterPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No session record: the running cloisters are asked (here: an engine with none).
    monkeypatch.setattr(Context, "docker", property(lambda self: NoEngine()))
    result = invoke(paths, "logs", cwd=tmp_path)
    assert result.exit_code == 1
    assert f"no cloister works in {tmp_path}; name one (`cloister list`)" in result.output


class NoEngine:
    class containers:  # noqa: N801 - the docker SDK's attribute
        @staticmethod
        def list(**filters: Any) -> list[object]:
            return []


def test_an_unknown_cloister_is_an_error(paths: CloisterPaths) -> None:
    result = invoke(paths, "logs", "nope")
    assert result.exit_code == 1
    assert (
        result.output == "Error: no cloister 'nope' on this machine has a log (`cloister list`)\n"
    )
    bad = invoke(paths, "logs", "../etc")
    assert bad.exit_code == 1
    assert "cloister '../etc' is not valid" in bad.output
    assert invoke(paths, "logs", "api", "--since", "soon").exit_code == 1


def test_a_known_cloister_without_a_log_yet(paths: CloisterPaths) -> None:
    paths.tokens_dir.mkdir(parents=True)
    paths.token_file("fresh").write_text("{}", encoding="utf-8")
    result = invoke(paths, "logs", "fresh")
    assert result.exit_code == 0
    assert result.output == f"cloister fresh has no log yet ({paths.cloister_log('fresh')})\n"


@pytest.mark.usefixtures("two")
def test_follow_prints_new_lines_until_ctrl_c(
    paths: CloisterPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[cloisterlogs.Shown] = []

    def follow(path: Path, shown: cloisterlogs.Shown) -> Iterator[cloisterlogs.Record]:
        seen.append(shown)
        assert path == paths.cloister_log("api")
        yield {"time": NOW.isoformat(), "event": "hostexec.request", "id": "b2", "command": "ls"}
        raise KeyboardInterrupt

    monkeypatch.setattr(cloisterlogs, "follow", follow)
    result = invoke(paths, "logs", "api", "-f", "-n", "1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("[a1] exit 0 in 4 ms")
    assert lines[1].endswith("hostexec.request           [b2] ls")
    assert "Aborted" not in result.output
    assert seen[0].offset == paths.cloister_log("api").stat().st_size  # from the end on
