"""``cloister approvals list | allow | deny``: the approval hub from a terminal.

Each call sends this machine's hub secret (``<data>/guardian/hub.secret``) to the hub
at ``--hub URL``, ``$CLOISTER_HUB_URL``, or ``http://127.0.0.1:<guardian.ui_port>``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click
from rich.table import Table
from rich.text import Text

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import console, print_json, warn
from cloister_cli.context import Context
from cloister_core.printable import printable

SCOPES = click.Choice(["once", "session", "project", "global"])
CommandT = TypeVar("CommandT", bound=Callable[..., Any])


def hub_option(command: CommandT) -> CommandT:
    option = click.option(
        "--hub",
        "hub_url",
        metavar="URL",
        envvar="CLOISTER_HUB_URL",
        help="The hub's base URL [default: http://127.0.0.1:<guardian.ui_port>;"
        " env: CLOISTER_HUB_URL].",
    )
    return option(command)


@click.group()
def approvals() -> None:
    """What waits for a decision, and deciding it without the browser.

    \b
    Examples:
      cloister approvals list
      cloister approvals allow 3f2a9c1d --scope project
      cloister approvals list --hub http://127.0.0.1:8999
    """


def _local(timestamp: str) -> str:
    """An ISO timestamp from the hub as this machine's local time of day."""
    return datetime.fromisoformat(timestamp).astimezone().strftime("%H:%M:%S")


@approvals.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@hub_option
@click.pass_obj
def approvals_list(context: Context, as_json: bool, hub_url: str | None) -> None:
    """List held domains and commands.

    \b
    Examples:
      cloister approvals list
      cloister approvals list --json | jq -r '.domains[].id'
      CLOISTER_HUB_URL=http://127.0.0.1:8999 cloister approvals list
    """
    pending = context.hub_at(hub_url).pending()
    if as_json:
        print_json(pending)
        return
    table = Table("id", "kind", "cloister", "what", "expires")
    table.columns[3].overflow = "fold"  # never cut a host or a command short

    def row(item: dict[str, Any], kind: str, what: str) -> None:
        # Text, not markup, and every control character visible: the agent chose these.
        cells = (item["id"], kind, item["cloister"], what)
        table.add_row(*(Text(printable(str(cell))) for cell in cells), _local(item["expires_at"]))

    for item in pending["domains"]:
        row(item, "domain", f"{item['host']}:{item['port']}")
    for item in pending["commands"]:
        row(item, "command", f"{item['command']}  (in {item['cwd']})")
    console().print(table if table.rows else "nothing is waiting")


@approvals.command("allow")
@click.argument("item_id", shell_complete=completion_sources.pending_approval_ids)
@click.option(
    "--scope",
    type=SCOPES,
    default="once",
    show_default=True,
    help="once, session, project or global (a command: once, session or project).",
)
@click.option("--wildcard", is_flag=True, help="For a domain: allow *.parent instead.")
@hub_option
@click.pass_obj
def approvals_allow(
    context: Context, item_id: str, scope: str, wildcard: bool, hub_url: str | None
) -> None:
    """Allow a held domain, or approve a held command (ITEM_ID: any unique prefix).

    \b
    Examples:
      cloister approvals allow 3f2a
      cloister approvals allow 3f2a9c1d --scope project --wildcard
      cloister approvals allow 77aa --scope session   # this command, until the cloister stops
    """
    hub = context.hub_at(hub_url)
    decision = hub.decide(item_id, allow=True, scope=scope, wildcard=wildcard, reason=None)
    _print_decision(decision)


@approvals.command("deny")
@click.argument("item_id", shell_complete=completion_sources.pending_approval_ids)
@click.option(
    "--scope",
    type=SCOPES,
    default="once",
    show_default=True,
    help="For a domain (a command is denied once).",
)
@click.option("--wildcard", is_flag=True, help="For a domain: deny *.parent instead.")
@click.option("--reason", help="For a command: shown to the agent.")
@hub_option
@click.pass_obj
def approvals_deny(
    context: Context,
    item_id: str,
    scope: str,
    wildcard: bool,
    reason: str | None,
    hub_url: str | None,
) -> None:
    """Deny a held domain or command.

    \b
    Examples:
      cloister approvals deny 3f2a9c1d --scope global
      cloister approvals deny 77aa01b2 --reason "not on a Friday"
    """
    decision = context.hub_at(hub_url).decide(
        item_id, allow=False, scope=scope, wildcard=wildcard, reason=reason
    )
    _print_decision(decision)


def _print_decision(decision: dict[str, Any]) -> None:
    """The hub's summary, and its warning (a scope it could not save, say: a full disk)."""
    click.echo(printable(decision["summary"]))
    if decision.get("warning"):
        warn(printable(str(decision["warning"])))
