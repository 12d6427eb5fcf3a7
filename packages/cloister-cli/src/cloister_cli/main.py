"""The ``cloister`` command group and its entry point."""

from __future__ import annotations

import click

from cloister_cli.commands.config import config
from cloister_cli.context import CliContext
from cloister_core import CloisterPaths


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cloister-cli", prog_name="cloister")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run AI coding agents unattended in a hardened sandbox.

    Files live in $CLOISTER_CONFIG_DIR (default ~/.config/cloister) and
    $CLOISTER_DATA_DIR (default ~/.local/share/cloister).

    \b
    Examples:
      cloister config check
      cloister config show --json
    """
    ctx.obj = CliContext(paths=CloisterPaths.from_env())


cli.add_command(config)


def main() -> None:
    cli(prog_name="cloister")
