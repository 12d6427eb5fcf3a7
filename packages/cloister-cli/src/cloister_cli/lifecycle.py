"""What the commands do, as library calls: the shared context, images, find, stop, exec.

The click commands in :mod:`cloister_cli.commands` parse options and print; everything
else happens here, so it can be used (and tested) without a terminal. ``cloister
start`` (and its dry run) is :mod:`cloister_cli.starting`, which builds on this module.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import docker
import docker.errors

from cloister_cli import (
    accounts,
    agentstate,
    cloisters,
    gitdirs,
    listing,
    ports,
    safeguards,
    sessions,
)
from cloister_cli.cloisters import CloisterStartError
from cloister_cli.guardian import Guardian
from cloister_cli.hub_client import HubClient
from cloister_cli.images import (
    AGENT_IMAGES,
    assemble_context,
    build_image,
    is_current,
    source_fingerprint,
)
from cloister_cli.workspace import SourceTreeError, source_tree
from cloister_core import stack
from cloister_core.config import load_global_config
from cloister_core.config.models import GlobalConfig
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, read_session
from cloister_executor.engine import Engine
from cloister_executor.gitsync import Syncer, SyncError, SyncOutcome

Progress = Callable[[str, str], None]  # (what, line)


@dataclass
class Context:
    """Paths, config and clients, made once per command and only when needed."""

    paths: CloisterPaths
    home: Path = field(default_factory=Path.home)

    @functools.cached_property
    def config(self) -> GlobalConfig:
        return load_global_config(self.paths)

    @functools.cached_property
    def instance(self) -> stack.Instance:
        """This user's guardian on the engine, for this data directory."""
        return stack.Instance.of(self.paths, os.getuid())

    @functools.cached_property
    def docker(self) -> docker.DockerClient:
        listing.check_engine_socket(listing.docker_host())
        try:
            client = docker.from_env()
            client.ping()
        except docker.errors.DockerException as error:
            raise listing.DockerUnavailableError(
                f"no Docker engine is reachable ({error}); start Docker and try again"
            ) from None
        return client

    @functools.cached_property
    def source(self) -> Path | None:
        try:
            return source_tree()
        except SourceTreeError:
            return None

    @functools.cached_property
    def guardian(self) -> Guardian:
        return Guardian(self.paths, self.config, self.docker, self.source, self.instance)

    @functools.cached_property
    def hub(self) -> HubClient:
        """This machine's approval hub, with its secret."""
        return self.hub_at(None)

    def hub_at(self, base_url: str | None) -> HubClient:
        """The approval hub at *base_url* (None: this machine's), with this machine's secret."""
        return HubClient.for_machine(self.paths, self.config.guardian.ui_port, base_url)

    def require_source(self) -> Path:
        return source_tree()

    @functools.cached_property
    def syncer(self) -> Syncer:
        """Brings cloisters' commits back (``cloister sync``, ``stop``)."""
        return Syncer(
            self.paths,
            Engine(os.environ.get("DOCKER_HOST")),
            fast_forward=self.config.git.fast_forward,
        )

    def without_writing(self) -> None:
        """Read the config without writing the default one (``start --dry-run``)."""
        self.__dict__["config"] = load_global_config(self.paths, create=False)


# -- images ----------------------------------------------------------------------------


def ensure_guardian(context: Context, progress: Progress, *, rebuild: bool = False) -> bool:
    """Bring the stack up, building images that are missing or stale; True if it started.

    A running stack is left alone (``rebuild`` restarts it with fresh images): this runs
    on every ``cloister start``, and asking the engine about images costs time.
    """
    guardian = context.guardian
    if not rebuild and guardian.is_running():
        return False
    stale = guardian.tags.specs() if rebuild else guardian.stale_images()
    if stale:
        context.require_source()
        with tempfile.TemporaryDirectory(prefix="cloister-build-") as scratch:
            guardian.build_images(stale, progress, Path(scratch))
    guardian.start()
    return True


def ensure_git_image(context: Context, progress: Progress) -> None:
    """Build the image of ``cloister sync``'s throwaway containers when missing or stale
    (a stack started by an older Cloister is left running without it)."""
    guardian = context.guardian
    stale = [(spec, tag) for spec, tag in guardian.stale_images() if tag == guardian.tags.git]
    if stale:
        context.require_source()
        with tempfile.TemporaryDirectory(prefix="cloister-build-") as scratch:
            guardian.build_images(stale, progress, Path(scratch))


def ensure_agent_image(context: Context, image: str, progress: Progress) -> None:
    """Build one of Cloister's agent images when missing or stale; others must exist."""
    spec = AGENT_IMAGES.get(image)
    source = context.source
    fingerprint = source_fingerprint(source, spec) if spec and source else None
    if is_current(context.docker, image, fingerprint):
        return
    if spec is None:
        raise CloisterStartError(
            f"image {image!r} is not on this machine; `docker pull {image}` or build it first"
        )
    if source is None:
        source = context.require_source()  # raises: says where it looked for the tree
    architecture = context.docker.info()["Architecture"]
    with tempfile.TemporaryDirectory(prefix="cloister-build-") as scratch:
        progress(image, "assembling the build context")
        build_context = assemble_context(source, spec, Path(scratch) / "agent", architecture)
        build_image(
            context.docker,
            build_context,
            image,
            on_line=lambda line: progress(image, line),
            fingerprint=fingerprint,
        )


# -- finding and stopping ------------------------------------------------------------------


def name_for_directory(context: Context, directory: Path) -> str:
    """The running cloister whose working tree contains *directory*."""
    resolved = directory.resolve()
    best: tuple[int, str] | None = None
    for info in listing.list_cloisters(context.docker, context.instance):
        path = Path(info.path)
        if resolved == path or path in resolved.parents:
            depth = len(path.parts)
            if best is None or depth > best[0]:
                best = (depth, info.name)
    if best is None:
        raise CloisterError(f"no cloister works in {directory}; name one (`cloister list`)")
    return best[1]


@dataclass(frozen=True, slots=True)
class StopOutcome:
    stopped: bool
    report: sessions.Report | None  # None: no session record, or the review failed
    sync: SyncOutcome | None = None  # the last sync of its commits
    sync_error: str | None = None  # why they could not be brought back (its git directory stays)
    moved: tuple[str, ...] = ()  # repositories the agent made, moved to the quarantine
    review_error: str | None = None  # why the review failed


def stop(context: Context, name: str) -> StopOutcome:
    """Remove the cloister, revoke its token everywhere, bring its commits back, and
    review what it left in the work tree."""
    instance = context.instance
    # Its published ports (`cloister port`) first: their forwarders are on its network.
    ports.remove_all(context.docker, instance, name)
    result = cloisters.stop(context.docker, context.paths, instance, name)
    # A sync running now (the watch's) would hold the last one up: its container goes,
    # and the sync gives up at once (a FIFO of the agent's can keep git waiting).
    for running in context.docker.containers.list(
        all=True, filters={"label": [instance.label_filter, f"{stack.LABEL_SYNC}={name}"]}
    ):
        with contextlib.suppress(docker.errors.NotFound):
            running.remove(force=True)
    accounts.remove(context.paths, name)
    safeguards.remove_marker(context.paths, name)
    if result.project is not None:
        agentstate.disarm(context.paths, result.project)
    # The hub and the gateway see the token file go on their own.
    context.guardian.reload_proxy()  # closes its open tunnels now
    session = read_session(context.paths, name)
    if session is None:
        return StopOutcome(result.stopped, None)
    # A session still open is a cloister to finish, its container gone or not.
    stopped = result.stopped or session.running
    synced, sync_error = sync_stopped(context, session)
    moved: list[str] = []
    try:
        report = sessions.report(session, sessions.review_target(session))
        moved = sessions.move_new_repositories(context.paths, report)
        if moved:
            report = sessions.report(session, sessions.review_target(session))
    except Exception as error:  # what the agent left must not hide what it left
        sessions.release(context.paths, session)
        return StopOutcome(
            stopped,
            None,
            synced,
            sync_error,
            tuple(moved),
            f"{type(error).__name__}: {error}",
        )
    sessions.release(context.paths, session)
    return StopOutcome(stopped, report, synced, sync_error, tuple(moved))


def sync_stopped(context: Context, session: SessionRecord) -> tuple[SyncOutcome | None, str | None]:
    """The last sync of a cloister whose container is gone; its git directory goes once
    its commits are in (it stays, and `cloister sync` retries, when they are not)."""
    if not session.is_git or not context.paths.cloister_git_dir(session.cloister).exists():
        return None, None
    try:
        outcome = context.syncer.sync(session.cloister, running=False)
    except SyncError as error:
        return None, str(error)
    gitdirs.remove(context.paths, session.cloister)
    return outcome, None


# -- exec ----------------------------------------------------------------------------------


def exec_argv(
    context: Context,
    name: str,
    command: list[str],
    *,
    workdir: str | None,
    cwd: Path,
    tty: bool,
) -> list[str]:
    """The ``docker exec`` command line that runs *command* in cloister *name*.

    The container's environment (token, proxy, the agent's settings) comes with it.
    Without *workdir*, the directory in ``/work`` that matches the caller's *cwd* when
    that is inside the cloister's working tree, else ``/work``; a relative *workdir* is
    relative to ``/work``.
    """
    container = cloisters.find(context.docker, context.instance, name)
    if container is None:
        raise CloisterError(f"no cloister {name!r} (`cloister list`)")
    if container.status == "paused":
        raise CloisterError(
            f"cloister {name!r} is paused by Cloister's git guard; see `cloister review {name}`"
        )
    if container.status != "running":
        raise CloisterError(
            f"cloister {name!r} is {container.status}; `cloister start` in its directory"
        )
    if not command:
        raise CloisterError("no command to run (cloister exec NAME -- COMMAND...)")
    if workdir is None:
        root = Path(container.labels.get(stack.LABEL_PATH, "/nonexistent"))
        inside = cwd.resolve()
        relative = inside.relative_to(root) if inside.is_relative_to(root) else Path()
        target = str(PurePosixPath("/work", *relative.parts))
    else:
        target = str(PurePosixPath("/work", workdir))  # an absolute one stays as it is
    flags = ["-it"] if tty else ["-i"]
    return [
        "exec",
        *flags,
        "-w",
        target,
        container.name or context.instance.cloister(name),
        *command,
    ]
