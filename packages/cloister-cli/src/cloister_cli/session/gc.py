"""``cloister gc`` as library calls: what cloisters that are gone left behind.

A cloister normally ends with ``cloister stop``, which removes its token, brings its
commits back from its own git directory (and removes that), removes the read-only
placeholders the start made in the work tree and reviews what the agent left. A CLI
killed half-way through a start, a container removed with ``docker rm``, or a machine
that rebooted leaves those behind. :func:`survey` finds them, :func:`collect` removes
them:

* a *dead cloister* (a token file, an unfinished session record or a git directory of
  its own, with no container) is stopped as ``cloister stop`` would
  (:func:`cloister_cli.session.ending.stop`: its commits synced, review included);
* a *sync container* that a killed ``cloister sync`` left is removed, and so is a
  probe's sidecar a killed ``cloister doctor`` left;
* *expired snapshots* are removed by the ``snapshots:`` rules, with pool files no kept
  snapshot needs, and scratch directories of snapshots that were interrupted;
* a *stale port forwarder* (``cloister port``) whose cloister is gone is removed: the
  address it joins may be another cloister's by now;
* a *stale service* (a compose devcontainer's other service,
  :mod:`cloister_cli.container.services`) whose cloister is gone, or is another container now, is
  removed with its anonymous volumes;
* a *stale network* (a cloister's own, :mod:`cloister_cli.container.networks`, which its
  stop leaves for its next start) whose cloister no longer exists is removed, once it is
  older than a start takes to run its container on it. A cloister exists while it has a
  container, or a session record of a project that is still registered (a stopped
  cloister starts again on its network);
* *stand-ins* a stopped cloister's session recorded making for its protected paths,
  still there (its stop was killed before it removed them), are removed if still empty
  (:func:`cloister_cli.session.ending.remove_stand_ins`);
* an *orphan worktree* (under ``<data>/worktrees``, no cloister in it, and its
  repository gone or no longer knowing it) is removed only when asked to: it may hold
  the only copy of uncommitted work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import docker.errors

from cloister_cli.container import cloisters, listing, networks, ports, services
from cloister_cli.context import Context
from cloister_cli.repo import git, gitdirs, gitmounts, projects
from cloister_cli.session import ending
from cloister_cli.session.ending import StopOutcome
from cloister_cli.session.snapshots.pool import prune
from cloister_cli.session.snapshots.take import expire_project, holding_pool
from cloister_cli.stack.doctor import PROBE_TIMEOUT
from cloister_core import beneath, stack
from cloister_core.errors import CloisterNameError
from cloister_core.names import validate_cloister_name
from cloister_core.owngit import POINTER
from cloister_core.sessions import SessionError, list_sessions, read_session
from cloister_core.snapshots import (
    SnapshotRecord,
    expired,
    needed_files,
    pool_dir,
    read_records,
    unreadable_records,
)
from cloister_executor.gitsync import EXPORT_TIMEOUT

SCRATCH_AGE_SECONDS = 3600.0  # a snapshot takes well under a second; older is abandoned
SCRATCH_MARGIN_SECONDS = 60.0  # past a sync's own limit: nobody waits for it any more
# A start makes the network, then runs the container on it: a younger network without
# its container may be such a start's.
NETWORK_AGE_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Orphan:
    path: Path
    project: str
    reason: str


@dataclass(frozen=True, slots=True)
class Survey:
    dead: list[str] = field(default_factory=list)  # cloisters without a container
    expired: dict[str, list[SnapshotRecord]] = field(default_factory=dict)  # by project
    scratch: list[Path] = field(default_factory=list)
    orphans: list[Orphan] = field(default_factory=list)
    stale_ports: list[str] = field(default_factory=list)  # forwarders of gone cloisters
    syncs: list[str] = field(default_factory=list)  # export containers left behind
    probes: list[str] = field(default_factory=list)  # `cloister doctor` sidecars left behind
    stale_networks: list[str] = field(default_factory=list)  # networks of gone cloisters
    stale_services: list[str] = field(default_factory=list)  # compose services of gone ones
    # Stand-ins stopped cloisters left in their work trees, by cloister.
    stand_ins: dict[str, list[Path]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.dead
            or any(self.expired.values())
            or self.scratch
            or self.orphans
            or self.stale_ports
            or self.syncs
            or self.probes
            or self.stale_networks
            or self.stale_services
            or self.stand_ins
        )


@dataclass(slots=True)
class Collected:
    stopped: dict[str, StopOutcome] = field(default_factory=dict)
    snapshots: int = 0
    pool_files: int = 0
    scratch: int = 0
    worktrees: list[Path] = field(default_factory=list)
    forwarders: list[str] = field(default_factory=list)
    syncs: int = 0
    probes: int = 0
    networks: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    stand_ins: list[Path] = field(default_factory=list)


def _names(directory: Path, suffix: str = "") -> set[str]:
    found: set[str] = set()
    try:
        entries = list(directory.iterdir())
    except OSError:
        return found
    for entry in entries:
        name = entry.name.removesuffix(suffix) if suffix else entry.name
        if entry.name.startswith(".") or (suffix and not entry.name.endswith(suffix)):
            continue
        try:
            found.add(validate_cloister_name(name))
        except CloisterNameError:
            continue
    return found


def dead_cloisters(context: Context) -> list[str]:
    """Cloisters with a token file, an unfinished session, a marker or an accounts
    directory (what ``stop`` removes), and no container."""
    data = context.paths.data_dir
    candidates = _names(context.paths.tokens_dir)
    candidates |= {record.cloister for record in list_sessions(context.paths) if record.running}
    candidates |= _names(data / "markers", ".json") | _names(data / "accounts")
    # A git directory its stop could not sync (not one kept aside as <name>.unsynced-…
    # by a later start, nor a half-made one: neither has a session record to sync by).
    candidates |= {
        name
        for name in _names(context.paths.git_dirs_dir)
        if (context.paths.git_dirs_dir / name).is_dir()
        and context.paths.session_file(name).is_file()
    }
    return sorted(
        name
        for name in candidates
        if cloisters.find(context.docker, context.instance, name) is None
    )


def orphan_worktrees(context: Context) -> list[Orphan]:
    """Worktrees under ``<data>/worktrees`` no cloister works in whose repository is
    gone (or, made by an older Cloister, does not list them any more)."""
    used = {info.path for info in listing.list_cloisters(context.docker, context.instance)}
    return [
        Orphan(made.directory, made.project, reason)
        for made in gitdirs.made_worktrees(context.paths)
        if str(made.directory) not in used and (reason := _orphaned(made)) is not None
    ]


def _orphaned(made: gitdirs.MadeWorktree) -> str | None:
    """Why *made* no longer belongs to a repository, or None when it does."""
    pointer = beneath.read_regular(made.directory, ".git", limit=4096)
    if pointer == POINTER:
        if made.checkout is None:
            return f"no project {made.project!r} names a repository any more"
        if git.toplevel(made.checkout) is None:
            return f"its repository ({made.checkout}) is gone"
        return None
    # A worktree an older Cloister registered with `git worktree add`.
    if pointer is None or not pointer.startswith("gitdir: "):
        return "it has no .git file"
    git_dir = Path(pointer.removeprefix("gitdir: ").strip())
    if not git_dir.is_dir():
        return f"its repository's record of it ({git_dir}) is gone"
    back = beneath.read_regular(git_dir, "gitdir", limit=4096)
    if back is None or Path(back.strip()) != made.directory / ".git":
        return f"{git_dir} belongs to another worktree now"
    return None


def _scratch(context: Context, now: float) -> list[Path]:
    found = []
    interrupted = [
        *context.paths.snapshots_dir.glob("*/tmp/*"),
        *context.paths.git_dirs_dir.glob(".sync-*"),
    ]
    for directory in sorted(interrupted):
        try:
            if now - directory.lstat().st_mtime > SCRATCH_AGE_SECONDS:
                found.append(directory)
        except OSError:
            continue
    return found


def survey(context: Context, *, now: datetime | None = None) -> Survey:
    """What :func:`collect` would remove; nothing is changed."""
    now = now or datetime.now(UTC)
    settings = context.config.snapshots
    expiring = {}
    for project in sorted(path.name for path in context.paths.snapshots_dir.glob("*/")):
        gone = expired(
            read_records(context.paths, project),
            keep=settings.keep,
            max_age=settings.max_age,
            now=now,
        )
        if gone:
            expiring[project] = gone
    return Survey(
        dead=dead_cloisters(context),
        expired=expiring,
        scratch=_scratch(context, now.timestamp()),
        orphans=orphan_worktrees(context),
        stale_ports=[
            forward.container
            for forward in ports.forwards(context.docker, context.instance)
            if forward.status == "stale"
        ],
        syncs=_finished_syncs(context, now),
        probes=_left_probes(context, now),
        stale_networks=_stale_networks(context, now),
        stale_services=sorted(
            container.name or container.short_id
            for container in services.stale(context.docker, context.instance)
        ),
        stand_ins={
            name: gitmounts.stand_ins(paths)
            for name, paths in ending.left_stand_ins(context).items()
        },
    )


def _age(created: str, now: datetime) -> float:
    """Seconds since the engine's *created* timestamp (nanoseconds cut); inf if unreadable."""
    try:
        return (now - datetime.fromisoformat(created[:26].rstrip("Z") + "+00:00")).total_seconds()
    except ValueError:
        return float("inf")


def _stale_networks(context: Context, now: datetime) -> list[str]:
    """The instance's cloister networks whose cloister no longer exists."""
    found = []
    for network in networks.instance_networks(context.docker, context.instance):
        cloister = (network.attrs.get("Labels") or {}).get(stack.LABEL_CLOISTER, "")
        old = _age(str(network.attrs.get("Created", "")), now) > NETWORK_AGE_SECONDS
        if old and not _exists(context, cloister):
            found.append(str(network.name))
    return sorted(found)


def _exists(context: Context, cloister: str) -> bool:
    """Whether *cloister* has a container, or a session record (running or stopped)
    of a project still registered: its next start takes its network."""
    if cloisters.find(context.docker, context.instance, cloister) is not None:
        return True
    try:
        validate_cloister_name(cloister)
        session = read_session(context.paths, cloister)
    except (CloisterNameError, SessionError):
        return False  # a record no stop or start reads: nothing starts it again
    return session is not None and projects.exists(context.paths, session.project)


def _finished_syncs(context: Context, now: datetime) -> list[str]:
    """Export containers that are not running, or run longer than a sync may (a running
    one is a sync in progress; one a killed `cloister sync` left runs on)."""
    found = []
    for container in context.docker.containers.list(
        all=True, filters={"label": [context.instance.label_filter, stack.LABEL_SYNC]}
    ):
        age = _age(str(container.attrs.get("Created", "")), now)
        if container.status != "running" or age > EXPORT_TIMEOUT + SCRATCH_MARGIN_SECONDS:
            found.append(container.name or container.short_id)
    return found


def _left_probes(context: Context, now: datetime) -> list[str]:
    """`cloister doctor` sidecars that are not running, or run longer than a probe may:
    a doctor killed before it removed its own."""
    found = []
    for container in context.docker.containers.list(
        all=True, filters={"label": [context.instance.label_filter, stack.LABEL_DOCTOR]}
    ):
        age = _age(str(container.attrs.get("Created", "")), now)
        if container.status != "running" or age > PROBE_TIMEOUT + SCRATCH_MARGIN_SECONDS:
            found.append(container.name or container.short_id)
    return found


def collect(
    context: Context,
    found: Survey,
    *,
    remove_worktree: Callable[[Orphan], bool] = lambda orphan: False,
) -> Collected:
    """Remove what *found* lists; each orphan worktree only if *remove_worktree* says so."""
    done = Collected()
    for name in found.dead:
        if cloisters.find(context.docker, context.instance, name) is None:  # not started since
            done.stopped[name] = ending.stop(context, name)
            done.stand_ins.extend(done.stopped[name].left_behind)
    done.stand_ins.extend(ending.remove_stand_ins(context))
    # After the dead cloisters' stop (which removes their forwarders): what is left belongs
    # to a cloister removed outside Cloister, and may reach another one's address by now.
    done.forwarders = ports.remove_stale(context.docker, context.instance)
    # Before the networks: a service left on one keeps it from going.
    done.services = services.remove_containers(services.stale(context.docker, context.instance))
    for name in found.stale_networks:
        cloister = name.removeprefix(context.instance.project + "-")
        if not _exists(context, cloister) and networks.remove(
            context.docker, context.instance, cloister
        ):
            done.networks.append(name)
    for name in found.syncs:
        with contextlib.suppress(docker.errors.NotFound):
            context.docker.containers.get(name).remove(force=True)
            done.syncs += 1
    for name in found.probes:
        with contextlib.suppress(docker.errors.NotFound):
            context.docker.containers.get(name).remove(force=True)
            done.probes += 1
    settings = context.config.snapshots
    for project in sorted(path.name for path in context.paths.snapshots_dir.glob("*/")):
        done.snapshots += len(expire_project(context.paths, project, settings))
        with holding_pool(context.paths, project):
            if unreadable_records(context.paths, project):
                continue  # a record this Cloister cannot read may need any pool file
            kept = needed_files(read_records(context.paths, project))
            done.pool_files += prune(pool_dir(context.paths, project), kept)
    for directory in found.scratch:
        with contextlib.suppress(OSError):
            beneath.remove_tree(directory)
        done.scratch += 1
    for orphan in found.orphans:
        if remove_worktree(orphan):
            beneath.remove_tree(orphan.path)
            done.worktrees.append(orphan.path)
    return done
