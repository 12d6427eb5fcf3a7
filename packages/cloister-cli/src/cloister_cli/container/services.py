"""A compose devcontainer's other services (``runServices``), each a container beside
its cloister: planned, made, waited for, found and removed here, and nowhere else.

The compose file is the agent's, so a service runs the agent's image and command, and
is no more capable than the cloister (less):

* it is on the cloister's own internal network only (:mod:`cloister_cli.container.networks`:
  no route to the host, the internet or another cloister), under its service name as
  alias; or, when the cloister's service said ``network_mode: service:<it>``, in the
  cloister's own network namespace (it reaches exactly what the cloister reaches);
* it gets none of the cloister's variables (no token, no proxy: the proxy binds a
  token to the cloister's address anyway), every capability dropped but the few a
  service image needs to start as root and step down to its own user
  (:data:`CAPABILITIES`), ``no-new-privileges``, the pids/memory/CPU limits of
  ``defaults``, a bounded log, and no published port (``cloister port --service``
  publishes one through a forwarder, as for the cloister);
* its mounts are what the loader kept: volumes (named ones namespaced per project, as
  a devcontainer's are), tmpfs, and binds inside the project, always read-only;
* its image exists on this machine, or is built from a context inside the project as
  the project's own image is (the context read without following a link, the classic
  builder, nothing pulled), tagged ``cloister-service-<project>-<service>:<key>`` and
  labelled as the project's, so ``cloister images prune`` removes it with the
  project's images once unused.

Its container (:meth:`cloister_core.stack.Instance.sidecar`) carries the instance's
labels and :data:`~cloister_core.stack.LABEL_SERVICE_OF`, never
:data:`~cloister_core.stack.LABEL_CLOISTER`: no listing takes it for a cloister.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import docker
import docker.errors
from docker.types import LogConfig, Mount

from cloister_cli.container import cloisters
from cloister_cli.container.cloisters import CloisterStartError
from cloister_cli.container.engine import Container, Engine
from cloister_core import stack
from cloister_core.errors import CloisterNameError
from cloister_core.names import validate_name
from cloister_core.printable import printable

if TYPE_CHECKING:  # the build machinery and the devcontainer's: `stop` needs none of it
    from cloister_cli.images.projectimages.model import ImagePlan
    from cloister_core.config.models import DefaultsConfig
    from cloister_core.devcontainer.model import ComposeService, MountSpec

# What a service image needs to start as root and step down to its own user (the
# entrypoints of database images chown their data directory, then setuid).
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID")
TAG_PREFIX = "cloister-service-"
RECIPE_VERSION = "cloister-service-image/1"
READY_TIMEOUT = 120.0  # seconds a service has to be running (healthy, with a healthcheck)
POLL_SECONDS = 0.25
PROGRESS_SECONDS = 5.0
MAX_LINE = 64 * 1024  # bytes of a service's output line held before it is shown
LOG = LogConfig(type=LogConfig.types.JSON, config={"max-size": "10m", "max-file": "2"})
# A service's name is a DNS name on the cloister's network: lower-case, and never one
# the guardian's services answer to there (it would collect the cloister's token).
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")

Progress = Callable[[str, str], None]  # (what, line)


class ServiceError(CloisterStartError):
    """A compose service that cannot be planned, built or started."""


def check_name(name: str) -> str:
    """*name* when it can be a service's alias on the cloister's network, else an error."""
    if not _NAME.fullmatch(name) or len(name) > 63:
        raise ServiceError(
            f"compose service {printable(name)!r}: Cloister runs services named with"
            " lower-case letters, digits, '.', '_' and '-' (at most 63); rename it"
        )
    if name.startswith(stack.PREFIX) or name in {"localhost", "host.docker.internal"}:
        raise ServiceError(
            f"compose service {name!r}: a name starting with {stack.PREFIX!r} (or naming"
            " this host) would answer for the guardian's services on the cloister's"
            " network; rename it"
        )
    return name


def order(services: Sequence[ComposeService]) -> list[ComposeService]:
    """*services* so that each comes after those it depends on (as written otherwise);
    a dependency that is not among them (the cloister's own service) is already up."""
    by_name = {service.name: service for service in services}
    done: list[ComposeService] = []
    state: dict[str, Literal["visiting", "done"]] = {}

    def visit(service: ComposeService, chain: tuple[str, ...]) -> None:
        if state.get(service.name) == "done":
            return
        if state.get(service.name) == "visiting":
            cycle = " -> ".join((*chain, service.name))
            raise ServiceError(f"compose services depend on each other in a circle: {cycle}")
        state[service.name] = "visiting"
        for name in service.depends_on:
            if name in by_name:
                visit(by_name[name], (*chain, service.name))
        state[service.name] = "done"
        done.append(service)

    for service in services:
        visit(service, ())
    return done


# -- images ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceImage:
    """The image a service runs: a local one as it is, or one built from the project."""

    tag: str
    step: str  # for people: "use redis:7 (on this machine)", "build db/Dockerfile ..."
    build: ImagePlan | None = None  # None: nothing to build (a local image, or cached)


def service_tag(project: str, service: str, key: str) -> str:
    """``cloister-service-<project>-<service>:<key[:12]>``."""
    return f"{TAG_PREFIX}{validate_name(project, what='project')}-{service}:{key[:12]}"


def _image_id(client: Engine, name: str, service: str, project: str) -> str | None:
    """The image's ID, None if absent; never another project's own image (its files)."""
    from cloister_cli.images.projectimages.model import ProjectImageError  # noqa: PLC0415
    from cloister_cli.images.projectimages.plan import project_image_id  # noqa: PLC0415

    try:
        return project_image_id(client, name, project)
    except ProjectImageError as error:
        raise ServiceError(f"compose service {service!r}: {error}") from None


def plan_image(
    client: Engine, service: ComposeService, *, project: str, root: Path
) -> ServiceImage:
    """The image of *service*, planned: nothing is pulled, nothing built yet."""
    from cloister_cli.images.projectimages.context import read_file, scan  # noqa: PLC0415
    from cloister_cli.images.projectimages.model import KEY_LABEL, Build, ImagePlan  # noqa: PLC0415
    from cloister_cli.images.projectimages.plan import from_images  # noqa: PLC0415

    source = service.source
    if source.kind == "image":
        name = source.image or ""
        if _image_id(client, name, service.name, project) is None:
            raise ServiceError(
                f"compose service {service.name!r}: image {printable(name)!r} is not on this"
                f" machine and Cloister pulls nothing: `docker pull {printable(name)}`, or"
                " build it from a Dockerfile in the project (`build:`)"
            )
        return ServiceImage(name, f"use {name} (on this machine)")
    if source.dockerfile is None or source.context is None:
        raise ServiceError(f"compose service {service.name!r}: a build without a Dockerfile")
    context = source.context.resolve()
    if not context.is_relative_to(root.resolve()):
        raise ServiceError(
            f"compose service {service.name!r}: its build context {str(context)!r} is outside"
            f" the project {str(root)!r}"
        )
    text = read_file(source.dockerfile)
    entries = scan(context)
    args = dict(sorted(source.args.items()))
    digest = hashlib.sha256()

    def add(*values: str | bytes) -> None:
        for value in values:
            data = value.encode() if isinstance(value, str) else value
            digest.update(len(data).to_bytes(8, "big") + data)

    add(RECIPE_VERSION, text, json.dumps(args), source.target or "", str(len(entries)))
    for entry in entries:
        add(entry.kind, entry.name, f"{entry.mode:o}", entry.digest)
    for reference in from_images(text.decode("utf-8", "replace"), args):
        found = (
            _image_id(client, reference, service.name, project) if "$" not in reference else None
        )
        if found is None:  # the classic builder would pull it: Cloister pulls nothing
            raise ServiceError(
                f"compose service {service.name!r}: FROM {printable(reference)} is not on"
                f" this machine; `docker pull {printable(reference)}` (or build it) first"
            )
        add("from", reference, found)
    key = digest.hexdigest()
    tag = service_tag(project, service.name, key)
    shown = (
        str(source.dockerfile.relative_to(root))
        if source.dockerfile.is_relative_to(root)
        else str(source.dockerfile)
    )
    step = f"build {shown} (context {context.relative_to(root.resolve())})"
    try:
        cached = (client.images.get(tag).labels or {}).get(KEY_LABEL) == key
    except docker.errors.ImageNotFound:
        cached = False
    if cached:
        return ServiceImage(tag, f"{step}: reuse {tag}")
    build = Build(shown, text, context, entries, args=args, target=source.target)
    plan = ImagePlan(project, tag, key, False, (step,), None, (build,), None)
    return ServiceImage(tag, f"{step}, tag it {tag}", plan)


# -- containers --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """Everything ``docker run`` gets for one service (pure data, easy to inspect)."""

    service: ComposeService
    instance: stack.Instance
    cloister: str
    project: str
    image: ServiceImage
    mounts: tuple[Mount, ...]
    limits: DefaultsConfig

    @property
    def container(self) -> str:
        return self.instance.sidecar(self.cloister, self.service.name)

    def labels(self, cloister_id: str) -> dict[str, str]:
        return {
            **self.instance.labels,
            stack.LABEL_SERVICE_OF: self.cloister,
            stack.LABEL_SERVICE: self.service.name,
            stack.LABEL_SERVICE_CONTAINER: cloister_id,
            stack.LABEL_PROJECT: self.project,
        }

    def run_kwargs(self, cloister_id: str) -> dict[str, Any]:
        """``containers.run`` arguments, beside the cloister container *cloister_id*."""
        service = self.service
        network: dict[str, Any]
        if service.shares_cloister_network:
            network = {"network_mode": f"container:{cloister_id}"}
        else:
            network = {"network": self.instance.cloister(self.cloister), "hostname": service.name}
        optional: dict[str, Any] = {}
        if service.command is not None:
            optional["command"] = list(service.command)
        if service.entrypoint is not None:
            optional["entrypoint"] = list(service.entrypoint)
        if service.user is not None:
            optional["user"] = service.user
        if service.working_dir is not None:
            optional["working_dir"] = service.working_dir
        if service.healthcheck is not None:
            optional["healthcheck"] = dict(service.healthcheck)
        return {
            "image": self.image.tag,
            "name": self.container,
            "detach": True,
            "labels": self.labels(cloister_id),
            "environment": dict(service.environment),  # the service's own: nothing of ours
            "mounts": list(self.mounts),
            "cap_drop": ["ALL"],
            "cap_add": list(CAPABILITIES),
            "security_opt": ["no-new-privileges:true"],
            "mem_limit": self.limits.memory,
            "nano_cpus": int(self.limits.cpus * 1_000_000_000),
            "pids_limit": self.limits.pids,
            "log_config": LOG,
            **network,
            **optional,
        }


def _mount(spec: MountSpec, project: str, root: Path, service: str) -> Mount:
    if spec.kind == "bind":
        source = Path(spec.source or "").resolve()
        if not source.is_relative_to(root.resolve()):
            raise ServiceError(
                f"compose service {service!r}: bind mount of {spec.source!r} is outside the project"
            )
    # Only a start with services: the devcontainer package costs `stop` about 60 ms.
    from cloister_cli.container import devoverrides  # noqa: PLC0415

    return devoverrides.mount_for(spec, project)  # a bind is always read-only


def plan(
    client: Engine,
    instance: stack.Instance,
    *,
    cloister: str,
    project: str,
    root: Path,
    services: Sequence[ComposeService],
    limits: DefaultsConfig,
) -> list[ServicePlan]:
    """The services of a cloister, in the order they start; nothing built or made."""
    plans = []
    for service in order(services):
        check_name(service.name)
        plans.append(
            ServicePlan(
                service=service,
                instance=instance,
                cloister=cloister,
                project=project,
                image=plan_image(client, service, project=project, root=root),
                mounts=tuple(_mount(spec, project, root, service.name) for spec in service.mounts),
                limits=limits,
            )
        )
    return plans


def start(
    client: Engine,
    plans: Iterable[ServicePlan],
    cloister: Container,
    *,
    progress: Progress = lambda what, line: None,
    timeout: float = READY_TIMEOUT,
) -> list[Container]:
    """Build what is missing, then run each service and wait until it runs (is healthy,
    when it has a healthcheck) before the next. On an error the caller stops the
    cloister, which removes what was started (:func:`remove_all`).

    A context is built as it was scanned when planned, or not at all: the cloister runs
    by now, and its agent can write there (the build stops on a file that changed)."""
    from cloister_cli.images.projectimages.build import build_chain  # noqa: PLC0415

    started = []
    cloister_id = str(cloister.id)
    for each in plans:
        if each.image.build is not None:
            build_chain(client, each.image.build, progress, no_cache=False)
        kwargs = each.run_kwargs(cloister_id)
        if "network" in kwargs:  # its name answers for it there, as compose would have it
            endpoint = client.api.create_endpoint_config(aliases=[each.service.name])
            kwargs["networking_config"] = {kwargs["network"]: endpoint}
        try:
            container: Container = client.containers.run(**kwargs)
        except (docker.errors.APIError, docker.errors.ImageNotFound) as error:
            detail = getattr(error, "explanation", None) or error
            raise ServiceError(
                f"cannot start compose service {each.service.name!r} ({each.container}): {detail}"
            ) from None
        started.append(container)
        wait_ready(container, each.service.name, progress=progress, timeout=timeout)
    return started


def wait_ready(
    container: Container,
    service: str,
    *,
    progress: Progress = lambda what, line: None,
    timeout: float = READY_TIMEOUT,
) -> None:
    """Until *container* runs, and is healthy when it has a healthcheck; bounded."""
    deadline = time.monotonic() + timeout
    said = time.monotonic()
    while True:
        container.reload()
        state = container.attrs.get("State") or {}
        health = (state.get("Health") or {}).get("Status")
        if container.status in ("exited", "dead"):
            raise ServiceError(
                f"compose service {service!r} exited (code {state.get('ExitCode')}):"
                f" {_last_lines(container)}"
            )
        if container.status == "running" and health in (None, "healthy"):
            return
        if health == "unhealthy":
            raise ServiceError(
                f"compose service {service!r} is unhealthy: {_last_lines(container)}"
            )
        now = time.monotonic()
        if now > deadline:
            raise ServiceError(
                f"compose service {service!r} was not ready within {timeout:g}s"
                f" ({container.status}, health {health}): `cloister logs NAME --service {service}`"
            )
        if now - said >= PROGRESS_SECONDS:
            progress(service, f"waiting for it to be {'healthy' if health else 'running'}")
            said = now
        time.sleep(POLL_SECONDS)


def _last_lines(container: Container) -> str:
    with contextlib.suppress(docker.errors.APIError):
        data: bytes = container.logs(stdout=True, stderr=True, tail=5)
        return printable(data.decode("utf-8", "replace").strip()) or "no output"
    return "no output"


# -- finding and removing ------------------------------------------------------------------


def find(client: Engine, instance: stack.Instance, cloister: str | None = None) -> list[Container]:
    """The service containers of cloister *cloister* (None: of every cloister)."""
    label = stack.LABEL_SERVICE_OF if cloister is None else f"{stack.LABEL_SERVICE_OF}={cloister}"
    return list(client.containers.list(all=True, filters={"label": [instance.label_filter, label]}))


def find_one(
    client: Engine, instance: stack.Instance, cloister: str, service: str
) -> Container | None:
    """Service *service* of cloister *cloister*, or None."""
    return next(
        (
            container
            for container in find(client, instance, cloister)
            if container.labels.get(stack.LABEL_SERVICE) == service
        ),
        None,
    )


def _remove(container: Container) -> str | None:
    # Its anonymous volumes go with it; named ones stay, as a devcontainer's do.
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as error:
        if error.status_code != 409:  # 409: its removal is under way already
            raise
    return container.name or container.short_id


def remove_all(client: Engine, instance: stack.Instance, cloister: str) -> list[str]:
    """Remove the services of cloister *cloister*; their names."""
    return [name for each in find(client, instance, cloister) if (name := _remove(each))]


def stale(client: Engine, instance: stack.Instance) -> list[Container]:
    """The service containers whose cloister is gone, or is another container now."""
    current: dict[str, str | None] = {}
    found = []
    for container in find(client, instance):
        owner = container.labels.get(stack.LABEL_SERVICE_OF, "")
        if owner not in current:
            try:
                cloister = cloisters.find(client, instance, owner)
            except CloisterNameError:  # a label no cloister can have
                cloister = None
            current[owner] = str(cloister.id) if cloister is not None else None
        if current[owner] != container.labels.get(stack.LABEL_SERVICE_CONTAINER):
            found.append(container)
    return found


def remove_containers(containers: Iterable[Container]) -> list[str]:
    """Remove *containers* (services :func:`stale` found); their names."""
    return [name for each in containers if (name := _remove(each))]


# -- output ------------------------------------------------------------------------------


def output(
    client: Engine,
    instance: stack.Instance,
    cloister: str,
    service: str,
    *,
    follow: bool = False,
    tail: int | None = None,
    since: datetime | None = None,
) -> Iterator[str]:
    """The lines service *service* of cloister *cloister* wrote (stdout and stderr),
    escaped: they are the agent's image's, and may hold any byte."""
    container = find_one(client, instance, cloister, service)
    if container is None:
        known = sorted(
            each.labels.get(stack.LABEL_SERVICE, "") for each in find(client, instance, cloister)
        )
        listed = f" (it has: {', '.join(known)})" if known else " (it has none now)"
        raise ServiceError(f"cloister {cloister!r} has no compose service {service!r}{listed}")
    options: dict[str, Any] = {
        "stdout": True,
        "stderr": True,
        "tail": "all" if tail is None else tail,
    }
    if since is not None:
        options["since"] = since
    if not follow:
        data: bytes = container.logs(**options)
        yield from (printable(line) for line in data.decode("utf-8", "replace").splitlines())
        return
    pending = b""
    for chunk in container.logs(stream=True, follow=True, **options):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE:  # a line without end is shown in pieces, never held
            lines.append(pending)
            pending = b""
        yield from (printable(line.decode("utf-8", "replace")) for line in lines)
    if pending:
        yield printable(pending.decode("utf-8", "replace"))
