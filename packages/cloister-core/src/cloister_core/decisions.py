"""The decision store: allow/deny entries the approval hub persists, and their undo.

Decision files (``decisions/global.yaml``, ``decisions/projects/<p>.yaml``) are shared
by the hub that writes them, the proxy that reloads them and the human who may edit
them. Every change is a locked read-modify-write of the round-trip YAML document, so

* concurrent writers (threads or processes) never lose each other's entries;
* the write is atomic (a reader sees the old or the new file, never a torn one);
* the human's comments and ordering survive;
* a file that does not parse is never overwritten: the error names its line, and the
  change is refused, so nothing the human wrote is lost.

Adding an entry that is already there changes nothing and says so (``added=False``),
which is what lets an undo remove exactly the entry its decision wrote.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from cloister_core.config.loader import load_text, parse_yaml, round_trip_yaml, validate_document
from cloister_core.config.models import DecisionFile, RuleEntry
from cloister_core.fileio import atomic_write, locked
from cloister_core.paths import CloisterPaths
from cloister_core.rules import RuleAction

DecisionScope = Literal["global", "project"]

_HEADER = (
    "Decisions made in the Cloister approval UI ({where}).\n"
    "Merged with config.yaml and projects/*.yaml; a deny anywhere beats every allow.\n"
    "You may edit this file; comments are kept when Cloister adds or removes entries."
)


@dataclass(frozen=True, slots=True)
class DecisionChange:
    """What one add or remove did to one file."""

    path: Path
    action: RuleAction
    entry: RuleEntry
    changed: bool


def _entry_node(entry: RuleEntry) -> CommentedMap:
    node = CommentedMap()
    if entry.domain is not None:
        node["domain"] = entry.domain
    else:
        node["pattern"] = entry.pattern
    if entry.ports is not None:
        ports = CommentedSeq(entry.ports)
        ports.fa.set_flow_style()
        node["ports"] = ports
    return node


def _dump(document: Any) -> str:
    buffer = io.StringIO()
    round_trip_yaml().dump(document, buffer)
    return buffer.getvalue()


class DecisionStore:
    """Read and change the decision files under one config directory."""

    def __init__(self, paths: CloisterPaths) -> None:
        self._paths = paths

    def path_for(self, scope: DecisionScope, project: str | None = None) -> Path:
        if scope == "global":
            return self._paths.global_decisions
        if project is None:
            raise ValueError("a project decision needs a project name")
        return self._paths.project_decisions(project)

    def load(self, scope: DecisionScope, project: str | None = None) -> DecisionFile:
        """The validated content of one decision file (empty when absent)."""
        path = self.path_for(scope, project)
        text = load_text(path)
        if text is None:
            return DecisionFile()
        return validate_document(parse_yaml(text, path), DecisionFile, path)

    def _read_document(self, path: Path, scope: DecisionScope, project: str | None) -> Any:
        text = load_text(path)
        if text is None or not text.strip():
            document = CommentedMap()
            where = "all projects" if scope == "global" else f"project {project}"
            document.yaml_set_start_comment(_HEADER.format(where=where))
            return document
        document = parse_yaml(text, path)
        validate_document(document, DecisionFile, path)  # refuse to touch a broken file
        return document if document is not None else CommentedMap()

    @staticmethod
    def _find(sequence: Any, entry: RuleEntry) -> int | None:
        for index, node in enumerate(sequence or ()):
            if RuleEntry.model_validate(node) == entry:
                return index
        return None

    def add(
        self,
        scope: DecisionScope,
        action: RuleAction,
        entry: RuleEntry,
        project: str | None = None,
    ) -> DecisionChange:
        """Add *entry* to the *action* list; ``changed`` is False if it was there."""
        path = self.path_for(scope, project)
        with locked(path):
            document = self._read_document(path, scope, project)
            sequence = document.get(action)
            if self._find(sequence, entry) is not None:
                return DecisionChange(path, action, entry, changed=False)
            if not isinstance(sequence, CommentedSeq) or sequence.fa.flow_style():
                # Absent, `allow:` with nothing, or `[]`: start a block list.
                sequence = CommentedSeq(list(sequence or ()))
                document[action] = sequence
            sequence.append(_entry_node(entry))
            atomic_write(path, _dump(document), mode=0o644)
        return DecisionChange(path, action, entry, changed=True)

    def remove(
        self,
        scope: DecisionScope,
        action: RuleAction,
        entry: RuleEntry,
        project: str | None = None,
    ) -> DecisionChange:
        """Remove *entry* from the *action* list (undo); ``changed`` is False if absent."""
        path = self.path_for(scope, project)
        with locked(path):
            if load_text(path) is None:
                return DecisionChange(path, action, entry, changed=False)
            document = self._read_document(path, scope, project)
            sequence = document.get(action)
            index = self._find(sequence, entry)
            if index is None:
                return DecisionChange(path, action, entry, changed=False)
            del sequence[index]
            atomic_write(path, _dump(document), mode=0o644)
        return DecisionChange(path, action, entry, changed=True)
