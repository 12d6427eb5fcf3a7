"""The git operations the CLI needs, as argv calls of the ``git`` program.

Every call runs ``git -C <dir> ...`` through :func:`cloister_core.gitrun.run_git` (argv,
the hardened settings of :mod:`cloister_core.gitsafety`, a timeout); errors are
:class:`GitError` with git's own message.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cloister_core.gitrun import GitError, run_git

__all__ = ["GitError"]


def run(
    directory: Path,
    *args: str,
    check: bool = True,
    hooks: bool = False,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``git -C directory ARGS`` through core's runner (:func:`run_git`)."""
    return run_git("-C", str(directory), *args, check=check, hooks=hooks, env=env, input=input)


def toplevel(directory: Path) -> Path | None:
    """The working tree containing *directory*, or None outside git."""
    result = run(directory, "rev-parse", "--show-toplevel", check=False)
    return Path(result.stdout.strip()) if result.returncode == 0 else None


@dataclass(frozen=True, slots=True)
class Layout:
    """Where git keeps a working tree's repository (one ``git`` call finds all three)."""

    toplevel: Path
    git_dir: Path  # this working tree's own (``.git``, or ``.git/worktrees/<name>``)
    common_dir: Path  # the repository's shared one (the main checkout's ``.git``)


_LAYOUT = ("rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir")


def _layout(worktree: Path, output: str) -> Layout:
    top, gitdir, common = output.splitlines()[:3]
    common_path = Path(common)
    if not common_path.is_absolute():
        common_path = (worktree / common_path).resolve()
    return Layout(Path(top), Path(gitdir), common_path)


def layout(worktree: Path) -> Layout:
    return _layout(worktree, run(worktree, *_LAYOUT).stdout)


def find_layout(directory: Path) -> Layout | None:
    """:func:`layout`, or None outside a git working tree (what :func:`toplevel` and
    :func:`layout` tell, in one ``git`` call)."""
    result = run(directory, *_LAYOUT, check=False)
    if result.returncode != 0 or len(result.stdout.splitlines()) < 3:
        return None
    return _layout(directory, result.stdout)


def remote_url(worktree: Path) -> str | None:
    result = run(worktree, "remote", "get-url", "origin", check=False)
    return result.stdout.strip() or None if result.returncode == 0 else None


def branch_exists(repository: Path, branch: str) -> bool:
    result = run(
        repository, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
    )
    return result.returncode == 0


def check_branch_name(repository: Path, branch: str) -> None:
    result = run(repository, "check-ref-format", "--branch", branch, check=False)
    if result.returncode != 0:
        raise GitError(f"{branch!r} is not a valid branch name")


def hooks_directory(worktree: Path) -> Path:
    """Where git looks for this work tree's hooks (``core.hooksPath`` honoured)."""
    path = Path(run(worktree, "rev-parse", "--git-path", "hooks", hooks=True).stdout.strip())
    return path if path.is_absolute() else worktree / path


@dataclass(frozen=True, slots=True)
class Include:
    """An ``include.path`` or ``includeIf.<condition>.path`` of the config git reads."""

    origin: Path  # the file that holds it
    value: str  # as written


def includes(worktree: Path) -> list[Include]:
    """Every include git would follow in *worktree*, whatever its condition."""
    result = run(
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
    output = run(worktree, "ls-files", "--stage", "-z").stdout
    found = []
    for entry in output.split("\0"):
        meta, _, path = entry.partition("\t")
        if meta.startswith("160000 "):
            found.append(path)
    return found
