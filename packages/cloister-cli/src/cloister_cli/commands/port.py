"""``cloister port``: publish a cloister's port on the host's 127.0.0.1, list, remove.

The library (:mod:`cloister_cli.container.ports`) is imported in the command: shell completion
loads this module to complete a cloister's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import console, note, print_json

if TYPE_CHECKING:
    from cloister_cli.container import ports
    from cloister_cli.context import Context


@click.command("port")
@click.argument(
    "words",
    nargs=-1,
    metavar="[NAME] [PORT[:HOSTPORT]]",
    shell_complete=completion_sources.exec_cloister_names,
)
@click.option("--list", "list_ports", is_flag=True, help="List what is published (NAME's, or all).")
@click.option("--remove", is_flag=True, help="Stop publishing PORT.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option(
    "--service",
    metavar="SVC",
    help="PORT of compose service SVC running beside the cloister, not of the cloister.",
)
@click.pass_obj
def port(
    context: Context,
    words: tuple[str, ...],
    list_ports: bool,
    remove: bool,
    as_json: bool,
    service: str | None,
) -> None:
    """Publish a cloister's port (a dev server) on this machine's 127.0.0.1.

    A small forwarder container joins 127.0.0.1:HOSTPORT (default: PORT; 0
    picks a free one) to PORT of the cloister, and to nothing else: the
    cloister still reaches neither the internet nor this machine. NAME
    defaults to the cloister of the current directory. `cloister stop`
    removes its ports. With --service SVC, PORT is that of the compose
    service SVC beside the cloister (a compose devcontainer's database, say).

    What you open is the agent's: open a web page as http://localhost:HOSTPORT/,
    not 127.0.0.1, so that cookies other local apps set for 127.0.0.1 (cookies
    are not kept apart by port) do not reach it. The approval UI sets no
    cookie: its login lives in its own origin's storage, so its port
    (guardian.ui_port, or any guardian's hub's) is refused: a page there could
    read that login.

    \b
    Examples:
      cloister port 8000                  # this directory's cloister, on 127.0.0.1:8000
      cloister port my-api 5173:3000      # port 5173 of my-api on 127.0.0.1:3000
      cloister port my-api 8000:0 --json | jq -r .url
      cloister port my-api --list
      cloister port --list --json         # every cloister's
      cloister port my-api 8000 --remove
      cloister port my-api 5432:15432 --service db   # its database on 127.0.0.1:15432
    """
    from cloister_cli.container import listing, ports  # noqa: PLC0415 - see the module docstring
    from cloister_cli.images import builds  # noqa: PLC0415

    if list_ports and remove:
        raise click.UsageError("give --list or --remove, not both")
    if list_ports:
        if len(words) > 1:
            raise click.UsageError("--list takes at most a NAME")
        found = ports.forwards(context.docker, context.instance, words[0] if words else None)
        _print_list(found, as_json=as_json, name=words[0] if words else None)
        return
    if not words or len(words) > 2:
        raise click.UsageError("say which port: cloister port [NAME] PORT[:HOSTPORT]")
    name = (
        words[0]
        if len(words) == 2
        else listing.name_for_directory(context.docker, context.instance, Path.cwd())
    )
    if remove:
        removed = ports.remove(
            context.docker, context.instance, name, ports.parse_port(words[-1]), service
        )
        if as_json:
            print_json(removed.to_json())
        else:
            click.echo(f"cloister {name}: port {removed.port} no longer published")
        return
    published = ports.publish(
        context.docker,
        context.instance,
        name,
        ports.parse_spec(words[-1]),
        image=builds.PROXY_IMAGE.tag,
        ui_port=context.config.guardian.ui_port,
        service=service,
    )
    forward = published.forward
    if forward.host_port is not None:
        ports.remember(context.paths, forward.host_port)
    if as_json:
        print_json(forward.to_json() | {"created": published.created})
        return
    verb = "published" if published.created else "already published"
    whose = f"cloister {name}" if service is None else f"cloister {name} service {service}"
    click.echo(f"{whose}: port {forward.port} {verb} on {forward.host}")
    note(f"a web page there: {forward.url} (see `cloister port --help`)")


def _print_list(found: list[ports.Forward], *, as_json: bool, name: str | None) -> None:
    if as_json:
        print_json([forward.to_json() for forward in found])
        return
    if not found:
        click.echo(f"cloister {name} publishes no port" if name else "no cloister publishes a port")
        return
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn

    table = Table("cloister", "port", "host", "open", "status")
    for forward in found:
        table.add_row(
            forward.cloister,
            str(forward.port) if forward.service is None else f"{forward.service}:{forward.port}",
            forward.host or "-",
            forward.url or "-",
            forward.status,
        )
    console().print(table)
