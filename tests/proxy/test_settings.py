"""Proxy settings: options, CLOISTER_PROXY_* variables, defaults, errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from cloister_proxy.settings import ProxySettings


def test_command_line_options(tmp_path: Path) -> None:
    settings = ProxySettings(
        _cli_parse_args=[
            "--config-dir",
            str(tmp_path),
            "--listen",
            "127.0.0.1:3129",
            "--approval-url",
            "http://hub:9999",
            "--header-timeout",
            "2s",
        ]
    )
    assert settings.config_dir == tmp_path
    assert settings.listen_address == ("127.0.0.1", 3129)
    assert settings.approval_url == "http://hub:9999"
    assert settings.header_timeout == timedelta(seconds=2)
    assert settings.idle_timeout == timedelta(minutes=5)


def test_environment_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOISTER_PROXY_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("CLOISTER_PROXY_LISTEN", "[::]:3128")
    monkeypatch.setenv("CLOISTER_PROXY_IDLE_TIMEOUT", "90")
    credential = tmp_path / "credential"
    credential.write_text("s3cret\n", encoding="utf-8")
    monkeypatch.setenv("CLOISTER_PROXY_APPROVAL_CREDENTIAL_FILE", str(credential))
    monkeypatch.setenv("CLOISTER_PROXY_CLOISTER_LOGS", "/logs")  # as the stack sets it
    settings = ProxySettings()
    assert settings.cloister_logs == Path("/logs")
    assert ProxySettings(_cli_parse_args=["--cloister-logs", "/x"]).cloister_logs == Path("/x")
    assert settings.listen_address == ("::", 3128)
    assert settings.idle_timeout == timedelta(seconds=90)
    assert settings.credential() == "s3cret"
    assert "s3cret" not in repr(ProxySettings(approval_credential=SecretStr("s3cret")))


def test_config_dir_defaults_to_cloister_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOISTER_CONFIG_DIR", "/somewhere/config")
    assert ProxySettings().config_dir == Path("/somewhere/config")


@pytest.mark.parametrize("value", ["3128", "host:", "host:99999", ":x"])
def test_bad_listen_address(value: str) -> None:
    with pytest.raises(ValidationError, match="HOST:PORT"):
        ProxySettings(listen=value)


def test_unknown_option_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ProxySettings(_cli_parse_args=["--no-such-option"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_guardian_networks_from_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOISTER_PROXY_GUARDIAN_NETWORKS", '["10.213.0.0/16", "fd00:c1::/64"]')
    settings = ProxySettings(_cli_parse_args=[])
    assert [str(network) for network in settings.guardian_networks] == [
        "10.213.0.0/16",
        "fd00:c1::/64",
    ]
    assert settings.refuse_own_networks is True  # the default
    monkeypatch.setenv("CLOISTER_PROXY_REFUSE_OWN_NETWORKS", "false")
    assert ProxySettings(_cli_parse_args=[]).refuse_own_networks is False
    assert ProxySettings(_cli_parse_args=["--refuse-own-networks"]).refuse_own_networks is True


@pytest.mark.parametrize("value", ['["10.213.0.1/16"]', '"10.213.0.0/16"', '["nonsense"]'])
def test_guardian_networks_must_be_a_list_of_networks(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CLOISTER_PROXY_GUARDIAN_NETWORKS", value)
    with pytest.raises(ValidationError, match="guardian_networks"):
        ProxySettings(_cli_parse_args=[])


def test_no_guardian_networks_by_default() -> None:
    assert ProxySettings(_cli_parse_args=[]).guardian_networks == ()
