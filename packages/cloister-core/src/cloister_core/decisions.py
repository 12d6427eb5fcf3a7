"""The decision store: allow/deny entries the approval hub persists, and their undo.

Decision files (``decisions/global.yaml``, ``decisions/projects/<p>.yaml``, and one per
running cloister, ``decisions/sessions/<cloister>.yaml``, removed when it stops) are
shared by the hub that writes them, the proxy and the hostexec gateway that reload them
and the human who may edit them; they are the user's alone (0600: every service runs as
the user). Domain entries go under ``proxy.allow``/``proxy.deny``, as in config.yaml (a
file that has them at the top, as earlier versions wrote it, keeps that shape); commands
a human approved beyond "once" under ``hostexec.auto_approve`` (the exact command,
anchored). Every change is a locked read-modify-write of the round-trip YAML document, so

* concurrent writers (threads or processes) never lose each other's entries;
* the write is atomic (a reader sees the old or the new file, never a torn one);
* the human's comments and ordering survive;
* a file that does not parse is never overwritten: the error names its line, and the
  change is refused, so nothing the human wrote is lost.

Adding an entry that is already there changes nothing and says so (``added=False``),
which is what lets an undo remove exactly the entry its decision wrote.

The Go implementation kept these files in ``approvals/``: :func:`migrate_approvals`
moves them to ``decisions/``.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from cloister_core.config.loader import load_text, parse_yaml, round_trip_yaml, validate_document
from cloister_core.config.models import CommandPattern, DecisionFile, RuleEntry
from cloister_core.fileio import atomic_write, locked
from cloister_core.paths import CloisterPaths
from cloister_core.patterns import literal
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


def _write(path: Path, document: Any) -> None:
    # The user's alone, an older 0644 file too (it is replaced).
    atomic_write(path, _dump(document), mode=0o600)


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

    @staticmethod
    def _lists(document: Any) -> Any:
        """The mapping that holds ``allow``/``deny`` in *document*: ``proxy`` (made when
        absent), or the top of a file that has its lists there and no ``proxy``."""
        if "proxy" not in document and ("allow" in document or "deny" in document):
            return document
        section = document.get("proxy")
        if not isinstance(section, CommentedMap):
            section = CommentedMap()
            document["proxy"] = section
        return section

    @staticmethod
    def _holders(document: Any) -> list[Any]:
        """Every mapping of *document* that may hold ``allow``/``deny`` lists."""
        holders = [document]
        if isinstance(document.get("proxy"), CommentedMap):
            holders.append(document["proxy"])
        return holders

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
            if any(
                self._find(held.get(action), entry) is not None for held in self._holders(document)
            ):
                return DecisionChange(path, action, entry, changed=False)
            lists = self._lists(document)
            sequence = lists.get(action)
            if not isinstance(sequence, CommentedSeq) or sequence.fa.flow_style():
                # Absent, `allow:` with nothing, or `[]`: start a block list.
                sequence = CommentedSeq(list(sequence or ()))
                lists[action] = sequence
            sequence.append(_entry_node(entry))
            _write(path, document)
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
            for held in self._holders(document):
                index = self._find(held.get(action), entry)
                if index is not None:
                    del held[action][index]
                    _write(path, document)
                    return DecisionChange(path, action, entry, changed=True)
        return DecisionChange(path, action, entry, changed=False)

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
            _write(path, document)
        return CommandChange(path, pattern, changed=True)


def command_pattern(command: str) -> str:
    """The pattern that approves exactly *command* (its canonical form) and nothing else."""
    pattern = literal(command)
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


@dataclass(frozen=True, slots=True)
class Migration:
    """What :func:`migrate_approvals` did: files moved, and those left (a file of that
    name was in ``decisions/`` already)."""

    moved: tuple[tuple[Path, Path], ...] = ()
    left: tuple[tuple[Path, Path], ...] = ()  # (the old file, the one in its way)

    def lines(self) -> list[str]:
        """What happened, a line each, for the human."""
        return [f"moved {source} to {target}" for source, target in self.moved] + [
            f"{source} was not moved: {target} exists; merge its entries there by hand,"
            " then remove it"
            for source, target in self.left
        ]


def migrate_approvals(paths: CloisterPaths) -> Migration:
    """Move the Go implementation's ``<config>/approvals/`` files into ``decisions/``.

    Its layout is the same (``global.yaml``, ``projects/<name>.yaml``) and both shapes of
    the files are read. A file already in ``decisions/`` is never replaced: the old one
    stays where it is, and ``approvals/`` with it; an emptied ``approvals/`` is removed.
    """
    old = paths.config_dir / "approvals"
    if old.is_symlink() or not old.is_dir():
        return Migration()
    moved: list[tuple[Path, Path]] = []
    left: list[tuple[Path, Path]] = []
    for source in sorted([old / "global.yaml", *(old / "projects").glob("*.yaml")]):
        if source.is_symlink() or not source.is_file():
            continue
        target = paths.decisions_dir / source.relative_to(old)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with locked(target):
            if target.exists():
                left.append((source, target))
                continue
            source.chmod(0o600)
            source.rename(target)
        moved.append((source, target))
    for directory in (old / "projects", old):
        with contextlib.suppress(OSError):  # not empty: something is left for the human
            directory.rmdir()
    return Migration(tuple(moved), tuple(left))
