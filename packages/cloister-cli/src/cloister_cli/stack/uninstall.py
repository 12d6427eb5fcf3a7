"""Removing Cloister from this machine: what ``cloister uninstall`` does, step by step.

In order: every cloister is stopped as ``cloister stop --all`` stops it (container
removed, token revoked, its commits brought back, what the agent left reviewed), and so
is one whose container is gone but whose git directory is left; then the guardian stack
(``docker compose down``) with whatever of its containers compose did not know about,
and the host executor; then Cloister's images and this instance's networks (its
stack's and its cloisters', which their stops keep for their next starts,
:class:`cloister_core.stack.Instance`) are removed. With
``purge``, the worktrees Cloister made are removed from their repositories and the
config and data directories deleted.

Each step is reported as it finishes, and one that fails does not stop the others (an
image some other container still uses must not keep the networks). What would be lost
is checked before anything is stopped: a directory that does not look like
Cloister's, or worktrees with uncommitted changes, are refused unless ``force``; the
home directory, ``/`` and a symbolic link never are deleted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import docker.errors

from cloister_cli.agents.agentstate import make_writable
from cloister_cli.container import listing, networks
from cloister_cli.container.engine import Engine
from cloister_cli.context import Context
from cloister_cli.images.builds import (
    AGENT_IMAGE,
    APPROVAL_IMAGE,
    GATEWAY_IMAGE,
    GIT_IMAGE,
    PROXY_IMAGE,
    SLIM_AGENT_IMAGE,
)
from cloister_cli.repo import git, gitdirs
from cloister_cli.session import ending, gc
from cloister_cli.stack import executor_process
from cloister_cli.stack.guardian import whose
from cloister_core import beneath, stack
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths

# The credential gateway runs the proxy's image, so these are all of them.
IMAGES = tuple(
    spec.tag
    for spec in (
        PROXY_IMAGE, APPROVAL_IMAGE, GATEWAY_IMAGE, GIT_IMAGE, AGENT_IMAGE, SLIM_AGENT_IMAGE
    )
)  # fmt: skip
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
# What only Cloister puts there: one of these makes a directory look like Cloister's.
CONFIG_MARKERS = ("config.yaml", "tokens", "projects", "decisions")
DATA_MARKERS = (
    "executor.json",
    "audit.log",
    "gitdirs",
    "guardian",
    "worktrees",
    "sessions",
    "agents",
    "credentials",
    "quarantine",
)

# shared: left for another guardian on the engine (not a failure)
Outcome = Literal["done", "absent", "failed", "kept", "shared"]


class UninstallError(CloisterError):
    """Uninstalling would delete something it should not; nothing was done."""


@dataclass(frozen=True, slots=True)
class Step:
    """One thing done (or found already gone, or failed), as a line and as JSON."""

    kind: str  # cloister, guardian, container, executor, image, network, worktree, directory
    target: str
    outcome: Outcome
    message: str  # the progress line for a person
    stopped: ending.StopOutcome | None = None  # a cloister's: what its review found

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "outcome": self.outcome,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Worktree:
    directory: Path
    repository: Path | None  # its project's checkout; None: not known
    dirty: bool


@dataclass(frozen=True, slots=True)
class Purge:
    """The directories to delete, checked before anything else happens."""

    directories: tuple[Path, ...] = ()
    worktrees: tuple[Worktree, ...] = ()


@dataclass
class Summary:
    steps: list[Step] = field(default_factory=list)
    unsynced: list[str] = field(default_factory=list)  # cloisters whose commits are not back

    @property
    def failed(self) -> list[Step]:
        return [step for step in self.steps if step.outcome in ("failed", "kept")]

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": [step.to_json() for step in self.steps],
            "failed": len(self.failed),
            "unsynced": self.unsynced,
        }


# -- checking what a purge deletes ----------------------------------------------------------


def _looks_like(directory: Path, markers: tuple[str, ...]) -> bool:
    return any((directory / marker).exists() for marker in markers) or not any(directory.iterdir())


def _never(directory: Path, home: Path) -> str | None:
    """Why *directory* may never be deleted, even with --force; None if it may."""
    if directory.is_symlink():
        return "is a symbolic link (delete what it points to yourself)"
    resolved = directory.resolve()
    if resolved == Path(resolved.anchor) or resolved in (home.resolve(), *home.resolve().parents):
        return "is / or your home directory, or holds it"
    return None


def _worktrees(paths: CloisterPaths) -> list[Worktree]:
    return [
        Worktree(made.directory, made.checkout, made.uncommitted())
        for made in gitdirs.made_worktrees(paths)
    ]


def plan_purge(paths: CloisterPaths, home: Path, *, force: bool) -> Purge:
    """The config and data directories to delete, and the worktrees in them.

    Raises :class:`UninstallError` for a directory that must not be deleted, or (unless
    *force*) one that does not look like Cloister's or holds uncommitted work.
    """
    directories: list[Path] = []
    problems: list[str] = []
    for directory, markers, what in (
        (paths.config_dir, CONFIG_MARKERS, "config"),
        (paths.data_dir, DATA_MARKERS, "data"),
    ):
        if directory in directories or not (directory.exists() or directory.is_symlink()):
            continue
        refusal = _never(directory, home)
        if refusal is not None:
            raise UninstallError(f"will not delete the {what} directory {directory}: it {refusal}")
        if not directory.is_dir():
            raise UninstallError(f"the {what} directory {directory} is not a directory")
        if not force and not _looks_like(directory, markers):
            problems.append(
                f"{directory} does not look like Cloister's {what} directory"
                f" (none of {', '.join(markers)})"
            )
        directories.append(directory)
    worktrees = _worktrees(paths) if paths.data_dir in directories else []
    dirty = [str(worktree.directory) for worktree in worktrees if worktree.dirty]
    if dirty and not force:
        problems.append(
            "these worktrees have uncommitted changes, which would be lost: "
            + ", ".join(dirty)
            + " (commit them, or `cloister worktree remove` them)"
        )
    if problems:
        raise UninstallError("; ".join(problems) + "; --force deletes anyway")
    return Purge(tuple(directories), tuple(worktrees))


# -- the steps --------------------------------------------------------------------------------


def _unsynced_dead(context: Context, running: Sequence[str]) -> list[str]:
    """Cloisters without a container whose git directory is still there (a killed stop,
    a `docker rm`): its commits may not be back yet, and a purge would delete them."""
    return [
        name
        for name in gc.dead_cloisters(context)
        if name not in running and context.paths.cloister_git_dir(name).is_dir()
    ]


def stop_cloisters(context: Context, summary: Summary) -> Iterator[Step]:
    names = [info.name for info in listing.list_cloisters(context.docker, context.instance)]
    for name in [*names, *_unsynced_dead(context, names)]:
        try:
            outcome = ending.stop(context, name)
        except (CloisterError, docker.errors.DockerException, OSError) as error:
            yield Step("cloister", name, "failed", f"could not stop cloister {name}: {error}")
            continue
        if outcome.sync_error is not None:
            summary.unsynced.append(name)
        # What the stop could not clean up (its container, the proxy told) uninstall
        # removes or stops next.
        left = "".join(f"; {line}" for line in outcome.cleanup_errors)
        yield Step("cloister", name, "done", f"stopped cloister {name}{left}", outcome)


def stop_guardian(context: Context) -> Iterator[Step]:
    executor = executor_process.running(context.paths)
    project = context.instance.project
    try:
        up = [service.name for service in context.guardian.services() if service.state != "absent"]
        context.guardian.stop()
    except (CloisterError, docker.errors.DockerException) as error:
        yield Step("guardian", project, "failed", f"could not stop the guardian: {error}")
    else:
        if up:
            yield Step("guardian", project, "done", "stopped the guardian stack")
        else:
            yield Step("guardian", project, "absent", "the guardian stack was not running")
    # Its compose file gone: by the labels (the instance's own, never another's).
    leftovers = context.docker.containers.list(
        all=True,
        filters={"label": [f"{COMPOSE_PROJECT_LABEL}={project}", context.instance.label_filter]},
    )
    for container in leftovers:
        name = container.name or container.short_id
        try:
            container.remove(force=True)
        except docker.errors.APIError as error:
            yield Step("container", name, "failed", f"could not remove container {name}: {error}")
        else:
            yield Step("container", name, "done", f"removed container {name}")
    try:
        executor_process.stop(context.paths)  # Guardian.stop stops it too, unless it failed
    except (CloisterError, OSError) as error:
        yield Step("executor", "", "failed", f"could not stop the host executor: {error}")
        return
    if executor is None:
        yield Step("executor", "", "absent", "the host executor was not running")
    else:
        yield Step(
            "executor", str(executor.pid), "done", f"stopped the host executor (pid {executor.pid})"
        )


def _remove(kind: str, name: str, remove: Callable[[str], object]) -> Step:
    try:
        remove(name)
    except docker.errors.NotFound:  # ImageNotFound too
        return Step(kind, name, "absent", f"{kind} {name}: not present")
    except docker.errors.APIError as error:
        reason = error.explanation or error
        return Step(kind, name, "failed", f"could not remove {kind} {name}: {reason}")
    return Step(kind, name, "done", f"removed {kind} {name}")


def remove_forwarders(client: Engine, instance: stack.Instance) -> Iterator[Step]:
    """`cloister port`'s forwarders that outlived their cloister (stopping one removes
    its own): they would keep the proxy's image and two networks."""

    def remove(name: str) -> None:
        client.containers.get(name).remove(force=True)

    # And syncs a killed CLI left, and compose services whose cloister is gone.
    for label in (stack.LABEL_FORWARD, stack.LABEL_SYNC, stack.LABEL_SERVICE_OF):
        found = client.containers.list(all=True, filters={"label": [instance.label_filter, label]})
        for container in found:
            yield _remove("container", container.name or container.short_id, remove)


def other_instances(client: Engine, instance: stack.Instance) -> dict[str, str]:
    """Other guardians' instances on this engine (id → whose): they use the same images."""
    labelled: dict[str, str | list[str] | bool] = {"label": [stack.LABEL_INSTANCE]}
    label_sets = [
        container.labels for container in client.containers.list(all=True, filters=labelled)
    ]
    label_sets += [
        network.attrs.get("Labels") or {} for network in client.networks.list(filters=labelled)
    ]
    return {
        labels[stack.LABEL_INSTANCE]: whose(labels)
        for labels in label_sets
        if labels.get(stack.LABEL_INSTANCE) not in (None, "", instance.id)
    }


def remove_images(client: Engine, instance: stack.Instance) -> Iterator[Step]:
    """Cloister's images, unless another guardian on this engine still has them in use:
    images are the engine's, not an instance's."""
    others = other_instances(client, instance)
    if others:
        users = "; ".join(f"{owner} {instance_id}" for instance_id, owner in sorted(others.items()))
        for tag in IMAGES:
            yield Step("image", tag, "shared", f"kept image {tag}: other guardians use it: {users}")
        return
    for tag in IMAGES:
        yield _remove("image", tag, client.images.remove)


def remove_networks(client: Engine, instance: stack.Instance) -> Iterator[Step]:
    """The instance's networks: its cloisters' (every one: a stop keeps it), then its
    stack's."""

    def remove(name: str) -> None:
        network = client.networks.get(name)
        if (network.attrs.get("Labels") or {}).get(stack.LABEL_INSTANCE) != instance.id:
            raise docker.errors.NotFound(f"{name} is not this instance's")
        networks.remove_network(network)

    for network in networks.instance_networks(client, instance):
        yield _remove("network", str(network.name), remove)
    for name in (instance.egress_net, instance.control_net, instance.ports_net):
        yield _remove("network", name, remove)


def purge(plan: Purge, summary: Summary) -> Iterator[Step]:
    if summary.unsynced:
        # Their git directories (in the data directory) hold the only copy of their commits.
        names = ", ".join(summary.unsynced)
        for directory in plan.directories:
            yield Step(
                "directory",
                str(directory),
                "kept",
                f"kept {directory}: the commits of cloister(s) {names} could not be brought"
                " back; `cloister sync NAME` first, then uninstall again",
            )
        return
    for worktree in plan.worktrees:
        try:
            beneath.remove_tree(worktree.directory)
        except OSError as error:
            yield Step(
                "worktree",
                str(worktree.directory),
                "failed",
                f"could not remove worktree {worktree.directory} ({error})",
            )
            continue
        if worktree.repository is not None and worktree.repository.is_dir():
            git.run(worktree.repository, "worktree", "prune", check=False)  # an older kind
        where = f" (its branch stays in {worktree.repository})" if worktree.repository else ""
        yield Step(
            "worktree",
            str(worktree.directory),
            "done",
            f"removed worktree {worktree.directory}{where}",
        )
    for directory in plan.directories:
        if not os.path.lexists(directory):  # remove_tree is content with a missing one
            yield Step("directory", str(directory), "absent", f"{directory}: not present")
            continue
        try:
            make_writable(directory)
            beneath.remove_tree(directory)
        except OSError as error:
            yield Step(
                "directory", str(directory), "failed", f"could not delete {directory}: {error}"
            )
        else:
            yield Step("directory", str(directory), "done", f"deleted {directory}")


def uninstall(
    context: Context, plan: Purge | None, on_step: Callable[[Step], None] = lambda step: None
) -> Summary:
    """Every step in order (see the module docstring); *plan* from :func:`plan_purge`."""
    summary = Summary()
    client = context.docker  # no engine: one clear error before anything is done
    parts: list[Iterator[Step]] = [
        stop_cloisters(context, summary),
        stop_guardian(context),
        remove_forwarders(client, context.instance),
        remove_images(client, context.instance),
        remove_networks(client, context.instance),
    ]
    for part in parts:
        for step in part:
            summary.steps.append(step)
            on_step(step)
    if plan is not None:
        for step in purge(plan, summary):
            summary.steps.append(step)
            on_step(step)
    return summary
