"""What the reviewed repository's own git directories hold that git would act on.

The agent can write ``.git`` (it must, to commit): it can leave links and FIFOs there,
alternates, ``info/`` files, or a made-up operation in progress whose ``exec`` lines a
``--continue`` would run. Read here without following any link (:mod:`.files`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cloister_cli.review.files import Entry, digest, inside, read_below, read_tree
from cloister_core.gitdir import ALTERNATES_FILES, SpecialEntry, SpecialScanner

# Directories of an operation in progress, and the files that say what comes next.
OPERATION_DIRECTORIES: dict[str, tuple[str, ...]] = {
    "rebase-merge": ("git-rebase-todo",),
    "sequencer": ("todo",),
    "rebase-apply": ("next", "last", "applying", "rebasing"),
}
OPERATION_HEADS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD")
EXEC_COMMANDS = frozenset({"exec", "x"})


@dataclass(frozen=True, slots=True)
class Special:
    """A symbolic link or FIFO in a git directory."""

    path: Path
    entry: SpecialEntry


@dataclass(frozen=True, slots=True)
class Operation:
    """An operation in progress: a state directory, or a ``*_HEAD`` file."""

    name: str  # "rebase-merge", "MERGE_HEAD", …
    path: Path
    files: tuple[Entry, ...]  # the todo files (or the head file itself)

    @property
    def content_digest(self) -> str:
        return digest(
            self.name,
            *(part for entry in self.files for part in (entry.path.name, entry.content_digest)),
        )

    @property
    def exec_lines(self) -> tuple[str, ...]:
        """The ``exec``/``x`` lines of its todo list: commands ``--continue`` runs."""
        lines: list[str] = []
        for entry in self.files:
            if entry.path.name not in {"git-rebase-todo", "todo"}:
                continue
            for line in entry.lines:
                command, _, rest = line.strip().partition(" ")
                if command in EXEC_COMMANDS and rest.strip():
                    lines.append(rest.strip())
        return tuple(lines)


@dataclass(frozen=True, slots=True)
class GitDirState:
    """Everything of interest in the reviewed repository's git directories."""

    specials: tuple[Special, ...] = ()
    alternates: tuple[Entry, ...] = ()
    info_files: tuple[Entry, ...] = ()
    operations: tuple[Operation, ...] = ()


def _roots(git_dir: Path, common_dir: Path) -> list[Path]:
    """The common dir, and the work tree's own git dir when it is not inside it."""
    return [common_dir] + ([] if inside(git_dir, common_dir) else [git_dir])


def read_state(git_dir: Path, common_dir: Path) -> GitDirState:
    specials: list[Special] = []
    info_files: list[Entry] = []
    for root in _roots(git_dir, common_dir):
        for relative, special in sorted(SpecialScanner().scan(root).items()):
            specials.append(Special(root / relative, special))
    info_roots = [common_dir] + ([] if git_dir == common_dir else [git_dir])
    for root in info_roots:
        info_files.extend(entry for entry in read_tree(root, "info") if entry.kind == "file")
    alternates = [
        found
        for name in ALTERNATES_FILES
        if (found := read_below(common_dir, name)) is not None and found.kind == "file"
    ]
    return GitDirState(
        specials=tuple(specials),
        alternates=tuple(alternates),
        info_files=tuple(info_files),
        operations=tuple(_operations(git_dir)),
    )


def _operations(git_dir: Path) -> list[Operation]:
    found: list[Operation] = []
    for name, todo in OPERATION_DIRECTORIES.items():
        entry = read_below(git_dir, name)
        if entry is None or entry.kind != "directory":
            continue
        files = tuple(
            item for file in todo if (item := read_below(git_dir, f"{name}/{file}")) is not None
        )
        found.append(Operation(name, git_dir / name, files))
    for name in OPERATION_HEADS:
        entry = read_below(git_dir, name)
        if entry is not None and entry.kind == "file":
            found.append(Operation(name, git_dir / name, (entry,)))
    return found
