"""What a cloister mounts for git, and the paths of the work tree it gets read-only.

The work tree the human shares with the agent is hostile input to whatever on the host
later reads it. A cloister gets:

* its own git directory (:mod:`cloister_cli.repo.gitdirs`) where the project's is: at
  ``/work/.git``, with ``config`` and ``hooks`` read-only over it; or, when
  ``/work/.git`` is a file on the host (a worktree cloister, a project that is a linked
  worktree), elsewhere with a read-only ``/work/.git`` file naming it. The human's
  object store is read-only at :data:`cloister_core.owngit.ORIGIN_OBJECTS` (and their
  submodules' git directories read-only at ``.git/modules``); the human's ``.git`` is
  never mounted;
* the code-running paths of the work tree read-only (:func:`_repository_paths`): a
  ``core.hooksPath`` inside the project (husky's ``.husky`` whole), the files a hook
  framework reads to decide what to run (``.pre-commit-config.yaml``, lefthook's,
  overcommit's), every ``include.path``/``includeIf`` target inside the project, and
  the ``.git`` of every repository nested in the project when the cloister starts
  (whole: the agent works in its own git directory, never in one of the human's);
* the *protected paths* of the configuration (``protect.paths``: ``.envrc``,
  ``.vscode/tasks.json``, ``.devcontainer``, …), in a project without git too.

A missing protected path is created empty first (a *placeholder*, or stand-in: an empty
directory, which git and direnv ignore, where an empty file would show as untracked), so
the agent cannot create it either. What was made is recorded in the cloister's session
record, and only that is removed, if still empty: at stop, or by the next ``start``,
``stop`` or ``gc`` when that stop did not get so far (:func:`cloister_cli.session.ending.
remove_stand_ins`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from docker.types import Mount

from cloister_cli.repo import git
from cloister_core import beneath
from cloister_core.errors import CloisterError
from cloister_core.owngit import (
    GIT_DIR_ELSEWHERE,
    GIT_DIR_IN_WORK,
    ORIGIN_ALTERNATES,
    ORIGIN_OBJECTS,
)
from cloister_core.repository import HumanRepository

WORK = PurePosixPath("/work")
# Files hook frameworks read to decide what a hook runs, by the word their hook holds.
HOOK_FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "pre-commit": (".pre-commit-config.yaml",),
    "lefthook": (
        *(f"{stem}.{ext}" for stem in ("lefthook", ".lefthook", "lefthook-local",
                                       ".lefthook-local")
          for ext in ("yml", "yaml", "json", "toml")),
        ".lefthook", ".lefthook-local",
    ),
    "overcommit": (".overcommit.yml",),
}  # fmt: skip
# Each nested repository costs a few mounts; more than this refuses the start (rather
# than leaving some of them writable).
MAX_NESTED = 100


class UnusualRepositoryError(CloisterError):
    """A git layout whose code-running files Cloister cannot keep out of reach."""


class ProtectedPathError(CloisterError):
    """A configured protected path that cannot be kept read-only as it is."""


def bind(source: Path, target: PurePosixPath | Path | str, *, read_only: bool) -> Mount:
    return Mount(target=str(target), source=str(source), type="bind", read_only=read_only)


@dataclass(frozen=True, slots=True)
class Protection:
    """A path of the work tree kept read-only, and why (told to the user)."""

    path: Path
    reason: str
    kind: Literal["git", "configured"] = "git"  # found in git's setup, or protect.paths
    stand_in: bool = False  # it did not exist: an empty directory stands in for it


@dataclass(slots=True)
class GitPlan:
    """The git part of a cloister: mounts, and what was protected or created."""

    mounts: list[Mount] = field(default_factory=list)  # of the work tree (checked)
    own_mounts: list[Mount] = field(default_factory=list)  # Cloister's git directory
    protections: list[Protection] = field(default_factory=list)
    placeholders: list[Path] = field(default_factory=list)
    common_dir: Path | None = None  # the human's repository (shared git directory)

    @property
    def protected(self) -> tuple[str, ...]:
        """Every read-only path of the work tree, relative to it (what hostexec's git
        must not write either)."""
        found = {
            PurePosixPath(str(mount["Target"])).relative_to(WORK).as_posix()
            for mount in self.mounts
            if mount["ReadOnly"] and PurePosixPath(str(mount["Target"])).is_relative_to(WORK)
        }
        return tuple(sorted(found))


def remove_placeholders(placeholders: Iterable[Path], worktree: Path) -> list[Path]:
    """Remove what :func:`plan` created, if it is still empty (deepest first), walking
    from the work tree without following a link: the agent may have put one on the way.
    The paths removed."""
    removed = []
    for path in sorted(placeholders, key=lambda item: len(item.parts), reverse=True):
        if (
            _inside(path, worktree)
            and path != worktree
            and beneath.remove_if_empty(worktree, path.relative_to(worktree).as_posix())
        ):
            removed.append(path)
    return removed


def stand_ins(placeholders: Iterable[Path]) -> list[Path]:
    """The stand-ins among *placeholders*: the protected paths themselves, not the
    directories made on the way to them (``.vscode/tasks.json``, not ``.vscode``)."""
    made = set(placeholders)
    return sorted(path for path in made if not any(path in other.parents for other in made))


# -- the cloister's own git directory ----------------------------------------------------------


def own_git_mounts(
    worktree: Path,
    git_dir: Path,
    repository: HumanRepository,
    alternates: Sequence[Path],
    pointer: Path,
) -> list[Mount]:
    """The cloister's git directory (read-write, but its config and hooks), and the
    human's object stores and submodules' git directories, read-only."""
    dot_git = worktree / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        inside = PurePosixPath(GIT_DIR_IN_WORK)
        mounts = [bind(git_dir, inside, read_only=False)]
    else:
        inside = PurePosixPath(GIT_DIR_ELSEWHERE)
        mounts = [
            bind(pointer, GIT_DIR_IN_WORK, read_only=True),
            bind(git_dir, inside, read_only=False),
        ]
    mounts += [
        bind(git_dir / "config", inside / "config", read_only=True),
        bind(git_dir / "hooks", inside / "hooks", read_only=True),
        bind(repository.common / "objects", ORIGIN_OBJECTS, read_only=True),
    ]
    mounts += [
        bind(path, f"{ORIGIN_ALTERNATES}/{number}", read_only=True)
        for number, path in enumerate(alternates)
    ]
    if (repository.common / "objects/info/alternates").is_file():
        # Host paths, which do not exist inside (the cloister's alternates list them
        # at their mounts): an empty file over it, or git complains at every command.
        mounts.append(bind(Path(os.devnull), f"{ORIGIN_OBJECTS}/info/alternates", read_only=True))
    modules = repository.common / "modules"
    if modules.is_dir() and not modules.is_symlink():
        mounts.append(bind(modules, inside / "modules", read_only=True))
    return mounts


# -- code-running paths in the work tree -----------------------------------------------------


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def _through_symlink(path: Path, root: Path) -> bool:
    """Whether a component of *path* below *root* is a symbolic link (the agent could
    repoint it, whatever is mounted where it points now)."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return True
    return False


@dataclass(slots=True)
class _TreeScan:
    """Finds what to protect in one work tree; collects mounts, reasons and placeholders.

    A read-only mount cannot be renamed or removed, but the directory holding it can be
    renamed (the mount travels with it) and a new one made in its place: so every
    directory between the root and a protected path is made a mount point too (of
    itself, read-write), and then cannot be renamed either.
    """

    plan: GitPlan
    worktree: Path
    roots: tuple[Path, ...]  # where the agent writes: the work tree
    already: list[Path]  # covered already (the cloister's own git directory)
    pinned: set[Path] = field(default_factory=set)  # directories that are mount points
    create: bool = True  # False: plan only (``cloister start --dry-run``), nothing is made

    def covered(self, path: Path) -> bool:
        return any(_inside(path, done) for done in self.already)

    def protect(
        self,
        path: Path,
        reason: str,
        *,
        directory: bool = False,
        tell: bool = True,
        kind: Literal["git", "configured"] = "git",
    ) -> None:
        """Make *path* read-only (creating it empty when missing), if the agent could write
        it; *tell* lists it in the line ``cloister start`` prints."""
        root = next((root for root in self.roots if _inside(path, root)), None)
        if root is None or path == root or self.covered(path):
            return
        if _through_symlink(path, root):
            raise UnusualRepositoryError(
                f"{str(path)!r} ({reason}) is reached through a symbolic link inside the"
                " project, which the agent could point elsewhere; make it a real path"
            )
        missing = not path.exists()
        if missing and self.create:
            self._make(path, root, directory=directory)
        # Directories pinned (read-write) on the way to read-only paths inside this one
        # are read-only with it now: Docker mounts the deeper ones last, over this one.
        inner = {pinned for pinned in self.pinned if _inside(pinned, path)}
        if inner:
            self.pinned -= inner
            targets = {str(self.container_path(pinned)) for pinned in inner}
            self.plan.mounts = [
                mount for mount in self.plan.mounts if mount["Target"] not in targets
            ]
        self._pin_ancestors(path, root)
        self.already.append(path)
        self.plan.mounts.append(bind(path, self.container_path(path), read_only=True))
        if tell and _inside(path, self.worktree):
            self.plan.protections.append(Protection(path, reason, kind, stand_in=missing))

    def _make(self, path: Path, root: Path, *, directory: bool) -> None:
        """Create *path* empty, and the directories to it; all are placeholders."""
        missing = [path, *(parent for parent in path.parents if _inside(parent, root))]
        missing = [item for item in missing if not item.exists()]
        if directory:
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o644)
        self.plan.placeholders.extend(missing)

    def _pin_ancestors(self, path: Path, root: Path) -> None:
        for ancestor in reversed(path.parents):
            if ancestor in self.roots or ancestor in self.pinned or not _inside(ancestor, root):
                continue
            if any(_inside(ancestor, done) for done in self.already):
                continue
            self.pinned.add(ancestor)
            self.plan.mounts.append(bind(ancestor, self.container_path(ancestor), read_only=False))

    def container_path(self, path: Path) -> PurePosixPath:
        return WORK / path.relative_to(self.worktree).as_posix()


def _hook_frameworks(hooks: Path) -> set[str]:
    """Which hook frameworks installed the hooks in *hooks* (by what their scripts say)."""
    found: set[str] = set()
    with contextlib.suppress(OSError), os.scandir(hooks) as entries:
        for entry in entries:
            if entry.name.endswith(".sample") or not entry.is_file(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                head = Path(entry.path).read_bytes()[:16384].decode("utf-8", "replace")
                found.update(name for name in HOOK_FRAMEWORKS if name in head)
    return found


def _include_target(include: git.Include, worktree: Path, home: Path) -> Path | None:
    value = include.value
    if value.startswith("~/"):
        return home / value[2:]
    if value.startswith("%(prefix)/"):
        return None  # relative to git's install prefix: not the project
    origin = include.origin if include.origin.is_absolute() else worktree / include.origin
    target = Path(value)
    return target if target.is_absolute() else origin.parent / target


def _repository_paths(scan: _TreeScan, checkout: Path, home: Path, place: Path) -> None:
    """The code-running paths of the repository whose work tree is *checkout* (as its
    git there sees them) that lie in the cloister's work tree. *place* is where
    *checkout* is in that work tree: the work tree itself for the human's repository
    (the cloister may work in a worktree of its own), the repository's own directory
    for one nested in the project."""

    def here(path: Path) -> Path | None:
        normal = Path(os.path.normpath(path))
        if _inside(normal, checkout / ".git"):
            return None
        if _inside(normal, checkout):
            return place / normal.relative_to(checkout)
        # A nested repository's hooks or includes elsewhere in the project.
        return normal if _inside(normal, scan.worktree) else None

    hooks_directory = git.hooks_directory(checkout)
    hooks = here(hooks_directory)
    if hooks is not None:
        husky = place / ".husky"
        if _inside(hooks, husky):  # husky's hooks run the scripts beside them
            scan.protect(husky, "husky runs your hooks from it", directory=True)
        else:
            scan.protect(hooks, "core.hooksPath runs your hooks from it", directory=True)
    for framework in sorted(_hook_frameworks(hooks_directory)):
        for name in HOOK_FRAMEWORKS[framework]:
            # A missing one too (an empty directory stands in): the agent would otherwise
            # create the file your next commit's hook reads and runs.
            exists = (place / name).exists()
            scan.protect(
                place / name,
                f"your {framework} hook runs what it lists",
                directory=not exists,
                tell=exists,
            )
    for include in git.includes(checkout):
        target = _include_target(include, checkout, home)
        inside = here(target) if target is not None else None
        if inside is not None:
            scan.protect(inside, "your git config includes it")


def _nested_repositories(scan: _TreeScan, nested: Sequence[Path], home: Path) -> None:
    """Repositories nested in the project at start: each ``.git`` read-only whole (the
    human's git run inside one obeys it), and their own code-running paths."""
    if len(nested) > MAX_NESTED:
        listed = ", ".join(str(path.parent) for path in sorted(nested)[:5])
        raise UnusualRepositoryError(
            f"{scan.worktree} holds {len(nested)} git repositories ({listed}, …); Cloister"
            f" keeps the git directories of up to {MAX_NESTED} read-only. Remove those you"
            " do not need, or start the cloister in a subdirectory"
        )
    for dot_git in sorted(nested):
        if dot_git.is_symlink() or scan.covered(dot_git):
            continue
        scan.protect(dot_git, "a repository nested in the project", tell=False)
        with contextlib.suppress(git.GitError):
            _repository_paths(scan, dot_git.parent, home, dot_git.parent)


def _check_configured(worktree: Path, protect: Sequence[str]) -> None:
    """Refuse a protected path that cannot be mounted as it is, before anything is made."""
    for relative in protect:
        path = worktree / relative
        if _through_symlink(path, worktree):
            raise ProtectedPathError(
                f"protected path {relative!r} is, or is reached through, a symbolic link in"
                f" {str(worktree)!r}: the agent could point it elsewhere, and a mount would"
                " follow it. Make it a real file or directory, or drop it with"
                " protect.except in the project's file (projects/<project>.yaml)"
            )
        if path.exists() and not (path.is_file() or path.is_dir()):
            raise ProtectedPathError(
                f"protected path {relative!r} in {str(worktree)!r} is neither a file nor a"
                " directory"
            )


def _configured_paths(scan: _TreeScan, protect: Sequence[str]) -> None:
    """The protected paths of the configuration (relative, validated by the config
    model), each read-only; a missing one becomes an empty directory."""
    for relative in protect:
        try:
            scan.protect(
                scan.worktree / relative, "protect.paths", directory=True, kind="configured"
            )
        except OSError as error:  # a directory of the project this user may not write
            raise ProtectedPathError(
                f"cannot make the stand-in for protected path {relative!r} in"
                f" {str(scan.worktree)!r}: {error.strerror or error}"
            ) from None


# -- the plan --------------------------------------------------------------------------------


def plan(
    worktree: Path,
    *,
    repository: HumanRepository | None,
    home: Path,
    nested: Iterable[Path] = (),
    create: bool = True,
    protect: Sequence[str] = (),
) -> GitPlan:
    """The read-only paths of a cloister working in *worktree*: git's code-running ones
    (of *repository*, the human's, when the project uses git) and the protected paths
    *protect* (relative to *worktree*).

    With *create* False nothing is written (no placeholder): the same mounts, for
    ``cloister start --dry-run``, naming paths that a start would create. *nested* are
    the ``.git`` entries of repositories nested in the work tree (found by the
    start-time review scan). The cloister's own git directory is :func:`own_git_mounts`.
    """
    result = GitPlan(common_dir=repository.common if repository is not None else None)
    _check_configured(worktree, protect)
    scan = _TreeScan(result, worktree, (worktree,), [worktree / ".git"], create=create)
    if repository is not None:
        _repository_paths(scan, repository.checkout, home, worktree)
        _nested_repositories(scan, list(nested), home)
    _configured_paths(scan, protect)  # after git's: a path both protect says why git's way
    return result
