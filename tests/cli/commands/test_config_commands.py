"""``cloister config path|check|show`` against a temporary config directory."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloister_cli.commands.main import cli


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
    }


def run(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.output


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def squash(text: str) -> str:
    """Whitespace runs as one space: rich pads table cells."""
    return re.sub(r"\s+", " ", text)


def test_path_json(env: dict[str, str]) -> None:
    code, output = run(env, "config", "path", "--json")
    assert code == 0
    listing = json.loads(output)
    assert listing["config_file"] == str(Path(env["CLOISTER_CONFIG_DIR"]) / "config.yaml")
    assert listing["audit_log"] == str(Path(env["CLOISTER_DATA_DIR"]) / "audit.log")
    assert listing["logs_dir"] == str(Path(env["CLOISTER_DATA_DIR"]) / "logs")


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


def test_show_lists_hostexec_patterns_with_their_files(env: dict[str, str]) -> None:
    config_dir = Path(env["CLOISTER_CONFIG_DIR"])
    write(config_dir / "config.yaml", "hostexec:\n  manual_approve: [{pattern: '^gh [a-z]+$'}]\n")
    write(config_dir / "projects" / "p.yaml", "hostexec:\n  auto_approve: [{pattern: '^make$'}]\n")
    code, output = run({**env, "COLUMNS": "400"}, "config", "show", "-p", "p")
    assert code == 0, output
    text = squash(output)
    assert "Hostexec patterns" in text
    assert "auto_approve │ ^make$" in text
    assert "manual_approve │ ^gh [a-z]+$" in text  # a regular expression, not rich markup
    assert "p.yaml" in text
    assert "config.yaml" in text
    code, output = run(env, "config", "show", "-p", "p", "--json")
    assert json.loads(output)["hostexec"]["manual_approve"] == [
        {"pattern": "^gh [a-z]+$", "file": str(config_dir / "config.yaml")}
    ]


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("cloister, version ")


WARNING_CONFIG = (
    "proxy:\n"
    "  allow:\n"
    "    - domain: api.anthropic.com\n"
    "    - pattern: '*.com'\n"
    "hostexec:\n"
    "  auto_approve:\n"
    "    - pattern: '.*'\n"
)


def test_check_warns_but_passes(env: dict[str, str]) -> None:
    config = write(Path(env["CLOISTER_CONFIG_DIR"]) / "config.yaml", WARNING_CONFIG)
    code, output = run(env, "config", "check")
    assert code == 0, output
    assert f"{config}:4:16: warning: allow pattern '*.com' opens every site" in output
    assert f"{config}:7:16: warning: auto_approve pattern '.*' approves any command" in output
    assert "configuration is valid (2 warnings; --strict makes them errors)" in output


def test_strict_turns_warnings_into_errors(env: dict[str, str]) -> None:
    write(Path(env["CLOISTER_CONFIG_DIR"]) / "config.yaml", WARNING_CONFIG)
    code, output = run(env, "config", "check", "--strict")
    assert code == 1
    assert "warning: allow pattern '*.com'" in output
    assert output.rstrip().endswith("Error: 2 warnings, which --strict makes errors")


def test_check_json_includes_warnings_and_errors(env: dict[str, str]) -> None:
    config_dir = Path(env["CLOISTER_CONFIG_DIR"])
    config = write(config_dir / "config.yaml", WARNING_CONFIG)
    code, output = run(env, "config", "check", "--json")
    assert code == 0, output
    document = json.loads(output)
    assert document["valid"] is True
    assert document["errors"] == []
    assert document["domain_rules"] == 2
    assert [(w["file"], w["line"], w["column"], w["kind"]) for w in document["warnings"]] == [
        (str(config), 4, 16, "public-suffix"),
        (str(config), 7, 16, "approves-anything"),
    ]
    code, output = run(env, "config", "check", "--json", "--strict")
    assert code == 1
    assert json.loads(output)["valid"] is False

    project = write(config_dir / "projects" / "p.yaml", "proxy:\n  alow: []\n")
    code, output = run(env, "config", "check", "--json", "-p", "p")
    assert code == 1
    document = json.loads(output)
    assert document["valid"] is False
    assert document["domain_rules"] is None
    assert document["errors"] == [
        {
            "file": str(project),
            "line": 2,
            "column": 3,
            "message": "unknown key 'alow' in proxy; did you mean 'allow'?",
        }
    ]
    assert [f["state"] for f in document["files"]] == ["ok", "invalid", "absent", "absent"]


def test_check_reports_every_broken_file(env: dict[str, str]) -> None:
    config_dir = Path(env["CLOISTER_CONFIG_DIR"])
    config = write(config_dir / "config.yaml", "proxy:\n\tallow: []\n")
    decisions = write(config_dir / "decisions" / "global.yaml", "allow:\n  - github.com\n")
    code, output = run(env, "config", "check")
    assert code == 1
    assert (
        f"{config}:2:1: invalid YAML: this line is indented with a tab; YAML indents with"
        " spaces only"
    ) in output
    assert f"{decisions}:2:5: allow[0]: 'github.com' is a bare string" in output
    assert "invalid            " in output
    assert output.endswith("Error: the configuration is not valid: 2 errors\n")


@pytest.mark.parametrize("command", ["check", "show"])
def test_unknown_project_is_one_line(env: dict[str, str], command: str) -> None:
    code, output = run(env, "config", command, "-p", "nope")
    assert code == 1
    assert output == "Error: no project 'nope' (`cloister project list`)\n"


def test_config_dir_naming_a_file_is_one_error_line(env: dict[str, str], tmp_path: Path) -> None:
    file = write(tmp_path / "oops", "")
    code, output = run({**env, "CLOISTER_CONFIG_DIR": str(file)}, "config", "check")
    assert code == 1
    assert output == (
        f"Error: CLOISTER_CONFIG_DIR is {str(file)!r}, which is not a directory; point it at"
        " a directory (Cloister creates a missing one)\n"
    )


def test_check_refs(env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "vendor").mkdir(parents=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    notes = write(tmp_path / "notes.txt", "x")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = Path(env["CLOISTER_DATA_DIR"])
    data.mkdir()
    project = write(
        Path(env["CLOISTER_CONFIG_DIR"]) / "projects" / "p.yaml",
        f"root: {root}\n"
        "refs:\n"
        f"  - {shared}\n"  # fine
        f"  - {notes}\n"  # a file: fine
        "  - vendor\n"  # relative to root: fine
        f"  - {tmp_path / 'gone'}\n"
        f"  - {fifo}\n"
        f"  - {data}\n",
    )
    code, output = run(env, "config", "check", "-p", "p")
    assert code == 1
    assert f"{project}:6:5: ref {str(tmp_path / 'gone')!r} does not exist" in output
    assert f"{project}:7:5: ref {str(fifo)!r} is neither a directory nor a file" in output
    assert (
        f"{project}:8:5: refusing to mount the ref {str(data)!r}: it is, holds or sits inside"
    ) in output
    assert "Error: the configuration is not valid: 3 errors" in output
    for fine in (3, 4, 5):
        assert f"{project}:{fine}:" not in output


def test_relative_ref_without_root(env: dict[str, str]) -> None:
    project = write(Path(env["CLOISTER_CONFIG_DIR"]) / "projects" / "p.yaml", "refs: [lib]\n")
    code, output = run(env, "config", "check", "-p", "p", "--json")
    assert code == 1
    [error] = json.loads(output)["errors"]
    assert (error["file"], error["line"], error["column"]) == (str(project), 1, 8)
    assert error["message"] == (
        "ref 'lib' is relative, and the project has no `root:` to resolve it"
    )


REFERENCE = Path(__file__).parents[2] / "core" / "config" / "fixtures" / "reference"


def test_the_go_implementations_files_load(env: dict[str, str]) -> None:
    config_dir = Path(env["CLOISTER_CONFIG_DIR"])
    write(config_dir / "config.yaml", (REFERENCE / "reference-global.yaml").read_text())
    write(
        config_dir / "approvals" / "global.yaml",
        (REFERENCE / "approvals" / "global.yaml").read_text(),
    )
    code, output = run(env, "config", "check")
    assert code == 0, output
    assert f"moved {config_dir / 'approvals' / 'global.yaml'} to" in output
    assert not (config_dir / "approvals").exists()
    # Each key set aside once, at its line, with what Cloister does instead.
    assert output.count("proxy.rate_limit is not used by Cloister") == 1
    assert re.search(r"config\.yaml:\d+:3: warning: proxy\.listen is not used by Cloister", output)
    assert "agents.{claude,codex,gemini}.command is not used by Cloister" in output
    assert "is read as devcontainer.trusted_features" in output
    summary = "25 domain rules, configuration is valid (16 warnings; --strict makes them errors)"
    assert summary in output
    code, output = run(env, "config", "check", "--strict")
    assert code == 1
    assert "16 warnings, which --strict makes errors" in output
    code, output = run(env, "config", "show", "--json")
    assert code == 0, output
    document = json.loads(output[output.index("{") :])
    rules = {(rule["action"], rule["rule"]) for rule in document["domains"]}
    assert {("deny", "*.malware-cdn.example.com"), ("allow", "test.org")} <= rules
    assert document["hostexec"]["auto_approve"][0]["pattern"] == "^docker compose ps$"
