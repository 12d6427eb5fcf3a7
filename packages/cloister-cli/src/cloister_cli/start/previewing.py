"""``cloister start --dry-run``, computed: what a start would do, with nothing written.

:func:`preview` makes the same container plan as :func:`cloister_cli.start.starting.start`
(from the same functions), so the two cannot say different things;
:mod:`cloister_cli.start.dryrun` renders it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cloister_cli.container import accounts, cloisters, safeguards, services
from cloister_cli.container.cloisters import Workspace
from cloister_cli.context import Context
from cloister_cli.images import projectimages, shape
from cloister_cli.images.builds import AGENT_IMAGES, is_current, source_fingerprint
from cloister_cli.images.features import resolve
from cloister_cli.images.features.resolve import FeaturePlan
from cloister_cli.repo import gitmounts
from cloister_cli.repo.gitmounts import GitPlan, Protection
from cloister_cli.repo.refs import check_refs
from cloister_cli.session import sessions
from cloister_cli.session.review import nested_git_entries
from cloister_cli.start import starting
from cloister_cli.start.starting import StartOptions, build_inputs, load_project_devcontainer
from cloister_core.config import load_project_config
from cloister_core.devcontainer import Devcontainer
from cloister_core.repository import HumanRepository


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
    protections: tuple[Protection, ...] = ()  # what would be read-only in the work tree
    services: tuple[services.ServicePlan, ...] = ()  # a compose devcontainer's others
    features: FeaturePlan | None = None  # the devcontainer's Features, when it has any


def preview(context: Context, directory: Path, options: StartOptions | None = None) -> Preview:
    """What :func:`~cloister_cli.start.starting.start` would do for *directory*, writing nothing.

    The engine is asked about containers and images; no image is built, no worktree,
    token, session, agent state or accounts file is written (their paths are the ones a
    start would use), the guardian is not started and the shape is not asked about.
    """
    options = options or StartOptions()
    notes: list[str] = []
    warnings: list[str] = []
    workspace, name = starting.workspace_for(
        context,
        directory,
        project_name=options.project_name,
        branch=options.branch,
        allow_no_git=options.allow_no_git,
        create=False,
    )
    project = workspace.project
    if workspace.branch is not None and not workspace.directory.exists():
        notes.append(
            f"the worktree {workspace.directory} would be created first; what is read-only"
            " in it is known only then (not shown)"
        )
    existing = cloisters.find(context.docker, context.instance, name)
    running = existing is not None and existing.status == "running"
    if running:
        notes.append(f"cloister {name} runs already: `cloister start` would attach to it")
    devcontainer = load_project_devcontainer(context, project.root, options)
    features = resolve.for_start(
        context, project.root, devcontainer, starting.host_environment(), dry_run=True
    )
    scope = starting.shape_scope(options)
    old = shape.load_approved(context.paths, project.name, scope)
    extra = [
        *starting.shape_extra(options),
        *build_inputs(devcontainer),
        *resolve.lock_input(devcontainer),
    ]
    difference = shape.difference(old, shape.read_shape(project.root, extra, scope=scope))
    check_refs(context.paths, project, context.home)
    base = options.image or context.config.defaults.image
    if devcontainer is not None and options.image:
        warnings.append(f"--image {options.image} is not used: the devcontainer's image is")
    if features is not None and not features.complete:
        image = _unbuildable(context, workspace, devcontainer, base)
    else:
        image = starting.plan_image(context, workspace, devcontainer, base, features)
    if devcontainer is not None and features is not None:
        devcontainer = resolve.with_requests(devcontainer, features)
    agent_image: str | None = None
    if image.base is not None and not _agent_image_current(context, image.base):
        agent_image = image.base
    project_config = load_project_config(context.paths, project.name)
    record = cloisters.new_token(workspace, name)
    agent_plan = starting.plan_agent(
        context, workspace, record, project_config, options.agent, write=False
    )
    warnings.extend(agent_plan.warnings)
    guards = safeguards.plan(
        context.paths, context.config, project_config, name, context.docker.info
    )
    warnings.extend(guards.warnings)
    git_plan = _git_plan(context, workspace, name, guards.protect)
    parts = starting.Parts(
        record,
        image.tag,
        project_config,
        git_plan,
        agent_plan,
        accounts.files(context.paths, name),
        devcontainer,
        guards,
    )
    plan, extra_notes = starting.plan_container(context, workspace, name, parts)
    try:
        service_plans = starting.plan_services(context, workspace, name, devcontainer)
    except services.ServiceError as error:  # shown: the start would fail the same way
        service_plans = []
        warnings.append(f"`cloister start` would fail: {error}")
    return Preview(
        name=name,
        workspace=workspace,
        plan=plan,
        image=image,
        agent_image=agent_image,
        devcontainer=devcontainer,
        features=features,
        shape_difference=difference,
        running=running,
        guardian_running=context.guardian.is_running(),
        secret=record.secret,
        notes=(*notes, *extra_notes),
        warnings=tuple(warnings),
        protections=tuple(git_plan.protections),
        services=tuple(service_plans),
    )


def _git_plan(
    context: Context, workspace: Workspace, name: str, protect: tuple[str, ...]
) -> GitPlan:
    """The mounts a start would make: the work tree's read-only paths and the cloister's
    own git directory (at the paths a start would write, none of them made here)."""
    repository = HumanRepository.of(workspace.project.root) if workspace.project.git else None
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


def _unbuildable(
    context: Context, workspace: Workspace, devcontainer: Devcontainer | None, base: str
) -> projectimages.ImagePlan:
    """The plan shown when a Feature could not be fetched: the rest of the image as
    planned without the Features, the start would fail (the Features say why)."""
    assert devcontainer is not None  # noqa: S101 - only with Features
    plain = starting.plan_image(context, workspace, replace(devcontainer, features=()), base)
    return replace(
        plain,
        cached=False,
        steps=(*plain.steps[:-1], "the Features not fetched: `cloister start` would fail"),
    )


def _agent_image_current(context: Context, image: str) -> bool:
    spec = AGENT_IMAGES.get(image)
    source = context.source
    fingerprint = source_fingerprint(source, spec) if spec and source else None
    return is_current(context.docker, image, fingerprint)
