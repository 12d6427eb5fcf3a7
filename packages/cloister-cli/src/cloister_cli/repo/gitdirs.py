"""Making a cloister's own git directory (``<data>/gitdirs/<cloister>``) when it starts.

Inside the cloister it is ``/work/.git`` (or what ``/work/.git`` names, when that is a
file): the human's ``.git`` is never mounted, and nothing on the host ever opens a file
the agent wrote in it (its work comes back by a fetch: ``cloister_executor.gitsync``).
It starts as the human's repository looks, made here from the human's own files
before the container exists:

* ``HEAD``, and in ``packed-refs`` the branches, tags, remote-tracking branches and
  notes; the human's branches also as ``refs/remotes/host/*`` (``git merge host/main``);
* the index (a copy: ``git status`` inside shows the same uncommitted work), or, for a
  worktree cloister, one built from its branch (which writes a new worktree's files);
* ``objects/info/alternates`` naming the human's object store, mounted read-only
  (new objects go to the cloister's own ``objects/``);
* ``config`` and ``hooks`` of Cloister's, read-only inside: the human's identity and
  remote URLs, the project's ``core.hooksPath`` when it is in the work tree (so the
  agent's commits go through the project's checks), nothing else;
* ``info/exclude`` and ``shallow`` copied.

The agent's branches of an earlier session (``refs/cloister/<cloister>/*``) come back
as its branches where they hold commits the human's lack.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cloister_cli.repo import git
from cloister_core import beneath
from cloister_core.config import load_project_config
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.gitrun import run_git
from cloister_core.gitsafety import FILTER_QUERY, filters_off
from cloister_core.owngit import (
    HOST_REMOTE,
    ORIGIN_ALTERNATES,
    ORIGIN_OBJECTS,
    POINTER,
    agent_ref,
    branch_name_problem,
)
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from cloister_core.sessions import list_sessions

# Refs a cloister starts with, besides its own branch of an earlier session.
COPIED_REFS = ("refs/heads/", "refs/tags/", "refs/remotes/", "refs/notes/")
# Keys of the human's config a cloister's config gets (identity, remotes).
_IDENTITY = ("user.name", "user.email")
_REMOTE_KEYS = ("url", "pushurl", "fetch")


class GitDirError(CloisterError):
    """The cloister's git directory could not be made."""


@dataclass(frozen=True, slots=True)
class OwnGitDir:
    """A cloister's git directory as made, and what its session record starts with."""

    path: Path
    alternates: tuple[Path, ...]  # the human's extra object stores (mounted read-only)
    bases: dict[str, str] = field(default_factory=dict)  # branch -> agreed commit
    host_heads: dict[str, str] = field(default_factory=dict)
    hooks_path: str | None = None  # core.hooksPath inside (``/work/...``), if any
    notes: tuple[str, ...] = ()


def _quote(value: str) -> str:
    """A config value as git reads it back exactly (quoted, escapes for \\ " and controls)."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    )
    return f'"{escaped}"'


def _subsection(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


Remotes = Mapping[str, Mapping[str, list[str]]]  # name -> key -> values


def config_text(
    *, object_format: str, identity: Mapping[str, str], remotes: Remotes, hooks_path: str | None
) -> str:
    """The cloister's ``config`` (read-only inside)."""
    lines = [
        "# Written by Cloister: this cloister's own git directory (read-only inside).\n",
        "[core]\n",
        f"\trepositoryformatversion = {1 if object_format != 'sha1' else 0}\n",
        "\tfilemode = true\n",
        "\tbare = false\n",
        "\tlogallrefupdates = true\n",
    ]
    if hooks_path is not None:
        lines.append(f"\thooksPath = {_quote(hooks_path)}\n")
    if object_format != "sha1":
        lines += ["[extensions]\n", f"\tobjectFormat = {object_format}\n"]
    if identity:
        lines.append("[user]\n")
        lines += [f"\t{key} = {_quote(value)}\n" for key, value in sorted(identity.items())]
    for remote, keys in sorted(remotes.items()):
        lines.append(f"[remote {_subsection(remote)}]\n")
        for key, values in keys.items():
            lines += [f"\t{key} = {_quote(value)}\n" for value in values]
    return "".join(lines)


def _human_config(checkout: Path) -> tuple[dict[str, str], dict[str, dict[str, list[str]]]]:
    """The identity and the remotes' URLs and refspecs the human's git uses there."""
    output = run_git("-C", str(checkout), "config", "--list", "-z", check=False).stdout
    identity: dict[str, str] = {}
    remotes: dict[str, dict[str, list[str]]] = {}
    for record in output.split("\0"):
        key, newline, value = record.partition("\n")
        if not newline:
            continue
        lowered = key.lower()
        if lowered in _IDENTITY:
            identity[lowered.partition(".")[2]] = value
        elif lowered.startswith("remote.") and lowered.count(".") >= 2:
            name, _, item = key[len("remote.") :].rpartition(".")
            if item.lower() in _REMOTE_KEYS and name and "\n" not in name:
                remotes.setdefault(name, {}).setdefault(item.lower(), []).append(value)
    return identity, remotes


def _hooks_path(checkout: Path) -> str | None:
    """``core.hooksPath`` inside the cloister when the human's hooks live in the work tree."""
    hooks = Path(os.path.normpath(git.hooks_directory(checkout)))
    if not hooks.is_relative_to(checkout) or hooks.is_relative_to(checkout / ".git"):
        return None
    relative = hooks.relative_to(checkout).as_posix()
    return "/work" if relative == "." else f"/work/{relative}"


def _bytes(text: str) -> bytes:
    """*text* read from git (names are bytes: surrogate escapes) as the same bytes."""
    return text.encode("utf-8", "surrogateescape")


def _packed_refs(refs: Mapping[str, str]) -> bytes:
    # No header: git then reads it without assuming an order or peeled tags.
    return _bytes("".join(f"{oid} {name}\n" for name, oid in sorted(refs.items())))


def _copy(source: Path, target: Path) -> None:
    """A copy of a file of the human's (never a link: the agent writes the target)."""
    shutil.copyfile(source, target, follow_symlinks=False)
    target.chmod(0o644)


def _head(repository: HumanRepository) -> str:
    result = run_git("-C", str(repository.checkout), "symbolic-ref", "--quiet", "HEAD", check=False)
    if result.returncode == 0:
        return f"ref: {result.stdout.strip()}\n"
    return run_git("-C", str(repository.checkout), "rev-parse", "HEAD").stdout.strip() + "\n"


@dataclass(slots=True)
class _Refs:
    """The cloister's refs as they are being chosen."""

    refs: dict[str, str]
    bases: dict[str, str]
    notes: list[str]


def _earlier_work(
    repository: HumanRepository,
    earlier: dict[str, str],
    refs: _Refs,
    *,
    keep_human: str | None,
) -> None:
    """The agent's branches of an earlier session (*earlier*: branch -> commit, from
    ``refs/cloister/<cloister>/``) where they hold commits the human's lack;
    *keep_human* (the branch checked out in a shared work tree, whose index is the
    human's) keeps the human's commit, and the agent's goes beside it."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    for branch, oid in earlier.items():
        if branch_name_problem(branch) is not None:
            continue  # one an older Cloister took: it would not come back again
        ref = f"refs/heads/{branch}"
        human = refs.refs.get(ref)
        if human == oid or (human is not None and repository.is_ancestor(oid, human)):
            continue  # the human has it all
        if branch == keep_human:
            aside = f"{branch}@{stamp}"
            refs.refs[f"refs/heads/{aside}"] = oid
            refs.notes.append(
                f"the agent's {branch} of its last session (not in yours) is its branch {aside}"
            )
            continue
        refs.refs[ref] = oid
        if human is not None and repository.is_ancestor(human, oid):
            refs.bases[branch] = human  # the agent's work on it began there
        else:
            refs.bases.pop(branch, None)


def create(
    paths: CloisterPaths,
    cloister: str,
    repository: HumanRepository,
    *,
    worktree: Path,
    branch: str | None,
) -> OwnGitDir:
    """Make cloister *cloister*'s git directory afresh for *worktree*.

    *branch*: a worktree cloister's branch (its work tree is *worktree*, of its own);
    None: the cloister works in the human's checkout, and starts on its ``HEAD``.
    """
    target = paths.cloister_git_dir(cloister)
    paths.git_dirs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    beneath.remove_tree(target)
    for directory in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "hooks", "info"):
        (target / directory).mkdir(parents=True, mode=0o755)
    try:
        return _fill(paths, cloister, repository, target, worktree=worktree, branch=branch)
    except BaseException:
        beneath.remove_tree(target)
        raise


def _fill(
    paths: CloisterPaths,
    cloister: str,
    repository: HumanRepository,
    target: Path,
    *,
    worktree: Path,
    branch: str | None,
) -> OwnGitDir:
    object_format = repository.object_format()
    # One git call for the human's refs and the agent's of an earlier session.
    prefix = agent_ref(cloister, "")
    found = repository.refs(*COPIED_REFS, prefix)
    human = {name: oid for name, oid in found.items() if not name.startswith(prefix)}
    earlier = {
        name.removeprefix(prefix): oid for name, oid in found.items() if name.startswith(prefix)
    }
    heads = {
        name.removeprefix("refs/heads/"): oid
        for name, oid in human.items()
        if name.startswith("refs/heads/")
    }
    chosen = _Refs(dict(human), dict(heads), [])
    shared = branch is None
    head = _head(repository) if shared else f"ref: refs/heads/{branch}\n"
    checked_out = head.removeprefix("ref: refs/heads/").strip() if head.startswith("ref:") else None
    _earlier_work(repository, earlier, chosen, keep_human=checked_out if shared else None)
    chosen.refs.update({f"refs/remotes/{HOST_REMOTE}/{name}": oid for name, oid in heads.items()})
    atomic_write(target / "packed-refs", _packed_refs(chosen.refs), mode=0o644)
    atomic_write(target / "HEAD", _bytes(head), mode=0o644)
    extra = repository.alternates()
    alternates = [ORIGIN_OBJECTS, *(f"{ORIGIN_ALTERNATES}/{n}" for n in range(len(extra)))]
    atomic_write(target / "objects/info/alternates", "".join(f"{a}\n" for a in alternates))
    identity, remotes = _human_config(repository.checkout)
    hooks_path = _hooks_path(repository.checkout)
    atomic_write(
        target / "config",
        _bytes(
            config_text(
                object_format=object_format,
                identity=identity,
                remotes=remotes,
                hooks_path=hooks_path,
            )
        ),
        mode=0o644,
    )
    for name in ("info/exclude", "shallow"):
        source = repository.common / name
        if source.is_file() and not source.is_symlink():
            _copy(source, target / name)
    if branch is None:
        _shared_index(repository, target)
    else:
        _worktree_index(repository, target, worktree, chosen.refs.get(f"refs/heads/{branch}"))
    return OwnGitDir(
        path=target,
        alternates=tuple(extra),
        bases=chosen.bases,
        host_heads=heads,
        hooks_path=hooks_path,
        notes=tuple(chosen.notes),
    )


def _shared_index(repository: HumanRepository, target: Path) -> None:
    """The human's index, copied; a split one is written whole (the shared part is the
    human's, which the cloister does not see)."""
    index = repository.git_dir / "index"
    if not index.is_file():
        return
    _copy(index, target / "index")
    if any(repository.common.glob("sharedindex.*")) or any(
        repository.git_dir.glob("sharedindex.*")
    ):
        run_git(
            "-C",
            str(repository.checkout),
            "update-index",
            "--no-split-index",
            env={"GIT_INDEX_FILE": str(target / "index")},
        )


def _worktree_index(
    repository: HumanRepository, target: Path, worktree: Path, commit: str | None
) -> None:
    """A worktree cloister's index: its branch's tree, written out when the work tree
    is new (empty), else read only (the files there are the agent's last session's).

    None of the human's filter drivers runs: the branch may be the agent's, whose
    ``.gitattributes`` would choose what they run on (git-lfs's smudge would fetch from
    the URL of its ``.lfsconfig``, from the host). Files come out as committed.
    """
    if commit is None:
        return  # a branch without a commit: an empty index
    env = {"GIT_INDEX_FILE": str(target / "index")} | _filters_off(repository)
    fresh = not any(path.name != ".git" for path in worktree.iterdir())
    args = ["read-tree", "-u", "--reset", commit] if fresh else ["read-tree", commit]
    run_git(f"--git-dir={repository.common}", f"--work-tree={worktree}", *args, env=env)


def _filters_off(repository: HumanRepository) -> dict[str, str]:
    listed = run_git(f"--git-dir={repository.common}", *FILTER_QUERY, check=False).stdout
    return filters_off(listed)


def uncommitted(repository: HumanRepository, worktree: Path, commit: str | None) -> bool:
    """Whether a worktree of Cloister's holds files that differ from *commit* (its
    branch as last synced), untracked ones included; the human's filter drivers off
    (the files are the agent's). Without a commit, whether it holds any file."""
    if commit is None:
        return any(path.name != ".git" for path in worktree.iterdir())
    with tempfile.TemporaryDirectory(prefix="cloister-worktree-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")} | _filters_off(repository)
        tree = (f"--git-dir={repository.common}", f"--work-tree={worktree}")
        run_git(*tree, "read-tree", commit, env=env)
        # Against the index just read (HEAD is the human's checkout's, another branch);
        # without -q, which would answer 0 for a changed or deleted file too.
        refreshed = run_git(*tree, "update-index", "--refresh", env=env, check=False)
        if refreshed.returncode != 0:
            return True
        untracked = run_git(*tree, "ls-files", "--others", "--exclude-standard", "-z", env=env)
        return bool(untracked.stdout)


def write_pointer(paths: CloisterPaths, cloister: str) -> Path:
    """The ``.git`` file mounted at ``/work/.git`` when that is a file on the host."""
    pointer = paths.git_pointer(cloister)
    atomic_write(pointer, POINTER, mode=0o644)
    return pointer


def remove(paths: CloisterPaths, cloister: str) -> None:
    """The cloister's git directory and pointer, once its work is synced (no link followed)."""
    beneath.remove_tree(paths.cloister_git_dir(cloister))
    paths.git_pointer(cloister).unlink(missing_ok=True)


# -- worktrees Cloister made ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MadeWorktree:
    """A worktree under ``<data>/worktrees/<project>/``, and what Cloister knows of it."""

    directory: Path
    project: str
    checkout: Path | None  # the project's checkout (its repository), when known
    branch: str | None  # from the session of the cloister that worked there
    cloister: str | None

    def uncommitted(self) -> bool:
        """Whether it holds work its branch (as last synced) lacks; True when that cannot
        be told (an older Cloister's worktree, a repository gone): count it as work."""
        pointer = beneath.read_regular(self.directory, ".git", limit=4096)
        if pointer != POINTER or self.checkout is None or self.branch is None:
            return True
        try:
            repository = HumanRepository.of(self.checkout)
            refs = repository.refs(agent_ref(self.cloister or "", self.branch), "refs/heads/")
            commit = refs.get(agent_ref(self.cloister or "", self.branch)) or refs.get(
                f"refs/heads/{self.branch}"
            )
            return uncommitted(repository, self.directory, commit)
        except (CloisterError, OSError):
            return True


def made_worktrees(paths: CloisterPaths, project: str | None = None) -> list[MadeWorktree]:
    """The worktrees Cloister made (of *project*, or all), with their branch and
    repository where a session record or the project's file tells."""
    sessions = {Path(record.worktree): record for record in list_sessions(paths) if record.branch}
    found: list[MadeWorktree] = []
    base = paths.worktrees_dir
    for project_dir in sorted(base.iterdir()) if base.is_dir() else ():
        if project is not None and project_dir.name != project:
            continue
        try:
            root = load_project_config(paths, project_dir.name).root
        except CloisterError:
            root = None
        for directory in sorted(project_dir.iterdir()) if project_dir.is_dir() else ():
            if directory.is_symlink() or not directory.is_dir():
                continue
            session = sessions.get(directory)
            found.append(
                MadeWorktree(
                    directory,
                    project_dir.name,
                    Path(str(root)) if root is not None else None,
                    session.branch if session else None,
                    session.cloister if session else None,
                )
            )
    return found
