"""The command group: its lazy table, typo suggestions, and what it imports.

Start-up time is measured by ``benchmarks/bench_cli_speed.py``; here the imports that
made it slow are kept out, which a test can check without a clock.
"""

from __future__ import annotations

import errno
import gc
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cloister_cli.commands.main import COMMANDS, GC_THRESHOLDS, cli
from tests.cli.engine_support import FakeEngineApi, serve

CONTEXT = click.Context(cli)


@pytest.mark.parametrize(
    ("typed", "hint"),
    [
        ("strat", " Did you mean 'start'?"),
        ("lst", " Did you mean 'list'?"),
        ("projcet", " Did you mean 'project'?"),
        ("aprovals", " Did you mean 'approvals'?"),
        ("stp", " Did you mean one of 'stop', 'setup'?"),
        ("frobnicate", ""),
    ],
)
def test_a_mistyped_command_gets_a_suggestion(typed: str, hint: str) -> None:
    result = CliRunner().invoke(cli, [typed, "--json"], prog_name="cloister")
    assert result.exit_code == 2
    assert result.output.endswith(f"\nError: No such command {typed!r}.{hint}\n"), result.output
    assert result.output.startswith("Usage: cloister [OPTIONS] COMMAND [ARGS]...\n")


def test_an_option_is_still_an_option() -> None:
    result = CliRunner().invoke(cli, ["--nope"], prog_name="cloister")
    assert result.exit_code == 2
    assert "No such option" in result.output


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/d/tokens/x"),
            "No space left on device: /d/tokens/x; free some space and run it again",
        ),
        (
            OSError(errno.EDQUOT, "Disk quota exceeded"),
            "Disk quota exceeded; free some space and run it again",
        ),
    ],
)
def test_a_full_disk_is_one_clean_line(
    monkeypatch: pytest.MonkeyPatch, error: OSError, said: str
) -> None:
    def full(self: click.Group, ctx: click.Context) -> None:
        raise error

    monkeypatch.setattr(click.Group, "invoke", full)
    result = CliRunner().invoke(cli, ["list"], prog_name="cloister")
    assert result.exit_code == 1, result.output
    assert result.output == f"Error: {said}\n"


def test_another_os_error_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: click.Group, ctx: click.Context) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", "/d")

    monkeypatch.setattr(click.Group, "invoke", refused)
    result = CliRunner().invoke(cli, ["list"], prog_name="cloister")
    assert isinstance(result.exception, PermissionError)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_summaries_are_the_commands_own(name: str) -> None:
    """--help and completion show them without importing the command: they must agree."""
    command = cli.get_command(CONTEXT, name)
    assert command is not None
    assert COMMANDS[name].summary == command.get_short_help_str(limit=1000)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_help_lists_the_commands_as_click_would(width: int) -> None:
    ours = click.HelpFormatter(width=width)
    cli.format_commands(CONTEXT, ours)
    clicks = click.HelpFormatter(width=width)
    click.Group.format_commands(cli, CONTEXT, clicks)  # imports every command
    assert ours.getvalue() == clicks.getvalue()
    assert "uninstall" in ours.getvalue()


GC_PROBE = """
import gc, json, sys
from cloister_cli.commands.main import main
sys.argv = ["cloister", "--version"]
try:
    main()
except SystemExit:
    pass
print(json.dumps([gc.get_threshold(), gc.get_freeze_count()]))
"""


def test_the_console_script_collects_rarely_and_freezes_what_is_left() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", GC_PROBE], check=True, capture_output=True, text=True, timeout=60
    )
    threshold, frozen = json.loads(ran.stdout.splitlines()[-1])
    assert tuple(threshold) == GC_THRESHOLDS
    assert threshold[0] > gc.get_threshold()[0]  # rarer than the interpreter's default
    assert frozen > 0


# -- what a command imports -------------------------------------------------------------------

HEAVY = (
    "docker",
    "requests",
    "httpx",
    "pydantic",
    "ruamel.yaml",
    "rich",
    "jinja2",
    "cloister_core.config",
    "cloister_cli.session.ending",
    "cloister_cli.start.apply",
    "cloister_cli.images.projectimages",
)

PROBE = """
import json, sys
from cloister_cli.commands.main import cli
try:
    cli(sys.argv[2:], prog_name="cloister")
except SystemExit:
    pass
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""


def imported(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules loaded by running `cloister ARGS` in a fresh interpreter."""
    listing = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), *args],
        check=True,
        capture_output=True,
        timeout=60,
        env=env,
    )
    return set(json.loads(listing.read_text(encoding="utf-8")))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY))


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("-h",)], ids=" ".join)
def test_help_and_version_import_no_command(tmp_path: Path, args: tuple[str, ...]) -> None:
    modules = imported(tmp_path, *args)
    assert heavy(modules) == []
    entry = "cloister_cli.commands.main"  # the group itself; no command's module
    assert not [m for m in modules if m.startswith("cloister_cli.commands.") and m != entry]


def test_list_imports_neither_the_docker_sdk_nor_the_lifecycle(tmp_path: Path) -> None:
    socket_path = tmp_path / "engine.sock"
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{socket_path}", "HOME": str(tmp_path)}
    with serve(socket_path, FakeEngineApi()) as api:
        assert heavy(imported(tmp_path, "list", "--json", env=env)) == []
        assert heavy(imported(tmp_path, "list", env=env)) == []
    assert len(api.requests) == 2  # it did ask the engine, twice


# Commands that read files only: the config, projects, snapshot records, worktrees.
OFFLINE = [
    ("setup", "--list"),
    ("config", "check"),
    ("config", "show"),
    ("config", "path"),
    ("project", "list"),
    ("worktree", "list"),
    ("restore", "api", "--list"),
]
ENGINE_ONLY = (
    "docker",
    "requests",
    "httpx",
    "cloister_cli.session.ending",
    "cloister_cli.start.apply",
)


@pytest.mark.parametrize("args", OFFLINE, ids=" ".join)
def test_commands_without_the_engine_import_no_engine_client(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
    }
    modules = imported(tmp_path, *args, env=env)
    assert f"cloister_cli.commands.{args[0]}" in modules  # it ran
    assert [m for m in modules if m.split(".")[0] in ENGINE_ONLY or m in ENGINE_ONLY] == []


def test_images_list_loads_no_config_parser(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}",  # it fails after the imports
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
    }
    modules = imported(tmp_path, "images", "list", env=env)
    assert "cloister_cli.images.projectimages.store" in modules
    parsers = ("ruamel", "cloister_core.config", "cloister_core.devcontainer")
    assert [m for m in modules if m.startswith(parsers)] == []
