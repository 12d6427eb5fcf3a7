"""``cloister start`` as a library call: the workspace, the devcontainer, the image, the
container plan and the container; :func:`preview` is the same computed with nothing written.

The guardian and agent images and ``stop`` are :mod:`cloister_cli.session.ending`'s (the
shared :class:`~cloister_cli.context.Context`, its own module's); this module uses them
(never the other way round).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import docker.errors
from docker.models.containers import Container

from cloister_cli.agents import agentstate
from cloister_cli.container import accounts, cloisters, devoverrides, safeguards, services
from cloister_cli.container.cloisters import CloisterStartError, Forbidden, Workspace
from cloister_cli.context import Context
from cloister_cli.images import projectimages, shape
from cloister_cli.images.features import resolve
from cloister_cli.images.features.resolve import FeaturePlan
from cloister_cli.inside.guardrails import guardrails_for
from cloister_cli.repo import git, gitdirs, gitmounts, projects
from cloister_cli.repo.gitmounts import GitPlan, Protection
from cloister_cli.repo.refs import check_refs
from cloister_cli.session import sessions, snapshots
from cloister_cli.session.ending import remove_stand_ins, stop, sync_stopped
from cloister_cli.stack import doctor
from cloister_cli.start.ensure import (
    Progress,
    ensure_agent_image,
    ensure_git_image,
    ensure_guardian,
)
from cloister_core import beneath, stack
from cloister_core.config import load_project_config
from cloister_core.config.models import ProjectConfig
from cloister_core.devcontainer import Devcontainer, find_devcontainer, load_devcontainer
from cloister_core.fileio import atomic_write
from cloister_core.names import cloister_name, sanitize_branch
from cloister_core.owngit import POINTER
from cloister_core.printable import printable
from cloister_core.sessions import list_sessions, read_session
from cloister_core.snapshots import SnapshotError
from cloister_core.tokens import TokenRecord

# -- start -----------------------------------------------------------------------------


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


def workspace_for(
    context: Context,
    directory: Path,
    *,
    project_name: str | None,
    branch: str | None,
    allow_no_git: bool,
    create: bool = True,
) -> tuple[Workspace, str]:
    """The workspace and cloister name for *directory* (making a worktree for -b, unless
    not *create*); in a worktree Cloister made, that worktree's cloister."""
    made = _made_worktree(context, directory)
    if made is not None and branch is None and project_name is None:
        return made
    project = projects.identify(directory, project_name, allow_no_git=allow_no_git)
    if branch is None:
        return Workspace(project, project.root), cloister_name(project.name)
    if not project.git:
        raise CloisterStartError("-b BRANCH needs a git repository")
    destination = context.paths.worktree(project.name, sanitize_branch(branch))
    if create:
        make_worktree(project.root, destination, branch)
    return Workspace(project, destination, branch), cloister_name(project.name, branch)


def _made_worktree(context: Context, directory: Path) -> tuple[Workspace, str] | None:
    """The workspace of a worktree under ``<data>/worktrees`` that *directory* is in:
    git on the host cannot tell (its ``.git`` names a path that exists only inside)."""
    resolved = directory.resolve()
    base = context.paths.worktrees_dir.resolve()
    if not resolved.is_relative_to(base) or len(resolved.relative_to(base).parts) < 2:
        return None
    project_dir, branch_dir = resolved.relative_to(base).parts[:2]
    worktree = base / project_dir / branch_dir
    for session in list_sessions(context.paths):
        if Path(session.worktree).resolve() == worktree and session.branch is not None:
            root = load_project_config(context.paths, session.project).root
            if root is None:
                return None
            project = projects.identify(Path(root), session.project, allow_no_git=False)
            return (
                Workspace(
                    project, context.paths.worktree(project.name, branch_dir), session.branch
                ),
                session.cloister,
            )
    return None


def make_worktree(repository: Path, destination: Path, branch: str) -> None:
    """A directory for *branch* of *repository*, whose files the cloister's own git
    directory writes (:mod:`cloister_cli.repo.gitdirs`) and whose ``.git`` names a path that
    exists only inside the cloister: the human's git there says "not a git repository"
    rather than read the agent's state. The branch is made (from ``HEAD``) when missing."""
    git.check_branch_name(repository, branch)
    if not git.branch_exists(repository, branch):
        result = git.run(repository, "branch", "--", branch, check=False)
        if result.returncode != 0:
            raise CloisterStartError(
                f"cannot make branch {branch!r} in {repository}: {result.stderr.strip()}"
                " (-b needs a commit to start from)"
            )
    destination.mkdir(parents=True, exist_ok=True)
    pointer = destination / ".git"
    if pointer.is_file() and not pointer.is_symlink():
        text = beneath.read_regular(destination, ".git", limit=4096) or ""
        if text == POINTER:
            return
        # A worktree an older Cloister registered with `git worktree add`: the repository
        # forgets it (its entry under .git/worktrees goes) and its .git names the cloister's.
        _forget_registered(repository, destination, text)
        atomic_write(pointer, POINTER, mode=0o644)
        return
    if pointer.exists() or pointer.is_symlink():
        raise CloisterStartError(f"{pointer} is not the file Cloister makes; move it away")
    atomic_write(pointer, POINTER, mode=0o644)


def _forget_registered(repository: Path, destination: Path, pointer: str) -> None:
    """Remove the repository's record of *destination* as a worktree of its own (what
    ``git worktree prune`` would, were the directory gone), if it is that record."""
    if not pointer.startswith("gitdir: "):
        return
    entry = Path(pointer.removeprefix("gitdir: ").strip())
    common = Path(git.run(repository, "rev-parse", "--git-common-dir").stdout.strip())
    records = (common if common.is_absolute() else repository / common).resolve() / "worktrees"
    if entry.parent.resolve() != records or entry.is_symlink():
        return
    back = beneath.read_regular(entry, "gitdir", limit=4096)
    if back is not None and Path(back.strip()) == destination / ".git":
        beneath.remove_tree(entry)


@dataclass(frozen=True, slots=True)
class StartOptions:
    """What ``cloister start`` was asked, beyond the directory."""

    project_name: str | None = None
    branch: str | None = None
    image: str | None = None  # the base image (default: defaults.image)
    agent: str | None = None
    allow_no_git: bool = False
    devcontainer: Path | None = None  # --devcontainer PATH
    no_devcontainer: bool = False
    assume_yes: bool = False  # --yes: accept a changed shape
    # Shown the shape's difference, says whether to go on; None: nobody can be asked.
    confirm: Callable[[str], bool] | None = None
    # Told the devcontainer as soon as it is read (its overrides are warnings to show).
    on_devcontainer: Callable[[Devcontainer], None] | None = None


def load_project_devcontainer(
    context: Context, root: Path, options: StartOptions
) -> Devcontainer | None:
    """The project's devcontainer.json read with Cloister's overrides, or None.

    Host variables come from this process's environment, only those of
    :func:`host_environment`; Cloister's own directories
    are blocked as mount sources besides the loader's list.
    """
    if options.no_devcontainer:
        return None
    found = find_devcontainer(root, options.devcontainer)
    if found is None:
        return None
    loaded = load_devcontainer(
        found,
        project_root=root,
        home=context.home,
        environ=host_environment(),
        container_workspace="/work",
        trusted_features=context.config.devcontainer.trusted_features,
        blocked_paths=(context.paths.config_dir, context.paths.data_dir),
    )
    if options.on_devcontainer is not None:
        options.on_devcontainer(loaded)
    return loaded


def load_with_features(
    context: Context, root: Path, options: StartOptions
) -> tuple[Devcontainer | None, FeaturePlan | None]:
    """The project's devcontainer and its Features, resolved (the lock file written on
    first use; :func:`cloister_cli.images.features.resolve.for_start`)."""
    devcontainer = load_project_devcontainer(context, root, options)
    return devcontainer, resolve.for_start(context, root, devcontainer, host_environment())


def shape_extra(options: StartOptions) -> list[Path]:
    return [options.devcontainer] if options.devcontainer is not None else []


def shape_scope(options: StartOptions) -> shape.Scope:
    """``cloister`` with --no-devcontainer: the shape leaves out the file not used."""
    return "cloister" if options.no_devcontainer else "all"


# What ``${localEnv:X}`` in a devcontainer.json may read of this machine's environment:
# nothing that could hold a secret (a token, a proxy with a password, an agent's key).
HOST_ENV_NAMES = frozenset({"USER", "LOGNAME", "LANG", "TZ", "TERM", "HOME", "SHELL"})


def host_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of *environ* (this process's by default): :data:`HOST_ENV_NAMES`
    and ``LC_*``."""
    source = os.environ if environ is None else environ
    return {
        name: value
        for name, value in source.items()
        if name in HOST_ENV_NAMES or name.startswith("LC_")
    }


def build_inputs(devcontainer: Devcontainer | None) -> list[Path]:
    """Everything a build of *devcontainer*'s image reads: its files (devcontainer.json,
    the Dockerfile) and its build context, a directory, and those of the compose
    services built beside it; added to the shape, as the agent may have written them
    anywhere (``"dockerfile": "../Dockerfile"``), and a build runs what its context
    holds."""
    if devcontainer is None:
        return []
    found = list(devcontainer.input_files())
    sources = (devcontainer.source, *(service.source for service in devcontainer.services))
    for source in sources:
        for path in (source.dockerfile, source.context):
            if path is not None and path not in found:
                found.append(path)
    return found


def checked_devcontainer(
    first: Devcontainer | None,
    load: Callable[[], Devcontainer | None],
) -> Devcontainer | None:
    """The devcontainer read again after the shape was approved: the one the build uses,
    provided it reads the same inputs, and names the same Features (resolved from the
    first), as the one whose inputs were approved."""
    again = load()
    if set(build_inputs(again)) != set(build_inputs(first)) or _features(again) != _features(first):
        raise shape.ShapeChangedError("the devcontainer changed while you were asked")
    return again


def _features(devcontainer: Devcontainer | None) -> object:
    if devcontainer is None:
        return ()
    return (devcontainer.features, devcontainer.override_feature_order)


def plan_image(
    context: Context,
    workspace: Workspace,
    devcontainer: Devcontainer | None,
    base: str,
    features: FeaturePlan | None = None,
) -> projectimages.ImagePlan:
    return projectimages.plan_project_image(
        context.docker,
        context.paths,
        project=workspace.project.name,
        root=workspace.project.root,
        devcontainer=devcontainer,
        base_image=base,
        source=context.source,
        features=features,
    )


def ensure_image(
    context: Context,
    workspace: Workspace,
    devcontainer: Devcontainer | None,
    base: str,
    progress: Progress,
    *,
    features: FeaturePlan | None = None,
) -> projectimages.ImagePlan:
    """The image the cloister runs, built when missing: Cloister's agent image first
    when the project's image starts from it, then the project's own layers."""
    planned = plan_image(context, workspace, devcontainer, base, features)
    if planned.base is not None:
        ensure_agent_image(context, planned.base, progress)
    return projectimages.ensure_project_image(
        context.docker,
        context.paths,
        project=workspace.project.name,
        root=workspace.project.root,
        devcontainer=devcontainer,
        base_image=base,
        source=context.source,
        progress=progress,
        features=features,
    )


def _image_env(context: Context, tag: str) -> dict[str, str] | None:
    try:
        image = context.docker.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    return devoverrides.image_environment((image.attrs.get("Config") or {}).get("Env"))


@dataclass(frozen=True, slots=True)
class Parts:
    """What the container plan is made of besides the workspace: the same function makes
    it for a start and for a dry run, so both say the same."""

    record: TokenRecord
    image: str
    project_config: ProjectConfig
    git_plan: GitPlan
    agent_plan: agentstate.AgentPlan
    accounts: tuple[Path, Path]
    devcontainer: Devcontainer | None
    guards: safeguards.Safeguards


def plan_container(
    context: Context, workspace: Workspace, name: str, parts: Parts
) -> tuple[cloisters.ContainerPlan, tuple[str, ...]]:
    """The container plan, and notes on the devcontainer extras that were left out."""
    extras: cloisters.Extras | None = None
    notes: tuple[str, ...] = ()
    image_env = _image_env(context, parts.image)
    if parts.devcontainer is not None:
        extras, notes = devoverrides.extras_for(
            parts.devcontainer,
            project=workspace.project.name,
            image_env=image_env,
        )
    guardrails = guardrails_for(
        parts.project_config.git_guardrails.applied_to(context.config.git_guardrails), image_env
    )
    plan = cloisters.plan(
        workspace,
        name,
        parts.record,
        instance=context.instance,
        image=parts.image,
        limits=context.config.defaults,
        refs=[Path(ref) for ref in parts.project_config.refs],
        forbidden=Forbidden.for_host(context.paths, context.home),
        git_plan=parts.git_plan,
        agent_environment=parts.agent_plan.environment,
        agent_mounts=parts.agent_plan.mounts,
        accounts=parts.accounts,
        extras=extras,
        marker=parts.guards.marker,
        storage_opt=parts.guards.storage_opt,
        guardrails=guardrails,
    )
    return plan, notes + plan.notes


def plan_agent(
    context: Context,
    workspace: Workspace,
    record: TokenRecord,
    project_config: ProjectConfig,
    agent: str | None,
    *,
    write: bool,
) -> agentstate.AgentPlan:
    forbidden = Forbidden.for_host(context.paths, context.home)
    refs = [Path(ref) for ref in project_config.refs]
    return agentstate.prepare(
        context.paths,
        record=record,
        config=context.config,
        project_config=project_config,
        host_home=context.home,
        home=cloisters.HOME,
        refs=[
            PurePosixPath(mount["Target"]).name
            for mount in cloisters.ref_mounts(workspace, refs, forbidden)
        ],
        chosen=agent,
        write=write,
    )


def _running(context: Context, workspace: Workspace, name: str) -> str | None:
    """The container of cloister *name* when it runs for *workspace* (a dead one is
    stopped, so that the start begins afresh); refused when another directory's."""
    existing = cloisters.find(context.docker, context.instance, name)
    if existing is None:
        return None
    if existing.labels.get(stack.LABEL_PATH) != str(workspace.directory):
        raise CloisterStartError(
            f"cloister {name!r} already runs for {existing.labels.get(stack.LABEL_PATH)};"
            " choose another project name with -p NAME"
        )
    if existing.status == "running" and context.paths.token_file(name).exists():
        return existing.name or ""
    stop(context, name)  # a dead one: start afresh
    return None


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
        target = snapshots.Target.of(name, workspace.project.name, workspace.project.root)
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


def check_engine(context: Context, name: str, warnings: list[str]) -> None:
    """On an engine this data directory has not seen pass (:func:`doctor.check_new_engine`):
    a cloister that can get out is stopped, and the start fails naming what failed. So is
    one the check failed on in any other way (fail closed): only a probe that could not
    start at all, for a reason of this machine's the agent has no hand in (no docker
    command, no probe image), is a warning; the engine stays unremembered either way."""
    try:
        failed = doctor.check_new_engine(
            context.docker, context.instance, context.paths, context.config, name
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


def check_and_complete(
    context: Context,
    name: str,
    container: Container,
    service_plans: list[services.ServicePlan],
    *,
    warnings: list[str],
    progress: Progress,
) -> None:
    """Once the cloister runs: the engine's start check, then its compose services."""
    check_engine(context, name, warnings)
    start_services(context, name, container, service_plans, progress)


def plan_services(
    context: Context, workspace: Workspace, name: str, devcontainer: Devcontainer | None
) -> list[services.ServicePlan]:
    """The compose devcontainer's other services, planned (nothing built or made)."""
    if devcontainer is None or not devcontainer.services:
        return []
    return services.plan(
        context.docker,
        context.instance,
        cloister=name,
        project=workspace.project.name,
        root=workspace.project.root,
        services=devcontainer.services,
        limits=context.config.defaults,
    )


def start_services(
    context: Context,
    name: str,
    container: Container,
    plans: list[services.ServicePlan],
    progress: Progress,
) -> None:
    """Run the services beside the cloister; one that fails stops the cloister (and
    them), as a failed start leaves nothing running."""
    if not plans:
        return
    try:
        services.start(context.docker, plans, container, progress=progress)
    except BaseException:
        stop(context, name)
        raise


def start(
    context: Context,
    directory: Path,
    options: StartOptions | None = None,
    *,
    progress: Progress = lambda what, line: None,
) -> StartOutcome:
    """Start (or find running) the cloister for *directory*.

    Every agent is set up in it (:mod:`cloister_cli.agents.agentstate`); ``options.agent`` is
    the one that must be: its setup failing fails the start, another's is a warning.
    The project's devcontainer.json (unless ``no_devcontainer``) shapes the image and
    adds what cannot weaken the cloister; its shape is checked (and, when changed,
    confirmed) before anything is built, and recorded as approved once it runs. Its
    lifecycle commands are in the outcome, for :mod:`cloister_cli.start.devlifecycle`.
    """
    options = options or StartOptions()
    warnings: list[str] = []
    workspace, name = workspace_for(
        context,
        directory,
        project_name=options.project_name,
        branch=options.branch,
        allow_no_git=options.allow_no_git,
    )
    if not workspace.project.git:
        warnings.append(
            f"{workspace.directory} is not a git repository: nothing can undo what the agent"
            " changes there"
        )
    projects.register(context.paths, workspace.project)
    if (running := _running(context, workspace, name)) is not None:
        return StartOutcome(name, running, workspace, False, tuple(warnings))
    left_behind = finish_earlier(context, name, warnings)
    root = workspace.project.root
    # With its Features resolved before the shape check: a lock file written on first use
    # is part of what is approved.
    devcontainer, features = load_with_features(context, root, options)
    # Before anything is built: the agent may have changed what the build reads, here
    # or anywhere its devcontainer.json points the build at.
    approved = shape.check_shape(
        context.paths,
        workspace.project.name,
        root,
        extra=[
            *shape_extra(options),
            *build_inputs(devcontainer),
            *resolve.lock_input(devcontainer),
        ],
        confirm=options.confirm,
        assume_yes=options.assume_yes,
        scope=shape_scope(options),
    )
    devcontainer = resolve.applied(
        checked_devcontainer(
            devcontainer,
            # Quiet: its warnings were shown once.
            lambda: load_project_devcontainer(
                context, root, replace(options, on_devcontainer=None)
            ),
        ),
        features,
        warnings,  # what the Features' metadata asked for and did not get
    )
    check_refs(context.paths, workspace.project, context.home)  # before minutes of building
    snapshot = keep_snapshot(context, workspace, name, warnings)
    ensure_guardian(context, progress)
    if workspace.project.git:
        ensure_git_image(context, progress)
    base = options.image or context.config.defaults.image
    if devcontainer is not None and options.image:
        warnings.append(f"--image {options.image} is not used: the devcontainer's image is")
    # The services' images checked before the cloister is made: a missing one fails now.
    image, service_plans = (
        ensure_image(context, workspace, devcontainer, base, progress, features=features),
        plan_services(context, workspace, name, devcontainer),
    )
    project_config = load_project_config(context.paths, workspace.project.name)
    record = cloisters.new_token(workspace, name).for_agent(options.agent)
    agent_plan = plan_agent(context, workspace, record, project_config, options.agent, write=True)
    warnings.extend(agent_plan.warnings)
    identity = accounts.for_cloister(
        context.docker,
        context.paths,
        name,
        image.tag,
        cloisters.HOME,
        name=devcontainer.user if devcontainer is not None else None,
    )
    guards = safeguards.plan(
        context.paths, context.config, project_config, name, context.docker.info
    )
    warnings.extend(guards.warnings)
    try:
        earlier_work(context, name, warnings)
        prepared = sessions.prepare(
            context.paths, workspace, name, home=context.home, protect=guards.protect
        )
    except BaseException:
        accounts.remove(context.paths, name)
        raise
    warnings.extend(prepared.notes)
    try:
        safeguards.write_marker(context.paths, name, workspace.project.name, workspace.branch)
        parts = Parts(
            record,
            image.tag,
            project_config,
            prepared.git_plan,
            agent_plan,
            identity,
            devcontainer,
            guards,
        )
        plan, notes = plan_container(context, workspace, name, parts)
        warnings.extend(notes)
        container = cloisters.create(
            context.docker,
            context.paths,
            plan,
            record,
            instance=context.instance,
            guardian=context.config.guardian,
        )
    except BaseException:
        sessions.release(context.paths, prepared.session)
        gitdirs.remove(context.paths, name)
        accounts.remove(context.paths, name)
        safeguards.remove_marker(context.paths, name)
        raise
    shape.save_approved(context.paths, workspace.project.name, approved)
    check_and_complete(
        context, name, container, service_plans, warnings=warnings, progress=progress
    )
    return StartOutcome(
        name,
        container.name or plan.container,
        workspace,
        True,
        tuple(warnings),
        tuple(prepared.git_plan.protections),
        devcontainer=devcontainer,
        user=plan.user,
        snapshot=snapshot,
        stand_ins=tuple(gitmounts.stand_ins(prepared.git_plan.placeholders)),
        left_behind=left_behind,
    )
