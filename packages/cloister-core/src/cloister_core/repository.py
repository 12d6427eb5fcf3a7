"""The human's repository, as the human's git in their checkout sees it.

What ``cloister start`` reads to make a cloister's own git directory and what a sync
reads and writes: refs, the object format, the extra object stores, ancestry. Only the
human's own files are read here (git runs hardened: :mod:`cloister_core.gitrun`),
never a file of a cloister's git directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cloister_core import beneath
from cloister_core.gitrun import run_git

__all__ = ["HumanRepository"]


@dataclass(frozen=True, slots=True)
class HumanRepository:
    """A checkout of the human's and its repository's git directories."""

    checkout: Path  # the work tree the project was started in
    git_dir: Path  # that checkout's own git directory (HEAD, index)
    common: Path  # the shared one (objects, refs, config)

    @classmethod
    def of(cls, checkout: Path) -> HumanRepository:
        """The repository of the work tree *checkout* (one git call)."""
        output = run_git(
            "-C",
            str(checkout),
            "rev-parse",
            "--show-toplevel",
            "--absolute-git-dir",
            "--git-common-dir",
        ).stdout
        top, git_dir, common = output.splitlines()[:3]
        common_path = Path(common)
        if not common_path.is_absolute():
            common_path = (checkout / common_path).resolve()
        return cls(Path(top), Path(git_dir), common_path)

    def git(
        self, *args: str, input: str | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        """``git --git-dir=<common> ARGS``; its output."""
        return run_git(f"--git-dir={self.common}", *args, input=input, env=env).stdout

    def refs(self, *prefixes: str) -> dict[str, str]:
        """Full ref name -> object below *prefixes*, symbolic refs left out."""
        output = self.git("for-each-ref", "--format=%(objectname) %(symref) %(refname)", *prefixes)
        found: dict[str, str] = {}
        for line in output.splitlines():
            oid, symref, name = line.split(" ", 2)
            if not symref:
                found[name] = oid
        return found

    def object_format(self) -> str:
        return self.git("rev-parse", "--show-object-format").strip() or "sha1"

    def empty_tree(self) -> str:
        return self.git("hash-object", "-t", "tree", "/dev/null").strip()

    def is_ancestor(self, older: str, newer: str) -> bool:
        result = run_git(
            f"--git-dir={self.common}", "merge-base", "--is-ancestor", older, newer, check=False
        )
        return result.returncode == 0

    def alternates(self) -> list[Path]:
        """The human's own extra object stores (their file): absolute, existing."""
        text = beneath.read_regular(self.common, "objects/info/alternates") or ""
        found = []
        for line in text.splitlines():
            entry = line.strip()
            if not entry or entry.startswith("#"):
                continue
            path = Path(entry) if Path(entry).is_absolute() else self.common / "objects" / entry
            if path.is_dir():
                found.append(path.resolve())
        return found

    def checked_out(self) -> dict[str, Path]:
        """branch -> the work tree that has it checked out, over the human's worktrees."""
        found: dict[str, Path] = {}
        tree: Path | None = None
        output = run_git("-C", str(self.checkout), "worktree", "list", "--porcelain").stdout
        for line in output.splitlines():
            if line.startswith("worktree "):
                tree = Path(line.removeprefix("worktree "))
            elif line.startswith("branch refs/heads/") and tree is not None:
                found[line.removeprefix("branch refs/heads/")] = tree
        return found
