"""``cloister sync``: a cloister's commits into the repository, and the human's into it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import note, print_json
from cloister_core.errors import CloisterError
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.context import Context


@click.command("sync")
@click.argument("name", required=False, shell_complete=completion_sources.cloister_names)
@click.option(
    "-y",
    "--yes",
    "assume_yes",
    is_flag=True,
    help="Fast-forward even over commits that add a gitlink or change a protected path.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def sync(context: Context, name: str | None, assume_yes: bool, as_json: bool) -> None:
    """Bring a cloister's commits into your repository, and yours into it.

    Each cloister commits to a git directory of its own. Its branches land in
    your repository as refs/cloister/NAME/BRANCH (never over your own), and
    the branch you have checked out fast-forwards to the agent's when it is
    still where the agent's work began and nothing is staged (git.fast_forward
    in config.yaml turns that off). Commits you made meanwhile reach the
    cloister: its branches the agent left alone move to yours, and yours show
    there as host/BRANCH. A running cloister is synced within seconds of each
    commit anyway, and `cloister stop` syncs one last time; this does it now.

    \b
    Examples:
      cloister sync                       # the cloister of this directory
      cloister sync my-api --json | jq .imported
      cloister sync my-api --yes          # fast-forward over a new gitlink
      git log --oneline refs/cloister/my-api/main
    """
    from cloister_cli.container import cloisters  # noqa: PLC0415 - see main.py
    from cloister_cli.repo import gitdirs  # noqa: PLC0415 - see main.py
    from cloister_cli.session import sessions  # noqa: PLC0415 - see main.py

    session = sessions.find(context.paths, name, Path.cwd())
    if session is None:
        raise CloisterError(
            f"no cloister {name!r} (`cloister list`)" if name else "no cloister works here"
        )
    if not session.is_git:
        raise CloisterError(f"cloister {session.cloister} does not work in a git repository")
    container = cloisters.find(context.docker, context.instance, session.cloister)
    running = container is not None and container.status == "running"
    outcome = context.syncer.sync(session.cloister, running=running, assume_yes=assume_yes)
    if container is None:  # stopped: the last sync `stop` could not do
        gitdirs.remove(context.paths, session.cloister)
    if as_json:
        print_json(
            {
                "cloister": session.cloister,
                "imported": outcome.imported,
                "removed": outcome.removed,
                "fast_forwarded": (
                    dict(zip(("branch", "from", "to"), outcome.fast_forwarded, strict=True))
                    if outcome.fast_forwarded
                    else None
                ),
                "to_cloister": outcome.to_cloister,
                "notes": outcome.notes,
                "seconds": round(outcome.seconds, 3),
            }
        )
        return
    lines = outcome.lines()
    if not lines:
        click.echo(f"cloister {session.cloister}: nothing new")
    for line in lines:
        note(printable(line))
