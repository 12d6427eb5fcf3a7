"""A Feature's ``devcontainer-feature.json``, its options, and its install environment.

The metadata comes with the Feature (from a registry, or a local folder the agent
writes): it is read like devcontainer.json (comments allowed, duplicate keys refused,
errors at ``<where>:<line>:<column>``) and is as much a request; what it asks of the
container goes through :mod:`.featurerequests`.

Options become the install script's environment as the devcontainers CLI does it: the
option's name upper-cased, each character other than ``[A-Za-z0-9_]`` turned into
``_`` and leading digits and underscores into one ``_`` (``1name`` → ``_NAME``); the
defaults first, then what devcontainer.json chose (an option the Feature does not
declare is passed too, as the CLI does); booleans as ``true``/``false``. Values are
quoted for ``sh`` here (the CLI does not), so ``$(…)``, backticks and quotes stay text.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from cloister_core.devcontainer.jsonc import parse_located
from cloister_core.devcontainer.model import DevcontainerError, Feature
from cloister_core.jsonc import Location, Positions

MAX_METADATA_SIZE = 1024 * 1024
"""The largest devcontainer-feature.json read (a Feature's author, or the agent, writes it)."""

OptionType = Literal["boolean", "string"]
OptionValue = str | bool
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_LEADING = re.compile(r"^[0-9_]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FeatureError(DevcontainerError):
    """A Feature Cloister cannot use; ``str()`` is ``<where>:<line>:<column>: <message>``.

    *where* names the Feature's file (``ghcr.io/x/y:1 devcontainer-feature.json``, a local
    folder's ``devcontainer-feature.json``, a lock file).
    """

    def __init__(
        self, where: str | Path, message: str, line: int | None = None, column: int | None = None
    ) -> None:
        super().__init__(Path(where), message, line, column)


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One entry of a Feature's ``options``."""

    type: OptionType
    default: OptionValue | None = None
    proposals: tuple[str, ...] = ()
    enum: tuple[str, ...] | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class FeatureMetadata:
    """What ``devcontainer-feature.json`` says (what Cloister reads; ``raw`` is all of it).

    ``depends_on`` maps a Feature id (as the Feature wrote it) to the options it needs;
    ``mounts`` holds each entry as written (a mount string or object).
    """

    id: str
    version: str | None
    name: str | None
    options: Mapping[str, OptionSpec]
    depends_on: Mapping[str, Mapping[str, OptionValue]]
    installs_after: tuple[str, ...]
    container_env: Mapping[str, str]
    privileged: bool | None
    cap_add: tuple[str, ...]
    security_opt: tuple[str, ...]
    init: bool | None
    entrypoint: str | None
    mounts: tuple[object, ...]
    raw: Mapping[str, object] = field(default_factory=dict)
    legacy_ids: tuple[str, ...] = ()  # the names it had before (installsAfter matches them)


@dataclass(frozen=True, slots=True)
class ResolvedFeature:
    """A Feature with its metadata and content digest (``sha256:<hex>``: the OCI manifest
    digest, or a digest of the local folder's files).

    The CLI builds these: for the Features devcontainer.json lists, and for those
    :func:`~cloister_core.devcontainer.featureorder.missing_dependencies` names (then
    ``feature.id`` is the id as the ``dependsOn`` wrote it, and ``feature.options`` its
    options).
    """

    feature: Feature
    metadata: FeatureMetadata
    digest: str


class _Reader:
    """Typed access to the parsed document, errors at the key's line."""

    def __init__(self, positions: Positions, where: str) -> None:
        self.positions = positions
        self.where = where

    def error(self, location: Location, message: str) -> FeatureError:
        found = self.positions.locate(location)
        line, column = found if found is not None else (None, None)
        return FeatureError(self.where, f"{_dotted(location)}: {message}", line, column)

    def wrong(self, location: Location, expected: str, value: object) -> FeatureError:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return self.error(location, f"expected {expected}, got {shown}")

    def optional_string(self, location: Location, value: object) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.wrong(location, "a string", value)
        return value

    def optional_bool(self, location: Location, value: object) -> bool | None:
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.wrong(location, "true or false", value)
        return value

    def strings(self, location: Location, value: object) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.wrong(location, "a list of strings", value)
        return tuple(cast("list[str]", value))

    def mapping(self, location: Location, value: object) -> dict[str, object]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.wrong(location, "an object", value)
        return cast("dict[str, object]", value)

    def option_values(self, location: Location, value: object) -> dict[str, OptionValue]:
        """A Feature's options as devcontainer.json (or ``dependsOn``) gives them."""
        if value is True:
            return {}
        if isinstance(value, str):
            return {"version": value}
        result: dict[str, OptionValue] = {}
        for name, item in self.mapping(location, value).items():
            if isinstance(item, str | bool):
                result[name] = item
            elif isinstance(item, int | float):
                result[name] = str(item)
            else:
                raise self.wrong((*location, name), "a string or a boolean", item)
        return result

    def option_spec(self, location: Location, value: object) -> OptionSpec:
        spec = self.mapping(location, value)
        kind = spec.get("type")
        if kind not in ("boolean", "string"):
            raise self.wrong((*location, "type"), '"boolean" or "string"', kind)
        default = spec.get("default")
        if default is not None:
            expected: type = bool if kind == "boolean" else str
            if not isinstance(default, expected):
                raise self.wrong((*location, "default"), f"a {kind}", default)
        enum: tuple[str, ...] | None = None
        if "enum" in spec:
            enum = self.strings((*location, "enum"), spec["enum"])
        return OptionSpec(
            type=kind,
            default=cast("OptionValue | None", default),
            proposals=self.strings((*location, "proposals"), spec.get("proposals")),
            enum=enum,
            description=self.optional_string((*location, "description"), spec.get("description")),
        )


def _dotted(location: Location) -> str:
    text = ""
    for step in location:
        if isinstance(step, int):
            text += f"[{step}]"
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$-]*", step):
            text += f".{step}" if text else step
        else:
            text += f"[{step!r}]"
    return text or "(top level)"


def _has_nul(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "\0" in item:
            return True
        if isinstance(item, dict):
            for key, inner in cast("dict[str, object]", item).items():
                if "\0" in key:
                    return True
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(cast("list[object]", item))
    return False


def parse_feature_metadata(text: str, where: str) -> FeatureMetadata:
    """Parse a ``devcontainer-feature.json``; errors are :class:`FeatureError` at *where*.

    Properties Cloister has no use for (``description``, ``customizations``, lifecycle
    commands, …) stay in ``raw``; the ones it acts on must have the specification's types.
    """
    if len(text) > MAX_METADATA_SIZE:
        raise FeatureError(where, f"it is over {MAX_METADATA_SIZE} bytes: refused")
    try:
        document, positions = parse_located(text, Path(where))
    except RecursionError:
        raise FeatureError(where, "its values are nested too deeply") from None
    except DevcontainerError as error:
        raise FeatureError(where, error.message, error.line, error.column) from None
    if not isinstance(document, dict):
        raise FeatureError(where, "expected a JSON object at the top", 1, 1)
    if _has_nul(document):
        raise FeatureError(where, "a NUL character (\\u0000) is not allowed in a string")
    data = cast("dict[str, object]", document)
    reader = _Reader(positions, where)
    feature_id = data.get("id")
    if not isinstance(feature_id, str) or not feature_id.strip():
        raise reader.wrong(("id",), "the Feature's id (a non-empty string)", feature_id)
    options = {
        name: reader.option_spec(("options", name), spec)
        for name, spec in reader.mapping(("options",), data.get("options")).items()
    }
    depends_on = {
        name: reader.option_values(("dependsOn", name), value)
        for name, value in reader.mapping(("dependsOn",), data.get("dependsOn")).items()
    }
    container_env: dict[str, str] = {}
    for name, value in reader.mapping(("containerEnv",), data.get("containerEnv")).items():
        if not isinstance(value, str):
            raise reader.wrong(("containerEnv", name), "a string", value)
        container_env[name] = value
    mounts = data.get("mounts", [])
    if not isinstance(mounts, list):
        raise reader.wrong(("mounts",), "a list of mounts", mounts)
    for index, mount in enumerate(cast("list[object]", mounts)):
        if not isinstance(mount, str | dict):
            raise reader.wrong(("mounts", index), "a mount string or object", mount)
    return FeatureMetadata(
        id=feature_id,
        version=reader.optional_string(("version",), data.get("version")),
        name=reader.optional_string(("name",), data.get("name")),
        options=options,
        depends_on=depends_on,
        installs_after=reader.strings(("installsAfter",), data.get("installsAfter")),
        container_env=container_env,
        privileged=reader.optional_bool(("privileged",), data.get("privileged")),
        cap_add=reader.strings(("capAdd",), data.get("capAdd")),
        security_opt=reader.strings(("securityOpt",), data.get("securityOpt")),
        init=reader.optional_bool(("init",), data.get("init")),
        entrypoint=reader.optional_string(("entrypoint",), data.get("entrypoint")),
        mounts=tuple(cast("list[object]", mounts)),
        raw=data,
        legacy_ids=reader.strings(("legacyIds",), data.get("legacyIds")),
    )


def safe_name(name: str) -> str:
    """An option's name as an environment variable, as the devcontainers CLI makes it."""
    return _LEADING.sub("_", _UNSAFE.sub("_", name)).upper()


def _text(value: OptionValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def option_environment(
    metadata: FeatureMetadata, chosen: Mapping[str, OptionValue]
) -> dict[str, str]:
    """The install script's option variables: defaults, then *chosen*, names made safe.

    An option whose name has no safe form (the empty name) is left out:
    :func:`option_problems` reports it.
    """
    values: dict[str, OptionValue] = {
        name: spec.default for name, spec in metadata.options.items() if spec.default is not None
    }
    values.update(chosen)
    environment: dict[str, str] = {}
    for name, value in values.items():
        variable = safe_name(name)
        if _NAME.fullmatch(variable):
            environment[variable] = _text(value)
    return environment


def option_problems(metadata: FeatureMetadata, chosen: Mapping[str, OptionValue]) -> list[str]:
    """What looks wrong in *chosen*, for warnings: the devcontainers CLI installs anyway
    (an undeclared option is passed, a value outside ``enum`` too), and so does Cloister."""
    problems: list[str] = []
    for name, value in chosen.items():
        spec = metadata.options.get(name)
        if not _NAME.fullmatch(safe_name(name)):
            problems.append(f"option {name!r} has no environment variable name: not passed")
        elif spec is None:
            known = ", ".join(sorted(metadata.options)) or "none"
            problems.append(f"option {name!r} is not one the Feature declares (it has: {known})")
        elif spec.type == "boolean" and not isinstance(value, bool):
            problems.append(f"option {name!r} is a boolean; {value!r} is passed as text")
        elif spec.enum is not None and _text(value) not in spec.enum:
            allowed = ", ".join(repr(item) for item in spec.enum)
            problems.append(f"option {name!r}: {value!r} is not one of {allowed}")
    return problems


def shell_assignment(name: str, value: str) -> str:
    """``NAME='value'`` for ``sh`` to source: the value stays text whatever it holds."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an environment variable name")
    if "\0" in value:
        raise ValueError(f"the value of {name} holds a NUL character")
    return f"{name}={shlex.quote(value)}"


def render_feature_env(
    metadata: FeatureMetadata,
    chosen: Mapping[str, OptionValue],
    *,
    remote_user: str,
    container_user: str,
    remote_user_home: str | None = None,
    container_user_home: str | None = None,
) -> str:
    """The ``devcontainer-features.env`` the install step sources with ``set -a``.

    First the specification's built-in variables (``_REMOTE_USER``, ``_CONTAINER_USER``
    and, when given, their homes: the CLI finds those in the image with ``getent`` at
    build time), then the options (:func:`option_environment`), each value single-quoted.
    """
    builtins = {"_REMOTE_USER": remote_user, "_CONTAINER_USER": container_user}
    if remote_user_home is not None:
        builtins["_REMOTE_USER_HOME"] = remote_user_home
    if container_user_home is not None:
        builtins["_CONTAINER_USER_HOME"] = container_user_home
    lines = [shell_assignment(name, value) for name, value in builtins.items()]
    lines += [
        shell_assignment(name, value)
        for name, value in option_environment(metadata, chosen).items()
    ]
    return "\n".join(lines) + "\n"
