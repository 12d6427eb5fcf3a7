"""``cloister project list | show | remove``.

The library modules are imported in the commands: shell completion loads this module
to complete a project's name, and they would make every TAB wait for the config
models and the docker SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import console, note, print_json
from cloister_cli.container import listing
from cloister_core.names import validate_name

if TYPE_CHECKING:
    from cloister_cli.context import Context

NO_PROJECTS = "no projects yet: `cloister start` in a repository registers one"


@click.group()
def project() -> None:
    """Projects: a repository, its name, its own rules and refs.

    \b
    Examples:
      cloister project list
      cloister project show my-api
    """


@project.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def project_list(context: Context, as_json: bool) -> None:
    """List the known projects and their directories.

    \b
    Examples:
      cloister project list
      cloister project list --json
    """
    from cloister_cli.repo import projects  # noqa: PLC0415 - see the module docstring

    found = projects.list_projects(context.paths)
    if as_json:
        print_json(
            [
                {"name": p.name, "root": p.root, "remote": p.remote, "refs": list(p.refs)}
                for p in found
            ]
        )
        return
    if not found:
        click.echo(NO_PROJECTS)
        return
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn

    table = Table("name", "root", "remote", "refs")
    for item in found:
        table.add_row(item.name, item.root or "-", item.remote or "-", ", ".join(item.refs) or "-")
    console().print(table)


@project.command("show")
@click.argument("name", shell_complete=completion_sources.project_names)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def project_show(context: Context, name: str, as_json: bool) -> None:
    """Show a project's directory, refs and merged domain rules (with their files).

    \b
    Examples:
      cloister project show my-api
    """
    from rich.table import Table  # noqa: PLC0415 - see the module docstring

    from cloister_cli.repo import projects  # noqa: PLC0415
    from cloister_core.policy import load_project_policy  # noqa: PLC0415

    validate_name(name, what="project name")
    projects.require(context.paths, name)
    policy = load_project_policy(context.paths, name)
    rules = [
        {"action": r.action, "rule": r.text, "scope": r.source.scope, "file": str(r.source.file)}
        for r in policy.domains.rules()
    ]
    document = {
        "name": name,
        "root": policy.project_config.root,
        "remote": policy.project_config.remote,
        "refs": list(policy.project_config.refs),
        "config_file": str(context.paths.project_config(name)),
        "rules": rules,
    }
    if as_json:
        print_json(document)
        return
    out = console()
    config = policy.project_config
    out.print(f"[bold]{name}[/]  {config.root or '(no directory recorded)'}")
    out.print(f"refs: {', '.join(config.refs) or '-'}; file: {context.paths.project_config(name)}")
    table = Table("action", "rule", "scope", "file")
    for rule in rules:
        table.add_row(rule["action"], rule["rule"], rule["scope"], rule["file"])
    out.print(table)


@project.command("remove")
@click.argument("name", shell_complete=completion_sources.project_names)
@click.option("--volumes", is_flag=True, help="Also delete its agents' state (sessions, history).")
@click.pass_obj
def project_remove(context: Context, name: str, volumes: bool) -> None:
    """Forget a project: delete its config and decision files (not its repository).

    The agents' state of the project (their sessions and history, kept across
    `stop` and `start`) stays unless --volumes.

    \b
    Examples:
      cloister project remove old-experiment
      cloister project remove old-experiment --volumes
    """
    from cloister_cli.agents import agentstate  # noqa: PLC0415 - see the docstring
    from cloister_cli.repo import projects  # noqa: PLC0415 - see the docstring

    validate_name(name, what="project name")
    state = agentstate.agents_dir(context.paths, name)
    known = projects.exists(context.paths, name)
    if not (known or (volumes and state.exists())):
        projects.require(context.paths, name)  # says there is no such project
    running = [
        c.name
        for c in listing.list_cloisters(context.docker, context.instance)
        if c.project == name
    ]
    if running:
        raise click.ClickException(f"stop its cloisters first: {', '.join(running)}")
    if known:
        for path in projects.remove(context.paths, name):
            click.echo(f"deleted {path}")
    if volumes:
        removed = agentstate.remove(context.paths, name)
        if removed is not None:
            click.echo(f"deleted {removed}")
    elif state.exists():
        note(f"the agents' state of {name} stays in {state} (--volumes deletes it)")
