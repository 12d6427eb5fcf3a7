"""What a repository nested in the work tree would make git do.

Git obeys a repository's own config, hooks and ``commondir`` when the human runs git
inside it, and when git enters it from the project (a gitlink in the human's index
makes ``git status`` recurse). Its git directory is read only when it lies inside the
work tree (by path and by real path): one that points elsewhere is reported as such
and never opened, it may be the human's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cloister_cli.session.review.files import (
    READ_LIMIT,
    Entry,
    inside,
    read_below,
    read_entry,
)
from cloister_cli.session.review.gitreads import Git, ParsedConfig
from cloister_core.beneath import open_directory

CONFIG_FILES = ("config", "config.worktree")
GITFILE_PREFIX = b"gitdir:"

DotGitKind = Literal["directory", "gitfile", "symlink"]


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """One config file of a nested repository: its entry and, if read, its entries."""

    name: str  # "config" or "config.worktree"
    entry: Entry
    parsed: ParsedConfig | None  # None: not a regular file, unreadable or too big


@dataclass(frozen=True, slots=True)
class NestedRepo:
    """A ``.git`` the agent may have made, and what its git directory holds."""

    relative: str  # the nested work tree, relative ("sub", "a/b"; "" at the top)
    dotgit: Entry  # the ``.git`` entry itself
    dotgit_kind: DotGitKind
    pointer: str | None  # a gitfile's "gitdir:" value or a link's text, as written
    git_dir: Path  # where git finds its git directory (lexically resolved)
    git_dir_inside: bool  # inside the work tree, by path and real path: it was read
    configs: tuple[ConfigFile, ...] = ()
    hooks: tuple[Entry, ...] = ()  # executable hooks (and linked ones), no samples
    commondir: Entry | None = None

    @property
    def where(self) -> str:
        """Its work tree as the human reads it: "sub/", or "./" at the top."""
        return f"{self.relative}/" if self.relative else "./"

    def below(self, name: str) -> str:
        """*name* in its work tree, relative to the reviewed one ("sub/.git")."""
        return f"{self.relative}/{name}" if self.relative else name


def dotgit_kind(entry: Entry) -> DotGitKind | None:
    """What a ``.git`` entry is to git, None when git would not take it as one."""
    if entry.kind == "directory":
        return "directory"
    if entry.kind == "symlink":
        return "symlink"
    if entry.kind == "file" and entry.data.lstrip().startswith(GITFILE_PREFIX):
        return "gitfile"
    return None


def inspect(
    git: Git, worktree: Path, real_worktree: Path, relative: str, entry: Entry
) -> NestedRepo | None:
    """The nested repository whose ``.git`` is *entry* at ``worktree/relative/.git``."""
    kind = dotgit_kind(entry)
    if kind is None:
        return None
    pointer: str | None = None
    if kind == "directory":
        git_dir = entry.path
        real_relative: str | None = f"{relative}/.git" if relative else ".git"
    else:
        if kind == "gitfile":
            first = entry.text.splitlines()[0] if entry.text else ""
            pointer = first.split(":", 1)[1].strip() if ":" in first else ""
        else:
            pointer = entry.link or ""
        git_dir = Path(os.path.normpath(entry.path.parent / pointer))
        real = os.path.realpath(git_dir)
        real_relative = None
        if inside(git_dir, worktree) and inside(real, real_worktree) and real != str(real_worktree):
            real_relative = Path(real).relative_to(real_worktree).as_posix()
    if real_relative is None:
        return NestedRepo(relative, entry, kind, pointer, git_dir, git_dir_inside=False)
    configs = tuple(
        _config(git, name, found)
        for name in CONFIG_FILES
        if (found := read_below(real_worktree, f"{real_relative}/{name}")) is not None
    )
    return NestedRepo(
        relative,
        entry,
        kind,
        pointer,
        git_dir,
        git_dir_inside=True,
        configs=configs,
        hooks=_hooks(real_worktree, real_relative, git_dir),
        commondir=read_below(real_worktree, f"{real_relative}/commondir"),
    )


def _config(git: Git, name: str, entry: Entry) -> ConfigFile:
    if entry.kind != "file" or entry.error is not None or entry.size > READ_LIMIT:
        return ConfigFile(name, entry, None)
    return ConfigFile(name, entry, git.parse_config(entry.data))


def _hooks(root: Path, relative: str, git_dir: Path) -> tuple[Entry, ...]:
    """Hooks git would run: executable files and links, ``*.sample`` excepted."""
    found: list[Entry] = []
    with open_directory(root, [*relative.split("/"), "hooks"]) as fd:
        if fd is None:
            return ()
        try:
            names = sorted(os.listdir(fd))  # noqa: PTH208 - a descriptor, not a path
        except OSError:
            return ()
        for name in names:
            if name.endswith(".sample"):
                continue
            entry = read_entry(name, dir_fd=fd)
            if entry is not None and (entry.executable or entry.kind == "symlink"):
                found.append(
                    Entry(
                        git_dir / "hooks" / name,
                        entry.kind,
                        entry.data,
                        entry.size,
                        entry.link,
                        entry.mode,
                        entry.error,
                    )
                )
    return tuple(found)
