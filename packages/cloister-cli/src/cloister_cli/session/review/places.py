"""How a review names paths: for the human reading it, and inside the quarantine.

The human knows the work tree, so paths in it are shown relative ("sub/.git",
".envrc"); anything else (where a link leads) absolute. In the quarantine the layout
mirrors the work tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cloister_cli.session.review.files import inside


@dataclass(frozen=True, slots=True)
class Places:
    """The directories of one review, normalised once."""

    worktree: Path
    git_dir: Path | None  # the human's: only to tell whether the hooks dir is in it
    common_dir: Path | None
    real_worktree: Path  # the work tree with every link resolved (computed once)

    @classmethod
    def of(cls, worktree: Path, git_dir: Path | None, common_dir: Path | None) -> Places:
        def normal(path: Path | None) -> Path | None:
            return None if path is None else Path(os.path.normpath(path.absolute()))

        git = normal(git_dir)
        tree = Path(os.path.normpath(worktree.absolute()))
        return cls(tree, git, normal(common_dir) or git, Path(os.path.realpath(tree)))

    def show(self, path: Path | str) -> str:
        """*path* as the human knows it: relative to the work tree, else absolute."""
        normal = os.path.normpath(path)
        if inside(normal, self.worktree) and normal != str(self.worktree):
            return Path(normal).relative_to(self.worktree).as_posix()
        return normal

    def stash(self, path: Path | str) -> str:
        """Where *path* goes below a quarantine directory (relative, never climbing)."""
        normal = os.path.normpath(path)
        if inside(normal, self.worktree) and normal != str(self.worktree):
            return Path(normal).relative_to(self.worktree).as_posix()
        return "outside/" + normal.lstrip("/")
