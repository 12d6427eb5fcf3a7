"""The ``cloister-approval`` command: its options, its help, its one-line errors, and
what it prints when it starts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cloister_approval import main as entry
from cloister_approval.main import build_parser, load_settings
from cloister_approval.settings import ApprovalSettings
from cloister_core.hubauth import LOGIN_PATH, verify_ticket


def test_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOISTER_APPROVAL_DOMAIN_TIMEOUT", "30")
    secret = tmp_path / "hub.secret"
    secret.write_text("s3cret\n", encoding="utf-8")
    options = "--port 19999 --command-timeout 2m --public-host hub.localhost:80 --no-audit-stdout"
    settings = load_settings(
        [*options.split(), "--config-dir", str(tmp_path), "--hub-secret-file", str(secret)]
    )
    assert settings.config_dir == tmp_path
    assert settings.port == 19999
    assert settings.domain_timeout.total_seconds() == 30
    assert settings.command_timeout.total_seconds() == 120
    assert settings.public_hosts == ("hub.localhost:80", "127.0.0.1:19999")
    assert settings.secret() == "s3cret"
    assert settings.audit_stdout is False


def test_every_option_has_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
    with pytest.raises(SystemExit) as caught:
        parser.parse_args(["--help"])
    assert caught.value.code == 0
    text = capsys.readouterr().out
    assert "--port PORT" in text
    assert "--hub-secret-file FILE" in text
    assert "(default: 720h)" in text  # a duration as a person writes it
    assert "Examples:" in text
    # Type names and secrets on the command line are not offered.
    for unwanted in ("SecretStr", "timedelta", "null", "--hub-secret ", "--service-credential "):
        assert unwanted not in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "abc"], "--port (CLOISTER_APPROVAL_PORT): Input should be a valid integer"),
        (["--port", "70000"], "--port (CLOISTER_APPROVAL_PORT): Input should be less than or"),
        (["--hub-secret-file", "/nonexistent/hub.secret"], "--hub-secret-file"),
        (["--service-credential-file", "/nonexistent/c"], "Path does not point to a file"),
        (["--domain-timeout", "soon"], "not a duration: 'soon'"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_bad_values_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        load_settings(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("cloister-approval: error: ")
    assert err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


def test_an_empty_secret_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "hub.secret"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(SystemExit) as caught:
        load_settings(["--hub-secret-file", str(empty)])
    assert caught.value.code == 2
    assert capsys.readouterr().err == (
        "cloister-approval: error: --hub-secret-file (CLOISTER_APPROVAL_HUB_SECRET_FILE):"
        " the file is empty\n"
    )


def test_a_bad_environment_variable_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLOISTER_APPROVAL_MAX_PENDING", "lots")
    with pytest.raises(SystemExit):
        load_settings([])
    err = capsys.readouterr().err
    assert err.startswith("cloister-approval: error: --max-pending (CLOISTER_APPROVAL_MAX_PENDING)")
    assert err.count("\n") == 1


class Served:
    def __init__(self) -> None:
        self.settings: ApprovalSettings | None = None

    def run(self, app: Any, **options: Any) -> None:
        self.settings = app.state.settings
        self.options = options


def test_without_a_secret_one_is_made_and_a_login_url_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served()
    monkeypatch.setattr("uvicorn.run", served.run)
    assert entry.main(["--port", "18999", "--config-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "cloister-approval: http://127.0.0.1:18999/"
    prefix = "cloister-approval: log in (once, within 10 minutes): "
    assert lines[1].startswith(prefix + f"http://127.0.0.1:18999{LOGIN_PATH}?ticket=")
    assert served.settings is not None
    secret = served.settings.secret()
    assert secret is not None
    assert len(secret) == 64
    ticket = lines[1].rsplit("ticket=", 1)[1]
    assert verify_ticket(secret, ticket, now=time.time()).nonce
    assert served.options["port"] == 18999


def test_with_a_secret_file_no_login_url_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served()
    monkeypatch.setattr("uvicorn.run", served.run)
    secret = tmp_path / "hub.secret"
    secret.write_text("a" * 64 + "\n", encoding="utf-8")
    entry.main(["--port", "18998", "--hub-secret-file", str(secret)])
    assert capsys.readouterr().err == "cloister-approval: http://127.0.0.1:18998/\n"
    assert served.settings is not None
    assert served.settings.secret() == "a" * 64
