"""``cloister completion SHELL``: the shell completion script (click's)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL; source it from your shell's rc file.

    \b
    Examples:
      cloister completion bash > ~/.local/share/bash-completion/completions/cloister
      eval "$(cloister completion zsh)"
    """
    root = ctx.find_root()
    completion_class = get_completion_class(shell)
    if completion_class is None:  # pragma: no cover - the Choice above prevents it
        raise click.UsageError(f"unsupported shell {shell!r}")
    script = completion_class(root.command, {}, root.info_name or "cloister", "_CLOISTER_COMPLETE")
    click.echo(script.source())
