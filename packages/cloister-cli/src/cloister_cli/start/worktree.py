"""Where a start works: the project's checkout, or a worktree of a branch (``-b``) under
``<data>/worktrees`` whose ``.git`` names a path that exists only inside the cloister."""

from __future__ import annotations

from pathlib import Path

from cloister_cli.container.cloisters import CloisterStartError, Workspace
from cloister_cli.context import Context
from cloister_cli.repo import git, projects
from cloister_core import beneath
from cloister_core.config import load_project_config
from cloister_core.fileio import atomic_write
from cloister_core.names import cloister_name, sanitize_branch
from cloister_core.owngit import POINTER
from cloister_core.sessions import list_sessions


def workspace_for(
    context: Context,
    directory: Path,
    *,
    project_name: str | None,
    branch: str | None,
    allow_no_git: bool,
) -> tuple[Workspace, str]:
    """The workspace and cloister name for *directory* (for -b, the worktree's, which
    :func:`make_worktree` makes); in a worktree Cloister made, that worktree's cloister."""
    made = _made_worktree(context, directory)
    if made is not None and branch is None and project_name is None:
        return made
    project = projects.identify(directory, project_name, allow_no_git=allow_no_git)
    if branch is None:
        return Workspace(project, project.root), cloister_name(project.name)
    if not project.git:
        raise CloisterStartError("-b BRANCH needs a git repository")
    destination = context.paths.worktree(project.name, sanitize_branch(branch))
    return Workspace(project, destination, branch), cloister_name(project.name, branch)


def _made_worktree(context: Context, directory: Path) -> tuple[Workspace, str] | None:
    """The workspace of a worktree under ``<data>/worktrees`` that *directory* is in:
    git on the host cannot tell (its ``.git`` names a path that exists only inside)."""
    resolved = directory.resolve()
    base = context.paths.worktrees_dir.resolve()
    if not resolved.is_relative_to(base) or len(resolved.relative_to(base).parts) < 2:
        return None
    project_dir, branch_dir = resolved.relative_to(base).parts[:2]
    worktree = base / project_dir / branch_dir
    for session in list_sessions(context.paths):
        if Path(session.worktree).resolve() == worktree and session.branch is not None:
            root = load_project_config(context.paths, session.project).root
            if root is None:
                return None
            project = projects.identify(Path(root), session.project, allow_no_git=False)
            return (
                Workspace(
                    project, context.paths.worktree(project.name, branch_dir), session.branch
                ),
                session.cloister,
            )
    return None


def make_worktree(repository: Path, destination: Path, branch: str) -> None:
    """A directory for *branch* of *repository*, whose files the cloister's own git
    directory writes (:mod:`cloister_cli.repo.gitdirs`) and whose ``.git`` names a path that
    exists only inside the cloister: the human's git there says "not a git repository"
    rather than read the agent's state. The branch is made (from ``HEAD``) when missing."""
    git.check_branch_name(repository, branch)
    if not git.branch_exists(repository, branch):
        result = git.run(repository, "branch", "--", branch, check=False)
        if result.returncode != 0:
            raise CloisterStartError(
                f"cannot make branch {branch!r} in {repository}: {result.stderr.strip()}"
                " (-b needs a commit to start from)"
            )
    destination.mkdir(parents=True, exist_ok=True)
    pointer = destination / ".git"
    if pointer.is_file() and not pointer.is_symlink():
        text = beneath.read_regular(destination, ".git", limit=4096) or ""
        if text == POINTER:
            return
        # A worktree an older Cloister registered with `git worktree add`: the repository
        # forgets it (its entry under .git/worktrees goes) and its .git names the cloister's.
        _forget_registered(repository, destination, text)
        atomic_write(pointer, POINTER, mode=0o644)
        return
    if pointer.exists() or pointer.is_symlink():
        raise CloisterStartError(f"{pointer} is not the file Cloister makes; move it away")
    atomic_write(pointer, POINTER, mode=0o644)


def _forget_registered(repository: Path, destination: Path, pointer: str) -> None:
    """Remove the repository's record of *destination* as a worktree of its own (what
    ``git worktree prune`` would, were the directory gone), if it is that record."""
    if not pointer.startswith("gitdir: "):
        return
    entry = Path(pointer.removeprefix("gitdir: ").strip())
    common = Path(git.run(repository, "rev-parse", "--git-common-dir").stdout.strip())
    records = (common if common.is_absolute() else repository / common).resolve() / "worktrees"
    if entry.parent.resolve() != records or entry.is_symlink():
        return
    back = beneath.read_regular(entry, "gitdir", limit=4096)
    if back is not None and Path(back.strip()) == destination / ".git":
        beneath.remove_tree(entry)
