"""The ``cloister`` command group and its entry point.

Subcommands are imported when they run (click's lazy-group pattern): ``cloister start``
loads the docker SDK and the config models, not the approvals table or the compose
renderer, because its start-up time is felt on every session.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths

# command name -> "module:attribute" under cloister_cli.commands
COMMANDS = {
    "start": "cloister:start",
    "list": "cloister:list_command",
    "path": "cloister:path_command",
    "stop": "cloister:stop",
    "exec": "cloister:exec_command",
    "review": "review:review",
    "setup": "setup:setup",
    "guardian": "guardian:guardian",
    "project": "project:project",
    "worktree": "worktree:worktree",
    "approvals": "approvals:approvals",
    "config": "config:config",
    "completion": "completion:completion",
}


class CloisterGroup(click.Group):
    """Loads subcommands lazily, and shows library errors as one clean line (status 1)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        module = importlib.import_module(f"cloister_cli.commands.{module_name}")
        command: click.Command = getattr(module, attribute)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CloisterError as error:
            raise click.ClickException(str(error)) from None


@click.group(cls=CloisterGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cloister-cli", prog_name="cloister")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run AI coding agents unattended in a hardened sandbox.

    Files live in $CLOISTER_CONFIG_DIR (default ~/.config/cloister) and
    $CLOISTER_DATA_DIR (default ~/.local/share/cloister).

    \b
    Examples:
      cloister start              # a cloister for this repository, and a shell in it
      cloister start -b feature   # a worktree for branch "feature", and its cloister
      cloister list
      cloister guardian status
    """
    from cloister_cli.lifecycle import Context  # noqa: PLC0415 - see the module docstring

    ctx.obj = Context(paths=CloisterPaths.from_env())


def main() -> None:
    cli(prog_name="cloister")
