"""What shell completion offers for an argument: cloister, project and worktree names,
pending approval ids.

Each function is a click ``shell_complete`` callback. They run on every TAB, so they
read directories or ask the engine's socket directly (no config loading, no docker
SDK), and they never fail loudly: an engine that does not answer, a missing
directory or a hub that is down just means no suggestions.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import click
from click.shell_completion import CompletionItem

from cloister_core.errors import CloisterNameError
from cloister_core.names import validate_name
from cloister_core.paths import CloisterPaths
from cloister_core.stack import Instance

ENGINE_TIMEOUT = 2.0  # seconds; a TAB that hangs is worse than one that offers nothing

Source = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _quietly(source: Callable[[click.Context, str], Iterable[CompletionItem]]) -> Source:
    @functools.wraps(source)
    def complete(
        ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        try:
            return [item for item in source(ctx, incomplete) if item.value.startswith(incomplete)]
        except Exception:  # completion offers nothing rather than a traceback
            return []

    return complete


def _valid(name: str) -> bool:
    """A Cloister name: what the commands accept, and nothing odd for the shell to show."""
    try:
        validate_name(name)
    except CloisterNameError:
        return False
    return True


def _names(directory: Path, suffix: str = "") -> set[str]:
    """The valid names of *directory*'s entries ending in *suffix* (which is dropped)."""
    if not directory.is_dir():
        return set()
    return {
        entry.name.removesuffix(suffix)
        for entry in directory.iterdir()
        if entry.name.endswith(suffix) and _valid(entry.name.removesuffix(suffix))
    }


def _paths() -> CloisterPaths:
    return CloisterPaths.from_env()


def _cloisters() -> list[CompletionItem]:
    from cloister_cli.container import listing  # noqa: PLC0415 - only when asked: it opens a socket

    instance = Instance.of(_paths(), os.getuid())
    found = listing.list_cloisters(listing.connect(timeout=ENGINE_TIMEOUT), instance)
    return [CompletionItem(info.name, help=info.path) for info in found]


@_quietly
def cloister_names(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """The cloisters on this machine (running or not), with their directories."""
    return _cloisters()


@_quietly
def exec_cloister_names(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """A cloister name as the first word of ``exec``; nothing after it or after ``--``."""
    if ctx.params.get("words") or "exec.command" in ctx.meta:
        return []
    return _cloisters()


@_quietly
def reviewable_names(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """Cloisters with a session record (stopped ones too: review comes after stop)."""
    items = {name: CompletionItem(name) for name in _names(_paths().sessions_dir, ".json")}
    with contextlib.suppress(Exception):  # no engine: the records still answer
        items.update((item.value, item) for item in _cloisters())
    return [items[name] for name in sorted(items)]


@_quietly
def logged_names(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """Cloisters with a log, or a session record (stopped ones too: their log stays)."""
    paths = _paths()
    names = _names(paths.logs_dir, ".log") | _names(paths.sessions_dir, ".json")
    items = {name: CompletionItem(name) for name in names}
    with contextlib.suppress(Exception):  # no engine: the files still answer
        items.update((item.value, item) for item in _cloisters())
    return [items[name] for name in sorted(items)]


@_quietly
def project_names(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """Projects that have a config file or decisions (what `project show` accepts)."""
    paths = _paths()
    names = _names(paths.projects_dir, ".yaml") | _names(paths.project_decisions_dir, ".yaml")
    return [CompletionItem(name) for name in sorted(names)]


@_quietly
def worktree_projects(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """Projects that have worktrees under ``<data>/worktrees``."""
    return [CompletionItem(name) for name in sorted(_names(_paths().worktrees_dir))]


@_quietly
def worktree_branches(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """The worktrees of the project named before (their directory names)."""
    project = ctx.params.get("project_name")
    if not isinstance(project, str) or not _valid(project):
        return []
    directory = _paths().worktrees_dir / project
    return [CompletionItem(name, help=str(directory / name)) for name in sorted(_names(directory))]


@_quietly
def pending_approval_ids(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """What waits in the approval hub: domains and commands, with what they are."""
    # Through the CLI's own hub client, so it reaches the hub exactly as `approvals
    # list` does; slower than the others, which is fine for a rare TAB.
    from cloister_cli.context import Context  # noqa: PLC0415 - only when asked
    from cloister_core.printable import printable  # noqa: PLC0415

    pending = Context(paths=_paths()).hub.pending()
    items = [
        CompletionItem(
            str(item["id"]), help=printable(f"domain {item.get('host')}:{item.get('port')}")
        )
        for item in pending.get("domains", [])
    ]
    items += [
        CompletionItem(str(item["id"]), help=printable(f"command {item.get('command')}"))
        for item in pending.get("commands", [])
    ]
    return items
