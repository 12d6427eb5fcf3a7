"""Find a project's devcontainer.json and read it, with Cloister's overrides applied.

The file belongs to the project, and the agent writes the project: everything in it is
treated as a request. What cannot weaken the cloister (an image, a Dockerfile in the
project, environment variables, lifecycle commands that run inside) is honoured; what
could (``--privileged``, host mounts of secrets, ``initializeCommand``, a build context
outside the project) is dropped or refused, and each decision is an
:class:`~cloister_core.devcontainer.model.Override` with its reason.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

from cloister_core.cloisterenv import set_by_cloister
from cloister_core.devcontainer.blocked import BlockedPaths
from cloister_core.devcontainer.compose import ComposeReader, ComposeResult
from cloister_core.devcontainer.composefile import load_compose_files
from cloister_core.devcontainer.features import (
    MAX_FEATURES,
    FeatureIdError,
    is_local_id,
    is_trusted,
    parse_oci_reference,
    resolve_local_feature,
    untrusted_reason,
)
from cloister_core.devcontainer.jsonc import parse_located
from cloister_core.devcontainer.model import (
    LIFECYCLE_STAGES,
    Devcontainer,
    DevcontainerError,
    Feature,
    ImageSource,
    LifecycleCommand,
    LifecycleStage,
    MountSpec,
    Outcome,
    Override,
    value_text,
)
from cloister_core.devcontainer.mounts import (
    MountParseError,
    decide_mount,
    git_directory_reason,
    parse_mount_object,
    parse_mount_string,
)
from cloister_core.devcontainer.reading import read_agent_text
from cloister_core.devcontainer.runargs import cap_add, check_run_args, security_opt
from cloister_core.devcontainer.variables import Variables, devcontainer_id, secret_reason
from cloister_core.jsonc import Location, Positions
from cloister_core.printable import printable

_PORTS = "the cloister has no published ports (`cloister port NAME PORT` publishes one)"
_LIMITS = "the limits come from `defaults:` in Cloister's config.yaml"
_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}\$?", re.IGNORECASE)
_WHEN: dict[LifecycleStage, str] = {
    "onCreateCommand": "when it is created",
    "updateContentCommand": "when it is created, after onCreateCommand",
    "postCreateCommand": "when it is created, after updateContentCommand",
    "postStartCommand": "each time it starts",
    "postAttachCommand": "each time you attach",
}
# Properties with no meaning in a cloister: property → why.
_IGNORED: dict[str, tuple[Outcome, str]] = {
    "forwardPorts": ("ignored", _PORTS),
    "appPort": ("ignored", _PORTS),
    "portsAttributes": ("ignored", _PORTS),
    "otherPortsAttributes": ("ignored", _PORTS),
    "init": ("ignored", "the cloister always runs an init"),
    "initializeCommand": (
        "refused",
        "it runs on the host, outside the sandbox: Cloister never runs it",
    ),
    "workspaceMount": ("dropped", "Cloister mounts the project itself"),
    "overrideCommand": ("ignored", "Cloister runs its own command"),
    "shutdownAction": ("ignored", "`cloister stop` stops the cloister"),
    "hostRequirements": ("ignored", _LIMITS),
    "updateRemoteUserUID": ("ignored", "the cloister always runs as your uid"),
    "userEnvProbe": ("ignored", "not supported"),
    "waitFor": ("ignored", "not supported: every lifecycle command runs before the agent"),
    "customizations": ("ignored", "editor settings: no editor attaches to a cloister"),
    "secrets": ("ignored", "Cloister does not pass secrets in"),
}
_COMPOSE_KEYS = frozenset({"dockerComposeFile", "service", "runServices"})
_SOURCE_KEYS = frozenset({"image", "build", "dockerFile", "context"})
MAX_SIZE = 1024 * 1024
"""The largest devcontainer.json read: the agent writes it, and it is read on the host."""


def _read_text(path: Path) -> str:
    """The file's text: a regular file of at most :data:`MAX_SIZE` bytes, in UTF-8."""
    return read_agent_text(path, MAX_SIZE, "a devcontainer.json", DevcontainerError)


def _nul_location(document: object) -> Location | None:
    """Where the first string (key or value) with a NUL character is, or None."""
    stack: list[tuple[Location, object]] = [((), document)]
    while stack:
        location, value = stack.pop()
        if isinstance(value, str) and "\0" in value:
            return location
        if isinstance(value, dict):
            for key, item in cast("dict[str, object]", value).items():
                if "\0" in key:
                    return location
                stack.append(((*location, key), item))
        elif isinstance(value, list):
            stack.extend(((*location, index), item) for index, item in enumerate(value))
    return None


def load_devcontainer(
    path: Path,
    *,
    project_root: Path,
    home: Path,
    environ: Mapping[str, str],
    container_workspace: str = "/work",
    trusted_features: Sequence[str] = (),
    blocked_paths: Sequence[Path] = (),
) -> Devcontainer:
    """Read *path* and apply the overrides (see this module's and the README's text).

    *environ* is what ``${localEnv:X}`` reads (names that look like secrets are never
    read); *blocked_paths* are added to the blocked list (Cloister's own config and
    data directories). Raises :class:`DevcontainerError` for a file Cloister cannot
    use: malformed, of the wrong types, without an image, over :data:`MAX_SIZE` bytes,
    nested too deeply, or with a NUL character in a string; or whose compose files
    (``dockerComposeFile``, read by :mod:`.compose`) are so.
    """
    return _load(
        path,
        _read_text(path),
        project_root=project_root,
        home=home,
        environ=environ,
        container_workspace=container_workspace,
        trusted_features=trusted_features,
        blocked_paths=blocked_paths,
    )


def _load(
    path: Path,
    text: str,
    *,
    project_root: Path,
    home: Path,
    environ: Mapping[str, str],
    container_workspace: str,
    trusted_features: Sequence[str],
    blocked_paths: Sequence[Path],
) -> Devcontainer:
    document, positions = parse_located(text, path)
    if not isinstance(document, dict):
        kind = type(document).__name__
        raise DevcontainerError(path, f"expected a JSON object at the top, got {kind}", 1, 1)
    # Raw or escaped: the only two ways a NUL gets into a string (the walk is for where).
    has_nul = "\0" in text or "\\u0000" in text
    if has_nul and (where := _nul_location(document)) is not None:
        found = positions.locate(where)
        line, column = found if found is not None else (None, None)
        message = f"{_dotted(where)}: a NUL character (\\u0000) is not allowed in a string"
        raise DevcontainerError(path, message, line, column)
    variables = Variables(
        environ=environ,
        local_workspace=str(project_root),
        container_workspace=container_workspace,
        devcontainer_id=devcontainer_id(str(project_root.absolute()), str(path.absolute())),
    )
    reader = _Reader(
        path=path,
        positions=positions,
        document=cast("dict[str, object]", document),
        project_root=project_root,
        variables=variables,
        blocked=BlockedPaths(home, blocked_paths),
        trusted_features=tuple(trusted_features),
    )
    return reader.read()


def _dotted(location: Location) -> str:
    text = ""
    for step in location:
        if isinstance(step, int):
            text += f"[{step}]"
        elif _PLAIN_KEY.fullmatch(step):
            text += f".{step}" if text else step
        else:
            text += f"[{step!r}]"
    return text or "(top level)"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Reader:
    """One pass over the document; collects the result and the overrides."""

    def __init__(
        self,
        *,
        path: Path,
        positions: Positions,
        document: dict[str, object],
        project_root: Path,
        variables: Variables,
        blocked: BlockedPaths,
        trusted_features: tuple[str, ...],
    ) -> None:
        self.path = path
        self.positions = positions
        self.document = document
        self.project_root = project_root
        self.variables = variables
        self.blocked = blocked
        self.trusted_features = trusted_features
        self.overrides: list[Override] = []
        self.features: list[Feature] = []
        self.feature_order: tuple[str, ...] = ()
        self.mounts: list[MountSpec] = []
        self.run_args: list[str] = []
        self.container_env: dict[str, str] = {}
        self.remote_env: dict[str, str | None] = {}
        self.lifecycle: list[LifecycleCommand] = []
        self.users: dict[str, str] = {}
        self.name: str | None = None

    # --- errors, notes and types ----------------------------------------------------

    def error(self, location: Location, message: str) -> DevcontainerError:
        found = self.positions.locate(location)
        line, column = found if found is not None else (None, None)
        return DevcontainerError(self.path, message, line, column)

    def note(self, location: Location, value: object, outcome: Outcome, why: str) -> None:
        found = self.positions.locate(location)
        line = found[0] if found is not None else None
        field = printable(_dotted(location))
        self.overrides.append(Override(field, value_text(value), outcome, printable(why), line))

    def wrong(self, location: Location, expected: str, value: object) -> DevcontainerError:
        return self.error(
            location, f"{_dotted(location)}: expected {expected}, got {_shown(value)}"
        )

    def string(self, location: Location, value: object) -> str:
        if not isinstance(value, str):
            raise self.wrong(location, "a string", value)
        return value

    def strings(self, location: Location, value: object) -> list[str]:
        if not isinstance(value, list):
            raise self.wrong(location, "a list of strings", value)
        for index, item in enumerate(value):
            self.string((*location, index), item)
        return cast("list[str]", value)

    def mapping(self, location: Location, value: object) -> dict[str, object]:
        if not isinstance(value, dict):
            raise self.wrong(location, "an object", value)
        return cast("dict[str, object]", value)

    def substituted(self, location: Location, value: str) -> str | None:
        """*value* with its variables replaced; None (and a refusal noted) if it reads a secret."""
        result = self.variables.substitute(value)
        if result.secrets:
            self.note(location, value, "refused", secret_reason(result.secrets[0]))
            return None
        return result.text

    # --- the whole file ---------------------------------------------------------------

    def read(self) -> Devcontainer:
        compose = self.compose() if "dockerComposeFile" in self.document else None
        source = compose.source if compose is not None else self.source()
        handlers: dict[str, Callable[[str, object], None]] = {
            "name": self.read_name,
            "features": self.read_features,
            "overrideFeatureInstallOrder": self.read_feature_order,
            "mounts": self.read_mounts,
            "runArgs": self.read_run_args,
            "privileged": self.read_privileged,
            "capAdd": self.read_cap_add,
            "securityOpt": self.read_security_opt,
            "containerEnv": self.read_env,
            "remoteEnv": self.read_env,
            "remoteUser": self.read_user,
            "containerUser": self.read_user,
            "workspaceFolder": self.read_workspace_folder,
            **dict.fromkeys(LIFECYCLE_STAGES, self.read_lifecycle),
        }
        for key, value in self.document.items():
            if key == "$schema" or (key in _SOURCE_KEYS and compose is None):
                continue
            if key in _COMPOSE_KEYS or key in _SOURCE_KEYS:
                self.compose_key(key, value, compose)
            elif key in handlers:
                handlers[key](key, value)
            elif key in _IGNORED:
                outcome, why = _IGNORED[key]
                self.note((key,), value, outcome, why)
            else:
                self.note(
                    (key,), value, "ignored", "not a devcontainer.json property Cloister knows"
                )
        user = self.users.get("remoteUser", self.users.get("containerUser"))
        if compose is None:
            return Devcontainer(
                path=self.path,
                name=self.name,
                source=source,
                features=tuple(self.features),
                mounts=tuple(self.mounts),
                run_args=tuple(self.run_args),
                container_env=self.container_env,
                remote_env=self.remote_env,
                user=user,
                lifecycle=tuple(self.lifecycle),
                overrides=tuple(self.overrides),
                override_feature_order=self.feature_order,
            )
        return Devcontainer(
            path=self.path,
            name=self.name,
            source=source,
            features=tuple(self.features),
            mounts=(*compose.mounts, *self.mounts),
            run_args=tuple(self.run_args),
            container_env={**compose.environment, **self.container_env},
            remote_env=self.remote_env,
            user=self.compose_user(compose, user),
            lifecycle=tuple(self.lifecycle),
            overrides=tuple(self.overrides),
            compose_files=compose.files,
            services=compose.services,
            compose_inputs=compose.inputs,
            override_feature_order=self.feature_order,
        )

    # --- docker-compose based files ---------------------------------------------------

    def compose(self) -> ComposeResult:
        """The compose files, their cloister's service and the services run beside it."""
        key = "dockerComposeFile"
        value = self.document[key]
        names = [value] if isinstance(value, str) else self.strings((key,), value)
        if not names:
            raise self.error((key,), f"{key}: no compose file is given")
        files: list[Path] = []
        for index, name in enumerate(names):
            location: Location = (key,) if isinstance(value, str) else (key, index)
            path = self.inside_project(
                location, name, "Cloister reads only the project's compose files"
            )
            if not path.is_file():
                raise self.error(location, f"{_dotted(location)}: no such file: {str(path)!r}")
            files.append(path)
        if "service" not in self.document:
            raise self.error(
                (key,), "`service` is missing: with dockerComposeFile it names the cloister's"
            )
        service = self.string(("service",), self.document["service"])
        reader = ComposeReader(
            load_compose_files(tuple(files)),
            files=tuple(files),
            project_root=self.project_root,
            variables=self.variables,
            blocked=self.blocked,
        )
        known = reader.names()
        if service not in known:
            raise self.error(
                ("service",),
                f"service: {service!r} is not a service of the compose files ({', '.join(known)})",
            )
        run: list[str] | None = None
        if "runServices" in self.document:
            run = self.strings(("runServices",), self.document["runServices"])
            for index, name in enumerate(run):
                if name not in known:
                    raise self.error(
                        ("runServices", index),
                        f"runServices[{index}]: {name!r} is not a service of the compose files",
                    )
        return reader.read(service, run)

    def compose_key(self, key: str, value: object, compose: ComposeResult | None) -> None:
        """``dockerComposeFile``, ``service``, ``runServices`` and, with compose, the image keys."""
        if compose is None:
            self.note((key,), value, "ignored", "only for docker-compose based files")
        elif key in _SOURCE_KEYS:
            self.note((key,), value, "ignored", "the compose service's image is used")
        else:
            why = {
                "dockerComposeFile": "read by Cloister, which decides each key (below)",
                "service": "the service that becomes the cloister",
                "runServices": "the services started beside the cloister, on its own network",
            }[key]
            self.note((key,), value, "kept", why)
            if key == "dockerComposeFile":
                self.overrides.extend(compose.overrides)

    def compose_user(self, compose: ComposeResult, chosen: str | None) -> str | None:
        """The compose service's ``user``, checked as remoteUser is; *chosen* (remoteUser or
        containerUser) wins."""
        if compose.user is None or compose.user_override is None:
            return chosen
        name = compose.user.strip()
        problem = _user_problem(name)
        if chosen is not None and problem is None:
            problem = f"{chosen!r} of devcontainer.json is used"
        why = problem or "the cloister's user name, with your uid"
        note = dataclasses.replace(
            compose.user_override, outcome="ignored" if problem else "kept", why=why
        )
        self.overrides.append(note)
        return chosen if problem else name

    # --- image or build ---------------------------------------------------------------

    def source(self) -> ImageSource:
        document = self.document
        image = document.get("image")
        build = self.mapping(("build",), document["build"]) if "build" in document else None
        if build is not None and "dockerfile" in build:
            if "dockerFile" in document:
                self.note(
                    ("dockerFile",), document["dockerFile"], "ignored", "build.dockerfile is used"
                )
            if "context" in document:
                self.note(("context",), document["context"], "ignored", "build.context is used")
            dockerfile = self.string(("build", "dockerfile"), build["dockerfile"])
            context = self.string(("build", "context"), build.get("context", "."))
            where: tuple[Location, Location] = (("build", "dockerfile"), ("build", "context"))
        elif "dockerFile" in document:  # the older form: top-level dockerFile and context
            dockerfile = self.string(("dockerFile",), document["dockerFile"])
            context = self.string(("context",), document.get("context", "."))
            where = (("dockerFile",), ("context",))
        elif image is not None:
            if build is not None:
                self.note(("build",), build, "ignored", "it has no dockerfile: the image is used")
            if "context" in document:
                self.note(("context",), document["context"], "ignored", "only for a Dockerfile")
            name = self.string(("image",), image).strip()
            if not name:
                raise self.error(("image",), "image: the image name is empty")
            self.note(("image",), name, "kept", "the cloister's base image")
            return ImageSource(kind="image", image=name)
        else:
            location: Location = ("build",) if build is not None else ()
            raise self.error(
                location,
                "neither `image` nor `build.dockerfile` is given: Cloister needs one of them"
                " (or `dockerComposeFile` and `service`)",
            )
        if image is not None:
            self.note(("image",), image, "ignored", "the Dockerfile is built instead")
        return self.build(dockerfile, context, build or {}, where)

    def inside_project(self, location: Location, relative: str, what: str) -> Path:
        resolved = (self.path.parent / relative).resolve()
        root = self.project_root.resolve()
        if resolved != root and not resolved.is_relative_to(root):
            raise self.error(
                location,
                f"{_dotted(location)}: {relative!r} is outside the project ({root}): {what}",
            )
        return resolved

    def build(
        self,
        dockerfile: str,
        context: str,
        build: dict[str, object],
        where: tuple[Location, Location],
    ) -> ImageSource:
        dockerfile_path = self.inside_project(
            where[0], dockerfile, "the image may be built only from the project's files"
        )
        if not dockerfile_path.is_file():
            raise self.error(
                where[0], f"{_dotted(where[0])}: no such file: {str(dockerfile_path)!r}"
            )
        context_path = self.inside_project(
            where[1],
            context,
            "every file under it would go to the build, where a Dockerfile could copy your"
            " secrets into the image",
        )
        for at, path in ((where[0], dockerfile_path), (where[1], context_path)):
            if (why := git_directory_reason(path, self.project_root)) is not None:
                raise self.error(at, f"{_dotted(at)}: {why}")
        self.note(where[0], dockerfile, "kept", "the cloister's image is built from it")
        args: dict[str, str] = {}
        target: str | None = None
        for key, value in build.items():
            location: Location = ("build", key)
            if key == "args":
                for name, arg in self.mapping(location, value).items():
                    text = self.substituted((*location, name), self.string((*location, name), arg))
                    if text is not None:
                        args[name] = text
                        self.note((*location, name), arg, "kept", "a build argument")
            elif key == "target":
                target = self.string(location, value)
                self.note(location, value, "kept", "the build stage to use")
            elif key == "options":
                self.strings(location, value)
                self.note(location, value, "dropped", "Cloister chooses the `docker build` options")
            elif key == "cacheFrom":
                self.note(location, value, "ignored", "not supported")
            elif key not in ("dockerfile", "context"):
                self.note(location, value, "ignored", "not a build property Cloister knows")
        return ImageSource(
            kind="build", dockerfile=dockerfile_path, context=context_path, args=args, target=target
        )

    # --- the other properties, in the file's order ----------------------------------

    def read_name(self, key: str, value: object) -> None:
        self.name = self.string((key,), value)

    def read_workspace_folder(self, key: str, value: object) -> None:
        self.string((key,), value)
        where = self.variables.container_workspace
        self.note((key,), value, "ignored", f"the project is at {where} in every cloister")

    def read_features(self, key: str, value: object) -> None:
        features = self.mapping((key,), value)
        if len(features) > MAX_FEATURES:
            message = f"features: {len(features)} Features; at most {MAX_FEATURES} are read"
            raise self.error((key,), message)
        for feature_id, options in features.items():
            location: Location = (key, feature_id)
            if not feature_id.strip():
                raise self.error(location, "features: a Feature id is empty")
            if options is False:
                self.note(location, options, "ignored", "false: not installed")
                continue
            chosen = self.feature_options(location, options)
            found = self.positions.locate(location)
            line = found[0] if found is not None else None
            try:
                if is_local_id(feature_id):
                    folder = resolve_local_feature(feature_id, self.path, self.project_root)
                    self.features.append(Feature(feature_id, chosen, True, "local", folder, line))
                    self.note(location, options, "kept", f"a local Feature, from {folder}")
                    continue
                parse_oci_reference(feature_id)
            except FeatureIdError as error:
                self.note(location, options, "refused", str(error))
                continue
            trusted = is_trusted(feature_id, self.trusted_features)
            self.features.append(Feature(feature_id, chosen, trusted, "oci", None, line))
            if trusted:
                why = "a Feature from a trusted source: fetched on the host, its digest locked"
                self.note(location, options, "kept", why)
            else:
                self.note(location, options, "refused", untrusted_reason(feature_id))

    def read_feature_order(self, key: str, value: object) -> None:
        self.feature_order = tuple(self.strings((key,), value))
        why = "these Features install as early as their dependencies allow, in this order"
        self.note((key,), value, "kept", why)
        for index, entry in enumerate(self.feature_order):
            if not is_local_id(entry):
                try:
                    parse_oci_reference(entry)
                except FeatureIdError as error:
                    why = f"it names no Feature Cloister installs: {error}"
                    self.note((key, index), entry, "ignored", why)

    def feature_options(self, location: Location, options: object) -> dict[str, str | bool]:
        if options is True:
            return {}
        if isinstance(options, str):
            return {"version": options}  # "id": "lts" is short for {"version": "lts"}
        result: dict[str, str | bool] = {}
        for name, option in self.mapping(location, options).items():
            if isinstance(option, str | bool):
                result[name] = option
            elif isinstance(option, int | float):
                result[name] = str(option)
            else:
                raise self.wrong((*location, name), "a string or a boolean", option)
        return result

    def read_mounts(self, key: str, value: object) -> None:
        if not isinstance(value, list):
            raise self.wrong((key,), "a list of mounts", value)
        for index, item in enumerate(value):
            location: Location = (key, index)
            try:
                if isinstance(item, str):
                    fields = parse_mount_string(item)
                elif isinstance(item, dict):
                    fields = parse_mount_object(cast("dict[str, object]", item))
                else:
                    raise self.wrong(location, "a mount string or object", item)
                decision = decide_mount(fields, variables=self.variables, blocked=self.blocked)
            except MountParseError as error:
                self.note(location, item, "dropped", f"not understood: {error}")
                continue
            if decision.mount is not None:
                self.mounts.append(decision.mount)
            self.note(location, item, decision.outcome, decision.why)

    def read_run_args(self, key: str, value: object) -> None:
        args = self.strings((key,), value)
        for decision in check_run_args(args, variables=self.variables, blocked=self.blocked):
            self.run_args.extend(decision.kept)
            self.note((key, decision.index), decision.text, decision.outcome, decision.why)

    def read_privileged(self, key: str, value: object) -> None:
        if not isinstance(value, bool):
            raise self.wrong((key,), "true or false", value)
        if value:
            why = "gives the container every capability and the host's devices: root on the host"
            self.note((key,), value, "dropped", why)
        else:
            self.note((key,), value, "ignored", "the cloister is never privileged")

    def read_cap_add(self, key: str, value: object) -> None:
        for index, capability in enumerate(self.strings((key,), value)):
            outcome, why = cap_add(capability)
            self.note((key, index), capability, outcome, why)

    def read_security_opt(self, key: str, value: object) -> None:
        for index, option in enumerate(self.strings((key,), value)):
            outcome, why = security_opt(option)
            self.note((key, index), option, outcome, why)

    def read_env(self, key: str, value: object) -> None:
        remote = key == "remoteEnv"
        target: dict[str, str] | dict[str, str | None] = (
            self.remote_env if remote else self.container_env
        )
        for name, raw in self.mapping((key,), value).items():
            location: Location = (key, name)
            if not name or "=" in name or "\0" in name:
                raise self.error(location, f"{key}: {name!r} is not an environment variable name")
            if (why := set_by_cloister(name)) is not None and (raw is None or isinstance(raw, str)):
                self.note(location, raw, "ignored", why)
                continue
            if raw is None and remote:
                self.remote_env[name] = None
                self.note(location, raw, "kept", "unset in the cloister")
                continue
            text = self.string(location, raw)
            substituted = self.substituted(location, text)
            if substituted is None:
                continue
            target[name] = substituted
            reads_host = "${localEnv:" in text or "${env:" in text
            why = "set in the cloister" + (", from your environment" if reads_host else "")
            self.note(location, text, "kept", why)

    def read_user(self, key: str, value: object) -> None:
        name = self.string((key,), value).strip()
        problem = _user_problem(name)
        if problem is not None:
            self.note((key,), value, "ignored", problem)
            return
        other = self.document.get("remoteUser")
        if (
            key == "containerUser"
            and isinstance(other, str)
            and _user_problem(other.strip()) is None
        ):
            self.note((key,), value, "ignored", f"remoteUser {other.strip()!r} is used")
            return
        self.users[key] = name
        self.note((key,), value, "kept", "the cloister's user name, with your uid")

    def read_lifecycle(self, key: str, value: object) -> None:
        stage = cast("LifecycleStage", key)
        why = f"runs inside the cloister, {_WHEN[stage]}"
        if isinstance(value, dict):
            for name, command in cast("dict[str, object]", value).items():
                self.command(
                    stage, name, (key, name), command, why + " (in parallel with the others)"
                )
        else:
            self.command(stage, None, (key,), value, why)

    def command(
        self, stage: LifecycleStage, name: str | None, location: Location, value: object, why: str
    ) -> None:
        expected = "a command: a string (run by /bin/sh -c), a list (the argv, no shell)"
        expected += " or an object of named commands" if name is None else ""
        if isinstance(value, str):
            argv: list[str] = ["/bin/sh", "-c", value] if value.strip() else []
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            argv = cast("list[str]", value)
        else:
            raise self.wrong(location, expected, value)
        if not argv:
            return
        texts: list[str] = []
        for item in argv:
            result = self.variables.substitute(item)
            if result.secrets:
                self.note(location, value, "refused", secret_reason(result.secrets[0]))
                return
            texts.append(result.text)
        self.lifecycle.append(LifecycleCommand(stage, name, tuple(texts)))
        self.note(location, value, "kept", why)


def _user_problem(name: str) -> str | None:
    """Why a remoteUser/containerUser is not honoured, or None."""
    if name.split(":", 1)[0] in ("root", "0"):
        return "the cloister never runs as root (it runs as your uid)"
    if re.fullmatch(r"[0-9]+(?::[0-9]+)?", name):
        return "a uid: the cloister runs as your uid; give a user name"
    if not _USER_NAME.fullmatch(name):
        return "not a user name"
    return None
