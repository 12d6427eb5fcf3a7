"""The decision store: allow/deny entries the approval hub persists, and their undo.

Decision files (``decisions/global.yaml``, ``decisions/projects/<p>.yaml``, and one per
running cloister, ``decisions/sessions/<cloister>.yaml``, removed when it stops) are
shared by the hub that writes them, the proxy and the hostexec gateway that reload them
and the human who may edit them. Domain entries go under ``allow``/``deny``; commands a
human approved beyond "once" under ``hostexec.auto_approve`` (the exact command,
anchored). Every change is a locked read-modify-write of the round-trip YAML document, so

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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from cloister_core.config.loader import load_text, parse_yaml, round_trip_yaml, validate_document
from cloister_core.config.models import CommandPattern, DecisionFile, RuleEntry
from cloister_core.fileio import atomic_write, locked
from cloister_core.paths import CloisterPaths
from cloister_core.rules import RuleAction

DecisionScope = Literal["global", "project", "session"]

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


@dataclass(frozen=True, slots=True)
class CommandChange:
    """What approving (or undoing) one command did to one file."""

    path: Path
    pattern: str
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

    def path_for(self, scope: DecisionScope, owner: str | None = None) -> Path:
        """The file of *scope*; *owner* is the project (project) or the cloister (session)."""
        if scope == "global":
            return self._paths.global_decisions
        if owner is None:
            raise ValueError(f"a {scope} decision needs its {scope}'s name")
        if scope == "session":
            return self._paths.session_decisions(owner)
        return self._paths.project_decisions(owner)

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
            where = {
                "global": "all projects",
                "project": f"project {project}",
                "session": f"the session of cloister {project}; removed when it stops",
            }[scope]
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

    def add_command(
        self, scope: DecisionScope, command: str, owner: str | None = None
    ) -> CommandChange:
        """Approve the exact *command* (canonical form) in the *scope* file."""
        return self._change_command(scope, command, owner, add=True)

    def remove_command(
        self, scope: DecisionScope, command: str, owner: str | None = None
    ) -> CommandChange:
        """Undo :meth:`add_command`; ``changed`` is False if it was not there."""
        return self._change_command(scope, command, owner, add=False)

    def _change_command(
        self, scope: DecisionScope, command: str, owner: str | None, *, add: bool
    ) -> CommandChange:
        pattern = command_pattern(command)
        path = self.path_for(scope, owner)
        with locked(path):
            if not add and load_text(path) is None:
                return CommandChange(path, pattern, changed=False)
            document = self._read_document(path, scope, owner)
            section = document.get("hostexec")
            if not isinstance(section, CommentedMap):
                section = CommentedMap()
                document["hostexec"] = section
            sequence = section.get("auto_approve")
            present = [
                index
                for index, node in enumerate(sequence or ())
                if isinstance(node, dict) and node.get("pattern") == pattern
            ]
            if add == bool(present):
                return CommandChange(path, pattern, changed=False)
            if add:
                if not isinstance(sequence, CommentedSeq) or sequence.fa.flow_style():
                    sequence = CommentedSeq(list(sequence or ()))
                    section["auto_approve"] = sequence
                node = CommentedMap()
                node["pattern"] = pattern
                sequence.append(node)
            else:
                del sequence[present[0]]
            atomic_write(path, _dump(document), mode=0o644)
        return CommandChange(path, pattern, changed=True)


def command_pattern(command: str) -> str:
    """The pattern that approves exactly *command* (its canonical form) and nothing else."""
    pattern = "^" + re.escape(command) + "$"
    CommandPattern(pattern=pattern)  # it compiles
    return pattern


def remove_session_decisions(paths: CloisterPaths, cloister: str) -> bool:
    """Forget a cloister's session (at stop, and before a cloister of that name starts)."""
    path = paths.session_decisions(cloister)
    if not path.parent.is_dir():
        return False
    with locked(path):  # not in the middle of the hub's write
        try:
            path.unlink()
        except FileNotFoundError:
            return False
    return True
