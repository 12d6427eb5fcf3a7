"""The git operations the CLI needs, as argv calls of the ``git`` program.

Every call runs ``git -C <dir> ...`` without a shell, with the hardened settings of
:mod:`cloister_core.gitsafety` (no fsmonitor, no hooks, no submodule recursion): the
repositories Cloister reads may hold what an agent planted. Errors become
:class:`GitError` with git's own message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cloister_core.errors import CloisterError
from cloister_core.gitsafety import git_environment

GIT_TIMEOUT = 60.0


class GitError(CloisterError):
    """A git command failed; the message is git's."""


def _git(
    directory: Path,
    *args: str,
    check: bool = True,
    hooks: bool = False,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``git -C directory ARGS``, hardened; *hooks* keeps the repository's hooks setting
    (only for reading it: the hardened one points it at nothing); *env* adds variables of
    Cloister's own (a temporary index or object directory) after the hardening."""
    program = shutil.which("git")
    if program is None:
        raise GitError("git is not installed")
    try:
        result = subprocess.run(
            [program, "-C", str(directory), *args],
            capture_output=True,
            encoding="utf-8",
            errors="surrogateescape",  # file names are bytes; the agent chooses some
            check=False,
            env=git_environment(os.environ, hooks=hooks) | dict(env or {}),
            timeout=GIT_TIMEOUT,
            **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}),
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)} took over {GIT_TIMEOUT:g}s in {directory}") from None
    if check and result.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {directory}: {result.stderr.strip()}")
    return result


def run(
    directory: Path,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Any git command, hardened (see :func:`_git`), for the modules that need one."""
    return _git(directory, *args, check=check, env=env, input=input)


def toplevel(directory: Path) -> Path | None:
    """The working tree containing *directory*, or None outside git."""
    result = _git(directory, "rev-parse", "--show-toplevel", check=False)
    return Path(result.stdout.strip()) if result.returncode == 0 else None


@dataclass(frozen=True, slots=True)
class Layout:
    """Where git keeps a working tree's repository (one ``git`` call finds all three)."""

    toplevel: Path
    git_dir: Path  # this working tree's own (``.git``, or ``.git/worktrees/<name>``)
    common_dir: Path  # the repository's shared one (the main checkout's ``.git``)


def layout(worktree: Path) -> Layout:
    result = _git(
        worktree, "rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir"
    )
    top, gitdir, common = result.stdout.splitlines()[:3]
    common_path = Path(common)
    if not common_path.is_absolute():
        common_path = (worktree / common_path).resolve()
    return Layout(Path(top), Path(gitdir), common_path)


def common_dir(worktree: Path) -> Path:
    """The repository's shared git directory (the main checkout's ``.git``)."""
    return layout(worktree).common_dir


def worktree_config(worktree: Path) -> bool:
    """Whether ``extensions.worktreeConfig`` is on (git then reads ``config.worktree``)."""
    result = _git(worktree, "config", "--bool", "--get", "extensions.worktreeConfig", check=False)
    return result.stdout.strip() == "true"


def remote_url(worktree: Path) -> str | None:
    result = _git(worktree, "remote", "get-url", "origin", check=False)
    return result.stdout.strip() or None if result.returncode == 0 else None


def branch_exists(repository: Path, branch: str) -> bool:
    result = _git(
        repository, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
    )
    return result.returncode == 0


def check_branch_name(repository: Path, branch: str) -> None:
    result = _git(repository, "check-ref-format", "--branch", branch, check=False)
    if result.returncode != 0:
        raise GitError(f"{branch!r} is not a valid branch name")


def add_worktree(repository: Path, destination: Path, branch: str) -> None:
    """Check *branch* out at *destination*: the branch if it exists, else new from HEAD."""
    check_branch_name(repository, branch)
    destination.parent.mkdir(parents=True, exist_ok=True)
    if branch_exists(repository, branch):
        _git(repository, "worktree", "add", str(destination), branch)
    else:
        _git(repository, "worktree", "add", "-b", branch, str(destination))


def remove_worktree(repository: Path, worktree: Path, *, force: bool) -> None:
    _git(repository, "worktree", "remove", *(["--force"] if force else []), str(worktree))


def is_dirty(worktree: Path) -> bool:
    """Uncommitted changes or untracked files."""
    return bool(_git(worktree, "status", "--porcelain").stdout.strip())


def current_branch(worktree: Path) -> str | None:
    result = _git(worktree, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return result.stdout.strip() or None


def list_worktrees(repository: Path) -> list[tuple[Path, str | None]]:
    """(path, branch) of every working tree of the repository, main checkout first."""
    found: list[tuple[Path, str | None]] = []
    path: Path | None = None
    branch: str | None = None
    for line in [*_git(repository, "worktree", "list", "--porcelain").stdout.splitlines(), ""]:
        if line.startswith("worktree "):
            path, branch = Path(line.removeprefix("worktree ")), None
        elif line.startswith("branch "):
            branch = line.removeprefix("branch refs/heads/")
        elif not line and path is not None:
            found.append((path, branch))
            path = None
    return found


def hooks_directory(worktree: Path) -> Path:
    """Where git looks for this work tree's hooks (``core.hooksPath`` honoured)."""
    path = Path(_git(worktree, "rev-parse", "--git-path", "hooks", hooks=True).stdout.strip())
    return path if path.is_absolute() else worktree / path


@dataclass(frozen=True, slots=True)
class Include:
    """An ``include.path`` or ``includeIf.<condition>.path`` of the config git reads."""

    origin: Path  # the file that holds it
    value: str  # as written


def includes(worktree: Path) -> list[Include]:
    """Every include git would follow in *worktree*, whatever its condition."""
    result = _git(
        worktree,
        "config",
        "--includes",
        "--show-origin",
        "--null",
        "--get-regexp",
        r"^include(if\..*)?\.path$",
        check=False,
    )
    found = []
    fields = result.stdout.split("\0")
    # --null: "file:<origin>" NUL "<key>\n<value>" NUL ...
    for origin, entry in zip(fields[0::2], fields[1::2], strict=False):
        if not origin.startswith("file:"):
            continue
        _, _, value = entry.partition("\n")
        found.append(Include(Path(origin.removeprefix("file:")), value))
    return found


def gitlinks(worktree: Path) -> list[str]:
    """Paths of the gitlinks (submodule entries) in the work tree's index."""
    output = _git(worktree, "ls-files", "--stage", "-z").stdout
    found = []
    for entry in output.split("\0"):
        meta, _, path = entry.partition("\t")
        if meta.startswith("160000 "):
            found.append(path)
    return found
