"""Read YAML files into the models, with errors that point at file, line and column.

ruamel.yaml's round-trip loader keeps the position of every key and item, so when
pydantic rejects a value we walk the error's location back through the document to
the line a human has to fix. Syntax errors are put in plain words by
:mod:`cloister_core.config.yamlerrors`.
"""

from __future__ import annotations

import difflib
import io
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from cloister_core.config.yamlerrors import yaml_problem
from cloister_core.errors import ConfigError, ConfigProblem

ModelT = TypeVar("ModelT", bound=BaseModel)


def round_trip_yaml() -> YAML:
    """A YAML instance that keeps comments, order and positions."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def parse_yaml(text: str, path: Path) -> Any:
    """Parse *text* (the content of *path*) keeping comments and positions."""
    try:
        return round_trip_yaml().load(io.StringIO(text))
    except MarkedYAMLError as error:
        raise ConfigError(path, [yaml_problem(error, text)]) from None
    except YAMLError as error:
        message = " ".join(str(error).split())
        raise ConfigError(path, [ConfigProblem(f"invalid YAML: {message}")]) from None


def _position(node: Any, loc: tuple[int | str, ...], *, key_of_last: bool) -> tuple[int, int]:
    """Best (line, column), 0-based, for a pydantic error location inside *node*."""
    line, column = 0, 0
    if isinstance(node, CommentedMap | CommentedSeq):
        line, column = node.lc.line, node.lc.col
    for depth, step in enumerate(loc):
        last = depth == len(loc) - 1
        if isinstance(node, CommentedMap) and step in node:
            if last and key_of_last:
                line, column = node.lc.key(step)
            else:
                line, column = node.lc.value(step)
            node = node[step]
        elif isinstance(node, CommentedSeq) and isinstance(step, int) and 0 <= step < len(node):
            line, column = node.lc.item(step)
            node = node[step]
        elif isinstance(step, str) and not step.isidentifier():
            # pydantic inserts validator names such as "function-after[...]"; skip them.
            continue
        else:
            break
        if isinstance(node, CommentedMap | CommentedSeq) and not last:
            line, column = node.lc.line, node.lc.col
    return line, column


def position(document: Any, loc: tuple[int | str, ...]) -> tuple[int, int]:
    """The 1-based (line, column) of the value at *loc* (keys and indexes) in *document*."""
    line, column = _position(document, loc, key_of_last=False)
    return line + 1, column + 1


def key_position(document: Any, loc: tuple[int | str, ...]) -> tuple[int, int]:
    """The 1-based (line, column) of the key at *loc* in *document* (of its value when the
    last step is an index)."""
    line, column = _position(document, loc, key_of_last=True)
    return line + 1, column + 1


def _unwrap(annotation: Any) -> Any:
    """The model class inside ``X | None``, ``tuple[X, ...]``, ``Annotated[X, ...]``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list, dict):
        for arg in typing.get_args(annotation):
            inner = _unwrap(arg)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return annotation


def _allowed_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names of the model that owns the key at *loc* (for "did you mean")."""
    current: Any = model
    for step in loc[:-1]:
        if isinstance(step, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(str(step)) or next(
            (each for each in current.model_fields.values() if each.alias == step), None
        )
        if field is None:
            return []
        current = _unwrap(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        # As written in the file: a field named after a keyword has its alias there.
        return [field.alias or name for name, field in current.model_fields.items()]
    return []


def _dotted(loc: tuple[int | str, ...]) -> str:
    text = ""
    for step in loc:
        if isinstance(step, int):
            text += f"[{step}]"
        elif step.isidentifier():
            text += f".{step}" if text else step
    return text or "(top level)"


def _problem(error: Any, document: Any, model: type[BaseModel]) -> ConfigProblem:
    merged_loc: tuple[int | str, ...] = tuple(error["loc"])
    # A model that merges parts of its file (DecisionFile) says where an item came from.
    source_loc = getattr(model, "source_loc", None)
    loc = source_loc(document, merged_loc) if callable(source_loc) else merged_loc
    kind = error["type"]
    line, column = _position(document, loc, key_of_last=kind == "extra_forbidden")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = _allowed_keys(model, merged_loc)
        message = f"unknown key {key!r}"
        if _dotted(loc[:-1]) != "(top level)":
            message += f" in {_dotted(loc[:-1])}"
        close = difflib.get_close_matches(key, allowed, n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
        elif allowed:
            message += f" (expected one of: {', '.join(allowed)})"
    else:
        text = str(error["msg"]).removeprefix("Value error, ")
        message = f"{_dotted(loc)}: {text}"
        if kind not in ("missing", "value_error") and "input" in error:
            given = error["input"]
            if loc[:1] == ("agents",) and isinstance(given, str):
                # under agents, a misplaced string may be a key someone pasted: not echoed
                message += f" (got a string of {len(given)} characters)"
            else:
                message += f" (got {given!r})"
    return ConfigProblem(message, line + 1, column + 1)


def validate_document(document: Any, model: type[ModelT], path: Path) -> ModelT:
    """Validate a parsed YAML document as *model*; errors name file and line."""
    if document is None:
        document = CommentedMap()
    if not isinstance(document, dict):
        raise ConfigError(
            path,
            [
                ConfigProblem(
                    f"expected a mapping of keys at the top, got {type(document).__name__}", 1, 1
                )
            ],
        )
    try:
        return model.model_validate(document)
    except ValidationError as error:
        problems = [_problem(item, document, model) for item in error.errors()]
        raise ConfigError(path, problems) from None


def load_text(path: Path) -> str | None:
    """The file's text, ``None`` if it does not exist; unreadable files are errors."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(path, [ConfigProblem(f"cannot read file: {error}")]) from None


def load_model(path: Path, model: type[ModelT]) -> ModelT:
    """Load *path* as *model*; a missing file gives the model's defaults."""
    text = load_text(path)
    if text is None:
        return model()
    return validate_document(parse_yaml(text, path), model, path)
