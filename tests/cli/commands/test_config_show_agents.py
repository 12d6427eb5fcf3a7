"""``cloister config show``: the agents' background hosts, the default or the config's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from cloister_cli.commands.main import cli


def show(tmp_path: Path, config: str | None, *args: str) -> str:
    config_dir = tmp_path / "config"
    if config is not None:
        config_dir.mkdir(parents=True, exist_ok=True)
        (config_dir / "config.yaml").write_text(config, encoding="utf-8")
    env = {
        "CLOISTER_CONFIG_DIR": str(config_dir),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "300",
    }
    result = CliRunner().invoke(cli, ["config", "show", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_defaults_are_listed_per_agent(tmp_path: Path) -> None:
    document = json.loads(show(tmp_path, None, "--json"))
    assert document["agent_background_hosts"] == {
        "claude": {"hosts": ["downloads.claude.ai"], "source": "default"},
        "codex": {"hosts": ["ab.chatgpt.com", "github.com"], "source": "default"},
        "gemini": {"hosts": ["play.googleapis.com"], "source": "default"},
    }
    table = re.sub(r"\s+", " ", show(tmp_path, None))
    assert "Agents' background hosts (refused unless a rule decides)" in table
    assert "codex │ ab.chatgpt.com, github.com │ default" in table


def test_the_configs_list_replaces_the_default(tmp_path: Path) -> None:
    config = (
        "agents:\n  codex:\n    background_hosts: [github.com]\n  gemini: {background_hosts: []}\n"
    )
    document = json.loads(show(tmp_path, config, "--json"))
    assert document["agent_background_hosts"]["codex"] == {
        "hosts": ["github.com"],
        "source": "config",
    }
    assert document["agent_background_hosts"]["gemini"] == {"hosts": [], "source": "config"}
    table = re.sub(r"\s+", " ", show(tmp_path, config))
    assert "codex │ github.com │ agents.codex.background_hosts" in table
    assert "gemini │ (none) │ agents.gemini.background_hosts" in table
    assert "claude │ downloads.claude.ai │ default" in table
