"""``cloister config path|check|show`` against a temporary config directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloister_cli.main import cli


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
    }


def run(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.output


def test_path_json(env: dict[str, str]) -> None:
    code, output = run(env, "config", "path", "--json")
    assert code == 0
    listing = json.loads(output)
    assert listing["config_file"] == str(Path(env["CLOISTER_CONFIG_DIR"]) / "config.yaml")
    assert listing["audit_log"] == str(Path(env["CLOISTER_DATA_DIR"]) / "audit.log")


def test_check_writes_default_then_validates(env: dict[str, str]) -> None:
    code, output = run(env, "config", "check")
    assert code == 0, output
    assert "wrote the default configuration" in output
    assert "configuration is valid" in output
    code, output = run(env, "config", "check")
    assert "wrote the default" not in output


def test_check_reports_file_and_line(env: dict[str, str]) -> None:
    config = Path(env["CLOISTER_CONFIG_DIR"]) / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("proxy:\n  allow:\n    - domian: x.test\n", encoding="utf-8")
    code, output = run(env, "config", "check")
    assert code == 1
    assert f"{config}:3:7: unknown key 'domian'" in output


def test_check_project_files(env: dict[str, str]) -> None:
    project = Path(env["CLOISTER_CONFIG_DIR"]) / "projects" / "my-api.yaml"
    project.parent.mkdir(parents=True)
    project.write_text("proxy:\n  deny: [{domain: 'bad host'}]\n", encoding="utf-8")
    code, output = run(env, "config", "check", "-p", "my-api")
    assert code == 1
    assert f"{project}:2:" in output
    code, output = run(env, "config", "check", "-p", "../etc")
    assert code == 2
    assert "not valid" in output


def test_show_json_merges_scopes(env: dict[str, str]) -> None:
    config_dir = Path(env["CLOISTER_CONFIG_DIR"])
    (config_dir / "projects").mkdir(parents=True)
    (config_dir / "config.yaml").write_text("proxy:\n  allow: [{domain: a.test}]\n", "utf-8")
    (config_dir / "projects" / "p.yaml").write_text(
        "proxy:\n  deny: [{pattern: '*.b.test'}]\n"
        "hostexec:\n  auto_approve: [{pattern: '^make$'}]\n",
        "utf-8",
    )
    code, output = run(env, "config", "show", "-p", "p", "--json")
    assert code == 0, output
    document = json.loads(output)
    assert document["domains"] == [
        {
            "action": "deny",
            "rule": "*.b.test",
            "ports": None,
            "scope": "project",
            "file": str(config_dir / "projects" / "p.yaml"),
        },
        {
            "action": "allow",
            "rule": "a.test",
            "ports": None,
            "scope": "global",
            "file": str(config_dir / "config.yaml"),
        },
    ]
    assert document["allowed_ports"] == [80, 443]
    assert document["hostexec"]["auto_approve"] == [
        {"pattern": "^make$", "file": str(config_dir / "projects" / "p.yaml")}
    ]


def test_show_table(env: dict[str, str]) -> None:
    code, output = run(env, "config", "show")
    assert code == 0, output
    assert "api.anthropic.com" in output
    assert "unlisted domains: request_approval" in output


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("cloister, version ")
