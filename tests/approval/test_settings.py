"""Hub settings: values, CLOISTER_APPROVAL_* variables, derived values."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from cloister_approval.settings import ApprovalSettings


def test_environment_and_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOISTER_APPROVAL_DOMAIN_TIMEOUT", "30")
    monkeypatch.setenv("CLOISTER_APPROVAL_COMMAND_TIMEOUT", "2m")
    monkeypatch.setenv("CLOISTER_APPROVAL_HUB_SECRET", "from-the-environment")
    monkeypatch.setenv("CLOISTER_APPROVAL_CLOISTER_LOGS", "/logs")  # as the stack sets it
    settings = ApprovalSettings(config_dir=tmp_path, port=19999)
    assert settings.cloister_logs == Path("/logs")
    assert settings.config_dir == tmp_path
    assert settings.port == 19999
    assert settings.domain_timeout == timedelta(seconds=30)
    assert settings.command_timeout == timedelta(minutes=2)
    assert settings.session_lifetime == timedelta(days=30)
    assert settings.recent_decisions == 500
    assert settings.host == "127.0.0.1"
    assert settings.secret() == "from-the-environment"


def test_the_own_port_is_always_a_public_host() -> None:
    settings = ApprovalSettings(port=8999)
    assert settings.public_hosts == ("127.0.0.1:8999",)  # not localhost: maybe ::1
    assert settings.url == "http://127.0.0.1:8999/"


def test_allowed_origins_follow_public_hosts() -> None:
    settings = ApprovalSettings(public_hosts=("Hub.Example:8999", "127.0.0.1:9999"))
    # Given ones first (the first is the URL a person is shown), then the own port's.
    assert settings.public_hosts == ("hub.example:8999", "127.0.0.1:9999")
    assert settings.url == "http://hub.example:8999/"
    assert settings.allowed_origins == frozenset(
        {"http://hub.example:8999", "http://127.0.0.1:9999"}
    )


def test_secrets_from_values_and_files(tmp_path: Path) -> None:
    secret = tmp_path / "hub.secret"
    secret.write_text("from-file\n", encoding="utf-8")
    assert ApprovalSettings(hub_secret_file=secret).secret() == "from-file"
    assert ApprovalSettings(hub_secret=SecretStr("value")).secret() == "value"
    assert ApprovalSettings().secret() is None
    assert "value" not in repr(ApprovalSettings(hub_secret=SecretStr("value")))


def test_a_missing_secret_file_is_a_validation_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="does not point to a file"):
        ApprovalSettings(hub_secret_file=tmp_path / "missing")
    with pytest.raises(ValidationError, match="does not point to a file"):
        ApprovalSettings(service_credential_file=tmp_path / "missing")
