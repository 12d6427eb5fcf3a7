"""``cloister start | list | path | stop | exec``.

The library modules are imported in the commands that use them: ``cloister list``
and shell completion (which loads this module to complete a cloister's name) answer
while a person waits, and the lifecycle pulls in the docker SDK, the config models and
the hub client (about half a second on a small machine).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cloister_cli.commands import completion_sources
from cloister_cli.commands.output import (
    build_progress,
    confirm_shape,
    console,
    note,
    print_json,
    warn,
)
from cloister_cli.container import listing
from cloister_cli.launch import run_in_terminal
from cloister_core import stack
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.context import Context
    from cloister_cli.session import ending
    from cloister_cli.start import apply, plan
    from cloister_core.devcontainer import Devcontainer


@click.command()
@click.option(
    "-p",
    "--project",
    "project_name",
    help="Project name (default: the directory's).",
    shell_complete=completion_sources.project_names,
)
@click.option("-b", "--branch", help="Work on BRANCH in its own git worktree.")
@click.option("-d", "--detach", is_flag=True, help="Start it, but do not attach a shell.")
@click.option(
    "--agent",
    help="Attach to this agent (claude, codex, gemini) or command instead of a shell.",
)
@click.option("--image", help="Agent image (default: defaults.image in config.yaml).")
@click.option(
    "--allow-no-git", is_flag=True, help="Allow a directory that is not a git repository."
)
@click.option(
    "--devcontainer",
    "devcontainer_path",
    type=click.Path(path_type=Path),
    help="Use this devcontainer.json (or directory holding one).",
)
@click.option("--no-devcontainer", is_flag=True, help="Ignore the project's devcontainer.json.")
@click.option(
    "-y", "--yes", "assume_yes", is_flag=True, help="Accept a changed shape without asking."
)
@click.option("--dry-run", is_flag=True, help="Print what would be built and run; change nothing.")
@click.option(
    "--json", "as_json", is_flag=True, help="With --dry-run or -d: print JSON for scripts."
)
@click.pass_obj
def start(
    context: Context,
    project_name: str | None,
    branch: str | None,
    detach: bool,
    agent: str | None,
    image: str | None,
    allow_no_git: bool,
    devcontainer_path: Path | None,
    no_devcontainer: bool,
    assume_yes: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Start (or enter) the cloister for this directory, then attach a shell.

    The guardian stack is started first if it is down. Entering a running
    cloister again just attaches; it keeps its token. Claude Code, Codex and
    Gemini CLI are set up in every cloister (`cloister setup` logs them in),
    with their own prompts off: the cloister is the sandbox.

    The project's devcontainer.json (.devcontainer/cloister/, .devcontainer/
    or .devcontainer.json) gives the image, and what cannot weaken the
    cloister; everything else is dropped with a warning. Its lifecycle
    commands run inside. When those files changed since you last started the
    project (the agent can write them), the difference is shown and you are
    asked; --yes accepts it (for scripts).

    \b
    Examples:
      cloister start
      cloister start --agent claude      # or defaults.agent in config.yaml
      cloister start -d --agent codex && cloister exec -- codex exec "fix the build"
      cloister start -d --image cloister-slim:latest
      cloister start -b feature/login     # worktree + cloister my-api-feature-login
      cloister start -p work-my-api       # when another project is called my-api
      cloister start --dry-run            # the image, the overrides, the docker run
      cloister start --dry-run --json | jq -r .command
      cloister start -d --json | jq -r '.stand_ins[]'
      cloister start -d --yes --devcontainer .devcontainer/ci
    """
    from cloister_cli.start import apply, plan  # noqa: PLC0415 - see the module docstring

    if as_json and not (dry_run or detach):
        raise click.UsageError("--json goes with --dry-run or -d")
    if no_devcontainer and devcontainer_path is not None:
        raise click.UsageError("give --devcontainer PATH or --no-devcontainer, not both")
    if dry_run:
        context = context.for_dry_run()
    agent = agent or context.config.defaults.agent
    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    options = plan.StartOptions(
        project_name=project_name,
        branch=branch,
        image=image,
        agent=agent,
        allow_no_git=allow_no_git,
        devcontainer=devcontainer_path,
        no_devcontainer=no_devcontainer,
        assume_yes=assume_yes,
        confirm=confirm_shape if interactive else None,
        on_devcontainer=None if dry_run else _show_overrides,
    )
    if dry_run:
        _dry_run(context, options, as_json=as_json)
        return
    planned = plan.plan_start(context, Path.cwd(), options)
    with build_progress() as progress:
        outcome = apply.apply(context, planned, progress=progress)
    for message in outcome.warnings:
        warn(message)
    _show_protections(outcome)
    if outcome.snapshot is not None:
        note(
            f"snapshot {outcome.snapshot} kept: `cloister restore {outcome.name}` brings the"
            " repository back to this start"
        )
    verb = "started" if outcome.created else "already running"
    note(
        f"cloister {click.style(outcome.name, bold=True)} {verb} ({outcome.container});"
        f" approvals: {context.guardian.ui_url}"
    )
    if outcome.created:
        _lifecycle(context, outcome, "create")
    if detach:
        if as_json:
            print_json(_start_json(outcome))
        return
    if outcome.created:
        _lifecycle(context, outcome, "attach")
    from cloister_cli.agents import agentstate  # noqa: PLC0415 - only to attach

    command = (
        agentstate.attach_argv(agent, context.config) if agent else [context.config.defaults.shell]
    )
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise click.ClickException("the docker command is not installed")
    returncode = run_in_terminal([docker_cli, "exec", "-it", outcome.container, *command])
    note(f"left cloister {outcome.name} (still running; `cloister stop {outcome.name}` ends it)")
    raise SystemExit(returncode)


def _start_json(outcome: apply.StartOutcome) -> dict[str, Any]:
    where = outcome.workspace.directory
    return {
        "name": outcome.name,
        "container": outcome.container,
        "created": outcome.created,
        "path": str(where),
        "branch": outcome.workspace.branch,
        "snapshot": outcome.snapshot,
        "stand_ins": [str(path.relative_to(where)) for path in outcome.stand_ins],
        "removed_stand_ins": [str(path) for path in outcome.left_behind],
        "warnings": list(outcome.warnings),
    }


def _show_protections(outcome: apply.StartOutcome) -> None:
    """What is read-only in the work tree: git's code-running paths, the protected ones."""
    where = outcome.workspace.directory
    git_paths = [item for item in outcome.protections if item.kind == "git"]
    configured = [item for item in outcome.protections if item.kind == "configured"]
    if git_paths:
        protected = "; ".join(
            f"{item.path.relative_to(where)} ({item.reason})" for item in git_paths
        )
        note(f"read-only in the cloister, as your git runs code from it: {protected}")
    if configured:
        missing = " (none yet: cannot be created)"
        names = ", ".join(
            f"{item.path.relative_to(where)}{missing if item.stand_in else ''}"
            for item in configured
        )
        note(f"protected paths, read-only in the cloister: {printable(names)}")
    if outcome.stand_ins:
        made = ", ".join(str(path.relative_to(where)) for path in outcome.stand_ins)
        note(
            "made empty read-only stand-ins for protected paths that did not exist"
            f" (removed at stop): {printable(made)}"
        )
    _show_left_behind(outcome.left_behind)


def _show_left_behind(paths: tuple[Path, ...]) -> None:
    if paths:
        removed = ", ".join(str(path) for path in paths)
        note(f"removed the stand-ins an unfinished stop left: {printable(removed)}")


def _show_overrides(devcontainer: Devcontainer) -> None:
    """What the devcontainer.json asked for and did not get, with the reason and line."""
    for item in devcontainer.warnings:
        warn(item.render(devcontainer.path))


def _dry_run(context: Context, options: plan.StartOptions, *, as_json: bool) -> None:
    from cloister_cli.start import dryrun  # noqa: PLC0415 - see the module docstring
    from cloister_cli.start import plan as planning  # noqa: PLC0415

    planned = planning.plan_start(context, Path.cwd(), options, dry_run=True)
    if as_json:
        print_json(dryrun.to_json(planned))
    else:
        click.echo(dryrun.render(planned), nl=False)


def _lifecycle(context: Context, outcome: apply.StartOutcome, when: str) -> None:
    """Run the devcontainer's lifecycle commands of *when* inside the cloister; a failure
    is a warning (the cloister stays up)."""
    devcontainer = outcome.devcontainer
    if devcontainer is None or not devcontainer.lifecycle:
        return
    from cloister_cli.start import devlifecycle  # noqa: PLC0415 - see the module docstring

    stages = devlifecycle.CREATE_STAGES if when == "create" else devlifecycle.ATTACH_STAGES
    outcomes = devlifecycle.run_stages(
        context.docker,
        outcome.container,
        devcontainer.lifecycle,
        stages,
        user=outcome.user,
        on_line=lambda what, line: note(f"[{printable(what)}] {printable(line)}"),
    )
    for each in outcomes:
        if each.failed:
            warn(printable(each.describe()))


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_command(as_json: bool) -> None:
    """List the cloisters on this machine.

    \b
    Examples:
      cloister list
      cloister list --json | jq -r '.[].name'
    """
    # Not the shared Context: this asks the engine without the docker SDK (see listing).
    instance = stack.Instance.of(CloisterPaths.from_env(), os.getuid())
    found = listing.list_cloisters(listing.connect(), instance)
    if as_json:
        print_json([info.to_json() for info in found])
        return
    if not found:
        click.echo("no cloisters (`cloister start` in a repository makes one)")
        return
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn

    table = Table("name", "project", "branch", "status", "age", "path")
    for info in found:
        table.add_row(
            info.name,
            info.project,
            info.branch or "-",
            info.status,
            listing.age(info.created),
            info.path,
        )
    console().print(table)


@click.command("path")
@click.argument("name", shell_complete=completion_sources.cloister_names)
@click.pass_obj
def path_command(context: Context, name: str) -> None:
    """Print the host directory a cloister works in.

    \b
    Examples:
      cloister path my-api
      cd "$(cloister path my-api-feature-login)"
    """
    from cloister_cli.container import cloisters  # noqa: PLC0415 - see the module docstring

    container = cloisters.find(context.docker, context.instance, name)
    if container is None:
        raise click.ClickException(f"no cloister {name!r} (`cloister list`)")
    click.echo(container.labels[stack.LABEL_PATH])


@click.command()
@click.argument("name", required=False, shell_complete=completion_sources.cloister_names)
@click.option("--all", "stop_all", is_flag=True, help="Stop every cloister.")
@click.pass_obj
def stop(context: Context, name: str | None, stop_all: bool) -> None:
    """Stop a cloister: remove its container and revoke its token at once.

    Without NAME, the cloister of the current directory. The worktree (if any)
    stays; `cloister worktree remove` deletes it.

    \b
    Examples:
      cloister stop
      cloister stop my-api-feature-login
      cloister stop --all
    """
    from cloister_cli.commands.review import print_report  # noqa: PLC0415
    from cloister_cli.session import ending  # noqa: PLC0415 - see the module docstring

    if stop_all and name:
        raise click.UsageError("give a NAME or --all, not both")
    names = (
        [info.name for info in listing.list_cloisters(context.docker, context.instance)]
        if stop_all
        else [name or listing.name_for_directory(context.docker, context.instance, Path.cwd())]
    )
    for each in names:
        outcome = ending.stop(context, each)
        if not outcome.stopped:
            raise click.ClickException(f"no cloister {each!r} (`cloister list`)")
        click.echo(f"stopped {each}")
        if outcome.sync is not None:
            for line in outcome.sync.lines():
                note(printable(line))
        if outcome.lost is not None:
            warn(lost_git_message(each, outcome.lost))
        elif outcome.sync_error is not None:
            warn(
                f"its commits could not be brought back ({printable(outcome.sync_error)});"
                f" its git directory is kept: `cloister sync {each}` tries again"
            )
        for line in outcome.cleanup_errors:
            warn(printable(line))
        for line in outcome.moved:
            note(f"moved a repository the agent made in the project: {printable(line)}")
        _show_left_behind(outcome.left_behind)
        if outcome.review_error is not None:
            warn(review_failed_message(each, outcome))
        if outcome.report is not None:
            print_report(outcome.report, who=f"cloister {each}")
            if outcome.report.findings:
                note(f"`cloister review {each}` shows them again")


def lost_git_message(name: str, lost: ending.LostGitDir) -> str:
    """What happened to a git directory a stopped cloister's commits cannot come back
    from, and the exact command that brings the project back."""
    where = printable(str(lost.path))
    if lost.whose == "repository":
        what = (
            f"your repository's git directory ({where}) is gone: cloister {name}'s commits"
            " could not be brought back into it"
        )
    elif lost.what == "removed":
        what = (
            f"the agent removed cloister {name}'s git directory (/work/.git inside): the"
            " commits it made could not be brought back, and no retry can. Your repository's"
            " own git directory was never in the cloister; the project's files are as the"
            " agent left them"
        )
    else:
        what = (
            f"the agent replaced cloister {name}'s git directory (/work/.git inside) with"
            f" another repository: its commits could not be brought back (it is kept at"
            f" {where})"
        )
    if lost.snapshot is None:
        return (
            f"{what}. No snapshot of its start was kept (snapshots are off, or taking it"
            " failed), so `cloister restore` cannot bring the project back"
        )
    return (
        f"{what}. To bring the project back to how this cloister's start found it (history,"
        f" branches, uncommitted work; what is there now is kept as a snapshot first),"
        f" run: cloister restore {name}"
    )


def review_failed_message(name: str, outcome: ending.StopOutcome) -> str:
    """``stop`` could not review what *name* left: with a git directory gone, the review
    has nothing to add to `cloister restore`."""
    error = outcome.review_error or ""
    if outcome.lost is not None and outcome.lost.snapshot is not None:
        return (
            f"could not review what cloister {name} left ({printable(error)}); treat"
            f" the project as hostile until you run: cloister restore {name}"
        )
    return (
        f"could not review what cloister {name} left ({printable(error)});"
        " treat its work as hostile until `cloister review` succeeds"
    )


class _ExecCommand(click.Command):
    """Keeps what follows ``--`` apart: it is the command, never NAME."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            split = args.index("--")
            ctx.meta["exec.command"] = args[split + 1 :]
            args = args[:split]
            ctx.allow_interspersed_args = True  # NAME -w DIR -- …: options anywhere before --
        return super().parse_args(ctx, args)


@click.command("exec", cls=_ExecCommand, context_settings={"allow_interspersed_args": False})
@click.option("-w", "--workdir", help="Directory to run in (relative ones are under /work).")
@click.argument(
    "words",
    nargs=-1,
    type=click.UNPROCESSED,
    metavar="[NAME] -- COMMAND [ARGS]...",
    shell_complete=completion_sources.exec_cloister_names,
)
@click.pass_obj
def exec_command(context: Context, workdir: str | None, words: tuple[str, ...]) -> None:
    """Run a command in a running cloister, with its environment.

    NAME defaults to the cloister of the current directory; the command runs in
    the matching directory under /work. It gets a terminal when you have one,
    and its exit status is cloister's.

    \b
    Examples:
      cloister exec -- make test
      cloister exec my-api -- claude -p "make the tests pass"
      cloister exec my-api -w src -- ls
      cloister start -d --agent claude && cloister exec -- claude -p "fix the build"
    """
    from cloister_cli.container import cloisters  # noqa: PLC0415 - see the module docstring

    command: list[str] | None = click.get_current_context().meta.get("exec.command")
    if command is None:  # docker's form: NAME COMMAND...
        if len(words) < 2:
            raise click.UsageError("say which command to run: cloister exec [NAME] -- COMMAND")
        name: str | None = words[0]
        command = list(words[1:])
    else:
        if len(words) > 1:
            raise click.UsageError(f"one NAME before --, got {' '.join(words)!r}")
        name = words[0] if words else None
    if name is None:
        name = listing.name_for_directory(context.docker, context.instance, Path.cwd())
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    argv = cloisters.exec_argv(context, name, command, workdir=workdir, cwd=Path.cwd(), tty=tty)
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise click.ClickException("the docker command is not installed")
    raise SystemExit(run_in_terminal([docker_cli, *argv]))
