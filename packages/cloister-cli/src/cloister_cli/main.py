"""The ``cloister`` command group and its entry point."""

from __future__ import annotations

from typing import Any

import click

from cloister_cli.commands.approvals import approvals
from cloister_cli.commands.cloister import list_command, path_command, start, stop
from cloister_cli.commands.completion import completion
from cloister_cli.commands.config import config
from cloister_cli.commands.guardian import guardian
from cloister_cli.commands.project import project
from cloister_cli.commands.worktree import worktree
from cloister_cli.lifecycle import Context
from cloister_core import CloisterPaths
from cloister_core.errors import CloisterError


class CloisterGroup(click.Group):
    """Shows library errors as one clean line (exit status 1), not a traceback."""

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
    ctx.obj = Context(paths=CloisterPaths.from_env())


for command in (start, list_command, path_command, stop, guardian, project, worktree,
                approvals, config, completion):  # fmt: skip
    cli.add_command(command)


def main() -> None:
    cli(prog_name="cloister")
