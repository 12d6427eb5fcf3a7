"""``cloister start`` as a library call: the workspace, the devcontainer, the image, the
container plan and the container; :func:`preview` is the same computed with nothing written.

The shared :class:`~cloister_cli.lifecycle.Context`, the guardian and agent images and
``stop`` are :mod:`cloister_cli.lifecycle`'s; this module uses them (never the other way
round).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

import docker.errors

from cloister_cli import (
    accounts,
    agentstate,
    cloisters,
    devoverrides,
    git,
    gitmounts,
    projectimages,
    projects,
    sessions,
    shape,
)
from cloister_cli.cloisters import CloisterStartError, Forbidden, Workspace
from cloister_cli.gitmounts import GitPlan, Protection
from cloister_cli.images import AGENT_IMAGES, is_current, source_fingerprint
from cloister_cli.lifecycle import Context, Progress, ensure_agent_image, ensure_guardian, stop
from cloister_cli.refs import check_refs
from cloister_cli.review import nested_git_entries
from cloister_core import stack
from cloister_core.config import load_project_config
from cloister_core.config.models import ProjectConfig
from cloister_core.devcontainer import Devcontainer, find_devcontainer, load_devcontainer
from cloister_core.names import cloister_name, sanitize_branch
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


def workspace_for(
    context: Context,
    directory: Path,
    *,
    project_name: str | None,
    branch: str | None,
    allow_no_git: bool,
) -> tuple[Workspace, str]:
    """The workspace and cloister name for *directory* (creating a worktree for -b)."""
    project = projects.identify(directory, project_name, allow_no_git=allow_no_git)
    if branch is None:
        return Workspace(project, project.root), cloister_name(project.name)
    if not project.git:
        raise CloisterStartError("-b BRANCH needs a git repository")
    destination = context.paths.worktree(project.name, sanitize_branch(branch))
    if not destination.exists():
        git.add_worktree(project.root, destination, branch)
    return Workspace(project, destination, branch), cloister_name(project.name, branch)


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


def _shape_extra(options: StartOptions) -> list[Path]:
    return [options.devcontainer] if options.devcontainer is not None else []


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
    the Dockerfile) and its build context, a directory; added to the shape, as the
    agent may have written them anywhere (``"dockerfile": "../Dockerfile"``)."""
    if devcontainer is None:
        return []
    found = list(devcontainer.input_files())
    context = devcontainer.source.context
    if context is not None and context not in found:
        found.append(context)
    return found


def checked_devcontainer(
    first: Devcontainer | None,
    load: Callable[[], Devcontainer | None],
) -> Devcontainer | None:
    """The devcontainer read again after the shape was approved: the one the build uses,
    provided it reads the same inputs as the one whose inputs were approved."""
    again = load()
    if set(build_inputs(again)) != set(build_inputs(first)):
        raise shape.ShapeChangedError("the devcontainer changed while you were asked")
    return again


def _image_plan(
    context: Context, workspace: Workspace, devcontainer: Devcontainer | None, base: str
) -> projectimages.ImagePlan:
    return projectimages.plan_project_image(
        context.docker,
        context.paths,
        project=workspace.project.name,
        root=workspace.project.root,
        devcontainer=devcontainer,
        base_image=base,
        source=context.source,
    )


def ensure_image(
    context: Context,
    workspace: Workspace,
    devcontainer: Devcontainer | None,
    base: str,
    progress: Progress,
) -> projectimages.ImagePlan:
    """The image the cloister runs, built when missing: Cloister's agent image first
    when the project's image starts from it, then the project's own layers."""
    planned = _image_plan(context, workspace, devcontainer, base)
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
    )


def _image_env(context: Context, tag: str) -> dict[str, str] | None:
    try:
        image = context.docker.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    return devoverrides.image_environment((image.attrs.get("Config") or {}).get("Env"))


@dataclass(frozen=True, slots=True)
class _Parts:
    """What the container plan is made of besides the workspace: the same function makes
    it for a start and for a dry run, so both say the same."""

    record: TokenRecord
    image: str
    project_config: ProjectConfig
    git_plan: GitPlan
    agent_plan: agentstate.AgentPlan
    accounts: tuple[Path, Path]
    devcontainer: Devcontainer | None


def _container_plan(
    context: Context, workspace: Workspace, name: str, parts: _Parts
) -> tuple[cloisters.ContainerPlan, tuple[str, ...]]:
    """The container plan, and notes on the devcontainer extras that were left out."""
    extras: cloisters.Extras | None = None
    notes: tuple[str, ...] = ()
    if parts.devcontainer is not None:
        extras, notes = devoverrides.extras_for(
            parts.devcontainer,
            project=workspace.project.name,
            image_env=_image_env(context, parts.image),
        )
    plan = cloisters.plan(
        workspace,
        name,
        parts.record,
        image=parts.image,
        limits=context.config.defaults,
        refs=[Path(ref) for ref in parts.project_config.refs],
        forbidden=Forbidden.for_host(context.paths, context.home),
        git_plan=parts.git_plan,
        agent_environment=parts.agent_plan.environment,
        agent_mounts=parts.agent_plan.mounts,
        accounts=parts.accounts,
        extras=extras,
    )
    return plan, notes + plan.notes


def _agent_plan(
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


def start(
    context: Context,
    directory: Path,
    options: StartOptions | None = None,
    *,
    progress: Progress = lambda what, line: None,
) -> StartOutcome:
    """Start (or find running) the cloister for *directory*.

    Every agent is set up in it (:mod:`cloister_cli.agentstate`); ``options.agent`` is
    the one that must be: its setup failing fails the start, another's is a warning.
    The project's devcontainer.json (unless ``no_devcontainer``) shapes the image and
    adds what cannot weaken the cloister; its shape is checked (and, when changed,
    confirmed) before anything is built, and recorded as approved once it runs. Its
    lifecycle commands are in the outcome, for :mod:`cloister_cli.devlifecycle`.
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
    existing = cloisters.find(context.docker, name)
    if existing is not None:
        if existing.labels.get(stack.LABEL_PATH) != str(workspace.directory):
            raise CloisterStartError(
                f"cloister {name!r} already runs for {existing.labels.get(stack.LABEL_PATH)};"
                " choose another project name with -p NAME"
            )
        if existing.status == "paused":
            raise CloisterStartError(
                f"cloister {name!r} was paused by Cloister's git guard: it planted something"
                f" in the repository; see `cloister review {name}`, then `cloister stop {name}`"
            )
        if existing.status == "running" and context.paths.token_file(name).exists():
            return StartOutcome(name, existing.name or "", workspace, False, tuple(warnings))
        stop(context, name)  # a dead one: start afresh
    root = workspace.project.root
    devcontainer = load_project_devcontainer(context, root, options)
    # Before anything is built: the agent may have changed what the build reads, here
    # or anywhere its devcontainer.json points the build at.
    approved = shape.check_shape(
        context.paths,
        workspace.project.name,
        root,
        extra=[*_shape_extra(options), *build_inputs(devcontainer)],
        confirm=options.confirm,
        assume_yes=options.assume_yes,
    )
    quiet = replace(options, on_devcontainer=None)  # its warnings were shown once
    devcontainer = checked_devcontainer(
        devcontainer, lambda: load_project_devcontainer(context, root, quiet)
    )
    check_refs(context.paths, workspace.project, context.home)  # before minutes of building
    ensure_guardian(context, progress)
    base = options.image or context.config.defaults.image
    if devcontainer is not None and options.image:
        warnings.append(f"--image {options.image} is not used: the devcontainer's image is")
    image = ensure_image(context, workspace, devcontainer, base, progress)
    project_config = load_project_config(context.paths, workspace.project.name)
    record = cloisters.new_token(workspace, name)
    agent_plan = _agent_plan(context, workspace, record, project_config, options.agent, write=True)
    warnings.extend(agent_plan.warnings)
    identity = accounts.for_cloister(
        context.docker,
        context.paths,
        name,
        image.tag,
        cloisters.HOME,
        name=devcontainer.user if devcontainer is not None else None,
    )
    prepared = sessions.prepare(context.paths, workspace, name, home=context.home)
    try:
        parts = _Parts(
            record,
            image.tag,
            project_config,
            prepared.git_plan,
            agent_plan,
            identity,
            devcontainer,
        )
        plan, notes = _container_plan(context, workspace, name, parts)
        warnings.extend(notes)
        container = cloisters.create(context.docker, context.paths, plan, record)
    except BaseException:
        sessions.release(context.docker, context.paths, prepared.session, held=False)
        accounts.remove(context.paths, name)
        raise
    shape.save_approved(context.paths, workspace.project.name, approved)
    return StartOutcome(
        name,
        container.name or plan.container,
        workspace,
        True,
        tuple(warnings),
        tuple(prepared.git_plan.protections),
        devcontainer=devcontainer,
        user=plan.user,
    )


# -- the dry run -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preview:
    """What ``cloister start`` would do, computed without changing anything."""

    name: str
    workspace: Workspace
    plan: cloisters.ContainerPlan
    image: projectimages.ImagePlan
    agent_image: str | None  # the agent image it would build first, if any
    devcontainer: Devcontainer | None
    shape_difference: str  # "" when the shape is what was approved
    running: bool  # a cloister runs already: start would attach to it
    guardian_running: bool
    secret: str  # the token in the plan, to be masked wherever it shows
    notes: tuple[str, ...]
    warnings: tuple[str, ...]


def preview(context: Context, directory: Path, options: StartOptions | None = None) -> Preview:
    """What :func:`start` would do for *directory*, with nothing created or written.

    The engine is asked about containers and images; no image is built, no worktree,
    token, session, agent state or accounts file is written (their paths are the ones a
    start would use), the guardian is not started and the shape is not asked about.
    """
    options = options or StartOptions()
    notes: list[str] = []
    warnings: list[str] = []
    project = projects.identify(directory, options.project_name, allow_no_git=options.allow_no_git)
    if options.branch is None:
        workspace, name = Workspace(project, project.root), cloister_name(project.name)
    else:
        if not project.git:
            raise CloisterStartError("-b BRANCH needs a git repository")
        destination = context.paths.worktree(project.name, sanitize_branch(options.branch))
        workspace = Workspace(project, destination, options.branch)
        name = cloister_name(project.name, options.branch)
        if not destination.exists():
            notes.append(
                f"the worktree {destination} would be created first; its git mounts are"
                " known only then (not shown)"
            )
    existing = cloisters.find(context.docker, name)
    running = existing is not None and existing.status == "running"
    if running:
        notes.append(f"cloister {name} runs already: `cloister start` would attach to it")
    devcontainer = load_project_devcontainer(context, project.root, options)
    old = shape.load_approved(context.paths, project.name)
    extra = [*_shape_extra(options), *build_inputs(devcontainer)]
    difference = shape.difference(old, shape.read_shape(project.root, extra))
    check_refs(context.paths, project, context.home)
    base = options.image or context.config.defaults.image
    if devcontainer is not None and options.image:
        warnings.append(f"--image {options.image} is not used: the devcontainer's image is")
    image = _image_plan(context, workspace, devcontainer, base)
    agent_image: str | None = None
    if image.base is not None and not _agent_image_current(context, image.base):
        agent_image = image.base
    project_config = load_project_config(context.paths, project.name)
    record = cloisters.new_token(workspace, name)
    agent_plan = _agent_plan(context, workspace, record, project_config, options.agent, write=False)
    warnings.extend(agent_plan.warnings)
    if workspace.directory.exists():
        nested = nested_git_entries(workspace.directory) if project.git else []
        git_plan = gitmounts.plan(
            workspace.directory, is_git=project.git, home=context.home, nested=nested, create=False
        )
    else:
        git_plan = GitPlan()
    parts = _Parts(
        record,
        image.tag,
        project_config,
        git_plan,
        agent_plan,
        accounts.files(context.paths, name),
        devcontainer,
    )
    plan, extra_notes = _container_plan(context, workspace, name, parts)
    return Preview(
        name=name,
        workspace=workspace,
        plan=plan,
        image=image,
        agent_image=agent_image,
        devcontainer=devcontainer,
        shape_difference=difference,
        running=running,
        guardian_running=context.guardian.is_running(),
        secret=record.secret,
        notes=(*notes, *extra_notes),
        warnings=tuple(warnings),
    )


def _agent_image_current(context: Context, image: str) -> bool:
    spec = AGENT_IMAGES.get(image)
    source = context.source
    fingerprint = source_fingerprint(source, spec) if spec and source else None
    return is_current(context.docker, image, fingerprint)
