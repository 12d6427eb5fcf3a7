"""``cloister logs``: what a cloister did, from its own log (``<data>/logs/<cloister>.log``)."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import note
from cloister_core.errors import CloisterError

if TYPE_CHECKING:  # imported where used: shell completion loads this module on every TAB
    from cloister_cli.container import cloisterlogs
    from cloister_cli.context import Context


@click.command("logs")
@click.argument("name", required=False, shell_complete=completion_sources.logged_names)
@click.option("--follow", "-f", is_flag=True, help="Keep printing lines as they come (Ctrl-C).")
@click.option("--json", "as_json", is_flag=True, help="Print each record as a JSON line.")
@click.option(
    "--since",
    metavar="DURATION|TIME",
    help="Only lines from then on: 30s, 10m, 2h, 1d, or a time (2026-05-01T14:00, local).",
)
@click.option(
    "--tail", "-n", type=click.IntRange(min=0), metavar="N", help="Only the last N lines."
)
@click.option(
    "--service",
    metavar="SVC",
    help="Show the output of compose service SVC running beside the cloister instead.",
)
@click.pass_obj
def logs(
    context: Context,
    name: str | None,
    follow: bool,
    as_json: bool,
    since: str | None,
    tail: int | None,
    service: str | None,
) -> None:
    """Show what a cloister did: its proxy requests, hostexec commands and their decisions.

    Reads <data>/logs/NAME.log, written by the guardian's services for every request
    charged to the cloister's token, and kept after the cloister stops. NAME defaults
    to the cloister of the current directory. Each line: local time, event, and what
    happened (host:port and verdict, the command and its outcome, the decision and its
    scope). --json prints the records as JSON lines for scripts (jq). --service SVC
    shows what a compose devcontainer's service SVC printed (its stdout and stderr).

    \b
    Examples:
      cloister logs                      # the cloister of this directory
      cloister logs my-api -f            # and what comes next, until Ctrl-C
      cloister logs my-api --since 10m
      cloister logs my-api -n 50 --json | jq -c 'select(.event == "proxy.request")'
      cloister logs my-api --service db -n 20   # the database beside it
    """
    from cloister_cli.container import cloisterlogs  # noqa: PLC0415 - see the imports above

    if name is None:
        name = cloisterlogs.cloister_for_directory(context.paths, Path.cwd())
        if name is None:
            from cloister_cli.container import listing  # noqa: PLC0415 - only without a session record

            name = listing.name_for_directory(context.docker, context.instance, Path.cwd())
    start = cloisterlogs.parse_since(since, datetime.now().astimezone()) if since else None
    if service is not None:
        if as_json:
            raise click.UsageError("--json is for the cloister's own log, not --service")
        _service_output(context, name, service, follow=follow, tail=tail, since=start)
        return
    path = context.paths.cloister_log(name)
    if not cloisterlogs.is_known(context.paths, name):
        raise CloisterError(f"no cloister {name!r} on this machine has a log (`cloister list`)")
    shown = cloisterlogs.read_log(path, since=start, tail=tail)

    def emit(record: cloisterlogs.Record) -> None:
        click.echo(cloisterlogs.as_json(record) if as_json else cloisterlogs.render(record))

    try:
        for record in shown.records:
            emit(record)
        if shown.identity is None and not follow:
            note(f"cloister {name} has no log yet ({path})")
        if follow:
            for record in cloisterlogs.follow(path, shown):
                if start is None or (cloisterlogs.record_time(record) or start) >= start:
                    emit(record)
    except KeyboardInterrupt:  # the way to stop --follow: no "Aborted!", status 0
        return
    except BrokenPipeError:  # `cloister logs | head`: the reader has what it wanted
        # Python would complain again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return


def _service_output(
    context: Context,
    name: str,
    service: str,
    *,
    follow: bool,
    tail: int | None,
    since: datetime | None,
) -> None:
    from cloister_cli.container import services  # noqa: PLC0415 - see the imports above

    lines = services.output(
        context.docker, context.instance, name, service, follow=follow, tail=tail, since=since
    )
    try:
        for line in lines:
            click.echo(line)
    except KeyboardInterrupt:  # the way to stop --follow
        return
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
