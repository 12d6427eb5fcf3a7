"""``cloister doctor``: a cloister audits itself (:mod:`cloister_cli.stack.doctor`).

The library is imported in the command: shell completion loads this module to complete
a cloister's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import console, note, print_json
from cloister_core.paths import CloisterPaths

if TYPE_CHECKING:
    from cloister_cli.stack import doctor as library


@click.command("doctor")
@click.argument("name", required=False, shell_complete=completion_sources.cloister_names)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def doctor(name: str | None, as_json: bool) -> None:
    """Check that a cloister is sealed: try from inside what an agent would try to get out.

    A probe runs in a throwaway container of Cloister's own image that
    shares only the cloister's network (the agent cannot see or answer for
    it): TCP, UDP and DNS out without the proxy, IPv6 and routes; the
    approval hub on every host address, the other cloisters; the proxy with
    the cloister's token to IP literals and the guardian's own services
    (refused: 403), and with a random token or none (407). The engine is
    asked the rest: the cloister's network, capabilities, mounts,
    no-new-privileges; the hub published on 127.0.0.1 only; the executor's
    socket; the guardian's containers; the disk quota. The "seen" column says
    which: network (the probe saw it) or engine (the engine's word). NAME
    defaults to the cloister of the current directory, or the only one
    running. Each failure says what it means and how to fix it; the exit
    status is 1 when any check fails.

    \b
    Examples:
      cloister doctor                    # the cloister of this directory
      cloister doctor my-api
      cloister doctor my-api --json | jq -r '.checks[] | select(.passed | not) | .id'
    """
    from cloister_cli.stack import doctor as library  # noqa: PLC0415 - see the module docstring

    # Not the shared Context: it would load most of the CLI (see cloister_cli.stack.doctor.connect).
    report = library.audit(CloisterPaths.from_env(), name, Path.cwd())
    if as_json:
        print_json(report.to_json())
    else:
        print_report(report)
    if not report.passed:
        raise SystemExit(1)


def print_report(report: library.Report) -> None:
    """The pass/fail table, then what each failure means and how to fix it."""
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn
    from rich.text import Text  # noqa: PLC0415

    table = Table("", "check", "family", "seen", "evidence", title=f"cloister {report.cloister}")
    for check in report.checks:
        mark = Text("pass", style="green") if check.passed else Text("FAIL", style="bold red")
        # Evidence holds what the network and the engine said: never rich markup.
        table.add_row(mark, Text(check.title), check.family, check.source, Text(check.evidence))
    console().print(table)
    for check in report.failed:
        click.echo(f"FAIL {check.id}: {check.title}")
        click.echo(f"  means: {check.meaning}")
        click.echo(f"  fix:   {check.fix}")
    total = len(report.checks)
    verdict = (
        f"all {total} checks passed"
        if report.passed
        else f"{len(report.failed)} of {total} checks failed"
    )
    note(f"cloister {report.cloister}: {verdict} ({report.seconds:.1f}s)")
