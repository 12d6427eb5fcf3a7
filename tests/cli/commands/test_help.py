"""Every command has help with an example (the sqlite-utils rule), enforced here."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from cloister_cli.commands.main import cli

CONTEXT = click.Context(cli)


def subcommand(group: click.Group, name: str) -> click.Command:
    """Through the group's own lookup: the top level loads its commands lazily."""
    command = group.get_command(CONTEXT, name)
    assert command is not None, name
    return command


def walk(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if isinstance(command, click.Group):
        for name in command.list_commands(CONTEXT):
            yield from walk(subcommand(command, name), (*path, name))


COMMANDS = list(walk(cli))


def test_there_are_commands() -> None:
    assert {("config", "check"), ("start",), ("guardian", "status")} <= set(COMMANDS)


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["strat"])
    assert result.exit_code == 2
    assert "No such command 'strat'" in result.output


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(("cloister", *path)))
def test_help_has_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output
    example_lines = result.output.split("Examples:", 1)[1].splitlines()
    assert any(line.strip().startswith("cloister ") for line in example_lines), result.output
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = subcommand(command, name)
    assert command.help, f"cloister {' '.join(path)} has no help text"
