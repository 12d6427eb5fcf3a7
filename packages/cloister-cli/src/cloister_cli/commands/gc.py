"""``cloister gc``: clean up after cloisters that are gone."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from cloister_cli.commands.output import note, print_json, warn
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.context import Context
    from cloister_cli.session import ending
    from cloister_cli.session import gc as garbage


def _survey_json(found: garbage.Survey) -> dict[str, Any]:
    return {
        "dead_cloisters": found.dead,
        "expired_snapshots": {
            project: [record.id for record in records] for project, records in found.expired.items()
        },
        "scratch": [str(path) for path in found.scratch],
        "orphan_worktrees": [
            {"path": str(orphan.path), "project": orphan.project, "reason": orphan.reason}
            for orphan in found.orphans
        ],
        "stale_port_forwarders": found.stale_ports,
        "sync_containers": found.syncs,
        "probe_containers": found.probes,
        "stale_networks": found.stale_networks,
        "stale_services": found.stale_services,
        "stand_ins": {
            name: [str(path) for path in paths] for name, paths in found.stand_ins.items()
        },
    }


def _print_survey(found: garbage.Survey) -> None:
    for name in found.dead:
        click.echo(f"cloister {name}: no container, but what its stop removes is still there")
    for project, records in found.expired.items():
        click.echo(f"project {project}: {len(records)} expired snapshot(s)")
    for path in found.scratch:
        click.echo(f"an interrupted snapshot's scratch directory: {printable(str(path))}")
    for orphan in found.orphans:
        click.echo(f"orphan worktree {printable(str(orphan.path))}: {printable(orphan.reason)}")
    for name in found.syncs:
        click.echo(f"a sync container a killed `cloister sync` left: {printable(name)}")
    for name in found.probes:
        click.echo(f"a probe container a killed `cloister doctor` left: {printable(name)}")
    for name in found.stale_ports:
        click.echo(f"port forwarder {name}: its cloister is gone")
    for name in found.stale_networks:
        click.echo(f"network {name}: its cloister is gone")
    for name in found.stale_services:
        click.echo(f"compose service container {name}: its cloister is gone")
    for name, paths in found.stand_ins.items():
        listed = ", ".join(str(path) for path in paths)
        click.echo(f"stand-ins cloister {name} left: {printable(listed)}")


def _print_stopped(name: str, outcome: ending.StopOutcome) -> None:
    from cloister_cli.commands.review import print_report  # noqa: PLC0415

    click.echo(f"cleaned up after cloister {name}")
    for line in outcome.sync.lines() if outcome.sync is not None else ():
        note(printable(line))
    if outcome.sync_error is not None:
        warn(
            f"the commits of cloister {name} could not be brought back"
            f" ({printable(outcome.sync_error)}); `cloister sync {name}` tries again"
        )
    if outcome.review_error is not None:
        warn(f"could not review what cloister {name} left ({outcome.review_error})")
    for line in outcome.cleanup_errors:
        warn(printable(line))
    if outcome.report is not None:
        print_report(outcome.report, who=f"cloister {name}")


def _print_collected(done: garbage.Collected) -> None:
    for name, outcome in done.stopped.items():
        _print_stopped(name, outcome)
    if done.snapshots or done.pool_files:
        click.echo(
            f"removed {done.snapshots} expired snapshot(s) and {done.pool_files} object file(s)"
            " no snapshot needs"
        )
    if done.scratch:
        click.echo(f"removed {done.scratch} interrupted snapshot directory(ies)")
    for path in done.worktrees:
        click.echo(f"removed orphan worktree {printable(str(path))}")
    for name in done.forwarders:
        click.echo(f"removed port forwarder {name} (its cloister is gone)")
    containers = [
        f"{count} {kind} container(s)"
        for kind, count in (("sync", done.syncs), ("probe", done.probes))
        if count
    ]
    if containers:
        click.echo(f"removed {' and '.join(containers)} left behind")
    gone = [f"compose service container {name}" for name in done.services]
    for what in [*gone, *(f"network {name}" for name in done.networks)]:
        click.echo(f"removed {what} (its cloister is gone)")
    if done.stand_ins:
        listed = ", ".join(str(path) for path in done.stand_ins)
        click.echo(f"removed the stand-ins an unfinished stop left: {printable(listed)}")


@click.command("gc")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("-y", "--yes", is_flag=True, help="Remove orphan worktrees without asking.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def gc(context: Context, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Clean up what cloisters that no longer exist left behind, and expired snapshots.

    A cloister whose container is gone without `cloister stop` (a killed CLI,
    `docker rm`, a reboot) leaves its token file, the commondir pin and the
    read-only placeholders in its repository, and the git guard in its config:
    gc stops it properly (what the agent left is reviewed, as at stop), and
    removes the empty stand-ins a stop killed half-way left. It also
    removes snapshots the `snapshots:` rules expire, and asks before removing a
    worktree under <data>/worktrees whose repository is gone or forgot it (it
    may hold the only copy of uncommitted work). Port forwarders whose cloister
    is gone, and networks of cloisters that no longer exist (a stop keeps a
    cloister's network for its next start), are removed (this guardian's only).

    \b
    Examples:
      cloister gc --dry-run
      cloister gc
      cloister gc --yes --json
    """
    from cloister_cli.session import gc as garbage  # noqa: PLC0415 - the docker SDK, when used

    found = garbage.survey(context)
    if dry_run:
        if as_json:
            print_json(_survey_json(found))
        elif found.empty:
            click.echo("nothing to clean up")
        else:
            _print_survey(found)
        return
    interactive = sys.stdin.isatty() and not as_json

    def ask(orphan: garbage.Orphan) -> bool:
        if yes:
            return True
        if not interactive:
            note(f"kept orphan worktree {orphan.path} (--yes removes it)")
            return False
        return click.confirm(
            f"remove orphan worktree {printable(str(orphan.path))} ({printable(orphan.reason)})?",
            default=False,
            err=True,
        )

    done = garbage.collect(context, found, remove_worktree=ask)
    if as_json:
        document = _survey_json(found)
        document["removed_worktrees"] = [str(path) for path in done.worktrees]
        document["removed_snapshots"] = done.snapshots
        document["removed_port_forwarders"] = done.forwarders
        document["removed_stand_ins"] = [str(path) for path in done.stand_ins]
        print_json(document)
    elif found.empty and not (done.pool_files or done.forwarders or done.stand_ins):
        click.echo("nothing to clean up")
    else:
        _print_collected(done)
