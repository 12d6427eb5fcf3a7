"""A cloister's git directories, with everything host git would run code from read-only.

Whatever the agent can write in ``/work`` is hostile input to the git the human runs
on the host afterwards (and to ``hostexec git``). So a cloister gets:

* the repository's git directory as a mount of its own (it cannot be renamed away and
  replaced), with ``hooks``, ``config``, a pinned ``commondir``, the other worktrees'
  and the submodules' git directories, ``config.worktree`` and, for a linked
  worktree, its ``.git`` file and pointers read-only (:func:`_git_directory_files`);
* the code-running paths that live in the work tree read-only (:func:`_tree_paths`):
  a ``core.hooksPath`` inside the project (husky's ``.husky`` whole), the files a hook
  framework reads to decide what to run (``.pre-commit-config.yaml``, lefthook's,
  overcommit's), every ``include.path``/``includeIf`` target inside the project or
  the git directory, ``.gitmodules`` (git takes per-submodule settings from it, which
  would override the guard of :mod:`cloister_cli.gitguard`; when there is none, an
  empty read-only directory stands in, so git never falls back to the index's copy,
  which the agent writes), and the git directories of repositories nested in the
  project when the cloister starts (config and hooks, or the ``.git`` file);
* the *protected paths* of the configuration (``protect.paths``: ``.envrc``,
  ``.vscode/tasks.json``, ``.devcontainer``, …), in a project without git too.

A missing directory or include target is created empty first (a *placeholder*), so
the agent cannot create it either; placeholders are removed when the last cloister of
the repository stops, if still empty. A missing protected path is an empty directory
too, even where a file belongs: git and direnv ignore an empty directory, while an
empty file would show as untracked (and be committed by ``git add -A`` inside).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from docker.types import Mount

from cloister_cli import git
from cloister_core import beneath
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write

WORK = PurePosixPath("/work")
# A main git directory never holds ``commondir``; git would read the repository (config,
# hooks) from wherever one pointed. "." names the directory itself: git reads it as if
# there were none, and the read-only mount keeps the agent from writing another.
COMMONDIR_PIN = ".\n"
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
# Each nested repository costs a dozen mounts; more than this refuses the start (rather
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

    mounts: list[Mount] = field(default_factory=list)
    layout: git.Layout | None = None
    protections: list[Protection] = field(default_factory=list)
    placeholders: list[Path] = field(default_factory=list)
    pins: list[Path] = field(default_factory=list)  # commondir pins made in nested repositories
    gitlinks: list[str] = field(default_factory=list)

    @property
    def common_dir(self) -> Path | None:
        return self.layout.common_dir if self.layout else None


# -- the commondir pin -------------------------------------------------------------------


def _pin_commondir(
    common: Path, made: list[Path] | None = None, *, strict: bool = True, create: bool = True
) -> Path:
    """``commondir`` holding the pin (created when missing, unless not *create*; recorded
    in *made* then); a different one is refused when *strict*, else kept (and made
    read-only)."""
    pin = common / "commondir"
    try:
        text = pin.read_text(encoding="utf-8")
    except FileNotFoundError:
        if create:
            atomic_write(pin, COMMONDIR_PIN, mode=0o644)
        if made is not None:
            made.append(pin)
        return pin
    if text != COMMONDIR_PIN and strict:
        raise UnusualRepositoryError(
            f"{str(pin)!r} exists ({text.strip()!r}): this repository's configuration lives"
            " elsewhere, and Cloister cannot keep it read-only"
        )
    return pin


def unpin_commondir(common: Path) -> None:
    """Remove the pin :func:`plan` made (when no cloister uses the repository)."""
    pin = common / "commondir"
    with contextlib.suppress(OSError):
        if pin.read_text(encoding="utf-8") == COMMONDIR_PIN:
            pin.unlink()


def remove_placeholders(placeholders: Iterable[Path], roots: Iterable[Path]) -> None:
    """Remove what :func:`plan` created, if it is still empty (deepest first), walking
    from *roots* (the work tree, the git directory) without following a link: the agent
    may have put one on the way."""
    bases = list(roots)
    for path in sorted(placeholders, key=lambda item: len(item.parts), reverse=True):
        root = next((base for base in bases if _inside(path, base) and path != base), None)
        if root is not None:
            beneath.remove_if_empty(root, path.relative_to(root).as_posix())


# -- the git directory ---------------------------------------------------------------------


def _git_directory_files(
    plan: GitPlan,
    common: Path,
    gitdir: Path,
    *,
    per_worktree: bool,
    nested: bool = False,
    create: bool = True,
) -> list[Path]:
    """What git reads code to run from (or config that names it) in the git directory.

    ``hooks`` and ``config`` (``core.hooksPath``, ``core.fsmonitor``, aliases, filters);
    ``commondir``, which redirects the whole repository; ``worktrees`` and ``modules``,
    the git directories of the other worktrees and of submodules, each with its own
    config and pointers; ``config.worktree`` when ``extensions.worktreeConfig`` is on.
    """
    hooks = common / "hooks"
    if not hooks.exists() and create:
        hooks.mkdir()  # a missing directory could be created from inside
    # The project's own pin stays while any cloister uses the repository; one in a nested
    # repository of the human's is this session's (recorded, removed at the end).
    pin = (
        _pin_commondir(common, plan.pins, strict=False, create=create)
        if nested
        else _pin_commondir(common, create=create)
    )
    found = [hooks, common / "config", pin]
    # Remotes the old way (`remotes/<name>`, `branches/<name>`): `git push` takes a URL
    # from them, and a local path runs git-receive-pack, and hooks, in that repository.
    for legacy in (common / "remotes", common / "branches"):
        if not legacy.exists():
            if create:
                legacy.mkdir()
            plan.placeholders.append(legacy)
        found.append(legacy)
    # The other worktrees' and the submodules' git directories, each with its config and
    # pointers (a worktree's `commondir` names the configuration git reads). A missing
    # one too: a worktree or submodule the host adds while the cloister runs lands in it.
    for others in (common / "worktrees", common / "modules"):
        if not others.exists():
            if create:
                others.mkdir()
            plan.placeholders.append(others)
        found.append(others)
    for directory in dict.fromkeys((common, gitdir)):
        config_worktree = directory / "config.worktree"
        if per_worktree and not config_worktree.exists():
            if create:
                config_worktree.touch(mode=0o644)  # else the agent could create it
            found.append(config_worktree)
        elif config_worktree.exists():
            found.append(config_worktree)
    if gitdir != common:  # a linked worktree's own pointers
        found += [gitdir / name for name in ("commondir", "gitdir") if (gitdir / name).exists()]
    return found


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
    roots: tuple[Path, ...]  # the work tree and the git directories: where the agent writes
    already: list[Path]  # read-only already (the git directory's files)
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

    def container_path(self, path: Path) -> PurePosixPath | Path:
        if _inside(path, self.worktree):
            return WORK / path.relative_to(self.worktree).as_posix()
        layout = self.plan.layout
        if layout is not None and layout.git_dir == layout.common_dir:  # main: at /work/.git
            return WORK / ".git" / path.relative_to(layout.common_dir).as_posix()
        return path  # a linked worktree's repository is mounted at its host path


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


def _repository_paths(scan: _TreeScan, worktree: Path, common: Path, home: Path) -> None:
    """The code-running paths of the repository whose work tree is *worktree*."""
    hooks = Path(os.path.normpath(git.hooks_directory(worktree)))
    if _inside(hooks, worktree) and not _inside(hooks, worktree / ".git"):
        husky = worktree / ".husky"
        if _inside(hooks, husky):  # husky's hooks run the scripts beside them
            scan.protect(husky, "husky runs your hooks from it", directory=True)
        else:
            scan.protect(hooks, "core.hooksPath runs your hooks from it", directory=True)
    elif hooks != common / "hooks":
        scan.protect(hooks, "core.hooksPath runs your hooks from it", directory=True)
    for framework in sorted(_hook_frameworks(hooks)):
        for name in HOOK_FRAMEWORKS[framework]:
            # A missing one too (an empty directory stands in): the agent would otherwise
            # create the file your next commit's hook reads and runs.
            exists = (worktree / name).exists()
            scan.protect(
                worktree / name,
                f"your {framework} hook runs what it lists",
                directory=not exists,
                tell=exists,
            )
    for include in git.includes(worktree):
        target = _include_target(include, worktree, home)
        if target is not None:
            scan.protect(Path(os.path.normpath(target)), "your git config includes it")


def _gitmodules(scan: _TreeScan) -> None:
    gitmodules = scan.worktree / ".gitmodules"
    if gitmodules.is_symlink():
        raise UnusualRepositoryError(
            f"{str(gitmodules)!r} is a symbolic link: git ignores it and reads the index's"
            " copy, which the agent could write; make it a file"
        )
    if gitmodules.is_dir() and not any(gitmodules.iterdir()):
        scan.plan.placeholders.append(gitmodules)  # a stand-in an earlier start left
    scan.protect(
        gitmodules,
        "git takes submodule settings from it",
        directory=not gitmodules.exists(),
        tell=False,
    )


def _nested_repositories(scan: _TreeScan, nested: Sequence[Path], home: Path) -> None:
    """Repositories of the human's inside the project: each gets what the project's own
    gets (its git directory's code-running files, hooks path, hook frameworks' config,
    include targets), or the human's git run inside one would run the agent's code."""
    if len(nested) > MAX_NESTED:
        listed = ", ".join(str(path.parent) for path in sorted(nested)[:5])
        raise UnusualRepositoryError(
            f"{scan.worktree} holds {len(nested)} git repositories ({listed}, …); Cloister"
            f" keeps the code-running files of up to {MAX_NESTED} read-only. Remove those you"
            " do not need, or start the cloister in a subdirectory"
        )
    for dot_git in sorted(nested):
        repository = dot_git.parent
        if dot_git.is_symlink() or scan.covered(dot_git):
            continue
        if dot_git.is_file():
            scan.protect(dot_git, "it says where a nested repository's git directory is")
            with contextlib.suppress(git.GitError):
                common = git.layout(repository).common_dir
                _repository_paths(scan, repository, common, home)
        elif dot_git.is_dir():
            per_worktree = git.worktree_config(repository)
            files = _git_directory_files(
                scan.plan,
                dot_git,
                dot_git,
                per_worktree=per_worktree,
                nested=True,
                create=scan.create,
            )
            for path in files:
                scan.protect(path, "a repository inside the project runs code from it", tell=False)
            _repository_paths(scan, repository, dot_git, home)


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
    is_git: bool,
    home: Path,
    nested: Iterable[Path] = (),
    create: bool = True,
    protect: Sequence[str] = (),
) -> GitPlan:
    """The git mounts of a cloister working in *worktree*, and those of the protected
    paths *protect* (relative to *worktree*; for a project without git too).

    With *create* False nothing is written (no placeholder, no pin): the same mounts,
    for ``cloister start --dry-run``, naming paths that a start would create.

    *nested* are the ``.git`` entries of repositories nested in the work tree (found by
    the start-time review scan). A main checkout's ``.git`` is mounted at ``/work/.git``
    (a mount point cannot be renamed, so it cannot be swapped for the agent's own); a
    linked worktree's ``.git`` file is mounted read-only, and the repository's git
    directory at its own host path, because that is what the file names.
    """
    result = GitPlan()
    _check_configured(worktree, protect)
    if not is_git:
        _configured_paths(_TreeScan(result, worktree, (worktree,), [], create=create), protect)
        return result
    where = git.layout(worktree)
    result.layout = where
    gitdir, common = where.git_dir, where.common_dir
    dot_git = worktree / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink() and gitdir != dot_git.resolve():
        raise UnusualRepositoryError(
            f"git reads {str(worktree)!r} from {str(gitdir)!r}, not from its own .git"
            " (GIT_DIR or core.worktree?): Cloister cannot tell what to keep read-only"
        )
    if dot_git.is_dir() and gitdir != common:
        raise UnusualRepositoryError(
            f"{str(gitdir / 'commondir')!r} exists: this repository's configuration lives"
            f" in {str(common)!r}, and Cloister cannot keep it read-only"
        )
    files = _git_directory_files(
        result, common, gitdir, per_worktree=git.worktree_config(worktree), create=create
    )
    if dot_git.is_dir() and gitdir == common:
        inside = WORK / ".git"
        result.mounts.append(bind(common, inside, read_only=False))
        result.mounts += [
            bind(path, inside / path.relative_to(common), read_only=True) for path in files
        ]
    elif dot_git.is_file():
        result.mounts += [
            bind(dot_git, WORK / ".git", read_only=True),
            bind(common, common, read_only=False),
        ]
        if gitdir != common:  # its HEAD and index, under the read-only worktrees/
            result.mounts.append(bind(gitdir, gitdir, read_only=False))
        result.mounts += [bind(path, path, read_only=True) for path in files]
    else:
        raise UnusualRepositoryError(f"{str(dot_git)!r} is neither a directory nor a file")
    already = [*files, *([dot_git] if dot_git.is_file() else [])]
    scan = _TreeScan(result, worktree, (worktree, common, gitdir), already, create=create)
    _repository_paths(scan, worktree, common, home)
    _gitmodules(scan)
    _nested_repositories(scan, list(nested), home)
    _configured_paths(scan, protect)  # after git's: a path both protect says why git's way
    result.gitlinks = git.gitlinks(worktree)
    return result
