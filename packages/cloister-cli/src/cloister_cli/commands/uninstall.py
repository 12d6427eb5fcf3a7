"""``cloister uninstall``: the steps are :mod:`cloister_cli.stack.uninstall`'s; this asks
and prints."""

from __future__ import annotations

import click

from cloister_cli.commands.cloister import lost_git_message, review_failed_message
from cloister_cli.commands.output import note, print_json, warn
from cloister_cli.commands.review import print_report
from cloister_cli.container import listing
from cloister_cli.context import Context
from cloister_cli.stack import uninstall as library


def _plan_lines(context: Context, plan: library.Purge | None) -> list[str]:
    names = [info.name for info in listing.list_cloisters(context.docker, context.instance)]
    lines = [
        f"stop every cloister ({', '.join(names)})" if names else "stop every cloister (none)",
        "stop the guardian stack and the host executor",
        f"remove the images {', '.join(library.IMAGES)}",
        f"remove this guardian's networks ({context.instance.project}-...)",
    ]
    if plan is not None:
        lines += [
            f"remove the worktree {worktree.directory} from {worktree.repository}"
            + (" (uncommitted changes are lost)" if worktree.dirty else "")
            for worktree in plan.worktrees
            if worktree.repository is not None
        ]
        lines += [f"delete {directory}" for directory in plan.directories]
    return lines


@click.command()
@click.option(
    "--purge",
    is_flag=True,
    help="Also delete the config and data directories (and the worktrees in them).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --purge: also a directory that does not look like Cloister's,"
    " and worktrees with uncommitted changes.",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print a JSON summary (progress goes to stderr)."
)
@click.pass_obj
def uninstall(context: Context, purge: bool, force: bool, yes: bool, as_json: bool) -> None:
    """Remove Cloister from this machine: its cloisters, guardian, images and networks.

    Stops every cloister as `cloister stop --all` does, then the guardian stack
    and the host executor, and removes what is left of `cloister port`'s
    forwarders, Cloister's images (cloister-proxy, cloister-approval,
    cloister-gateway, cloister, cloister-slim) and this guardian's networks (its
    cloisters' and its stack's, cloister-ID-...). Other users' guardians on the
    engine are left alone. Your repositories and their branches stay.

    With --purge it also removes the worktrees Cloister made from their
    repositories and deletes the config directory (config.yaml, projects,
    decisions, tokens) and the data directory (logs, worktrees, the agents'
    state, stored credentials). It refuses a directory that does not look like
    Cloister's, and worktrees with uncommitted changes, unless --force; and it
    keeps both directories while a stopped cloister's review holds git's guard.

    The command itself stays: `uv tool uninstall cloister-cli` removes it.

    \b
    Examples:
      cloister uninstall
      cloister uninstall --purge
      cloister uninstall --purge --yes --json
    """
    if force and not purge:
        raise click.UsageError("--force only applies to --purge")
    plan = library.plan_purge(context.paths, context.home, force=force) if purge else None
    lines = _plan_lines(context, plan)  # no engine: one clean error, and nothing done
    note("cloister uninstall will:")
    for line in lines:
        note(f"  {line}")
    if not yes:
        click.confirm("Go ahead?", abort=True, err=True)

    def progress(step: library.Step) -> None:
        click.echo(step.message, err=as_json)
        stopped = step.stopped
        if stopped is None:
            return
        if stopped.lost is not None:
            warn(lost_git_message(step.target, stopped.lost))
        if stopped.review_error is not None:
            warn(review_failed_message(step.target, stopped))
        if stopped.report is not None:
            print_report(stopped.report, who=f"cloister {step.target}")

    summary = library.uninstall(context, plan, progress)
    if as_json:
        print_json(summary.to_json())
    for name in summary.unsynced:
        warn(
            f"the commits of cloister {name} could not be brought back: its git directory"
            f" stays in the data directory until `cloister sync {name}` works"
        )
    if summary.failed:
        raise click.ClickException(
            "uninstall incomplete: " + "; ".join(step.message for step in summary.failed)
        )
    note("the `cloister` command stays: `uv tool uninstall cloister-cli` removes it")
