"""One pass over the work tree, plus the few git reads, into a :class:`TreeScan`.

Only the work tree is reviewed: the human shares it, live, with the agent. The git
directory is the human's own (a cloister commits to one of its own, never to this
one), so the walk skips a git project's top-level ``.git`` and git is only asked where
the human's hooks are and which paths the human's index holds as gitlinks.

The detectors are pure functions of the scan, so the tree is walked once however many
kinds there are. The walk never follows a link (``os.scandir`` entries, ``lstat``
semantics), does not enter a nested ``.git`` directory (its git directory is inspected,
:mod:`.nested`) but does enter the nested work tree: repositories nest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cloister_cli.session.review.files import Entry, inside, read_below, read_entry, read_tree
from cloister_cli.session.review.findings import ReviewTarget
from cloister_cli.session.review.gitreads import Git, ParsedConfig
from cloister_cli.session.review.nested import NestedRepo, dotgit_kind, inspect
from cloister_cli.session.review.places import Places

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
WORKSPACE_SUFFIX = ".code-workspace"
# What mise reads as config in a directory (and, for .tool-versions, renders as
# templates), relative to that directory or to its .config/.
MISE_FILE = re.compile(
    r"(?:^|/)(?:"
    r"\.?mise(?:\.[^/]+)?\.toml"  # mise.toml, .mise.toml, mise.local.toml, mise.<env>.toml
    r"|\.?mise/config(?:\.[^/]+)?\.toml"  # mise/config.toml, .mise/config.local.toml
    r"|\.?mise/conf\.d/[^/]+\.toml"
    r"|\.tool-versions"
    r")$"
)
GITMODULES = ".gitmodules"
HOOK_DIRECTORY_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class Marked:
    """A work-tree file a detector cares about (a link is recorded, not followed)."""

    relative: str
    entry: Entry
    # hook configs: which manager reads it ("husky", "hooks", …); mise configs: the
    # directory mise applies it to ("" at the top, "sub/")
    label: str = ""


@dataclass(slots=True)
class TreeScan:
    """What one review saw: the work tree's files of interest, and two git answers."""

    places: Places
    nested: list[NestedRepo] = field(default_factory=list)
    attributes: list[Marked] = field(default_factory=list)  # regular .gitattributes
    envrcs: list[Marked] = field(default_factory=list)
    symlinks: list[Marked] = field(default_factory=list)
    hook_configs: list[Marked] = field(default_factory=list)
    tasks: list[Marked] = field(default_factory=list)  # every .vscode/tasks.json
    workspaces: list[Marked] = field(default_factory=list)  # every *.code-workspace
    mise: list[Marked] = field(default_factory=list)
    gitmodules: Entry | None = None
    gitmodules_config: ParsedConfig = field(default_factory=ParsedConfig)
    gitlinks: Mapping[str, str] = field(default_factory=dict)  # the human's index: path -> commit
    hooks_dir: Path | None = None

    @property
    def is_git(self) -> bool:
        return self.places.git_dir is not None

    def regular(self, entry: Entry) -> Entry | None:
        """*entry* if a regular file, or what it links to when that is a regular file
        inside the work tree (read without crossing a link); None otherwise."""
        if entry.kind == "file":
            return entry
        if entry.kind != "symlink" or entry.link is None:
            return None
        real = os.path.realpath(entry.path)
        root = self.places.real_worktree
        if not inside(real, root) or real == str(root):
            return None
        found = read_below(root, Path(real).relative_to(root).as_posix())
        return found if found is not None and found.kind == "file" else None


def scan(target: ReviewTarget, git: Git | None = None) -> TreeScan:
    """Walk *target*'s work tree once and ask git what only git knows."""
    git = git or Git()
    places = Places.of(target.worktree, target.git_dir, target.common_dir)
    result = TreeScan(places)
    _walk(result, git)
    root = places.worktree
    result.gitmodules = read_below(root, GITMODULES)
    if result.gitmodules is not None and result.gitmodules.kind == "file":
        result.gitmodules_config = git.parse_config(result.gitmodules.data)
    if result.is_git:
        result.gitlinks = git.gitlinks(root)
        result.hooks_dir = git.hooks_dir(root)
        _hooks_directory(result)
    return result


def mise_directory(relative: str) -> str | None:
    """The directory mise applies the file at *relative* to ("" at the top, "sub/"), or
    None when mise reads no config there."""
    match = MISE_FILE.search(relative)
    if match is None:
        return None
    directory = relative[: match.start()]
    if directory == ".config" or directory.endswith("/.config"):
        directory = directory.removesuffix(".config").rstrip("/")
    return f"{directory}/" if directory else ""


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
        if item.name == ".git" and not prefix and result.is_git:
            continue  # the human's own git directory: never the agent's
        if is_link:
            result.symlinks.append(
                Marked(relative, Entry(Path(item.path), "symlink", link=_readlink(item)))
            )
        if item.name == ".git":
            # In a project without git, a .git at the top is the agent's as well.
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
    mise = mise_directory(relative) if name.endswith((".toml", ".tool-versions")) else None
    workspace = name.endswith(WORKSPACE_SUFFIX)
    tasks = relative == TASKS_FILE or relative.endswith("/" + TASKS_FILE)
    wanted = label or workspace or tasks or mise is not None
    if not wanted and name not in {".gitattributes", ".envrc"}:
        return
    entry = read_entry(item.path)
    if entry is None:
        return
    if label:
        result.hook_configs.append(Marked(relative, entry, label))
    if entry.kind not in {"file", "symlink"}:
        return  # a FIFO or a device: nothing reads it as any of these
    if name == ".gitattributes" and entry.kind == "file":
        result.attributes.append(Marked(relative, entry))
    elif name == ".envrc":
        result.envrcs.append(Marked(relative, entry))
    elif workspace:
        result.workspaces.append(Marked(relative, entry))
    elif tasks:
        result.tasks.append(Marked(relative, entry))
    elif mise is not None:
        result.mise.append(Marked(relative, entry, mise))


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
