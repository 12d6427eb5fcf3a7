"""Claude Code: its variables, forced files, copied settings and login."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.agents.base import AgentSetupError, HomeFile
from cloister_cli.agents.claude import AGENT
from cloister_core.credentials import Method
from tests.cli.agents.hosthome import leaked

HOME = "/home/cloister"
GATEWAY = "http://cloister-guardian-credentials:9997/claude"
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


def document(files: list[HomeFile], path: str) -> Any:
    return json.loads(by_path(files)[path].content)


COMMON = {
    "CLAUDE_CONFIG_DIR": "/home/cloister/.claude",
    "IS_SANDBOX": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    # Implied by the one above, and kept when a human turns that one back on.
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("api-key", {"ANTHROPIC_BASE_URL": GATEWAY, "ANTHROPIC_AUTH_TOKEN": TOKEN}),
        ("oauth-token", {"ANTHROPIC_BASE_URL": GATEWAY, "CLAUDE_CODE_OAUTH_TOKEN": TOKEN}),
        ("existing-login", {}),
    ],
)
def test_environment_per_method(method: Method, expected: dict[str, str]) -> None:
    assert environment(method) == COMMON | expected


def test_the_api_key_variable_is_never_set() -> None:
    # ANTHROPIC_API_KEY makes the interactive CLI ask whether to use the key (default No).
    for method in AGENT.method_help:
        assert "ANTHROPIC_API_KEY" not in environment(method)


def test_extra_is_merged_last() -> None:
    env = environment("api-key", {"DISABLE_AUTOUPDATER": "0", "MY_VAR": "x"})
    assert (env["DISABLE_AUTOUPDATER"], env["MY_VAR"]) == ("0", "x")


@pytest.mark.parametrize(
    "name",
    [
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CONFIG_DIR",
        "HTTPS_PROXY",
        "no_proxy",
        "HOME",
        "CLOISTER_TOKEN",
    ],
)
def test_extra_may_not_set_a_reserved_variable(name: str) -> None:
    with pytest.raises(AgentSetupError, match=f"agents.claude.env may not set '{name}'"):
        environment("existing-login", {name: "x"})


def test_a_gateway_method_needs_the_token() -> None:
    with pytest.raises(AgentSetupError, match="needs the gateway URL and a token"):
        AGENT.environment(
            home=HOME,
            gateway_url=GATEWAY,
            token="",
            method="api-key",
            skip_permissions=True,
            extra={},
        )


@pytest.mark.parametrize("method", ["api-key", "oauth-token", "existing-login"])
def test_generated_with_permissions_off(method: Method) -> None:
    files = AGENT.generated(method=method, skip_permissions=True, rules=RULES, gateway_url=GATEWAY)
    assert sorted(by_path(files)) == [".claude.json", "CLAUDE.md", "settings.json"]
    assert document(files, ".claude.json") == {
        "hasCompletedOnboarding": True,
        "hasSeenAutoDefaultNudge": True,
        "projects": {"/work": {"hasTrustDialogAccepted": True}},
        "bypassPermissionsModeAccepted": True,
    }
    assert document(files, "settings.json") == {
        "permissions": {"defaultMode": "bypassPermissions"},
        "skipDangerousModePermissionPrompt": True,
    }
    assert by_path(files)["CLAUDE.md"].content == RULES.encode()
    assert all(item.mode in (0o600, 0o644) for item in files)


def test_generated_with_permissions_on() -> None:
    files = AGENT.generated(
        method="api-key", skip_permissions=False, rules=RULES, gateway_url=GATEWAY
    )
    assert "bypassPermissionsModeAccepted" not in document(files, ".claude.json")
    assert document(files, "settings.json") == {"permissions": {"defaultMode": "default"}}


def test_copied_keeps_only_allowlisted_settings(host_home: Path) -> None:
    files = AGENT.copied(host_home)
    assert [item.path for item in files] == ["settings.json"]
    assert document(files, "settings.json") == {
        "model": "claude-opus-test",
        "theme": "light",
        "verbose": True,
        "attribution": {"commit": "Co-authored-by: me"},
    }
    assert leaked(files) == []


def test_copied_from_a_home_without_claude(tmp_path: Path) -> None:
    assert AGENT.copied(tmp_path) == []


@pytest.mark.parametrize("method", ["api-key", "oauth-token"])
def test_home_files_forced_values_win_and_nothing_leaks(host_home: Path, method: Method) -> None:
    files = AGENT.home_files(
        host_home=host_home,
        method=method,
        skip_permissions=True,
        rules=RULES,
        gateway_url=GATEWAY,
    )
    assert sorted(by_path(files)) == [".claude.json", "CLAUDE.md", "settings.json"]
    settings = document(files, "settings.json")
    assert settings["permissions"] == {"defaultMode": "bypassPermissions"}  # the host had "plan"
    assert settings["skipDangerousModePermissionPrompt"] is True  # the host had False
    assert settings["model"] == "claude-opus-test"
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
        ".claude.json",
        ".credentials.json",
        "CLAUDE.md",
        "settings.json",
    ]
    assert leaked(files) == [".credentials.json"]  # the one thing this method does copy


def test_login_files(host_home: Path) -> None:
    (login,) = AGENT.login_files(host_home)
    source = host_home / ".claude" / ".credentials.json"
    assert login == HomeFile(
        ".credentials.json", source.read_bytes(), 0o600, host_mtime=source.stat().st_mtime
    )


def test_login_files_missing(tmp_path: Path) -> None:
    with pytest.raises(AgentSetupError, match="log in with `claude` on this machine first"):
        AGENT.login_files(tmp_path)
