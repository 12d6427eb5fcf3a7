"""``cloister review``: what a cloister left that would run code or read outside the project."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import note, print_json, warn
from cloister_core.errors import CloisterError

if TYPE_CHECKING:  # imported where used: shell completion loads this module on every TAB
    from cloister_cli.context import Context
    from cloister_cli.session import sessions
    from cloister_cli.session.review import ReviewTarget

FOUND_EXIT = 3  # something was found (1 is an error, 2 a usage error)


def _report_json(report: sessions.Report, actions: list[str]) -> dict[str, Any]:
    session = report.session
    return {
        "cloister": session.cloister if session else None,
        "worktree": str(report.target.worktree),
        "baseline": session is not None,
        "findings": [finding.to_json() for finding in report.findings],
        "fixed": actions,
    }


LABELS = {"runs-code": "runs code", "reads-outside": "reads outside", "review": "to review"}


def print_report(report: sessions.Report, *, who: str, after_fix: bool = False) -> None:
    """The findings for a person, on stderr (*after_fix*: those --fix could not neutralise)."""
    if not report.findings:
        return
    count = len(report.findings)
    things = f"{count} thing{'s' if count != 1 else ''}"
    if after_fix:
        opening = f"after --fix, {things} {'remain' if count != 1 else 'remains'}"
    else:
        opening = f"{who} left {things}"
    warn(
        f"{opening} that would run code or read outside the project the next time you use"
        " git or open it:"
    )
    for finding in report.findings:
        note(f"  {LABELS[finding.severity]:<14} {finding.path}")
        note(f"  {'':<14} {finding.summary}")
        for line in finding.details:
            if line != finding.summary:
                note(f"  {'':<14}   {line}")
        if finding.fix is not None:
            note(f"  {'':<14} --fix: {finding.fix.description}")


@click.command("review")
@click.argument("name", required=False, shell_complete=completion_sources.reviewable_names)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option(
    "--fix",
    "fix",
    is_flag=True,
    help="Neutralise what is safe to (moved to the quarantine, never deleted).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before --fix changes anything.")
@click.pass_obj
def review(context: Context, name: str | None, as_json: bool, fix: bool, yes: bool) -> None:
    """Show what a cloister left that would run code or read outside the project.

    Compares the work tree with what it held when the cloister started (the
    human's own setup is never reported): nested repositories with code-running
    config, hook configuration, .envrc, mise hooks, VS Code tasks run on folder
    open, links out of the project, and more.
    `cloister stop` runs it too. Exits with status 3 when something is found.

    \b
    Examples:
      cloister review                 # the cloister of this directory
      cloister review my-api --json
      cloister review my-api --fix    # asks first; --yes for scripts
    """
    from cloister_cli.session import sessions  # noqa: PLC0415 - see the imports above

    session = sessions.find(context.paths, name, Path.cwd())
    if session is None and name is not None:
        raise CloisterError(f"no session of cloister {name!r} (`cloister list`)")
    if session is None:
        note("no cloister has worked here: everything found is listed")
    target = sessions.review_target(session) if session else _unknown_directory(Path.cwd())
    who = f"cloister {session.cloister}" if session else "this project"
    report = sessions.report(session, target)
    actions: list[str] = []
    if fix and any(finding.fix for finding in report.findings):
        report, actions = _fix(context, report, who=who, quiet=as_json, yes=yes)
    if as_json:
        print_json(_report_json(report, actions))
    else:
        print_report(report, who=who, after_fix=bool(actions))
        if not report.findings:
            click.echo("nothing found" if not actions else "nothing left")
    if report.findings:
        raise SystemExit(FOUND_EXIT)


def _fix(
    context: Context, report: sessions.Report, *, who: str, quiet: bool, yes: bool
) -> tuple[sessions.Report, list[str]]:
    """Show, confirm, apply; the report after, and what was done."""
    if not quiet:
        print_report(report, who=who)
    plan = "\n".join(f"  {finding.fix.description}" for finding in report.findings if finding.fix)
    if not yes and not click.confirm(f"Cloister will:\n{plan}\nGo ahead?", err=True):
        raise SystemExit(1)
    from cloister_cli.session import sessions  # noqa: PLC0415 - see the imports above

    outcome = sessions.fix(context.docker, context.paths, report)
    if not quiet:
        for action in outcome.actions:
            note(action)
    return outcome.after, outcome.actions


def _unknown_directory(directory: Path) -> ReviewTarget:
    from cloister_cli.repo import git  # noqa: PLC0415 - only for a directory without a session
    from cloister_cli.session.review import ReviewTarget  # noqa: PLC0415

    top = git.toplevel(directory)
    if top is None:
        return ReviewTarget(directory.resolve(), None, None)
    layout = git.layout(top)
    return ReviewTarget(top, layout.git_dir, layout.common_dir)
