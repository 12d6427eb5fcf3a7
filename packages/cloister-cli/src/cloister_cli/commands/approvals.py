"""``cloister approvals list | allow | deny``: the approval hub from a terminal."""

from __future__ import annotations

import click
from rich.table import Table

from cloister_cli.commands.output import console, print_json
from cloister_cli.lifecycle import Context

SCOPES = click.Choice(["once", "session", "project", "global"])


@click.group()
def approvals() -> None:
    """What waits for a decision, and deciding it without the browser.

    \b
    Examples:
      cloister approvals list
      cloister approvals allow 3f2a9c1d --scope project
    """


@approvals.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def approvals_list(context: Context, as_json: bool) -> None:
    """List held domains and commands.

    \b
    Examples:
      cloister approvals list
      cloister approvals list --json | jq -r '.domains[].id'
    """
    pending = context.hub.pending()
    if as_json:
        print_json(pending)
        return
    table = Table("id", "kind", "cloister", "what", "expires")
    for item in pending["domains"]:
        table.add_row(
            item["id"],
            "domain",
            item["cloister"],
            f"{item['host']}:{item['port']}",
            item["expires_at"][11:19],
        )
    for item in pending["commands"]:
        table.add_row(
            item["id"],
            "command",
            item["cloister"],
            f"{item['command']}  (in {item['cwd']})",
            item["expires_at"][11:19],
        )
    console().print(table if table.rows else "nothing is waiting")


@approvals.command("allow")
@click.argument("item_id")
@click.option("--scope", type=SCOPES, default="once", show_default=True, help="For a domain.")
@click.option("--wildcard", is_flag=True, help="For a domain: allow *.parent instead.")
@click.pass_obj
def approvals_allow(context: Context, item_id: str, scope: str, wildcard: bool) -> None:
    """Allow a held domain, or approve a held command.

    \b
    Examples:
      cloister approvals allow 3f2a9c1d
      cloister approvals allow 3f2a9c1d --scope project --wildcard
    """
    decision = context.hub.decide(item_id, allow=True, scope=scope, wildcard=wildcard, reason=None)
    click.echo(decision["summary"])


@approvals.command("deny")
@click.argument("item_id")
@click.option("--scope", type=SCOPES, default="once", show_default=True, help="For a domain.")
@click.option("--wildcard", is_flag=True, help="For a domain: deny *.parent instead.")
@click.option("--reason", help="For a command: shown to the agent.")
@click.pass_obj
def approvals_deny(
    context: Context, item_id: str, scope: str, wildcard: bool, reason: str | None
) -> None:
    """Deny a held domain or command.

    \b
    Examples:
      cloister approvals deny 3f2a9c1d --scope global
      cloister approvals deny 77aa01b2 --reason "not on a Friday"
    """
    decision = context.hub.decide(
        item_id, allow=False, scope=scope, wildcard=wildcard, reason=reason
    )
    click.echo(decision["summary"])
