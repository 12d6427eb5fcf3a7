"""Codex: its variables, forced config.toml, copied settings and login."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.agents.base import AgentSetupError, HomeFile
from cloister_cli.agents.codex import AGENT
from cloister_core.credentials import Method
from tests.cli.agents.hosthome import leaked

HOME = "/home/cloister"
GATEWAY = "http://cloister-guardian-credentials:9997/codex"
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


def config(files: list[HomeFile]) -> dict[str, Any]:
    return tomllib.loads(by_path(files)["config.toml"].content.decode())


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("api-key", {"OPENAI_BASE_URL": f"{GATEWAY}/v1", "OPENAI_API_KEY": TOKEN}),
        ("oauth-token", {"OPENAI_BASE_URL": f"{GATEWAY}/v1", "OPENAI_API_KEY": TOKEN}),
        ("existing-login", {}),
    ],
)
def test_environment_per_method(method: Method, expected: dict[str, str]) -> None:
    assert environment(method) == {"CODEX_HOME": "/home/cloister/.codex"} | expected


def test_a_trailing_slash_of_the_gateway_url_is_dropped() -> None:
    env = AGENT.environment(
        home=HOME,
        gateway_url=GATEWAY + "/",
        token=TOKEN,
        method="api-key",
        skip_permissions=True,
        extra={},
    )
    assert env["OPENAI_BASE_URL"] == f"{GATEWAY}/v1"


@pytest.mark.parametrize(
    "name",
    ["CODEX_HOME", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN"],
)
def test_extra_may_not_set_a_reserved_variable(name: str) -> None:
    with pytest.raises(AgentSetupError, match=f"agents.codex.env may not set '{name}'"):
        environment("api-key", {name: "x"})


def test_extra_is_merged_last() -> None:
    assert environment("api-key", {"RUST_LOG": "debug"})["RUST_LOG"] == "debug"


@pytest.mark.parametrize("method", ["api-key", "oauth-token"])
def test_generated_for_the_gateway(method: Method) -> None:
    files = AGENT.generated(method=method, skip_permissions=True, rules=RULES, gateway_url=GATEWAY)
    assert sorted(by_path(files)) == ["AGENTS.md", "config.toml"]
    assert config(files) == {
        "check_for_update_on_startup": False,
        "model_provider": "cloister",
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "model_providers": {
            "cloister": {
                "name": "Cloister credential gateway",
                "base_url": f"{GATEWAY}/v1",  # the gateway forwards /v1/responses unchanged
                "env_key": "OPENAI_API_KEY",
                "wire_api": "responses",
            }
        },
        "projects": {"/work": {"trust_level": "trusted"}},
        "features": {"daemon_auto_start": False},
        "analytics": {"enabled": False},
        "otel": {"metrics_exporter": "none"},
    }
    assert by_path(files)["AGENTS.md"].content == RULES.encode()


def test_generated_for_an_existing_login_keeps_the_built_in_provider() -> None:
    files = AGENT.generated(
        method="existing-login", skip_permissions=True, rules=RULES, gateway_url=GATEWAY
    )
    document = config(files)
    assert "model_provider" not in document
    assert "model_providers" not in document
    assert document["approval_policy"] == "never"


def test_generated_with_permissions_on() -> None:
    files = AGENT.generated(
        method="api-key", skip_permissions=False, rules=RULES, gateway_url=GATEWAY
    )
    document = config(files)
    assert "approval_policy" not in document
    assert "sandbox_mode" not in document
    assert document["projects"] == {"/work": {"trust_level": "trusted"}}


def test_copied_keeps_only_allowlisted_keys(host_home: Path) -> None:
    files = AGENT.copied(host_home)
    assert [item.path for item in files] == ["config.toml"]
    assert config(files) == {"model": "gpt-test", "model_reasoning_effort": "high"}
    assert leaked(files) == []


def test_copied_from_a_broken_config(tmp_path: Path) -> None:
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text("model = \n")
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
    assert sorted(by_path(files)) == ["AGENTS.md", "config.toml"]
    document = config(files)
    assert document["model"] == "gpt-test"
    assert document["approval_policy"] == "never"  # the host had "untrusted"
    assert document["model_provider"] == "cloister"
    assert set(document["model_providers"]) == {"cloister"}
    assert "notify" not in document
    assert "mcp_servers" not in document
    assert leaked(files) == []


def test_home_files_of_existing_login_add_only_the_login(host_home: Path) -> None:
    files = AGENT.home_files(
        host_home=host_home,
        method="existing-login",
        skip_permissions=True,
        rules=RULES,
        gateway_url=GATEWAY,
    )
    assert sorted(by_path(files)) == ["AGENTS.md", "auth.json", "config.toml"]
    assert leaked(files) == ["auth.json"]


def test_login_files(host_home: Path) -> None:
    (login,) = AGENT.login_files(host_home)
    source = host_home / ".codex" / "auth.json"
    assert (login.path, login.content, login.mode) == ("auth.json", source.read_bytes(), 0o600)
    assert login.host_mtime == source.stat().st_mtime


def test_login_files_missing(tmp_path: Path) -> None:
    with pytest.raises(AgentSetupError, match="log in with `codex login` on this machine first"):
        AGENT.login_files(tmp_path)
