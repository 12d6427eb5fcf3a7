"""Tables keep ids, names and paths whole: piped, no line is folded; on a narrow
terminal the other cells wrap and the line grows rather than cut a value."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.table import Table

import cloister_cli
from cloister_cli.commands import output
from cloister_cli.commands.main import cli
from cloister_cli.commands.tables import UNFOLDED, WholeConsole
from cloister_core import snapshots
from cloister_core.paths import CloisterPaths
from tests.cli.engine_support import FakeEngineApi, cloister_attrs, instance_of, serve

NAME = "a-cloister-whose-name-is-longer-than-a-narrow-terminal"
NARROW = "40"  # $COLUMNS: rich folds piped output to it unless told otherwise
PROGRAM = "from cloister_cli.commands.main import main; main()"


def deep(root: Path) -> Path:
    """A directory whose path, with a space in it, is wider than a terminal."""
    return root / "work trees of the team" / ("nested-" * 6).rstrip("-") / NAME


def line_with(output_text: str, *values: str) -> str:
    """The line of *output_text* holding every one of *values*, whole."""
    for line in output_text.splitlines():
        if all(value in line for value in values):
            return line
    raise AssertionError(f"no line holds all of {values!r} in:\n{output_text}")


def environment(root: Path) -> dict[str, str]:
    return {
        "CLOISTER_CONFIG_DIR": str(root / "config"),
        "CLOISTER_DATA_DIR": str(root / "data"),
        "COLUMNS": NARROW,
    }


def record(root: Path, worktree: Path, taken: datetime) -> snapshots.SnapshotRecord:
    return snapshots.SnapshotRecord(
        id=snapshots.new_snapshot_id(taken),
        cloister=NAME,
        project=NAME,
        created_at=taken,
        worktree=str(worktree),
        git_dir=str(root / "data" / "git" / NAME),
        common_dir=str(worktree / ".git"),
        head_ref="refs/heads/a-branch-with-a-long-name-too",
        head_commit="0123456789abcdef0123456789abcdef01234567",
    )


def test_piped_restore_list_shows_whole_ids(tmp_path: Path) -> None:
    worktree = deep(tmp_path)
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    now = datetime.now(UTC)
    records = [record(tmp_path, worktree, now - timedelta(minutes=age)) for age in (0, 5)]
    for each in records:
        snapshots.write_record(paths, each)

    # The real command, its stdout a pipe, in a fresh interpreter.
    ran = subprocess.run(
        [sys.executable, "-c", PROGRAM, "restore", NAME, "--list"],
        env={**os.environ, **environment(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert ran.returncode == 0, ran.stderr
    assert "…" not in ran.stdout
    for each in records:
        line_with(ran.stdout, each.id, str(worktree), "a-branch-with-a-long-name-too")


def test_piped_list_shows_whole_names_and_paths(tmp_path: Path) -> None:
    worktree = deep(tmp_path)
    api = FakeEngineApi([cloister_attrs(NAME, path=str(worktree), instance=instance_of(tmp_path))])
    env = {**environment(tmp_path), "DOCKER_HOST": f"unix://{tmp_path / 'engine.sock'}"}
    with serve(tmp_path / "engine.sock", api):
        result = CliRunner().invoke(cli, ["list"], env=env, prog_name="cloister")
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    line_with(result.output, NAME, str(worktree))


def test_piped_project_list_and_config_show_keep_paths_whole(tmp_path: Path) -> None:
    root = deep(tmp_path)
    env = environment(tmp_path)
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    project_file = paths.project_config("api")
    project_file.parent.mkdir(parents=True)
    project_file.write_text(
        f"root: {root}\nproxy:\n  allow: [{{domain: {NAME}.example.org}}]\n", encoding="utf-8"
    )

    listed = CliRunner().invoke(cli, ["project", "list"], env=env, prog_name="cloister")
    assert listed.exit_code == 0, listed.output
    line_with(listed.output, "api", str(root))

    shown = CliRunner().invoke(cli, ["config", "show", "-p", "api"], env=env, prog_name="cloister")
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.output
    line_with(shown.output, f"{NAME}.example.org", str(project_file))


def test_a_piped_console_folds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("COLUMNS", NARROW)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert output.console().width == UNFOLDED


def test_a_narrow_terminal_wraps_other_cells_and_keeps_values_whole() -> None:
    snapshot_id = "20261126T121314Z-3f2a"
    path = "/home/someone/the team's projects/api"
    words = "a long free-text summary that may wrap at its spaces in a narrow terminal"
    table = Table("id", "what", "work tree")
    table.add_row(snapshot_id, words, path)
    screen = io.StringIO()
    terminal = WholeConsole(file=screen, width=50, force_terminal=True, color_system=None)

    terminal.print(table)

    drawn = screen.getvalue()
    assert "…" not in drawn
    line_with(drawn, snapshot_id, path)
    assert terminal.width == 50  # widened for the table only
    # The free text wrapped: its words are all there, over several lines.
    cells = [line.split("│")[2].strip() for line in drawn.splitlines() if line.count("│") == 4]
    assert len([cell for cell in cells if cell]) > 1
    assert " ".join(" ".join(cells).split()) == words


def test_every_table_is_drawn_by_the_console_that_keeps_it_whole() -> None:
    """Whatever command draws a rich table draws it with ``output.console()``."""
    source = Path(cloister_cli.__file__).parent
    drawn = []
    for module in sorted(source.rglob("*.py")):
        text = module.read_text(encoding="utf-8")
        if module.name in {"output.py", "tables.py"}:
            continue
        assert not re.search(r"\bConsole\(", text), f"{module} makes its own rich Console"
        if re.search(r"\bTable\(", text):
            assert re.search(r"console\(\)", text), f"{module} draws a table elsewhere"
            drawn.append(module.stem)
    # The commands with tables: list, restore --list, worktree list, images, approvals,
    # project, setup --list, doctor, port --list, guardian status, config show.
    assert len(drawn) >= 11, drawn
