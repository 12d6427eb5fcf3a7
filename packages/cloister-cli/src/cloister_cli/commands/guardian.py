"""``cloister guardian start | stop | status | open | logout | logs``."""

from __future__ import annotations

import time
import webbrowser
from datetime import UTC, datetime

import click
from rich.table import Table

from cloister_cli.commands.output import build_progress, console, note, print_json, warn
from cloister_cli.context import Context
from cloister_cli.stack import guardian as stack_guardian
from cloister_cli.stack import hub_client
from cloister_core.hubauth import REVOKED_BEFORE, revoke_sessions, sessions_dir


@click.group()
def guardian() -> None:
    """The guardian stack: proxy, approval hub, hostexec gateway and host executor.

    \b
    Examples:
      cloister guardian start
      cloister guardian status --json
    """


@guardian.command("start")
@click.option("--build", is_flag=True, help="Rebuild the service images first.")
@click.pass_obj
def guardian_start(context: Context, build: bool) -> None:
    """Start the stack (building missing images); does nothing if it runs.

    \b
    Examples:
      cloister guardian start
      cloister guardian start --build    # after changing Cloister's source
    """
    legacy = context.guardian.legacy_containers()
    if legacy:
        warn(
            f"a guardian of an older Cloister runs on this engine ({', '.join(legacy)});"
            f" Cloister leaves it alone: {stack_guardian.legacy_hint()}"
        )
    with build_progress() as progress:
        from cloister_cli.start import ensure  # noqa: PLC0415 - only `guardian start` needs it

        started = ensure.ensure_guardian(context, progress, rebuild=build)
    if started:  # a new hub refuses its ticket: it was minted before the hub started
        hub_client.login_page_path(context.paths).unlink(missing_ok=True)
    status = context.guardian.status()
    verb = "started" if started else "already running"
    console().print(
        f"guardian {status.project} {verb}; approvals at {status.ui}"
        " (log a browser in: `cloister guardian open`)"
    )


@guardian.command("stop")
@click.pass_obj
def guardian_stop(context: Context) -> None:
    """Stop the stack and the host executor; running cloisters keep their tokens.

    \b
    Examples:
      cloister guardian stop
    """
    context.guardian.stop()
    hub_client.login_page_path(context.paths).unlink(missing_ok=True)
    click.echo("guardian stopped")


@guardian.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def guardian_status(context: Context, as_json: bool) -> None:
    """Show the services, their health, the executor, tokens and the UI address.

    \b
    Examples:
      cloister guardian status
      cloister guardian status --json | jq .running
    """
    status = context.guardian.status()
    if as_json:
        print_json(status.to_json())
        return
    table = Table("service", "state", "health")
    for service in status.services:
        table.add_row(service.name, service.state, service.health)
    table.add_row(
        "executor", f"pid {status.executor_pid}" if status.executor_pid else "stopped", "-"
    )
    out = console()
    out.print(table)
    state = "running" if status.running else "not running"
    out.print(f"{status.project} {state}; {status.tokens} token(s); UI {status.ui}")


@guardian.command("open")
@click.option("--no-browser", is_flag=True, help="Only print the login URL.")
@click.pass_obj
def guardian_open(context: Context, no_browser: bool) -> None:
    """Log a browser in to the approval UI with a one-time login link.

    The link carries a ticket made from this machine's hub secret
    (<data>/guardian/hub.secret): it works once, within a minute, and not after
    `cloister guardian logout` or a restart of the hub. The hub's page trades it for
    a browser session kept in that page's own storage (no cookie: no other port of
    127.0.0.1 sees it); `cloister guardian logout` and a restart of the guardian end
    every such session. The browser is handed a private file that leads to the link
    (<data>/guardian/login.html; never the link itself: a program's arguments are
    visible to every user of the machine); logout, stop and start remove it. Open the
    UI again later with the plain address, http://127.0.0.1:<guardian.ui_port>/.

    \b
    Examples:
      cloister guardian open
      cloister guardian open --no-browser   # print the link, e.g. to open it elsewhere
    """
    hub = context.hub
    hub.verify()  # the link (and the browser) go only to a hub that holds the secret
    if no_browser:
        click.echo(hub.login_url())
        return
    page = hub.login_file(context.paths)
    if webbrowser.open(page.as_uri()):
        click.echo(f"opened the approval UI in your browser ({hub.base}/)")
    else:
        click.echo(hub.login_url())
        note("no browser could be started; open the URL above within a minute")


@guardian.command("logout")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def guardian_logout(context: Context, as_json: bool) -> None:
    """Log every browser out of the approval UI, without restarting the guardian.

    Every browser session made so far stops working at once, open pages included
    (they show how to log in again), and so does every login link made so far
    (`guardian open`'s page is removed too); the CLI, which sends the hub secret, is
    not affected. It writes <data>/guardian/hub-sessions/revoked-before, which the
    hub reads; log a browser in again with `cloister guardian open`.

    \b
    Examples:
      cloister guardian logout
      cloister guardian logout --json | jq .revoked_before
    """
    directory = sessions_dir(hub_client.hub_secret_path(context.paths))
    cutoff = revoke_sessions(directory, now=time.time())
    hub_client.login_page_path(context.paths).unlink(missing_ok=True)
    # The cut-off is the next second: a link made before it begins would be refused.
    time.sleep(max(0.0, cutoff - time.time()))
    when = datetime.fromtimestamp(cutoff, UTC)
    if as_json:
        print_json(
            {
                "revoked_before": when.isoformat(),
                "file": str(directory / REVOKED_BEFORE),
            }
        )
        return
    click.echo(
        "every browser is logged out of the approval UI;"
        " log one in again with `cloister guardian open`"
    )


@guardian.command("logs")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--tail", type=int, help="Only the last N lines of each service.")
@click.pass_obj
def guardian_logs(context: Context, follow: bool, tail: int | None) -> None:
    """Show the services' logs (audit lines are JSON).

    \b
    Examples:
      cloister guardian logs --tail 50
      cloister guardian logs -f
    """
    context.guardian.logs(follow=follow, tail=tail)
