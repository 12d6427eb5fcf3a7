"""``cloister restore``: bring a repository back to how a cloister found it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import note, print_json, warn
from cloister_core import stack
from cloister_core.errors import CloisterError
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.context import Context
    from cloister_cli.session.snapshots import RestoreOutcome
    from cloister_core.snapshots import SnapshotRecord


def _local(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _check_not_running(context: Context, record: SnapshotRecord) -> None:
    """No cloister may work in the repository while it is restored: the agent would go
    on writing (another worktree's cloister shares the refs and objects)."""
    from cloister_cli.container import cloisters, listing  # noqa: PLC0415 - the docker SDK, when used

    try:
        container = cloisters.find(context.docker, context.instance, record.cloister)
        others = context.docker.containers.list(
            all=True, filters={"label": f"{stack.LABEL_GIT_COMMON_DIR}={record.common_dir}"}
        )
    except listing.DockerUnavailableError as error:
        warn(f"{error}: cannot tell whether a cloister works in {record.common_dir}")
        return
    name = record.cloister
    if container is not None:
        raise CloisterError(
            f"cloister {name!r} is {container.status}: stop it first (`cloister stop {name}`),"
            " or the agent would go on writing while its repository is restored"
        )
    if others:
        names = ", ".join(sorted(str(item.labels.get(stack.LABEL_CLOISTER)) for item in others))
        raise CloisterError(
            f"cloister(s) {names} work in the same repository ({record.common_dir}): stop"
            " them first, or their agents would go on writing while it is restored"
        )


def _print_list(records: list[SnapshotRecord]) -> None:
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn
    from rich.text import Text  # noqa: PLC0415

    from cloister_cli.commands.output import console  # noqa: PLC0415

    table = Table("id", "taken", "kind", "HEAD", "refs", "work tree")
    for record in records:
        head = record.head_ref.removeprefix("refs/heads/") if record.head_ref else "detached"
        commit = (record.head_commit or "unborn")[:12]
        table.add_row(
            record.id,
            _local(record.created_at),
            record.kind,
            Text(printable(f"{head} {commit}")),
            str(len(record.refs)),
            Text(printable(record.worktree)),
        )
    console().print(table)


def _outcome_json(outcome: RestoreOutcome) -> dict[str, Any]:
    return {
        "restored": outcome.record.id,
        "before": outcome.before.id if outcome.before else None,
        "changed": outcome.changed,
        "kept": outcome.kept,
        "rebuilt": outcome.rebuilt,
        "displaced": str(outcome.displaced) if outcome.displaced else None,
        "notes": outcome.notes,
    }


def _print_outcome(outcome: RestoreOutcome, name: str) -> None:
    record = outcome.record
    click.echo(
        f"restored {printable(record.worktree)} to snapshot {record.id}"
        f" ({_local(record.created_at)})"
    )
    if outcome.rebuilt:
        note(f"made again: {printable(', '.join(outcome.rebuilt))}")
    if outcome.changed:
        note(f"refs set back: {printable(', '.join(outcome.changed))}")
    if outcome.kept:
        note(f"refs made since, kept as they are: {printable(', '.join(outcome.kept))}")
    if outcome.displaced is not None:
        note(f"files that were in the way are in {printable(str(outcome.displaced))}")
    for line in outcome.notes:
        warn(printable(line))
    if outcome.before is not None:
        note(
            f"what was there is snapshot {outcome.before.id}:"
            f" `cloister restore {name} {outcome.before.id}` undoes this"
        )


@click.command("restore")
@click.argument("name", required=False, shell_complete=completion_sources.reviewable_names)
@click.argument("snapshot", required=False)
@click.option("--list", "list_only", is_flag=True, help="List the kept snapshots; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def restore(
    context: Context, name: str | None, snapshot: str | None, list_only: bool, as_json: bool
) -> None:
    """Bring a repository back to how a cloister found it when it started.

    Every `cloister start` keeps a snapshot of the repository: its history,
    branches, tags, HEAD and uncommitted work (staged, unstaged and untracked
    files). This sets them back, also after the agent deleted .git, reset
    branches or pruned objects; the cloister must be stopped. What is there now
    is snapshotted first, so a restore can be undone the same way. Without
    SNAPSHOT (an id or a unique prefix of one), the newest start.

    \b
    Examples:
      cloister restore my-api --list
      cloister stop my-api && cloister restore my-api
      cloister restore my-api 20261125T1107     # an older session's start
      cloister restore --list --json | jq -r '.[].id'
    """
    from cloister_cli.session.snapshots import (  # noqa: PLC0415
        chosen,
        cloister_for_directory,
        records_of,
        summary,
    )
    from cloister_cli.session.snapshots import restore as restore_snapshot  # noqa: PLC0415

    name = name or cloister_for_directory(context.paths, Path.cwd())
    records = records_of(context.paths, name)
    if list_only:
        if as_json:
            print_json([summary(record) for record in records])
        elif records:
            _print_list(records)
        else:
            click.echo(f"no snapshots of cloister {name}")
        return
    if not records:
        raise CloisterError(f"no snapshots of cloister {name!r} (`cloister restore --list`)")
    record = chosen(records, snapshot)
    _check_not_running(context, record)
    outcome = restore_snapshot(context.paths, record, context.config.snapshots)
    if as_json:
        print_json(_outcome_json(outcome))
    else:
        _print_outcome(outcome, name)
