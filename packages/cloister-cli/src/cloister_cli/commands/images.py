"""``cloister images build | list | prune``: the steps are
:mod:`cloister_cli.images.projectimages`'s.

The library modules are imported in the commands (the docker SDK and the config
models cost time that `--help` and completion should not pay).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import (
    build_progress,
    confirm_shape,
    console,
    note,
    print_json,
)
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.context import Context


@click.group()
def images() -> None:
    """Project images: what `cloister start` builds from devcontainer.json and .cloister/Dockerfile.

    A project with a devcontainer.json (image or build) or a .cloister/Dockerfile
    runs in an image of its own, cloister-project-<project>:<key>, rebuilt when
    any input changes and reused otherwise.

    \b
    Examples:
      cloister images build
      cloister images list
      cloister images prune -y
    """


@images.command("build")
@click.argument(
    "directory",
    required=False,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "-p",
    "--project",
    "project_name",
    help="Project name (default: the directory's).",
    shell_complete=completion_sources.project_names,
)
@click.option("--image", help="Base image without a devcontainer (default: defaults.image).")
@click.option(
    "--devcontainer",
    "devcontainer_path",
    type=click.Path(path_type=Path),
    help="This devcontainer.json (or its directory) instead of the project's.",
)
@click.option("--no-devcontainer", is_flag=True, help="Ignore the project's devcontainer.json.")
@click.option("--no-cache", is_flag=True, help="Build again, without Docker's cache.")
@click.option("--dry-run", is_flag=True, help="Print the steps; build nothing.")
@click.option(
    "-y", "--yes", "assume_yes", is_flag=True, help="Accept changed image files without asking."
)
@click.pass_obj
def build(
    context: Context,
    directory: Path | None,
    project_name: str | None,
    image: str | None,
    devcontainer_path: Path | None,
    no_devcontainer: bool,
    no_cache: bool,
    dry_run: bool,
    assume_yes: bool,
) -> None:
    """Build the project's image, as `cloister start` would, and print its tag.

    The image: the devcontainer's (its `image`, or a build of its Dockerfile),
    its Features each in a layer of its own, and Cloister's layer (hostexec,
    /work), or the base image without one;
    then the project's .cloister/Dockerfile on top, if there is one (it starts
    with `ARG CLOISTER_BASE` and `FROM ${CLOISTER_BASE}`). Nothing is pulled:
    a devcontainer image must be on this machine.

    \b
    Examples:
      cloister images build
      cloister images build ~/src/my-api -p my-api
      cloister images build --dry-run
      cloister images build --no-cache
      cloister images build --yes   # accept changed Dockerfiles without asking
    """
    from cloister_cli.images import projectimages, shape  # noqa: PLC0415
    from cloister_cli.repo import projects  # noqa: PLC0415
    from cloister_cli.start import apply  # noqa: PLC0415
    from cloister_cli.start import plan as planning  # noqa: PLC0415

    if no_devcontainer and devcontainer_path is not None:
        raise click.UsageError("give --devcontainer PATH or --no-devcontainer, not both")
    project = projects.identify(directory or Path.cwd(), project_name, allow_no_git=True)
    # The agent writes the Dockerfiles a build runs (with the network): a change since
    # the human last started the cloister is shown and needs their yes, as at start.
    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    options = planning.StartOptions(
        image=image,
        devcontainer=devcontainer_path,
        no_devcontainer=no_devcontainer,
        assume_yes=assume_yes,
        confirm=confirm_shape if interactive else None,
    )
    part = planning.plan_image_part(context, project, options, dry_run=dry_run)
    if dry_run:
        if part.unbuildable is not None:
            raise projectimages.ProjectImageError(
                f"`cloister images build` would fail: {part.unbuildable}"
            )
        for step in part.image.steps:
            click.echo(printable(step))
        return
    warnings: list[str] = []
    approved, devcontainer = apply.approve_shape(
        context, part, options, warnings, command="images build"
    )
    for warning in warnings:
        note(warning)
    projects.register(context.paths, project)  # prune keeps the images of known projects
    with build_progress() as progress:
        plan = apply.build_image(context, part, devcontainer, progress, rebuild=no_cache)
    shape.save_approved(context.paths, project.name, approved)
    if plan.key is None:
        note(f"nothing to build: {project.name} runs {plan.tag} as it is")
    elif plan.cached:
        note(f"{plan.tag} is up to date (its inputs are unchanged)")
    else:
        note(f"built {plan.tag}")
    click.echo(plan.tag)


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"  # pragma: no cover - the loop returns


_ONE_PROJECT = click.option(
    "-p",
    "--project",
    "project_name",
    help="Only this project's images.",
    shell_complete=completion_sources.project_names,
)


@images.command("list")
@_ONE_PROJECT
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def list_command(context: Context, project_name: str | None, as_json: bool) -> None:
    """List Cloister's project images: project, tag, key, size, age, in use.

    \b
    Examples:
      cloister images list
      cloister images list -p my-api
      cloister images list --json | jq -r '.[] | select(.current | not) | .tag'
    """
    from cloister_cli.container import listing  # noqa: PLC0415
    from cloister_cli.images import projectimages  # noqa: PLC0415

    found = projectimages.list_project_images(context.docker, context.paths)
    found = [image for image in found if project_name in (None, image.project)]
    if as_json:
        print_json([image.to_json() for image in found])
        return
    if not found:
        click.echo("no project images (a devcontainer.json or .cloister/Dockerfile makes one)")
        return
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn

    table = Table("project", "tag", "key", "size", "age", "current", "in use by")
    for image in found:
        table.add_row(
            image.project,
            image.tag,
            image.key[:12],
            _size(image.size),
            listing.age(image.created),
            "yes" if image.current else "no",
            ", ".join(image.containers) or "-",
        )
    console().print(table)


@images.command("prune")
@_ONE_PROJECT
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def prune(context: Context, project_name: str | None, yes: bool, as_json: bool) -> None:
    """Remove project images that are no longer current, and those of removed projects.

    An image a container was made from stays (stop that cloister first), and
    so do the images of a project whose current image is not recorded.

    \b
    Examples:
      cloister images prune
      cloister images prune -p my-api
      cloister images prune -y --json
    """
    from cloister_cli.images import projectimages  # noqa: PLC0415
    from cloister_cli.repo import projects  # noqa: PLC0415
    from cloister_core.errors import CloisterError  # noqa: PLC0415

    def exists(name: str) -> bool:
        try:
            return projects.exists(context.paths, name)
        except CloisterError:  # a label that is no project name
            return False

    found = projectimages.list_project_images(context.docker, context.paths)
    found = [image for image in found if project_name in (None, image.project)]
    chosen = projectimages.prunable(found, exists)
    if not chosen:
        if as_json:
            print_json([])
        else:
            click.echo("nothing to prune")
        return
    note("cloister images prune will remove:")
    for item in chosen:
        note(f"  {item.image.tag} ({item.image.id[7:19]}, {_size(item.image.size)}): {item.why}")
    if not yes:
        click.confirm("Go ahead?", abort=True, err=True)
    results = projectimages.prune_project_images(context.docker, context.paths, chosen, exists)
    if as_json:
        print_json([result.to_json() for result in results])
    else:
        for result in results:
            click.echo(result.message)
    failed = [result for result in results if result.failed]
    if failed:
        raise click.ClickException(f"{len(failed)} image(s) kept; see above")
