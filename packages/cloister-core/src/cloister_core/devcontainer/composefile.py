"""Compose files read as compose reads them: bounded, merged, interpolated, with lines.

The files are the project's (the agent's), read on the host before anyone is asked,
so reading is bounded: each file at most :data:`MAX_FILE_SIZE` bytes, at most
:data:`MAX_FILES` files, and at most :data:`MAX_VALUES` values once YAML aliases are
followed (an alias counts each time it is used, so a "billion laughs" file stops at
the limit instead of expanding). Every value keeps the file and the line it came from.

Several files merge as compose merges them, for the keys Cloister reads: a later
file's scalar wins; mappings merge key by key; ``environment``, ``depends_on`` and
``build.args`` merge by name (both their list and mapping forms); ``volumes`` by
target; ``command``, ``entrypoint`` and ``healthcheck.test`` are replaced; other lists
are appended without duplicates. Relative paths in every file are resolved against the
first file's folder (compose's project directory).

Interpolation (``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
``${VAR:?error}``, ``${VAR:+other}``, ``$$``) reads the ``.env`` file beside the first
compose file and the host environment Cloister was given, but never a host variable
whose name looks like a secret (:func:`~cloister_core.devcontainer.variables.looks_secret`).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.nodes import Node as YamlNode

from cloister_core.config.yamlerrors import yaml_problem
from cloister_core.devcontainer.model import DevcontainerError
from cloister_core.devcontainer.reading import read_agent_text
from cloister_core.devcontainer.variables import looks_secret

MAX_FILE_SIZE = 256 * 1024
"""The largest compose (or env) file read, in bytes: YAML is parsed in pure Python
(about 3 s a MiB), and real compose files are a few KiB."""
MAX_FILES = 8
"""The most compose files one devcontainer.json may list."""
MAX_VALUES = 100_000
"""The most values read from all the compose files, aliases counted each time used."""
MAX_DEPTH = 64
"""The deepest nesting read."""

Scalar = str | int | float | bool | None


@dataclass(slots=True)
class Node:
    """One value of a compose file: a scalar, a mapping or a list, and where it was written."""

    value: Scalar | dict[str, Node] | list[Node]
    file: Path
    line: int  # 1-based: the key's line for a mapping's value, the item's for a list's

    @property
    def mapping(self) -> dict[str, Node] | None:
        return self.value if isinstance(self.value, dict) else None

    @property
    def items(self) -> list[Node] | None:
        return self.value if isinstance(self.value, list) else None

    @property
    def scalar(self) -> Scalar:
        return None if isinstance(self.value, dict | list) else self.value

    def plain(self) -> object:
        """The value as plain Python (for showing it)."""
        if (mapping := self.mapping) is not None:
            return {key: item.plain() for key, item in mapping.items()}
        if (items := self.items) is not None:
            return [item.plain() for item in items]
        return self.value


def read_bounded(path: Path, what: str) -> str:
    """*path*'s text: a regular file of at most :data:`MAX_FILE_SIZE` bytes, in UTF-8.

    Opened without blocking (a FIFO the agent planted must not hang the host).
    """
    return read_agent_text(path, MAX_FILE_SIZE, what, DevcontainerError)


# --- YAML → nodes -----------------------------------------------------------------------


@dataclass(slots=True)
class _Budget:
    left: int = MAX_VALUES

    def spend(self, file: Path, line: int) -> None:
        self.left -= 1
        if self.left < 0:
            raise DevcontainerError(
                file,
                f"the compose files hold over {MAX_VALUES} values (a YAML alias counts each"
                " time it is used): Cloister reads no more",
                line,
            )


_TAG = "tag:yaml.org,2002:"


def _scalar(node: ScalarNode) -> Scalar:
    """A plain scalar as YAML 1.2 (compose's) resolves it; anything unusual stays text."""
    text = cast("str", node.value)
    tag = node.tag or ""
    kind = tag.removeprefix(_TAG) if tag.startswith(_TAG) else "str"
    try:
        if kind == "null":
            return None
        if kind == "bool":
            return text.lower() == "true"
        if kind == "int":
            return int(text.replace("_", ""), 0)
        if kind == "float" and not text.lstrip("+-").startswith("."):
            return float(text.replace("_", ""))
    except ValueError:
        pass
    return text


def _convert(node: YamlNode, file: Path, budget: _Budget, depth: int) -> Node:
    line = node.start_mark.line + 1
    budget.spend(file, line)
    if depth > MAX_DEPTH:
        raise DevcontainerError(file, "its values are nested too deeply", line)
    if isinstance(node, MappingNode):
        return Node(_mapping(node, file, budget, depth), file, line)
    if isinstance(node, SequenceNode):
        items = cast("list[YamlNode]", node.value)
        return Node([_convert(item, file, budget, depth + 1) for item in items], file, line)
    return Node(_scalar(cast("ScalarNode", node)), file, line)


def _mapping(node: MappingNode, file: Path, budget: _Budget, depth: int) -> dict[str, Node]:
    """A mapping's keys and values; ``<<`` merges as YAML says (its own keys win)."""
    result: dict[str, Node] = {}
    merged: dict[str, Node] = {}
    for key_node, value_node in cast("list[tuple[YamlNode, YamlNode]]", node.value):
        key_line = key_node.start_mark.line + 1
        if key_node.tag == _TAG + "merge":
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in cast("list[YamlNode]", sources):
                if not isinstance(source, MappingNode):
                    raise DevcontainerError(file, "'<<' merges only mappings", key_line)
                for name, item in _mapping(source, file, budget, depth + 1).items():
                    merged.setdefault(name, item)
            continue
        if not isinstance(key_node, ScalarNode):
            raise DevcontainerError(file, "a key must be text", key_line)
        key = str(key_node.value)
        if key in result:
            raise DevcontainerError(
                file, f"key {key!r} is given twice in the same mapping; keep one", key_line
            )
        value = _convert(value_node, file, budget, depth + 1)
        value.line = key_line  # a value is found at its key
        result[key] = value
    return {**merged, **result}


def parse_compose_text(text: str, file: Path, budget: _Budget | None = None) -> Node:
    """One compose file's text as a :class:`Node` (a mapping), errors at file:line.

    The node graph is composed, not constructed: an alias is the same node again,
    counted each time it is used (:data:`MAX_VALUES`).
    """
    yaml = YAML(typ="safe", pure=True)
    try:
        document = yaml.compose(io.StringIO(text))
    except MarkedYAMLError as error:
        problem = yaml_problem(error, text)
        raise DevcontainerError(file, problem.message, problem.line, problem.column) from None
    except YAMLError as error:
        raise DevcontainerError(file, f"invalid YAML: {' '.join(str(error).split())}") from None
    except RecursionError:
        raise DevcontainerError(file, "its values are nested too deeply") from None
    if document is None:
        return Node({}, file, 1)
    if not isinstance(document, MappingNode):
        kind = "a list" if isinstance(document, SequenceNode) else "a scalar"
        raise DevcontainerError(file, f"expected a mapping at the top, got {kind}", 1)
    return _convert(document, file, budget or _Budget(), 0)


# --- normalising and merging ------------------------------------------------------------


def _wrong(node: Node, where: str, expected: str) -> DevcontainerError:
    shown = repr(node.plain())
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return DevcontainerError(node.file, f"{where}: expected {expected}, got {shown}", node.line)


def _named_list(node: Node, where: str, *, with_values: bool) -> Node:
    """The list form of ``environment``/``build.args`` (``K=V``) or ``depends_on`` (names)
    as the mapping form; ``K`` without ``=`` maps to None (compose reads the host's)."""
    if node.mapping is not None:
        return node
    items = node.items
    if items is None:
        raise _wrong(node, where, "a mapping or a list")
    result: dict[str, Node] = {}
    for item in items:
        if not isinstance(item.scalar, str) or isinstance(item.value, bool):
            raise _wrong(item, where, "a string")
        text = item.scalar
        if with_values:
            name, equals, value = text.partition("=")
            result[name] = Node(value if equals else None, item.file, item.line)
        else:
            result[text] = Node({}, item.file, item.line)
    return Node(result, node.file, node.line)


def volume_target(node: Node) -> str | None:
    """The container path a service's volume entry mounts on (short or long syntax)."""
    if (mapping := node.mapping) is not None:
        target = mapping.get("target")
        return str(target.scalar) if target is not None and target.scalar is not None else None
    if isinstance(node.scalar, str):
        parts = node.scalar.split(":")
        return parts[1] if len(parts) > 1 else parts[0]
    return None


def _normalise_service(service: Node, where: str) -> None:
    mapping = service.mapping
    if mapping is None:
        raise _wrong(service, where, "a mapping")
    if "environment" in mapping:
        mapping["environment"] = _named_list(
            mapping["environment"], f"{where}.environment", with_values=True
        )
    if "depends_on" in mapping:
        mapping["depends_on"] = _named_list(
            mapping["depends_on"], f"{where}.depends_on", with_values=False
        )
    build = mapping.get("build")
    if build is not None and isinstance(build.scalar, str):
        mapping["build"] = build = Node({"context": build}, build.file, build.line)
    if (
        build is not None
        and (build_mapping := build.mapping) is not None
        and "args" in build_mapping
    ):
        build_mapping["args"] = _named_list(
            build_mapping["args"], f"{where}.build.args", with_values=True
        )
    for key in ("env_file", "tmpfs", "dns", "dns_search"):
        if key in mapping and isinstance(mapping[key].scalar, str):
            node = mapping[key]
            mapping[key] = Node([node], node.file, node.line)


_REPLACED = frozenset({"command", "entrypoint", "test"})


def _merge(base: Node, over: Node, key: str) -> Node:
    base_mapping, over_mapping = base.mapping, over.mapping
    if base_mapping is not None and over_mapping is not None:
        merged = dict(base_mapping)
        for name, value in over_mapping.items():
            merged[name] = _merge(merged[name], value, name) if name in merged else value
        return Node(merged, base.file, base.line)
    base_items, over_items = base.items, over.items
    if base_items is None or over_items is None or key in _REPLACED:
        return over
    if key == "volumes":
        by_target = {volume_target(item) or repr(item.plain()): item for item in base_items}
        by_target.update((volume_target(item) or repr(item.plain()), item) for item in over_items)
        return Node(list(by_target.values()), over.file, over.line)
    seen = {repr(item.plain()) for item in base_items}
    added = [item for item in over_items if repr(item.plain()) not in seen]
    return Node([*base_items, *added], base.file, base.line)


def load_compose_files(files: tuple[Path, ...]) -> Node:
    """The compose files read, normalised and merged in order (see the module's text)."""
    if len(files) > MAX_FILES:
        raise DevcontainerError(files[MAX_FILES], f"Cloister reads at most {MAX_FILES} files")
    budget = _Budget()
    merged: Node | None = None
    for file in files:
        document = parse_compose_text(read_bounded(file, "a compose file"), file, budget)
        top = cast("dict[str, Node]", document.value)
        services = top.get("services")
        if services is not None:
            if (service_map := services.mapping) is None:
                raise _wrong(services, "services", "a mapping of services")
            for name, service in service_map.items():
                _normalise_service(service, f"services.{name}")
        merged = document if merged is None else _merge(merged, document, "")
    assert merged is not None  # noqa: S101 (the loader passes at least one file)
    return merged


# --- interpolation ----------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = (":-", ":?", ":+", "-", "?", "+")


class InterpolationError(ValueError):
    """A ``${…}`` compose refuses (bad syntax, or ``${VAR:?message}`` of an unset VAR)."""


@dataclass(slots=True)
class Interpolated:
    """A value after interpolation, and the host variables it was not given."""

    text: str
    secrets: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Interpolator:
    """Compose's ``${VAR}`` for one project: its ``.env`` and the allowed host environment."""

    environ: Mapping[str, str]
    dotenv: Mapping[str, str]

    def lookup(self, name: str, secrets: list[str]) -> str | None:
        # Compose prefers the host's value; a secret-looking one is never read from the
        # host, and the project's own .env may still give it.
        if looks_secret(name):
            if name in self.dotenv:
                return self.dotenv[name]
            secrets.append(name)
            return None
        if name in self.environ:
            return self.environ[name]
        return self.dotenv.get(name)

    def interpolate(self, text: str) -> Interpolated:
        result = Interpolated("")
        result.text = self._run(text, result.secrets)
        return result

    def _run(self, text: str, secrets: list[str]) -> str:
        out: list[str] = []
        index = 0
        while (dollar := text.find("$", index)) >= 0:
            out.append(text[index:dollar])
            following = text[dollar + 1 : dollar + 2]
            if following == "$":
                out.append("$")
                index = dollar + 2
            elif following == "{":
                end = _closing_brace(text, dollar + 2)
                out.append(self._braced(text[dollar + 2 : end], secrets))
                index = end + 1
            elif match := _NAME.match(text, dollar + 1):
                out.append(self.lookup(match.group(), secrets) or "")
                index = match.end()
            else:
                out.append("$")
                index = dollar + 1
        out.append(text[index:])
        return "".join(out)

    def _braced(self, inner: str, secrets: list[str]) -> str:
        match = _NAME.match(inner)
        if match is None:
            raise InterpolationError(f"invalid interpolation format: ${{{inner}}}")
        name, rest = match.group(), inner[match.end() :]
        value = self.lookup(name, secrets)
        if not rest:
            return value or ""
        operator = next((op for op in _OPERATORS if rest.startswith(op)), None)
        if operator is None:
            raise InterpolationError(f"invalid interpolation format: ${{{inner}}}")
        argument = rest[len(operator) :]
        unset = value is None or (operator.startswith(":") and not value)
        if operator.endswith("-"):
            return self._run(argument, secrets) if unset else cast("str", value)
        if operator.endswith("+"):
            return "" if unset else self._run(argument, secrets)
        if unset and not (secrets and secrets[-1] == name):
            message = self._run(argument, secrets) or f"{name} is not set"
            raise InterpolationError(f"required variable {name} is missing a value: {message}")
        return value or ""


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    raise InterpolationError(f"invalid interpolation format: {text[start - 2 :]!r} is not closed")


# --- env files --------------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


def parse_env_file(text: str) -> Iterator[tuple[int, str, str | None]]:
    """``(line, name, value)`` for each ``NAME=value`` line of an env file; a ``NAME``
    alone yields None (compose reads it from the host). Quotes as compose reads them:
    single quotes literal, double quotes with backslash escapes, an unquoted value ends
    at `` #``."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals:
            yield number, name, None
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == '"' and value.rfind('"') > 0:
            body = value[1 : value.rfind('"')]
            value = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)
        else:
            value = value.split(" #", 1)[0].rstrip()
        yield number, name, value
