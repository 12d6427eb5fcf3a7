"""Carrying out a :class:`~cloister_cli.start.plan.StartPlan`: :func:`apply`.

Each step that writes registers its undo on one :class:`contextlib.ExitStack`: a start
that fails before its container runs leaves nothing of this start behind (what it kept
on purpose stays: the snapshot, the images, the agents' state). Once the container runs,
:func:`~cloister_cli.session.ending.stop` is the one undo. The container is created from
the plan's :class:`~cloister_cli.container.cloisters.ContainerPlan`, the one the dry run
prints (:func:`cloister_cli.start.plan.fill_in`: made again only when what the start
found once it wrote differs from what was planned, as for a new worktree). The compose
services it runs are planned again from the devcontainer read once the shape was
approved (:func:`cloister_cli.start.plan.approved_services`), never from the first read.

:func:`approve_shape` and :func:`build_image` are the image part's steps, which
``cloister images build`` takes too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cloister_cli.container import accounts, cloisters, networks, safeguards, services
from cloister_cli.container.cloisters import CloisterStartError, Workspace
from cloister_cli.context import Context
from cloister_cli.images import projectimages, shape
from cloister_cli.repo import git, gitdirs, gitmounts, projects
from cloister_cli.repo.gitmounts import Protection
from cloister_cli.session import sessions, snapshots
from cloister_cli.session.ending import remove_stand_ins, stop, sync_stopped
from cloister_cli.stack import doctor
from cloister_cli.start import plan
from cloister_cli.start.ensure import (
    Progress,
    ensure_agent_image,
    ensure_git_image,
    ensure_guardian,
)
from cloister_cli.start.plan import Attach, ImagePart, StartOptions, StartPlan
from cloister_cli.start.worktree import make_worktree
from cloister_core.printable import printable
from cloister_core.sessions import read_session
from cloister_core.snapshots import SnapshotError

if TYPE_CHECKING:
    from cloister_core.devcontainer import Devcontainer


@dataclass(frozen=True, slots=True)
class StartOutcome:
    name: str
    container: str
    workspace: Workspace
    created: bool
    warnings: tuple[str, ...]
    protections: tuple[Protection, ...] = ()
    devcontainer: Devcontainer | None = None  # its lifecycle commands run next
    user: str = ""  # the uid:gid the container runs as (and its commands)
    snapshot: str | None = None  # the id of the session snapshot kept at this start
    stand_ins: tuple[Path, ...] = ()  # made empty for protected paths that did not exist
    left_behind: tuple[Path, ...] = ()  # stand-ins unfinished stops left, removed now


def apply(
    context: Context,
    planned: StartPlan | Attach,
    *,
    progress: Progress = lambda what, line: None,
) -> StartOutcome:
    """Carry out *planned*: start the cloister (or attach to the one running).

    Every agent is set up in it (:mod:`cloister_cli.agents.agentstate`); the plan's
    agent is the one that must be: its setup failing fails the start, another's is a
    warning. The devcontainer's shape is checked (and, when changed, confirmed) before
    anything is built, and recorded as approved once the cloister runs. Its lifecycle
    commands are in the outcome, for :mod:`cloister_cli.start.devlifecycle`.
    """
    if isinstance(planned, Attach):
        projects.register(context.paths, planned.workspace.project)
        return StartOutcome(
            planned.name, planned.container, planned.workspace, False, planned.warnings
        )
    options, name, workspace = planned.options, planned.name, planned.workspace
    warnings = list(planned.warnings)
    if options.branch is not None:
        make_worktree(workspace.project.root, workspace.directory, options.branch)
    projects.register(context.paths, workspace.project)
    if planned.existing == "stale":
        stop(context, name)  # a dead one: start afresh
    left_behind = finish_earlier(context, name, warnings)
    approved, devcontainer = approve_shape(context, planned.image_part, options, warnings)
    # Before anything is made: a missing service image fails the start now.
    service_plans = plan.approved_services(context, planned, devcontainer)
    ensure_guardian(context, progress)
    with (
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="cloister-engine") as asking,
        contextlib.ExitStack() as undo,
    ):
        # The engine's ID for its start check (GET /info, ~12 ms), asked meanwhile.
        engine_id = asking.submit(doctor.ask_engine_id, context.docker)
        # Its network made and the services joined on a thread while the steps below run
        # (the guardian is up: its networks are made): the container's start is then
        # the only change the engine makes.
        ahead = networks.Ahead.start(
            context.docker, context.instance, name, context.config.guardian
        )
        undo.callback(ahead.discard)
        ahead.join_services()
        snapshot = keep_snapshot(context, workspace, name, warnings)
        if workspace.project.git:
            ensure_git_image(context, progress)
        image = build_image(context, planned.image_part, devcontainer, progress)
        agents = plan.agent_state(
            context, workspace, planned.record, planned.project_config, options.agent, write=True
        )
        warnings.extend(item for item in agents.warnings if item not in planned.warnings)
        # Inspected once, for its accounts and its variables (built: it is there).
        inspected = context.docker.images.get(image.tag)
        identity = accounts.for_cloister(
            context.docker,
            context.paths,
            name,
            inspected,
            cloisters.HOME,
            name=devcontainer.user if devcontainer is not None else None,
        )
        undo.callback(accounts.remove, context.paths, name)
        earlier_work(context, name, warnings)
        prepared = sessions.prepare(
            context.paths, workspace, name, home=context.home, protect=planned.guards.protect
        )
        undo.callback(gitdirs.remove, context.paths, name)
        undo.callback(sessions.release, context.paths, prepared.session)
        warnings.extend(prepared.notes)
        safeguards.write_marker(context.paths, name, workspace.project.name, workspace.branch)
        undo.callback(safeguards.remove_marker, context.paths, name)
        found = plan.Found(
            devcontainer,
            prepared.git_plan,
            image.tag,
            plan.environment_of(inspected),
            agents,
            identity,
        )
        container_plan, left_out = plan.fill_in(context, planned, found)
        warnings.extend(left_out)
        container = cloisters.create(
            context.docker,
            context.paths,
            container_plan,
            planned.record,
            instance=context.instance,
            guardian=context.config.guardian,
            ahead=ahead,
        )
        undo.pop_all()  # it runs: from here on `stop` is the undo
        shape.save_approved(context.paths, workspace.project.name, approved)
        check_engine(context, name, warnings, engine_id)  # stops it when it fails
        undo.callback(stop, context, name)
        if service_plans:
            services.start(context.docker, service_plans, container, progress=progress)
        undo.pop_all()
    return StartOutcome(
        name,
        container.name or container_plan.container,
        workspace,
        True,
        tuple(warnings),
        tuple(prepared.git_plan.protections),
        devcontainer=devcontainer,
        user=container_plan.user,
        snapshot=snapshot,
        stand_ins=tuple(gitmounts.stand_ins(prepared.git_plan.placeholders)),
        left_behind=left_behind,
    )


# -- the image part ----------------------------------------------------------------------


def approve_shape(
    context: Context,
    part: ImagePart,
    options: StartOptions,
    warnings: list[str],
    *,
    command: str = "start",
) -> tuple[shape.Shape, Devcontainer | None]:
    """The shape, approved before anything is built (the agent may have changed what the
    build reads, here or anywhere its devcontainer.json points the build at), and the
    devcontainer the build uses: read again, the one that was approved, with what its
    Features ask of the container (what they asked for and did not get in *warnings*)."""
    if part.features is not None:  # first use, a new Feature: the lock is approved too
        from cloister_cli.images.features import resolve  # noqa: PLC0415 - only with Features

        resolve.write_lock(part.features, part.project.root)
    approved = shape.check_shape(
        context.paths,
        part.project.name,
        part.project.root,
        extra=part.shape_inputs,
        confirm=options.confirm,
        assume_yes=options.assume_yes,
        command=command,
        scope=part.shape_scope,
    )
    quiet = replace(options, on_devcontainer=None)  # its warnings were shown once
    again = checked_devcontainer(
        part.devcontainer,
        lambda: plan.load_project_devcontainer(context, part.project.root, quiet),
    )
    if again is None or part.features is None:
        return approved, again
    from cloister_cli.images.features import resolve  # noqa: PLC0415 - only with Features

    return approved, resolve.applied(again, part.features, warnings)


def checked_devcontainer(
    first: Devcontainer | None,
    load: Callable[[], Devcontainer | None],
) -> Devcontainer | None:
    """The devcontainer read again after the shape was approved: the one the build uses,
    provided it reads the same inputs, and names the same Features (resolved from the
    first), as the one whose inputs were approved."""
    again = load()
    inputs = plan.build_inputs
    if set(inputs(again)) != set(inputs(first)) or _features(again) != _features(first):
        raise shape.ShapeChangedError("the devcontainer changed while you were asked")
    return again


def _features(devcontainer: Devcontainer | None) -> object:
    if devcontainer is None:
        return ()
    return (devcontainer.features, devcontainer.override_feature_order)


def build_image(
    context: Context,
    part: ImagePart,
    devcontainer: Devcontainer | None,
    progress: Progress,
    *,
    rebuild: bool = False,
) -> projectimages.ImagePlan:
    """The image the cloister runs, built when missing (*rebuild*: again, without
    Docker's cache): Cloister's agent image first when the project's image starts from
    it, then the project's own layers."""
    if part.image.base is not None:
        ensure_agent_image(context, part.image.base, progress)
    return projectimages.ensure_project_image(
        context.docker,
        context.paths,
        project=part.project.name,
        root=part.project.root,
        devcontainer=devcontainer,
        base_image=part.base,
        source=context.source,
        progress=progress,
        rebuild=rebuild,
        features=part.features,
    )


# -- what a start finishes or keeps first ------------------------------------------------


def finish_earlier(context: Context, name: str, warnings: list[str]) -> tuple[Path, ...]:
    """Finish cloister *name*'s last session when its container went without a finished
    ``stop`` (a killed one, ``docker rm``): as ``stop`` would, so that what it left is
    reviewed against its own start (this start's review takes what is there now as the
    human's) and its stand-ins are removed rather than taken for the human's files.
    Then the stand-ins of any stopped cloister's unfinished stop: those removed."""
    session = read_session(context.paths, name)
    if session is None or not session.running:
        return tuple(remove_stand_ins(context))
    outcome = stop(context, name)
    warnings.append(
        f"cloister {name}'s last session ended without a finished `cloister stop`;"
        " it was stopped now, as `cloister stop` would"
    )
    if outcome.review_error is not None:
        warnings.append(
            f"could not review what that session left ({printable(outcome.review_error)});"
            f" look at {printable(session.worktree)} before you use git there or open it"
        )
    elif outcome.report is not None and outcome.report.findings:
        found = printable(", ".join(finding.path for finding in outcome.report.findings))
        warnings.append(
            "that session left what would run code or read outside the project the next"
            f" time you use git or open it: {found}; look at it before you do"
        )
    return outcome.left_behind


def earlier_work(context: Context, name: str, warnings: list[str]) -> None:
    """Bring back the commits of cloister *name*'s last session when its stop could not
    (its git directory is still there); if they cannot be, keep that directory aside."""
    leftover = context.paths.cloister_git_dir(name)
    session = read_session(context.paths, name)
    if not leftover.exists() or session is None:
        return
    _, error = sync_stopped(context, session)
    if error is None:
        return
    aside = leftover.with_name(f"{name}.unsynced-{datetime.now(UTC):%Y%m%dT%H%M%S}")
    leftover.rename(aside)
    warnings.append(
        f"the commits of cloister {name}'s last session could not be brought back ({error});"
        f" its git directory is kept at {aside}"
    )


def keep_snapshot(
    context: Context, workspace: Workspace, name: str, warnings: list[str]
) -> str | None:
    """Snapshot the repository for ``cloister restore`` (its id); a failure is a warning:
    the cloister still starts, without an undo."""
    settings = context.config.snapshots
    if not workspace.project.git or not settings.enabled:
        return None
    try:
        # The human's repository and checkout (a worktree of Cloister's is no repository
        # on the host: the cloister's branch comes back by sync, its files stay).
        project = workspace.project
        repository = project.repository()  # as the start found it: no git call
        target = snapshots.Target(
            name, project.name, project.root, repository.git_dir, repository.common
        )
        record = snapshots.take(context.paths, target, settings)
    except (SnapshotError, git.GitError) as error:
        warnings.append(f"{error}; `cloister restore` cannot undo this session")
        return None
    if record.missing:
        warnings.append(
            f"the snapshot of {workspace.directory} is incomplete ({len(record.missing)}"
            " object(s) missing: the repository changed while it was read, or is damaged)"
        )
    return record.id


# -- once it runs --------------------------------------------------------------------------


def check_engine(
    context: Context, name: str, warnings: list[str], engine_id: Future[str] | None = None
) -> None:
    """On an engine this data directory has not seen pass (:func:`doctor.check_new_engine`):
    a cloister that can get out is stopped, and the start fails naming what failed. So is
    one the check failed on in any other way (fail closed): only a probe that could not
    start at all, for a reason of this machine's the agent has no hand in (no docker
    command, no probe image), is a warning; the engine stays unremembered either way."""
    try:
        failed = doctor.check_new_engine(
            context.docker,
            context.instance,
            context.paths,
            context.config,
            name,
            known_id=engine_id,
        )
    except doctor.ProbeUnavailableError as error:
        warnings.append(f"the start check of this engine could not run: {error}")
        return
    except Exception as error:  # any failure of the check fails the start
        stop(context, name)
        raise CloisterStartError(
            f"cloister {name} was stopped: the start check of this engine failed: {error!r}"
        ) from error
    if failed:
        stop(context, name)
        raise CloisterStartError(doctor.start_failure(name, failed))
