"""Hub settings: options, CLOISTER_APPROVAL_* variables, derived values."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from cloister_approval.settings import ApprovalSettings


def test_options_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOISTER_APPROVAL_DOMAIN_TIMEOUT", "30")
    settings = ApprovalSettings(
        _cli_parse_args=[
            "--config-dir",
            str(tmp_path),
            "--port",
            "19999",
            "--command-timeout",
            "2m",
        ]
    )
    assert settings.config_dir == tmp_path
    assert settings.port == 19999
    assert settings.domain_timeout == timedelta(seconds=30)
    assert settings.command_timeout == timedelta(minutes=2)
    assert settings.host == "127.0.0.1"


def test_allowed_origins_follow_public_hosts() -> None:
    settings = ApprovalSettings(public_hosts=("LocalHost:8999",))
    assert settings.public_hosts == ("localhost:8999",)
    assert settings.allowed_origins == frozenset({"http://localhost:8999"})


def test_unknown_option_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ApprovalSettings(_cli_parse_args=["--nope"])
    assert "unrecognized arguments" in capsys.readouterr().err
