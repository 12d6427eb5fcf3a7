"""The ``cloister`` command group and its entry point.

Subcommands are imported when they run (click's lazy-group pattern): ``cloister start``
loads the docker SDK and the config models, not the approvals table or the compose
renderer, because its start-up time is felt on every session. ``cloister --help`` and
the completion of command names show each command's summary from the table below,
so they import none of them (a test keeps the summaries equal to the commands' help).
The shared :class:`~cloister_cli.context.Context` makes its clients when first used: a
command that reads files only (``config check``, ``restore --list``) never loads the
docker SDK (``benchmarks/bench_cli_speed.py`` times them).
"""

from __future__ import annotations

import errno
import gc
import importlib
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


class Entry(NamedTuple):
    target: str  # "module:attribute" under cloister_cli.commands
    summary: str  # the first sentence of its help
    # Whether it is handed the shared Context (cloister_cli.context: light, its clients
    # made when used); `list`, `doctor` and `completion` make only what they use.
    uses_context: bool = True


COMMANDS = {
    "start": Entry(
        "cloister:start", "Start (or enter) the cloister for this directory, then attach a shell."
    ),
    "list": Entry("cloister:list_command", "List the cloisters on this machine.", False),
    "path": Entry("cloister:path_command", "Print the host directory a cloister works in."),
    "stop": Entry(
        "cloister:stop", "Stop a cloister: remove its container and revoke its token at once."
    ),
    "sync": Entry(
        "sync:sync", "Bring a cloister's commits into your repository, and yours into it."
    ),
    "exec": Entry(
        "cloister:exec_command", "Run a command in a running cloister, with its environment."
    ),
    "port": Entry(
        "port:port", "Publish a cloister's port (a dev server) on this machine's 127.0.0.1."
    ),
    "doctor": Entry(
        "doctor:doctor",
        "Check that a cloister is sealed: try from inside what an agent would try to get out.",
        False,
    ),
    "review": Entry(
        "review:review",
        "Show what a cloister left that would run code or read outside the project.",
    ),
    "logs": Entry(
        "logs:logs",
        "Show what a cloister did: its proxy requests, hostexec commands and their decisions.",
    ),
    "restore": Entry(
        "restore:restore", "Bring a repository back to how a cloister found it when it started."
    ),
    "gc": Entry(
        "gc:gc",
        "Clean up what cloisters that no longer exist left behind, and expired snapshots.",
    ),
    "setup": Entry(
        "setup:setup",
        "Log an agent in: Claude Code (claude), Codex (codex) or Gemini CLI (gemini).",
    ),
    "guardian": Entry(
        "guardian:guardian",
        "The guardian stack: proxy, approval hub, hostexec gateway and host executor.",
    ),
    "project": Entry(
        "project:project", "Projects: a repository, its name, its own rules and refs."
    ),
    "worktree": Entry(
        "worktree:worktree",
        "Worktrees that `cloister start -b BRANCH` made under <data>/worktrees.",
    ),
    "approvals": Entry(
        "approvals:approvals", "What waits for a decision, and deciding it without the browser."
    ),
    "images": Entry(
        "images:images",
        "Project images: what `cloister start` builds from devcontainer.json and"
        " .cloister/Dockerfile.",
    ),
    "config": Entry("config:config", "Inspect and validate Cloister's configuration."),
    "completion": Entry(
        "completion:completion",
        "Print the completion script for SHELL; source it from your shell's rc file.",
        False,
    ),
    "uninstall": Entry(
        "uninstall:uninstall",
        "Remove Cloister from this machine: its cloisters, guardian, images and networks.",
    ),
}


FULL = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full disk, or the user's quota


def _summary(name: str) -> click.Command:
    """A stand-in with the command's summary as its help: click shortens it as usual."""
    return click.Command(name, help=COMMANDS[name].summary)


class CloisterGroup(click.Group):
    """Loads subcommands lazily, suggests the nearest command for a typo, and shows
    library errors as one clean line (status 1)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attribute = entry.target.split(":")
        module = importlib.import_module(f"cloister_cli.commands.{module_name}")
        command: click.Command = getattr(module, attribute)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if name not in COMMANDS and not ctx.resilient_parsing and not name.startswith("-"):
            # click suggests for options, and (from 8.4) only for commands it holds.
            import difflib  # noqa: PLC0415 - only for a mistyped command

            close = difflib.get_close_matches(name, COMMANDS, n=3)
            hint = ""
            if len(close) == 1:
                hint = f" Did you mean {close[0]!r}?"
            elif close:
                hint = f" Did you mean one of {', '.join(map(repr, close))}?"
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click.Group's own, from the summaries: it would import every command.
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(name, _summary(name).get_short_help_str(limit)) for name in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem  # noqa: PLC0415 - only when completing

        # click.Group's own, from the summaries (see format_commands), then the options.
        items = [
            CompletionItem(name, help=_summary(name).get_short_help_str())
            for name in COMMANDS
            if name.startswith(incomplete)
        ]
        return items + click.Command.shell_complete(self, ctx, incomplete)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CloisterError as error:
            # The message may quote the agent's text (an image name, a builder line):
            # its control characters are escaped, line by line.
            lines = str(error).split("\n")
            raise click.ClickException("\n".join(printable(line) for line in lines)) from None
        except OSError as error:
            if error.errno not in FULL:
                raise
            # The machine's state, not a bug: what failed, and what to do (no traceback).
            where = f": {error.filename}" if error.filename else ""
            raise click.ClickException(
                printable(f"{error.strerror}{where}; free some space and run it again")
            ) from None


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
    entry = COMMANDS.get(ctx.invoked_subcommand or "")
    if entry is not None and not entry.uses_context:
        return
    from cloister_cli.context import Context  # noqa: PLC0415 - see the module docstring

    ctx.obj = Context(paths=CloisterPaths.from_env())


# The cyclic collector's thresholds while a command runs. A run allocates mostly what
# lives until it ends (modules, classes, pydantic's schemas): at the default (700) the
# collector walked all of it again and again, about a fifth of a `cloister start`
# (benchmarks/bench_cli.py). Rarer passes still bound what a long command (`logs
# --follow`, an attached session) leaves behind.
GC_THRESHOLDS = (50_000, 50, 100)


def main() -> None:
    """The ``cloister`` console script."""
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        cli(prog_name="cloister")
    finally:
        # All that is left lives until the exit: frozen, the interpreter's teardown
        # does not walk it once more.
        gc.freeze()
