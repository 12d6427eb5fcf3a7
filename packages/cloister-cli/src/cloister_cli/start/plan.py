"""What ``cloister start`` will do, computed with nothing written: :func:`plan_start`.

The plan is a value: ``--dry-run`` prints it (:mod:`cloister_cli.start.dryrun`) and a
start carries it out (:func:`cloister_cli.start.apply.apply`), creating the container
from the plan's :class:`~cloister_cli.container.cloisters.ContainerPlan`. Planning asks
the engine about containers and images; it builds nothing and writes no worktree, token,
session, agent state, accounts file or lock file (their paths are the ones a start
writes). What is known only once something is written (a worktree ``-b`` makes, an image
not built yet) is named in :attr:`StartPlan.pending`; :func:`fill_in` gives the
container plan with what the start found then.

:func:`plan_image` is the image part alone, which ``cloister images build`` plans too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal, overload

import docker.errors

from cloister_cli.agents import agentstate
from cloister_cli.container import accounts, cloisters, devoverrides, safeguards, services
from cloister_cli.container.cloisters import CloisterStartError, Forbidden, Workspace
from cloister_cli.container.engine import Image
from cloister_cli.context import Context
from cloister_cli.images import projectimages, shape
from cloister_cli.images.builds import AGENT_IMAGES, is_current, source_fingerprint
from cloister_cli.inside.guardrails import guardrails_for
from cloister_cli.repo import gitmounts
from cloister_cli.repo.gitmounts import GitPlan, Protection
from cloister_cli.repo.projects import Project
from cloister_cli.repo.refs import check_refs
from cloister_cli.session import sessions
from cloister_cli.session.review import nested_git_entries
from cloister_cli.start.worktree import workspace_for
from cloister_core import stack
from cloister_core.config import load_project_config
from cloister_core.config.models import ProjectConfig
from cloister_core.devcontainer.discovery import find_devcontainer
from cloister_core.tokens import TokenRecord

if TYPE_CHECKING:
    from cloister_cli.images.features.resolve import FeaturePlan
    from cloister_core.devcontainer import Devcontainer


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


# -- the image part (``cloister images build`` plans it too) ---------------------------

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


def load_project_devcontainer(
    context: Context, root: Path, options: StartOptions
) -> Devcontainer | None:
    """The project's devcontainer.json read with Cloister's overrides, or None.

    Host variables come from this process's environment, only those of
    :func:`host_environment`; Cloister's own directories are blocked as mount sources
    besides the loader's list.
    """
    if options.no_devcontainer:
        return None
    found = find_devcontainer(root, options.devcontainer)
    if found is None:
        return None
    # The parser and its model, imported only for a project that has the file.
    from cloister_core.devcontainer import load_devcontainer  # noqa: PLC0415

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


def plan_image(
    context: Context,
    project: Project,
    devcontainer: Devcontainer | None,
    base: str,
    features: FeaturePlan | None = None,
) -> projectimages.ImagePlan:
    """The image a start builds: hashed with the lock file it writes first (in a build
    context, the lock is in the key), so the key is the one the build will have."""
    overlay: dict[Path, bytes] = {}
    if features is not None:
        from cloister_cli.images.features import resolve  # noqa: PLC0415 - only with Features

        overlay = resolve.to_write(features)
    return projectimages.plan_project_image(
        context.docker,
        context.paths,
        project=project.name,
        root=project.root,
        devcontainer=devcontainer,
        base_image=base,
        source=context.source,
        features=features,
        overlay=overlay,
    )


@dataclass(frozen=True, slots=True)
class ImagePart:
    """The image of a start: the devcontainer and its Features, the shape the human
    approves before anything is built, and the image's plan."""

    project: Project
    devcontainer: Devcontainer | None  # as first read (apply reads it again once asked)
    features: FeaturePlan | None  # the devcontainer's Features, when it has any
    base: str  # the image without a devcontainer (--image, defaults.image)
    shape_scope: shape.Scope
    shape_inputs: tuple[Path, ...]  # what the shape reads besides the project's own files
    shape_difference: str  # "" when the shape is what was approved
    image: projectimages.ImagePlan
    # Why a start would fail to build it (a dry run's refused or unfetched Feature).
    unbuildable: str | None = None
    agent_image: str | None = None  # Cloister's agent image built first (asked by a dry run)


def plan_image_part(
    context: Context, project: Project, options: StartOptions, *, dry_run: bool
) -> ImagePart:
    """The image part of a start for *project*, nothing written (the Features' lock file
    is written by :func:`cloister_cli.start.apply.approve_shape`); for a *dry_run*, a
    Feature that is refused or cannot be fetched is shown rather than raised (in
    :attr:`ImagePart.unbuildable`, with the image as far as it can be planned)."""
    devcontainer = load_project_devcontainer(context, project.root, options)
    features: FeaturePlan | None = None
    lock: list[Path] = []
    refused: str | None = None
    if devcontainer is not None:  # the Features' code, imported only for a devcontainer
        from cloister_cli.images.features import resolve  # noqa: PLC0415

        # Resolved before the shape check: a lock file written on first use is approved
        # too. A start stops here on a refused Feature.
        features = resolve.for_start(
            context, project.root, devcontainer, host_environment(), dry_run=dry_run
        )
        lock = resolve.lock_input(devcontainer)
        refused = resolve.refusal(devcontainer)
    scope: shape.Scope = "cloister" if options.no_devcontainer else "all"
    inputs = (
        *([options.devcontainer] if options.devcontainer is not None else []),
        *build_inputs(devcontainer),
        *lock,
    )
    difference = _shape_difference(context, project, inputs, scope)
    base = options.image or context.config.defaults.image
    image, unfetched = _image(context, project, devcontainer, base, features)
    unbuildable = refused or unfetched  # as a start would say
    agent_image = _agent_image(context, image) if dry_run else None
    return ImagePart(
        project,
        devcontainer,
        features,
        base,
        scope,
        inputs,
        difference,
        image,
        unbuildable,
        agent_image,
    )


def _shape_difference(
    context: Context, project: Project, inputs: tuple[Path, ...], scope: shape.Scope
) -> str:
    old = shape.load_approved(context.paths, project.name, scope)
    return shape.difference(old, shape.read_shape(project.root, inputs, scope=scope))


def _image(
    context: Context,
    project: Project,
    devcontainer: Devcontainer | None,
    base: str,
    features: FeaturePlan | None,
) -> tuple[projectimages.ImagePlan, str | None]:
    """The image's plan; with a Feature a dry run could not fetch, the rest of it planned
    without the Features, and why it cannot be built (the Features say why)."""
    if devcontainer is None or features is None or features.complete:
        return plan_image(context, project, devcontainer, base, features), None
    try:
        return plan_image(context, project, devcontainer, base, features), None
    except projectimages.ProjectImageError as error:
        why = str(error)
    plain = plan_image(context, project, replace(devcontainer, features=()), base)
    steps = (*plain.steps[:-1], "the Features not fetched: `cloister start` would fail")
    return replace(plain, cached=False, steps=steps), why


def _agent_image(context: Context, image: projectimages.ImagePlan) -> str | None:
    """Cloister's agent image the start builds first (missing or stale), if any."""
    if image.base is None:
        return None
    spec = AGENT_IMAGES.get(image.base)
    source = context.source
    fingerprint = source_fingerprint(source, spec) if spec and source else None
    return None if is_current(context.docker, image.base, fingerprint) else image.base


# -- the start ---------------------------------------------------------------------------

Existing = Literal["none", "running", "stale"]
"""The cloister's container before the start: none, running (a start attaches to it),
or stale (dead, or without its token: a start removes it and starts afresh)."""


@dataclass(frozen=True, slots=True)
class Attach:
    """A start of a cloister that runs already: it attaches (nothing else planned)."""

    name: str
    container: str
    workspace: Workspace
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StartPlan:
    """Everything a start will do, computed without writing anything."""

    options: StartOptions
    name: str
    workspace: Workspace
    existing: Existing
    image_part: ImagePart
    devcontainer: Devcontainer | None  # with its Features' requests: what the cloister gets
    project_config: ProjectConfig
    record: TokenRecord  # the cloister's token (written, bound to its address, by apply)
    agents: agentstate.AgentPlan
    guards: safeguards.Safeguards
    git: GitPlan  # the work tree's read-only paths and the cloister's own git directory
    accounts: tuple[Path, Path]  # the passwd and group files apply writes
    image_env: Mapping[str, str] | None  # the image's variables (None: not built yet)
    container: cloisters.ContainerPlan  # what ``docker run`` gets
    # A compose devcontainer's others, as shown: a start runs approved_services'.
    services: tuple[services.ServicePlan, ...] = ()
    guardian_running: bool | None = None  # asked by a dry run (a start brings it up)
    pending: tuple[str, ...] = ()  # what is known only once the start writes
    left_out: tuple[str, ...] = ()  # of the devcontainer's extras, and why
    noticed: tuple[str, ...] = ()  # a running cloister
    warnings: tuple[str, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """What the plan cannot know yet, what it noticed, and what it left out (why)."""
        return (*self.pending, *self.noticed, *self.left_out)

    @property
    def running(self) -> bool:
        return self.existing == "running"

    @property
    def secret(self) -> str:
        """The token in the plan, to be masked wherever it shows."""
        return self.record.secret

    @property
    def image(self) -> projectimages.ImagePlan:
        return self.image_part.image

    @property
    def features(self) -> FeaturePlan | None:
        return self.image_part.features

    @property
    def shape_difference(self) -> str:
        return self.image_part.shape_difference

    @property
    def agent_image(self) -> str | None:
        return self.image_part.agent_image

    @property
    def protections(self) -> tuple[Protection, ...]:
        """What is read-only in the work tree (known only once a new worktree exists)."""
        return tuple(self.git.protections)


@overload
def plan_start(
    context: Context, directory: Path, options: StartOptions, *, dry_run: Literal[True]
) -> StartPlan: ...


@overload
def plan_start(
    context: Context,
    directory: Path,
    options: StartOptions | None = None,
    *,
    dry_run: Literal[False] = False,
) -> StartPlan | Attach: ...


def plan_start(
    context: Context,
    directory: Path,
    options: StartOptions | None = None,
    *,
    dry_run: bool = False,
) -> StartPlan | Attach:
    """What a start in *directory* will do, with nothing written: :class:`Attach` when
    its cloister runs. A *dry_run* plans that one on (to show it), and shows what a
    start would fail on (a Feature refused or that cannot be fetched, a service) as a
    warning rather than raise.
    """
    options = options or StartOptions()
    notes: list[str] = []
    pending: list[str] = []
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
    if workspace.branch is not None and not workspace.directory.exists():
        pending.append(
            f"the worktree {workspace.directory} would be created first; what is read-only"
            " in it is known only then (not shown)"
        )
    existing = _existing(context, workspace, name, dry_run, warnings)
    if existing == "running":
        if not dry_run:
            running = context.instance.cloister(name)
            return Attach(name, running, workspace, tuple(warnings))
        notes.append(f"cloister {name} runs already: `cloister start` would attach to it")
    part = plan_image_part(context, workspace.project, options, dry_run=dry_run)
    if part.unbuildable is not None:  # a dry run's only: a start raised
        warnings.append(f"`cloister start` would fail: {part.unbuildable}")
    if part.devcontainer is not None and options.image:
        warnings.append(f"--image {options.image} is not used: the devcontainer's image is")
    devcontainer = _with_requests(part)
    check_refs(context.paths, workspace.project, context.home)  # before minutes of building
    project_config = load_project_config(context.paths, workspace.project.name)
    record = cloisters.new_token(workspace, name).for_agent(options.agent)
    agents = _agents(context, workspace, record, project_config, options.agent)
    warnings.extend(agents.warnings)
    guards = safeguards.plan(
        context.paths, context.config, project_config, name, context.docker.info
    )
    warnings.extend(guards.warnings)
    git = _git(context, workspace, name, guards.protect)
    identity = accounts.files(context.paths, name)
    environment = image_env(context, part.image.tag)
    if environment is None and part.image.key is not None:
        pending.append(
            f"the variables of {part.image.tag} are known once it is built (the guarded"
            " git's PATH follows the image's)"
        )
    container, container_notes = container_plan(
        context,
        workspace=workspace,
        name=name,
        record=record,
        project_config=project_config,
        devcontainer=devcontainer,
        guards=guards,
        git=git,
        image=part.image.tag,
        image_env=environment,
        agents=agents,
        accounts=identity,
    )
    service_plans = _services(context, workspace, name, devcontainer, warnings, dry_run=dry_run)
    return StartPlan(
        options=options,
        name=name,
        workspace=workspace,
        existing=existing,
        image_part=part,
        devcontainer=devcontainer,
        project_config=project_config,
        record=record,
        agents=agents,
        guards=guards,
        git=git,
        accounts=identity,
        image_env=environment,
        container=container,
        services=tuple(service_plans),
        guardian_running=context.guardian.is_running() if dry_run else None,
        pending=tuple(pending),
        left_out=container_notes,
        noticed=tuple(notes),
        warnings=tuple(warnings),
    )


def _existing(
    context: Context, workspace: Workspace, name: str, dry_run: bool, warnings: list[str]
) -> Existing:
    """Cloister *name*'s container: running for *workspace*, stale, or none; refused (a
    warning for a dry run) when it runs for another directory."""
    found = cloisters.find(context.docker, context.instance, name)
    if found is None:
        return "none"
    where = found.labels.get(stack.LABEL_PATH)
    if where != str(workspace.directory):
        refusal = (
            f"cloister {name!r} already runs for {where}; choose another project name with -p NAME"
        )
        if not dry_run:
            raise CloisterStartError(refusal)
        warnings.append(f"`cloister start` would fail: {refusal}")
        return "stale"
    if found.status == "running" and context.paths.token_file(name).exists():
        return "running"
    return "stale"


def _with_requests(part: ImagePart) -> Devcontainer | None:
    """The devcontainer with what its Features ask of the container (mounts, overrides)."""
    if part.devcontainer is None or part.features is None:
        return part.devcontainer
    from cloister_cli.images.features import resolve  # noqa: PLC0415 - only with Features

    return resolve.with_requests(part.devcontainer, part.features)


def _agents(
    context: Context,
    workspace: Workspace,
    record: TokenRecord,
    project_config: ProjectConfig,
    agent: str | None,
) -> agentstate.AgentPlan:
    return agent_state(context, workspace, record, project_config, agent, write=False)


def agent_state(
    context: Context,
    workspace: Workspace,
    record: TokenRecord,
    project_config: ProjectConfig,
    agent: str | None,
    *,
    write: bool,
) -> agentstate.AgentPlan:
    """The agents' variables and state mounts (written by a start, *write*)."""
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


def _git(context: Context, workspace: Workspace, name: str, protect: tuple[str, ...]) -> GitPlan:
    """The mounts a start would make: the work tree's read-only paths and the cloister's
    own git directory (at the paths a start would write, none of them made here)."""
    repository = workspace.project.repository() if workspace.project.git else None
    if repository is not None:
        sessions.check_repository(context.paths, context.home, repository)
    if not workspace.directory.exists():
        return GitPlan(common_dir=repository.common if repository is not None else None)
    nested = nested_git_entries(workspace.directory) if repository is not None else []
    git_plan = gitmounts.plan(
        workspace.directory,
        repository=repository,
        home=context.home,
        nested=nested,
        create=False,
        protect=protect,
    )
    if repository is not None:
        git_plan.own_mounts = gitmounts.own_git_mounts(
            workspace.directory,
            context.paths.cloister_git_dir(name),
            repository,
            repository.alternates(),
            context.paths.git_pointer(name),
        )
    return git_plan


def image_env(context: Context, tag: str) -> dict[str, str] | None:
    """The variables image *tag* sets (None when it is not on the engine yet)."""
    try:
        image = context.docker.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    return environment_of(image)


def environment_of(image: Image) -> dict[str, str]:
    """The variables *image* (as the engine answered its inspect) sets."""
    return devoverrides.image_environment((image.attrs.get("Config") or {}).get("Env"))


def container_plan(
    context: Context,
    *,
    workspace: Workspace,
    name: str,
    record: TokenRecord,
    project_config: ProjectConfig,
    devcontainer: Devcontainer | None,
    guards: safeguards.Safeguards,
    git: GitPlan,
    image: str,
    image_env: Mapping[str, str] | None,
    agents: agentstate.AgentPlan,
    accounts: tuple[Path, Path],
) -> tuple[cloisters.ContainerPlan, tuple[str, ...]]:
    """The container plan, and notes on the devcontainer extras that were left out."""
    extras: cloisters.Extras | None = None
    notes: tuple[str, ...] = ()
    environment = dict(image_env) if image_env is not None else None
    if devcontainer is not None:
        extras, notes = devoverrides.extras_for(
            devcontainer, project=workspace.project.name, image_env=environment
        )
    guardrails = guardrails_for(
        project_config.git_guardrails.applied_to(context.config.git_guardrails), environment
    )
    plan = cloisters.plan(
        workspace,
        name,
        record,
        instance=context.instance,
        image=image,
        limits=context.config.defaults,
        refs=[Path(ref) for ref in project_config.refs],
        forbidden=Forbidden.for_host(context.paths, context.home),
        git_plan=git,
        agent_environment=agents.environment,
        agent_mounts=agents.mounts,
        accounts=accounts,
        extras=extras,
        marker=guards.marker,
        storage_opt=guards.storage_opt,
        guardrails=guardrails,
    )
    return plan, notes + plan.notes


def _services(
    context: Context,
    workspace: Workspace,
    name: str,
    devcontainer: Devcontainer | None,
    warnings: list[str],
    *,
    dry_run: bool,
) -> list[services.ServicePlan]:
    """The compose devcontainer's other services, planned (their images checked: a
    missing one fails the start now, before the cloister is made)."""
    if devcontainer is None or not devcontainer.services:
        return []
    try:
        return services.plan(
            context.docker,
            context.instance,
            cloister=name,
            project=workspace.project.name,
            root=workspace.project.root,
            services=devcontainer.services,
            limits=context.config.defaults,
        )
    except services.ServiceError as error:
        if not dry_run:
            raise
        warnings.append(f"`cloister start` would fail: {error}")  # as the start would
        return []


def approved_services(
    context: Context, plan: StartPlan, devcontainer: Devcontainer | None
) -> tuple[services.ServicePlan, ...]:
    """The compose services a start runs: planned again from *devcontainer*, the one read
    once the shape was approved. The plan's were made from the first read, before the
    check (the agent may have changed the compose file since): the dry run shows them,
    no start runs them. Their build contexts are scanned again too, after the Features'
    lock file is written."""
    found = _services(context, plan.workspace, plan.name, devcontainer, [], dry_run=False)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Found:
    """What a start found once it wrote: the values :attr:`StartPlan.pending` named."""

    devcontainer: Devcontainer | None  # read again once the shape was approved
    git: GitPlan  # the session's (stand-ins made, the worktree's paths)
    image: str
    image_env: Mapping[str, str] | None
    agents: agentstate.AgentPlan
    accounts: tuple[Path, Path]


def fill_in(
    context: Context, plan: StartPlan, found: Found
) -> tuple[cloisters.ContainerPlan, tuple[str, ...]]:
    """The container plan a start creates: the plan's own when what the start found is
    what was planned, else made again with what it found (the notes on what was left out)."""
    planned = Found(
        plan.devcontainer, plan.git, plan.image.tag, plan.image_env, plan.agents, plan.accounts
    )
    if _same(found, planned):
        return plan.container, plan.left_out
    return container_plan(
        context,
        workspace=plan.workspace,
        name=plan.name,
        record=plan.record,
        project_config=plan.project_config,
        devcontainer=found.devcontainer,
        guards=plan.guards,
        git=found.git,
        image=found.image,
        image_env=found.image_env,
        agents=found.agents,
        accounts=found.accounts,
    )


def _same(found: Found, planned: Found) -> bool:
    """Whether the container made of *found* is the one planned: the git plan's mounts
    (its stand-ins are made now, not mounted differently) and everything else."""

    def mounted(git: GitPlan) -> object:
        return (git.mounts, git.own_mounts, git.common_dir)

    def agents(plan: agentstate.AgentPlan) -> object:
        return (plan.environment, plan.mounts)

    return (
        found.devcontainer == planned.devcontainer
        and mounted(found.git) == mounted(planned.git)
        and found.image == planned.image
        and found.image_env == planned.image_env
        and agents(found.agents) == agents(planned.agents)
        and found.accounts == planned.accounts
    )
