"""Cloister containers: what one is made of, and starting, listing and stopping them.

A cloister is container ``cloister-<instance>-<name>`` (:class:`cloister_core.stack.Instance`),
alone with its instance's services on a network of its own (:mod:`cloister_cli.container.networks`),
running as the host
user so files in ``/work`` stay the user's, with every capability dropped,
``no-new-privileges``, an init process, and the pids/memory/CPU limits of
``defaults``. It can write its working tree and nothing else of the host:

* ``/work`` is the project (or the worktree) read-write, but its git directory is the
  cloister's own (:mod:`cloister_cli.repo.gitdirs`), never the human's, and every path of
  the work tree through which git would run code on the host the next time the human
  uses it is mounted read-only over it (:mod:`cloister_cli.repo.gitmounts`);
* each project ref is read-only at ``/refs/<name>``;
* the protected paths of the configuration are read-only too, and ``/.cloister`` (with
  ``CLOISTER=1`` and ``CLOISTER_NAME``) tells tools they run inside
  (:mod:`cloister_cli.container.safeguards`);
* a guarded ``git`` is first on PATH (:mod:`cloister_cli.inside.guardrails`);
* never the docker socket nor a sensitive host path: a project or ref that is, holds
  or sits inside one is refused.

Its only identity is its token (``<config>/tokens/<cloister>``), created here, bound to
the container's address on its network (the services refuse it from any other), and
removed by :func:`stop`, after which the proxy and the gateways refuse it at once.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

import docker
import docker.errors
from docker.types import Mount

from cloister_cli.container import networks
from cloister_cli.container.engine import Container, Engine
from cloister_cli.container.safeguards import MARKER, shm_size
from cloister_cli.launch import wire
from cloister_cli.repo.gitmounts import GitPlan, bind
from cloister_core import stack
from cloister_core.cloisterenv import set_by_cloister
from cloister_core.decisions import remove_session_decisions
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths

if TYPE_CHECKING:
    from cloister_cli.context import Context
    from cloister_cli.inside.guardrails import Guardrails
    from cloister_cli.repo.projects import Project
    from cloister_core.config.models import DefaultsConfig, GuardianConfig

from cloister_core.tokens import (
    TokenRecord,
    remove_token_file,
    remove_tokens_bound_to,
    write_token_file,
)

LABEL = stack.LABEL_CLOISTER
GIT_LABEL = stack.LABEL_GIT_COMMON_DIR
HOME = "/home/cloister"


class CloisterStartError(CloisterError):
    """A cloister cannot be started as asked."""


class StopResult(NamedTuple):
    stopped: bool  # there was a container or a token
    common_dir: Path | None  # the repository it worked in
    project: str | None = None  # its project, when there was a container
    # Its container's removal on the pool, once killed (None: removed before the return).
    removed: Future[None] | None = None


@dataclass(frozen=True, slots=True)
class Workspace:
    """The host directory a cloister works in, and how git sees it."""

    project: Project
    directory: Path
    branch: str | None = None  # set for a cloister-managed worktree

    @property
    def is_worktree(self) -> bool:
        return self.branch is not None


# -- sensitive paths -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Forbidden:
    """Host paths a cloister must never see.

    ``subtrees`` may not be mounted, nor anything inside them, nor anything holding
    them; ``roots`` (``/`` and the home directory) may not be mounted whole, but
    projects inside them are fine. Inside an ``exceptions`` directory (the worktrees
    Cloister makes under ``<data>``, which by default is under ``~/.local``) mounting is
    fine again.
    """

    roots: tuple[Path, ...]
    subtrees: tuple[Path, ...]
    exceptions: tuple[Path, ...] = ()

    @classmethod
    def for_host(cls, paths: CloisterPaths, home: Path) -> Forbidden:
        subtrees = (
            Path("/etc"), Path("/proc"), Path("/sys"), Path("/dev"), Path("/boot"),
            Path("/var/run/docker.sock"), Path("/run/docker.sock"),
            home / ".ssh", home / ".aws", home / ".gnupg", home / ".config", home / ".local",
            home / ".docker", home / ".kube", home / ".netrc",
            # the agents' own homes: logins, hooks and settings that run code
            home / ".claude", home / ".claude.json", home / ".codex", home / ".gemini",
            paths.config_dir, paths.data_dir,
            # the command server's sockets: it runs Cloister's commands
            *(Path(directory) for directory in wire.reachable_directories(os.environ)),
        )  # fmt: skip
        return cls(
            roots=(Path("/"), home), subtrees=subtrees, exceptions=(paths.data_dir / "worktrees",)
        )

    def check(self, path: Path, what: str) -> None:
        resolved = path.resolve()
        subtrees = {bad.resolve() for bad in self.subtrees}
        excepted = any(ok.resolve() in resolved.parents for ok in self.exceptions)
        for bad in sorted({bad.resolve() for bad in self.roots} | subtrees):
            holds = resolved == bad or resolved in bad.parents
            inside = bad in subtrees and bad in resolved.parents and not excepted
            if holds or inside:
                raise CloisterStartError(
                    f"refusing to mount {what} {str(path)!r}: it is, holds or sits inside"
                    f" {str(bad)!r}, which a cloister must never see"
                )


# -- the container ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Extras:
    """What a devcontainer.json adds to a cloister: only what cannot weaken it.

    Made by :func:`cloister_cli.container.devoverrides.extras_for` from the overrides the loader
    kept; :func:`plan` still drops a variable of Cloister's own and a mount that would
    cover one of Cloister's.
    """

    mounts: tuple[Mount, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    hostname: str | None = None
    shm_size: str | None = None
    # Compose services beside the cloister: reached directly (in NO_PROXY), those in its
    # network namespace at 127.0.0.1 (an /etc/hosts entry, as their name no DNS knows).
    services: tuple[str, ...] = ()
    local_services: tuple[str, ...] = ()


def cloister_owned(name: str, own: Iterable[str]) -> bool:
    """Whether the variable *name* is Cloister's (or an agent's), so nothing overrides it."""
    return name in own or set_by_cloister(name) is not None


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """Everything ``docker run`` gets for one cloister (pure data, easy to inspect)."""

    name: str
    container: str  # and its network's name
    image: str
    user: str
    environment: dict[str, str]
    mounts: list[Mount]
    labels: dict[str, str]
    limits: DefaultsConfig
    tmpfs: dict[str, str] = field(default_factory=dict)
    hostname: str | None = None  # None: the cloister's name
    shm_size: str | None = None  # None: Docker's default
    storage_opt: dict[str, str] = field(default_factory=dict)  # the disk quota, if any
    extra_hosts: dict[str, str] = field(default_factory=dict)  # name → address
    notes: tuple[str, ...] = ()  # what of the devcontainer's extras was left out, and why

    def run_kwargs(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"shm_size": self.shm_size} if self.shm_size else {}
        if self.storage_opt:
            extra["storage_opt"] = dict(self.storage_opt)
        if self.extra_hosts:
            extra["extra_hosts"] = dict(self.extra_hosts)
        return {
            "image": self.image,
            # The image's own ENTRYPOINT never runs (as the devcontainers CLI does unless
            # overrideCommand is false): it would run as soon as the container starts,
            # before the start is done with it (its token, its services, its check).
            "entrypoint": ["sleep"],
            "command": ["infinity"],
            "name": self.container,
            "hostname": self.hostname or self.name,
            "detach": True,
            "user": self.user,
            "working_dir": "/work",
            "environment": self.environment,
            "mounts": self.mounts,
            "tmpfs": self.tmpfs,
            "labels": self.labels,
            "network": self.container,  # its own (see cloister_cli.container.networks)
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"],
            "init": True,
            "mem_limit": self.limits.memory,
            "nano_cpus": int(self.limits.cpus * 1_000_000_000),
            "pids_limit": self.limits.pids,
            **extra,
        }


def environment_for(record: TokenRecord) -> dict[str, str]:
    """The variables a cloister gets: its token, the guardian, and the proxy."""
    proxy = f"http://cloister:{record.secret}@{stack.PROXY_ALIAS}:{stack.PROXY_PORT}"
    # The credential gateway is reached directly: through the proxy its request (and the
    # token in it) would go to an address the proxy refuses anyway.
    no_proxy = ",".join(
        (stack.HOSTEXEC_ALIAS, stack.PROXY_ALIAS, stack.CREDENTIALS_ALIAS, "localhost", "127.0.0.1")
    )
    return {
        "CLOISTER": "1",  # markers: tools can tell they run inside (so is /.cloister)
        "CLOISTER_NAME": record.cloister,
        "CLOISTER_TOKEN": record.secret,
        "CLOISTER_CLOISTER": record.cloister,
        "CLOISTER_PROJECT": record.project,
        "CLOISTER_GUARDIAN_HOST": stack.HOSTEXEC_ALIAS,
        "CLOISTER_REQUEST_PORT": str(stack.HOSTEXEC_PORT),
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
        "HOME": HOME,
    }


def ref_mounts(workspace: Workspace, refs: Iterable[Path], forbidden: Forbidden) -> list[Mount]:
    """Each ref read-only at ``/refs/<its name>`` (``<name>-2``, ``-3``… when taken).

    A relative ref is relative to the project's root.
    """
    mounts = []
    taken: set[str] = set()
    for given in refs:
        ref = workspace.project.root / given.expanduser()
        if not ref.exists():
            raise CloisterStartError(
                f"ref {str(ref)!r} of project {workspace.project.name} does not exist"
            )
        forbidden.check(ref, "the ref")
        target = ref.name
        suffix = 1
        while target in taken:
            suffix += 1
            target = f"{ref.name}-{suffix}"
        taken.add(target)
        mounts.append(bind(ref, f"/refs/{target}", read_only=True))
    return mounts


def plan(
    workspace: Workspace,
    name: str,
    record: TokenRecord,
    *,
    instance: stack.Instance,
    image: str,
    limits: DefaultsConfig,
    refs: Iterable[Path],
    forbidden: Forbidden,
    git_plan: GitPlan,
    agent_environment: dict[str, str] | None = None,
    agent_mounts: Iterable[Mount] = (),
    accounts: tuple[Path, Path] | None = None,
    extras: Extras | None = None,
    marker: Path | None = None,
    storage_opt: Mapping[str, str] | None = None,
    guardrails: Guardrails | None = None,
) -> ContainerPlan:
    """What ``docker run`` gets; *git_plan* is :func:`gitmounts.plan` of the workspace
    (with the protected paths).

    *agent_environment* and *agent_mounts* come from :func:`agentstate.prepare` (the
    cloister's own variables win over them); *accounts* are the ``passwd`` and ``group``
    files of :mod:`cloister_cli.container.accounts`, mounted read-only over the image's; *marker*
    is the file mounted read-only at ``/.cloister``; *storage_opt* the disk quota of
    :func:`safeguards.storage_options`. *guardrails* put the guarded git first on PATH
    (:mod:`cloister_cli.inside.guardrails`). *extras* (a devcontainer's) come last and
    lowest: their variables never replace Cloister's, and their mounts never cover one
    of Cloister's (a protected path among them).
    """
    forbidden.check(workspace.directory, "the project")
    for mount in git_plan.mounts:
        forbidden.check(Path(mount["Source"]), "a path of the project")
    # The cloister's own git directory (under <data>: not checked) and the human's
    # object stores, read-only; then the read-only paths of the work tree over /work.
    mounts = [
        bind(workspace.directory, "/work", read_only=False),
        *git_plan.own_mounts,
        *git_plan.mounts,
    ]
    mounts += ref_mounts(workspace, refs, forbidden)
    mounts += agent_mounts  # Cloister's own directories under <data>: not checked
    if accounts is not None:
        mounts += [
            bind(accounts[0], "/etc/passwd", read_only=True),
            bind(accounts[1], "/etc/group", read_only=True),
        ]
    if marker is not None:
        mounts.append(bind(marker, MARKER, read_only=True))
    if guardrails is not None:
        mounts += guardrails.mounts()
    uid, gid = os.getuid(), os.getgid()
    own_environment = (agent_environment or {}) | environment_for(record)
    extras = extras or Extras()
    notes: list[str] = []
    environment: dict[str, str] = {}
    for key, value in extras.environment.items():
        if cloister_owned(key, own_environment):
            notes.append(f"variable {key} not set from devcontainer.json: Cloister sets it")
        else:
            environment[key] = value
    if extras.services:
        direct = ",".join((own_environment["NO_PROXY"], *extras.services))
        own_environment = own_environment | {"NO_PROXY": direct, "no_proxy": direct}
    if guardrails is not None:  # first on PATH: before the devcontainer's, else the image's
        path = environment.get("PATH")
        own_environment = own_environment | guardrails.environment(path)
        notes.extend(guardrails.notes(path))
    taken = [str(mount["Target"]) for mount in mounts] + [HOME]
    for mount in extras.mounts:
        target = str(mount["Target"])
        clash = next((own for own in taken if _overlaps(target, own)), None)
        if clash is not None:
            notes.append(f"mount on {target} dropped: it would cover Cloister's own {clash}")
            continue
        taken.append(target)
        mounts.append(mount)
    return ContainerPlan(
        name=name,
        container=instance.cloister(name),
        image=image,
        user=f"{uid}:{gid}",
        environment=environment | own_environment,
        mounts=mounts,
        labels={
            **instance.labels,
            LABEL: name,
            stack.LABEL_PROJECT: workspace.project.name,
            stack.LABEL_PATH: str(workspace.directory),
            stack.LABEL_BRANCH: workspace.branch or "",
            GIT_LABEL: str(git_plan.common_dir or ""),
        },
        limits=limits,
        # A home the user owns, whatever uid the image was built with.
        tmpfs={HOME: f"uid={uid},gid={gid},mode=0700"},
        hostname=extras.hostname,
        shm_size=shm_size(limits, extras.shm_size),
        storage_opt=dict(storage_opt or {}),
        extra_hosts=dict.fromkeys(extras.local_services, "127.0.0.1"),
        notes=tuple(notes),
    )


def _overlaps(target: str, own: str) -> bool:
    """Whether a mount on *target* would cover, or sit inside, Cloister's mount on *own*
    (below ``/work`` is fine: a volume for ``node_modules`` is the usual case)."""
    target, own = posixpath.normpath(target), posixpath.normpath(own)
    if target == own:
        return True
    if own != "/work" and target.startswith(own.rstrip("/") + "/"):
        return True
    return own.startswith(target.rstrip("/") + "/")


# -- lifecycle -------------------------------------------------------------------------


def find(client: Engine, instance: stack.Instance, name: str) -> Container | None:
    """Cloister *name*'s container of *instance*, or None."""
    try:
        container = client.containers.get(instance.cloister(name))
    except docker.errors.NotFound:
        return None
    labels = container.labels
    return (
        container if LABEL in labels and labels.get(stack.LABEL_INSTANCE) == instance.id else None
    )


def create(
    client: Engine,
    paths: CloisterPaths,
    container_plan: ContainerPlan,
    record: TokenRecord,
    *,
    instance: stack.Instance,
    guardian: GuardianConfig,
    ahead: networks.Ahead | None = None,
) -> Container:
    """Make the cloister's network or take the one kept from its last session (or the
    one made *ahead*), run the container there (the services join meanwhile, unless they
    are on it already), then write its token bound to its address on that network.

    The token is valid only from that address (the services check), and only once the
    file exists: nothing in the container uses it before ``start`` returns.
    """
    # A session starts empty, even if an earlier cloister of this name left its file.
    remove_session_decisions(paths, record.cloister)
    try:
        network = (
            ahead.network()
            if ahead is not None
            else networks.create(client, instance, container_plan.name, guardian)
        )
    except docker.errors.APIError as error:
        raise CloisterStartError(
            f"cannot create the network of {container_plan.name}: {error}"
        ) from None
    # Tokens other cloisters that went without `cloister stop` left bound to the address
    # this one gets (their network taken back, or made again on their subnet) go before
    # it runs: its image's entrypoint runs at once, and would be served with them.
    for stale in remove_tokens_bound_to(
        paths.tokens_dir, networks.cloister_address_on(network), keep=record.cloister
    ):
        remove_session_decisions(paths, stale)

    def run() -> Container:
        return client.containers.run(
            **container_plan.run_kwargs(),
            networking_config=networks.endpoint_config(client, network),
        )

    try:
        if ahead is not None and ahead.joins:
            container = run()  # the services are on it: ahead.network() waited for them
        else:
            container = networks.run_with_services(client, instance, network, run)
    except (docker.errors.APIError, docker.errors.ImageNotFound) as error:
        networks.remove_unused(client, instance, container_plan.name)
        hint = ""
        if container_plan.storage_opt and "storage" in str(error).lower():
            hint = " (the engine cannot apply defaults.disk here: remove it from config.yaml)"
        raise CloisterStartError(
            f"cannot start {container_plan.container}: {error}{hint}"
        ) from None
    except BaseException:
        networks.remove_unused(client, instance, container_plan.name)
        raise
    try:
        container.reload()
        address = networks.cloister_address(container.attrs, container_plan.container)
        if not address:
            raise CloisterStartError(
                f"{container_plan.container} has no address on its network"
                f" (status {container.status}): `docker logs {container_plan.container}`"
            )
        # Those left bound to the address it has, should the engine have given another.
        for stale in remove_tokens_bound_to(paths.tokens_dir, address):
            remove_session_decisions(paths, stale)
        write_token_file(paths.tokens_dir, record.bound_to(address))
    except BaseException:
        container.remove(force=True)
        networks.remove(client, instance, container_plan.name)
        raise
    return container


def new_token(workspace: Workspace, name: str) -> TokenRecord:
    return TokenRecord.create(
        cloister=name,
        project=workspace.project.name,
        branch=workspace.branch,
        path=workspace.directory,
    )


def stop(
    client: Engine,
    paths: CloisterPaths,
    instance: stack.Instance,
    name: str,
    *,
    pool: Executor,
) -> StopResult:
    """Remove the container, its token and its session decisions. Its network stays,
    with the services on it, for its next start (:mod:`cloister_cli.container.networks`).

    A running container is killed first, and removed on *pool* (``removed``, which the
    caller waits for) once the engine says it is not running: no process of the
    cloister can write its files any more when this returns (its git directory is synced
    next), and its removal (measured: about 0.1 s of the engine) overlaps the sync's."""
    container = find(client, instance, name)
    common: Path | None = None
    project: str | None = None
    removed: Future[None] | None = None
    if container is not None:
        label = container.labels.get(GIT_LABEL)
        common = Path(label) if label else None
        project = container.labels.get(stack.LABEL_PROJECT) or None
        removed = _remove(container, pool)
    token = remove_token_file(paths.tokens_dir, name)
    remove_session_decisions(paths, name)
    return StopResult(container is not None or token, common, project, removed)


def _remove(container: Container, pool: Executor) -> Future[None] | None:
    """Kill *container*, then remove it on *pool* once it is not running; remove it now
    when it was not running (paused by the git guard, say) or will not stop."""
    if container.status == "running":
        try:
            container.kill(signal="SIGKILL")  # the engine answers once it is not running
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as error:
            if error.status_code != 409:  # 409: it is not running (any more)
                raise
        try:
            container.reload()
        except docker.errors.NotFound:
            return None
        if container.status in ("exited", "dead"):
            return pool.submit(container.remove, force=True)
    container.remove(force=True)
    return None


def running(
    client: Engine,
    instance: stack.Instance,
    name: str,
    *,
    error: type[CloisterError] = CloisterError,
) -> Container:
    """Cloister *name*'s container, running (not paused by the git guard, not stopped);
    else *error* saying which and what to do."""
    container = find(client, instance, name)
    if container is None:
        raise error(f"no cloister {name!r} (`cloister list`)")
    if container.status == "paused":
        raise error(
            f"cloister {name!r} is paused by Cloister's git guard; see `cloister review {name}`"
        )
    if container.status != "running":
        raise error(f"cloister {name!r} is {container.status}; `cloister start` in its directory")
    return container


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
    container = running(context.docker, context.instance, name)
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
