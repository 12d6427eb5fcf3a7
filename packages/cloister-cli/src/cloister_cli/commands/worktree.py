"""``cloister worktree list | remove``.

The library modules are imported in the commands: shell completion loads this module
to complete a worktree's name, and they would make every TAB wait for the config
models and the docker SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import console, print_json
from cloister_cli.container import listing
from cloister_cli.repo import git
from cloister_core.names import sanitize_branch, validate_name

if TYPE_CHECKING:
    from cloister_cli.context import Context


@click.group()
def worktree() -> None:
    """Worktrees that `cloister start -b BRANCH` made under <data>/worktrees.

    \b
    Examples:
      cloister worktree list
      cloister worktree remove my-api feature/login
    """


@worktree.command("list")
@click.argument("project_name", required=False, shell_complete=completion_sources.worktree_projects)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def worktree_list(context: Context, project_name: str | None, as_json: bool) -> None:
    """List Cloister's worktrees (of one project, or all), dirty or clean.

    \b
    Examples:
      cloister worktree list
      cloister worktree list my-api --json
    """
    from cloister_cli.repo import gitdirs  # noqa: PLC0415 - see the module docstring

    if project_name is not None:
        validate_name(project_name, what="project name")
    rows = [
        {
            "project": made.project,
            "branch": made.branch,
            "path": str(made.directory),
            "dirty": made.uncommitted(),
        }
        for made in gitdirs.made_worktrees(context.paths, project_name)
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        whose = f" of {project_name}" if project_name else ""
        click.echo(f"no worktrees{whose}: `cloister start -b BRANCH` in a repository makes one")
        return
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn

    table = Table("project", "branch", "dirty", "path")
    for row in rows:
        table.add_row(
            str(row["project"]),
            str(row["branch"]),
            "yes" if row["dirty"] else "no",
            str(row["path"]),
        )
    console().print(table)


@worktree.command("remove")
@click.argument("project_name", shell_complete=completion_sources.worktree_projects)
@click.argument("branch", shell_complete=completion_sources.worktree_branches)
@click.option("-f", "--force", is_flag=True, help="Remove even with uncommitted changes.")
@click.pass_obj
def worktree_remove(context: Context, project_name: str, branch: str, force: bool) -> None:
    """Remove a worktree (refused if it has uncommitted changes, unless -f).

    The branch itself stays in the repository.

    \b
    Examples:
      cloister worktree remove my-api feature/login
      cloister worktree remove my-api feature/login -f
    """
    from cloister_cli.repo import gitdirs  # noqa: PLC0415 - see the module docstring
    from cloister_core import beneath  # noqa: PLC0415

    directory = context.paths.worktree(project_name, sanitize_branch(branch))
    if not directory.is_dir():
        raise click.ClickException(f"no worktree {directory}")
    running = [
        c.name
        for c in listing.list_cloisters(context.docker, context.instance)
        if c.path == str(directory)
    ]
    if running:
        raise click.ClickException(f"stop its cloister first: cloister stop {running[0]}")
    made = next(
        (
            m
            for m in gitdirs.made_worktrees(context.paths, project_name)
            if m.directory == directory
        ),
        None,
    )
    if made is not None and made.uncommitted() and not force:
        raise click.ClickException(
            f"{directory} holds work its branch does not have (or Cloister cannot tell);"
            " commit it inside the cloister, or remove anyway with -f"
        )
    beneath.remove_tree(directory)
    if made is not None and made.checkout is not None:
        # A worktree an older Cloister registered: the repository forgets it.
        git.run(made.checkout, "worktree", "prune", check=False)
    click.echo(f"removed {directory} (the branch stays; the agent's is refs/cloister/…)")
