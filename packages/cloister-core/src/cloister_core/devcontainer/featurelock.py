"""``devcontainer-lock.json``: the digests Features were first installed at.

The specification's lock file, beside devcontainer.json (``.devcontainer-lock.json``
beside a root ``.devcontainer.json``)::

    {"features": {"<id as written>": {"version": "2.16.1",
                                      "resolved": "<registry>/<path>@sha256:…",
                                      "integrity": "sha256:…"}}}

The CLI writes it on first use and checks every fetch against it after; it is part of
the approved shape, so a changed digest asks like any other change. It lies in the
agent's directory: it is read like devcontainer.json (bounded, comments allowed,
errors at file:line) and an entry that is not well formed is an error, never skipped.
Written as the devcontainers CLI writes it: keys sorted, two spaces, a final newline.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from cloister_core.devcontainer.featuremeta import FeatureError
from cloister_core.devcontainer.featureorder import collation_key
from cloister_core.devcontainer.jsonc import parse_located
from cloister_core.devcontainer.model import DevcontainerError
from cloister_core.devcontainer.reading import read_agent_text
from cloister_core.jsonc import Location

MAX_LOCK_SIZE = 1024 * 1024
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class LockEntry:
    """One Feature's pin: ``resolved`` is ``<registry>/<path>@sha256:…``."""

    version: str
    resolved: str
    integrity: str  # sha256:<64 hex digits>, the manifest digest for an OCI Feature
    depends_on: tuple[str, ...] = ()  # the ids of its dependsOn, as the CLI records them

    def __post_init__(self) -> None:
        if not _DIGEST.fullmatch(self.integrity):
            raise ValueError(f"integrity {self.integrity!r} is not sha256:<64 hex digits>")
        # A tarball Feature's entry (the CLI writes them; Cloister refuses such Features)
        # resolves to its URL; an OCI Feature's to the manifest it was installed from.
        oci = "://" not in self.resolved
        if oci and not self.resolved.endswith("@" + self.integrity):
            raise ValueError(f"resolved {self.resolved!r} does not end in @{self.integrity}")


@dataclass(frozen=True, slots=True)
class LockFile:
    """A lock file's entries by Feature id as written in devcontainer.json.

    ``exists`` is False when there is no file; an empty file is the spec's way to ask
    for one (``exists`` True, no entries): either way the CLI writes it after a build.
    """

    path: Path
    entries: Mapping[str, LockEntry] = field(default_factory=dict)
    exists: bool = False


def lock_path_for(devcontainer_path: Path) -> Path:
    """``devcontainer-lock.json`` beside it (``.devcontainer-lock.json`` for a dot file)."""
    dotted = devcontainer_path.name.startswith(".")
    name = ".devcontainer-lock.json" if dotted else "devcontainer-lock.json"
    return devcontainer_path.parent / name


def _read(path: Path) -> str | None:
    """The file's text (None if there is none); a link or a non-regular file is an error."""
    if not os.path.lexists(path):
        return None
    return read_agent_text(path, MAX_LOCK_SIZE, "the lock file", FeatureError, follow_links=False)


def read_lock(path: Path) -> LockFile:
    """Read *path*; a missing or empty file is a LockFile with no entries.

    Errors (:class:`~cloister_core.devcontainer.featuremeta.FeatureError`) name the file
    and the line: malformed JSON, an entry without ``version``/``resolved``/``integrity``,
    a digest that is not ``sha256:<64 hex>``, a ``resolved`` not ending in it.
    """
    text = _read(path)
    if text is None:
        return LockFile(path)
    if not text.strip():
        return LockFile(path, exists=True)
    try:
        document, positions = parse_located(text, path)
    except DevcontainerError as problem:
        raise FeatureError(path, problem.message, problem.line, problem.column) from None

    def error(location: Location, message: str) -> FeatureError:
        found = positions.locate(location)
        line, column = found if found is not None else (None, None)
        return FeatureError(path, message, line, column)

    if not isinstance(document, dict):
        raise FeatureError(path, 'expected {"features": {…}}', 1, 1)
    features = cast("dict[str, object]", document).get("features", {})
    if not isinstance(features, dict):
        raise error(("features",), "features: expected an object")
    entries: dict[str, LockEntry] = {}
    for feature_id, raw in cast("dict[str, object]", features).items():
        entries[feature_id] = _entry(feature_id, raw, error)
    return LockFile(path, entries, exists=True)


def _entry(
    feature_id: str, raw: object, fail: Callable[[Location, str], FeatureError]
) -> LockEntry:
    where = ("features", feature_id)
    if not isinstance(raw, dict):
        raise fail(where, f"features[{feature_id!r}]: expected an object")
    entry = cast("dict[str, object]", raw)
    values: dict[str, str] = {}
    for key in ("version", "resolved", "integrity"):
        value = entry.get(key)
        if not isinstance(value, str):
            raise fail((*where, key), f"features[{feature_id!r}].{key}: expected a string")
        values[key] = value
    depends = entry.get("dependsOn", [])
    if not isinstance(depends, list) or not all(isinstance(item, str) for item in depends):
        message = f"features[{feature_id!r}].dependsOn: expected a list of strings"
        raise fail((*where, "dependsOn"), message)
    try:
        return LockEntry(
            values["version"],
            values["resolved"],
            values["integrity"],
            tuple(cast("list[str]", depends)),
        )
    except ValueError as problem:
        raise fail(where, f"features[{feature_id!r}]: {problem}") from None


def render_lock(entries: Mapping[str, LockEntry]) -> str:
    """The file's text, as the devcontainers CLI writes it (ids sorted, two spaces)."""
    features: dict[str, dict[str, object]] = {}
    for feature_id in sorted(entries, key=collation_key):
        entry = entries[feature_id]
        item: dict[str, object] = {
            "version": entry.version,
            "resolved": entry.resolved,
            "integrity": entry.integrity,
        }
        if entry.depends_on:
            item["dependsOn"] = list(entry.depends_on)
        features[feature_id] = item
    return json.dumps({"features": features}, indent=2, ensure_ascii=False) + "\n"
