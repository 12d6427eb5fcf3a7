"""The Go implementation's files load: its first-run config.yaml, the samples of its
configuration reference and guide, and its decision files (fixtures/reference/)."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from pathlib import Path

import pytest

from cloister_core.config import (
    GlobalConfig,
    ProjectConfig,
    legacy_notices,
    load_decision_file,
    load_global_config,
    load_project_config,
)
from cloister_core.config.loader import load_model, parse_yaml
from cloister_core.errors import ConfigError
from cloister_core.paths import CloisterPaths
from cloister_core.policy import load_project_policy

FIXTURES = Path(__file__).parent / "fixtures" / "reference"

# Every key only the Go implementation's global files have, and what it is read as.
FIRST_RUN_KEYS = {
    "proxy.listen",
    "proxy.rate_limit",
    "proxy.max_request_bytes",
    "request.listen",
    "request.timeout",
    "hostexec.listen",
    "agents.{claude,codex,gemini}.command",
    "agents.{claude,codex,gemini}.env",
    "defaults.user",
    "log.stdout",
    "log.level",
    "log.per_cloister",
    "log.per_cloister_dir",
}
REFERENCE_KEYS = FIRST_RUN_KEYS | {
    "devcontainer.enabled",
    "devcontainer.blocked_mounts",
    "devcontainer.features.allow",
}


def named_keys(name: str) -> list[str]:
    document = parse_yaml((FIXTURES / name).read_text(encoding="utf-8"), FIXTURES / name)
    return [notice.message.split(" ", 1)[0] for notice in legacy_notices(document)]


def installed(tmp_path: Path, global_file: str, project_file: str | None = None) -> CloisterPaths:
    """A config directory holding the fixtures as the Go implementation would."""
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    paths.projects_dir.mkdir(parents=True)
    shutil.copy(FIXTURES / global_file, paths.config_file)
    if project_file is not None:
        shutil.copy(FIXTURES / project_file, paths.project_config("my-api"))
    return paths


@pytest.mark.parametrize(
    ("name", "keys"),
    [("first-run.yaml", FIRST_RUN_KEYS), ("reference-global.yaml", REFERENCE_KEYS)],
)
def test_each_key_only_it_has_is_named_once(name: str, keys: set[str]) -> None:
    named = named_keys(name)
    assert Counter(named) == Counter(keys)


def test_the_first_run_file_keeps_its_rules(tmp_path: Path) -> None:
    config = load_model(FIXTURES / "first-run.yaml", GlobalConfig)
    allowed = {entry.target for entry in config.proxy.allow}
    assert len(allowed) == 32
    assert {"api.anthropic.com", "packages.example.org", "pkg.go.dev"} <= allowed
    assert config.proxy.unlisted_domain_behavior == "request_approval"
    assert config.proxy.approval_timeout.total_seconds() == 60
    assert [item.pattern for item in config.hostexec.auto_approve] == ["^docker ps.*$"]
    assert len(config.hostexec.manual_approve) == 4
    assert config.defaults.agent == "claude"
    assert config.defaults.shell == "/bin/bash"
    assert config.agents.claude.skip_permissions
    assert config.agents.claude.env == {}  # a list of host variables is not passed


def test_effective_rules_are_what_it_would_apply(tmp_path: Path) -> None:
    paths = installed(tmp_path, "reference-global.yaml", "reference-project.yaml")
    shutil.copytree(FIXTURES / "approvals", paths.decisions_dir)  # same layout
    shutil.copy(FIXTURES / "reference-decisions.yaml", paths.global_decisions)
    policy = load_project_policy(paths, "my-api")
    verdicts = {
        host: policy.domains.decide(host, 443).action
        for host in (
            "api.anthropic.com",  # config.yaml
            "known-bad-site.example.com",  # config.yaml's deny
            "x.malware-cdn.example.com",  # one label under a deny pattern
            "internal-docs.company.com",  # the project's file
            "blocked-service.company.com",  # the project's deny
            "a.cdn.example.com",  # a global decision, under proxy:
            "malware-cdn.example.com",  # denied there
            "project.dev",  # the project's decision file
            "tracker.example.net",  # denied there
            "elsewhere.example",  # nothing
        )
    }
    assert verdicts == {
        "api.anthropic.com": "allow",
        "known-bad-site.example.com": "deny",
        "x.malware-cdn.example.com": "deny",
        "internal-docs.company.com": "allow",
        "blocked-service.company.com": "deny",
        "a.cdn.example.com": "allow",
        "malware-cdn.example.com": "deny",
        "project.dev": "allow",
        "tracker.example.net": "deny",
        "elsewhere.example": "unlisted",
    }
    # Its wildcard is the apex and one label, as here.
    assert policy.domains.decide("cdn.example.com", 443).action == "allow"
    assert policy.domains.decide("a.b.cdn.example.com", 443).action == "unlisted"
    assert policy.commands.decide(["make", "test"]).action == "auto_approve"
    assert policy.commands.decide(["./scripts/lint.sh"]).action == "auto_approve"
    assert policy.commands.decide(["docker", "compose", "logs", "-f"]).action == "auto_approve"
    assert policy.commands.decide(["curl", "https://x.test"]).action == "manual_approve"
    assert policy.commands.decide(["rm", "-rf", "/"]).action == "deny"


def test_its_feature_list_is_read_as_trusted_features() -> None:
    config = load_model(FIXTURES / "reference-global.yaml", GlobalConfig)
    assert config.devcontainer.trusted_features == (
        "ghcr.io/devcontainers/features/",
        "ghcr.io/devcontainers-contrib/features/",
    )
    assert config.defaults.image == "cloister:latest"


@pytest.mark.parametrize("name", ["reference-project.yaml", "guide-project.yaml"])
def test_its_project_files_load_as_they_are(name: str) -> None:
    project = load_model(FIXTURES / name, ProjectConfig)
    assert project.proxy.allow
    assert project.hostexec.auto_approve


def test_its_guide_sample_loads_with_nothing_set_aside() -> None:
    assert named_keys("guide-global.yaml") == []
    config = load_model(FIXTURES / "guide-global.yaml", GlobalConfig)
    assert config.defaults.agent == "claude"
    assert [item.pattern for item in config.hostexec.manual_approve] == ["^docker compose"]


def test_its_decision_file_loads() -> None:
    decisions = load_decision_file(FIXTURES / "reference-decisions.yaml")
    assert [entry.target for entry in decisions.allow] == [
        "docs.example.com",
        "internal-api.company.com",
        "pkg.go.dev",
        "*.cdn.example.com",
        "*.s3.amazonaws.com",
    ]
    assert len(decisions.deny) == 4


def test_an_agent_secret_is_never_kept(tmp_path: Path) -> None:
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    paths.config_dir.mkdir(parents=True)
    secret = "sk-ant-do-not-keep-0123456789"
    paths.config_file.write_text(
        "agents:\n"
        "  claude:\n"
        "    auth_method: token\n"
        f"    token: {secret}\n"
        "  codex:\n"
        f"    api_key: {secret}\n"
        "  aider:\n"
        "    command: aider\n",
        encoding="utf-8",
    )
    config = load_global_config(paths, create=False)
    assert secret not in config.model_dump_json()
    assert secret not in repr(config)
    document = parse_yaml(paths.config_file.read_text(encoding="utf-8"), paths.config_file)
    messages = [notice.message for notice in legacy_notices(document)]
    assert all(secret not in message for message in messages)
    setup = (
        " is not used by Cloister: Cloister never reads a secret from config.yaml; run"
        " `cloister setup {}` (the credential gateway hands it to the agent), then delete"
        " this line: the secret is in clear here"
    )
    assert sorted(messages) == [
        "agents.aider is not used by Cloister: Cloister runs only claude, codex, gemini",
        "agents.claude.auth_method is not used by Cloister: choose the method with"
        " `cloister setup claude --method ...`",
        "agents.claude.token" + setup.format("claude"),
        "agents.codex.api_key" + setup.format("codex"),
    ]


def test_cloisters_own_keys_are_still_checked(tmp_path: Path) -> None:
    config = load_model(FIXTURES / "first-run.yaml", GlobalConfig)
    assert config.proxy.max_held_per_cloister == 16  # untouched
    document = {"proxy": {"listen": ":3128", "alow": []}}
    with pytest.raises(ValueError, match="alow"):
        GlobalConfig.model_validate(document)
    env = {"agents": {"claude": {"env": {"EDITOR": "vi"}}}}
    assert GlobalConfig.model_validate(env).agents.claude.env == {"EDITOR": "vi"}


def test_loading_names_each_key_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths = installed(tmp_path, "first-run.yaml")
    with caplog.at_level(logging.WARNING, logger="cloister_core.config"):
        load_global_config(paths)
        load_global_config(paths)  # a service reloading the file
    [message] = [record.getMessage() for record in caplog.records]
    assert message.startswith(
        f"{paths.config_file}: 13 key(s) of the Go implementation's format set aside or read"
        " as Cloister's: proxy.listen, proxy.rate_limit, proxy.max_request_bytes,"
        " request.listen, request.timeout, hostexec.listen, agents.{claude,codex,gemini}"
        ".command, agents.{claude,codex,gemini}.env, defaults.user, log.stdout,"
    )
    assert message.endswith("(`cloister config check` says what Cloister does instead)")
    assert load_project_config(paths, "my-api") == ProjectConfig()


def test_a_string_misplaced_under_agents_is_not_echoed(tmp_path: Path) -> None:
    """A key pasted where a mapping belongs (``agents.claude: sk-…``) is an error that
    names where, never the value."""
    path = tmp_path / "config.yaml"
    path.write_text("agents:\n  claude: sk-ant-api03-not-for-the-terminal\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_model(path, GlobalConfig)
    assert "not-for-the-terminal" not in str(raised.value)
    assert "agents.claude" in str(raised.value)
    assert "got a string of 33 characters" in str(raised.value)


def test_log_file_is_read_as_the_place_of_a_link_to_the_audit_log(tmp_path: Path) -> None:
    paths = installed(tmp_path, "first-run.yaml")
    assert load_global_config(paths).log.file == "~/.local/state/cloister/audit.log"
    assert "log.file" not in named_keys("first-run.yaml")
