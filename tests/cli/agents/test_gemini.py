"""Gemini CLI: its command line, variables, forced settings, copied settings and login."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.agents.base import AgentSetupError, HomeFile
from cloister_cli.agents.gemini import AGENT
from cloister_core.credentials import Method
from tests.cli.agents.hosthome import leaked

HOME = "/home/cloister"
GATEWAY = "http://cloister-guardian-credentials:9997/gemini"
TOKEN = "cloister-token"
RULES = "# rules\n"


def environment(method: Method, extra: dict[str, str] | None = None) -> dict[str, str]:
    return AGENT.environment(
        home=HOME,
        gateway_url=GATEWAY,
        token=TOKEN,
        method=method,
        skip_permissions=True,
        extra=extra or {},
    )


def by_path(files: list[HomeFile]) -> dict[str, HomeFile]:
    return {item.path: item for item in files}


def settings(files: list[HomeFile]) -> Any:
    return json.loads(by_path(files)["settings.json"].content)


def test_yolo_is_a_flag() -> None:
    # general.defaultApprovalMode = "yolo" is ignored by the CLI on purpose.
    assert AGENT.argv(skip_permissions=True) == ["gemini", "--approval-mode=yolo"]
    assert AGENT.argv(skip_permissions=False) == ["gemini"]


COMMON = {"GEMINI_CLI_HOME": HOME, "GEMINI_CLI_TRUST_WORKSPACE": "true"}


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("api-key", {"GOOGLE_GEMINI_BASE_URL": GATEWAY, "GEMINI_API_KEY": TOKEN}),
        ("oauth-token", {"GOOGLE_GEMINI_BASE_URL": GATEWAY, "GEMINI_API_KEY": TOKEN}),
        ("existing-login", {}),
    ],
)
def test_environment_per_method(method: Method, expected: dict[str, str]) -> None:
    assert environment(method) == COMMON | expected


def test_the_config_home_holds_the_state_directory() -> None:
    # GEMINI_CLI_HOME replaces the home: the CLI appends ".gemini" itself.
    home = environment("api-key")["GEMINI_CLI_HOME"]
    assert f"{home}/.gemini" == AGENT.config_dir(HOME)


@pytest.mark.parametrize(
    "name", ["GEMINI_CLI_HOME", "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"]
)
def test_extra_may_not_set_a_reserved_variable(name: str) -> None:
    with pytest.raises(AgentSetupError, match=f"agents.gemini.env may not set '{name}'"):
        environment("api-key", {name: "x"})


def test_extra_is_merged_last() -> None:
    env = environment("existing-login", {"GOOGLE_CLOUD_PROJECT": "p"})
    assert env["GOOGLE_CLOUD_PROJECT"] == "p"


@pytest.mark.parametrize(
    ("method", "auth"),
    [
        ("api-key", "gemini-api-key"),
        ("oauth-token", "gemini-api-key"),
        ("existing-login", "oauth-personal"),
    ],
)
@pytest.mark.parametrize("skip_permissions", [True, False])
def test_generated(method: Method, auth: str, skip_permissions: bool) -> None:
    files = AGENT.generated(
        method=method, skip_permissions=skip_permissions, rules=RULES, gateway_url=GATEWAY
    )
    assert sorted(by_path(files)) == ["GEMINI.md", "settings.json"]
    assert settings(files) == {
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": auth}},
    }
    assert by_path(files)["GEMINI.md"].content == RULES.encode()


def test_copied_keeps_only_allowlisted_keys(host_home: Path) -> None:
    files = AGENT.copied(host_home)
    assert [item.path for item in files] == ["settings.json"]
    assert settings(files) == {
        "ui": {"theme": "GitHub", "hideBanner": True},
        "general": {"vimMode": True},
        "model": {"name": "gemini-test"},
    }
    assert leaked(files) == []


@pytest.mark.parametrize("method", ["api-key", "oauth-token"])
def test_home_files_forced_values_win_and_nothing_leaks(host_home: Path, method: Method) -> None:
    files = AGENT.home_files(
        host_home=host_home,
        method=method,
        skip_permissions=True,
        rules=RULES,
        gateway_url=GATEWAY,
    )
    assert sorted(by_path(files)) == ["GEMINI.md", "settings.json"]
    document = settings(files)
    assert document["security"] == {"auth": {"selectedType": "gemini-api-key"}}  # host: LEAK-auth
    assert document["general"] == {
        "vimMode": True,
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
    }
    assert "mcpServers" not in document
    assert leaked(files) == []


def test_home_files_of_existing_login_add_only_the_login(host_home: Path) -> None:
    files = AGENT.home_files(
        host_home=host_home,
        method="existing-login",
        skip_permissions=True,
        rules=RULES,
        gateway_url=GATEWAY,
    )
    assert sorted(by_path(files)) == [
        "GEMINI.md",
        "google_accounts.json",
        "oauth_creds.json",
        "settings.json",
    ]
    assert sorted(leaked(files)) == ["google_accounts.json", "oauth_creds.json"]


def test_login_files_without_the_optional_account_file(host_home: Path) -> None:
    (host_home / ".gemini" / "google_accounts.json").unlink()
    assert [item.path for item in AGENT.login_files(host_home)] == ["oauth_creds.json"]


def test_login_files_missing(tmp_path: Path) -> None:
    with pytest.raises(AgentSetupError, match="log in with Google in `gemini` on this machine"):
        AGENT.login_files(tmp_path)
