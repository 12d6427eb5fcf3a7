"""``log.file``: a link to the audit log where the Go implementation kept its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_cli.stack.guardian import link_audit_log


@pytest.fixture
def audit_log(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "audit.log"
    path.parent.mkdir()
    path.write_text('{"event": "proxy.request"}\n', encoding="utf-8")
    return path


def test_a_link_is_made_once_and_kept(tmp_path: Path, audit_log: Path) -> None:
    wanted = tmp_path / "state" / "cloister" / "audit.log"
    assert link_audit_log(audit_log, wanted) is None
    assert wanted.is_symlink()
    assert wanted.read_text(encoding="utf-8") == audit_log.read_text(encoding="utf-8")
    assert link_audit_log(audit_log, wanted) is None  # the next start: nothing to do
    assert (wanted.parent.stat().st_mode & 0o777) == 0o700


def test_a_tilde_is_the_home(
    tmp_path: Path, audit_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert link_audit_log(audit_log, Path("~/.local/state/cloister/audit.log")) is None
    assert (tmp_path / "home" / ".local" / "state" / "cloister" / "audit.log").is_symlink()


def test_what_is_there_already_is_kept(tmp_path: Path, audit_log: Path) -> None:
    old_log = tmp_path / "audit.log"
    old_log.write_text("the Go implementation's lines\n", encoding="utf-8")
    problem = link_audit_log(audit_log, old_log)
    assert problem is not None
    assert "something is there already (kept)" in problem
    assert old_log.read_text(encoding="utf-8") == "the Go implementation's lines\n"
    elsewhere = tmp_path / "elsewhere.log"
    elsewhere.symlink_to(tmp_path / "other")
    assert link_audit_log(audit_log, elsewhere) is not None
    assert elsewhere.readlink() == tmp_path / "other"


def test_a_relative_path_is_refused(audit_log: Path) -> None:
    problem = link_audit_log(audit_log, Path("logs/audit.log"))
    assert problem is not None
    assert "not an absolute path" in problem
