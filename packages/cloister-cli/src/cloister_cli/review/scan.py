"""One pass over the work tree, plus the git reads, into a :class:`TreeScan`.

The detectors are pure functions of the scan, so the tree is walked once however many
kinds there are. The walk never follows a link (``os.scandir`` entries, ``lstat``
semantics), skips the top-level ``.git``, does not enter a nested ``.git`` directory
(its git directory is inspected, :mod:`.nested`) but does enter the nested work tree:
repositories nest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cloister_cli.review.files import Entry, read_below, read_entry, read_tree
from cloister_cli.review.findings import ReviewTarget
from cloister_cli.review.gitreads import Git, ParsedConfig
from cloister_cli.review.gitstate import GitDirState, read_state
from cloister_cli.review.nested import NestedRepo, dotgit_kind, inspect
from cloister_cli.review.places import Places

LEFTHOOK_NAMES = frozenset(
    f"{stem}.{extension}"
    for stem in ("lefthook", ".lefthook", "lefthook-local", ".lefthook-local")
    for extension in ("yml", "yaml", "json", "toml")
)
# Files at the top of the work tree that decide what the human's hook managers run.
HOOK_FILES: dict[str, str] = {
    ".pre-commit-config.yaml": "pre-commit",
    ".overcommit.yml": "overcommit",
    **dict.fromkeys(LEFTHOOK_NAMES, "lefthook"),
}
# Directories at the top whose every file is a hook (or a hook manager's script).
HOOK_DIRECTORIES: dict[str, str] = {
    ".husky": "husky",
    ".lefthook": "lefthook",
    ".githooks": "githooks",
}
TASKS_FILE = ".vscode/tasks.json"
GITMODULES = ".gitmodules"
HOOK_DIRECTORY_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class Marked:
    """A work-tree file a detector cares about (a link is recorded, not followed)."""

    relative: str
    entry: Entry
    label: str = ""  # hook configs: which manager reads it ("husky", "hooks", …)


@dataclass(slots=True)
class TreeScan:
    """What one review saw: the work tree's files of interest and the git state."""

    places: Places
    nested: list[NestedRepo] = field(default_factory=list)
    attributes: list[Marked] = field(default_factory=list)  # regular .gitattributes
    envrcs: list[Marked] = field(default_factory=list)
    symlinks: list[Marked] = field(default_factory=list)
    hook_configs: list[Marked] = field(default_factory=list)
    tasks: Entry | None = None
    gitmodules: Entry | None = None
    gitmodules_config: ParsedConfig = field(default_factory=ParsedConfig)
    gitlinks: Mapping[str, str] = field(default_factory=dict)  # path -> commit
    unsafe_entries: Mapping[str, str] = field(default_factory=dict)  # path -> why
    hooks_dir: Path | None = None
    git_state: GitDirState = field(default_factory=GitDirState)
    info_attributes: Entry | None = None

    @property
    def is_git(self) -> bool:
        return self.places.git_dir is not None


def scan(target: ReviewTarget, git: Git | None = None) -> TreeScan:
    """Walk *target*'s work tree once and ask git what only git knows."""
    git = git or Git()
    places = Places.of(target.worktree, target.git_dir, target.common_dir)
    result = TreeScan(places)
    _walk(result, git)
    root = places.worktree
    result.tasks = read_below(root, TASKS_FILE)
    result.gitmodules = read_below(root, GITMODULES)
    if result.gitmodules is not None and result.gitmodules.kind == "file":
        result.gitmodules_config = git.parse_config(result.gitmodules.data)
    if places.git_dir is not None and places.common_dir is not None:
        result.gitlinks, result.unsafe_entries = git.index_entries(root)
        result.hooks_dir = git.hooks_dir(root)
        result.git_state = read_state(places.git_dir, places.common_dir)
        result.info_attributes = read_below(places.common_dir, "info/attributes")
        _hooks_directory(result)
    return result


def _tree(root: Path) -> Iterator[tuple[str, os.DirEntry[str], bool, bool]]:
    """Every entry below *root*: (relative prefix, entry, is a link, is a directory).

    Links are never followed and no directory named ``.git`` is entered; one directory
    listing is open at a time.
    """
    pending: list[tuple[str, str]] = [(str(root), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            listing = os.scandir(directory)
        except OSError:
            continue
        with listing:
            for item in listing:
                try:
                    is_link = item.is_symlink()
                    is_dir = not is_link and item.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir and item.name != ".git":
                    pending.append((item.path, f"{prefix}{item.name}/"))
                yield prefix, item, is_link, is_dir


def nested_git_entries(worktree: Path) -> list[Path]:
    """The ``.git`` entries (directory, gitfile or link) of repositories below the top.

    Only a walk, no git: for planning what to keep read-only before a cloister starts.
    """
    found = []
    for prefix, item, is_link, is_dir in _tree(worktree):
        if item.name != ".git" or not prefix:
            continue
        entry = None if is_dir or is_link else read_entry(item.path)
        if is_dir or is_link or (entry is not None and dotgit_kind(entry) is not None):
            found.append(Path(item.path))
    return sorted(found)


def _walk(result: TreeScan, git: Git) -> None:
    real_root = result.places.real_worktree
    for prefix, item, is_link, is_dir in _tree(result.places.worktree):
        relative = prefix + item.name
        if item.name == ".git" and not prefix:
            continue  # the reviewed repository's own
        if is_link:
            result.symlinks.append(
                Marked(relative, Entry(Path(item.path), "symlink", link=_readlink(item)))
            )
        if item.name == ".git":
            _nested(result, git, real_root, prefix[:-1], item.path)
        elif not is_dir:
            _file(result, relative, item)


def _readlink(item: os.DirEntry[str]) -> str | None:
    try:
        return str(Path(item.path).readlink())
    except OSError:
        return None


def _file(result: TreeScan, relative: str, item: os.DirEntry[str]) -> None:
    """Record one non-directory entry if a detector cares about it."""
    name = item.name
    top, below, _ = relative.partition("/")
    label = HOOK_DIRECTORIES.get(top, "") if below else HOOK_FILES.get(name, "")
    if name not in {".gitattributes", ".envrc"} and not label:
        return
    entry = read_entry(item.path)
    if entry is None:
        return
    marked = Marked(relative, entry, label)
    if label:
        result.hook_configs.append(marked)
    if name == ".gitattributes" and entry.kind == "file":
        result.attributes.append(marked)
    elif name == ".envrc" and entry.kind in {"file", "symlink"}:
        result.envrcs.append(marked)


def _nested(result: TreeScan, git: Git, real_root: Path, relative: str, path: str) -> None:
    entry = read_entry(path)
    if entry is None:
        return
    repo = inspect(git, result.places.worktree, real_root, relative, entry)
    if repo is not None:
        result.nested.append(repo)


def _hooks_directory(result: TreeScan) -> None:
    """Every file of the effective hooks dir when the agent could write it (work tree)."""
    places = result.places
    hooks = result.hooks_dir
    if hooks is None or places.common_dir is None:
        return
    relative = places.show(hooks)
    if Path(relative).is_absolute() or hooks == places.common_dir / "hooks":
        return  # outside the project, or .git/hooks: read-only to the agent
    known = {item.relative for item in result.hook_configs}
    for entry in read_tree(places.worktree, relative, limit=HOOK_DIRECTORY_LIMIT):
        shown = places.show(entry.path)
        if shown not in known:
            result.hook_configs.append(Marked(shown, entry, "hooks"))
