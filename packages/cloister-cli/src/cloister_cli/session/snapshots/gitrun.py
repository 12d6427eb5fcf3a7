"""git for snapshots and restores: in one work tree only, and running none of its filters.

Besides the hardening every host git gets (:mod:`cloister_core.gitsafety`: no hooks, no
fsmonitor, no submodules):

* git looks for the repository in the work tree and nowhere above it
  (``GIT_CEILING_DIRECTORIES``): with ``.git/HEAD`` deleted, git would otherwise take
  a repository around the project (dotfiles in ``~``) for it;
* every filter driver of the human's configuration is switched off
  (``filter.<driver>.clean``/``smudge``/``process`` empty, ``required`` false). The
  agent's ``.gitattributes`` chooses which files a driver gets: git-lfs's, say, would
  fetch from a URL the agent wrote in ``.lfsconfig``, from the host, past the proxy.
  Snapshots keep the files' bytes as they are in the work tree, and restores write them
  back so.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cloister_cli.repo import git
from cloister_core.gitsafety import FILTER_QUERY, filters_off


@dataclass(frozen=True, slots=True)
class SnapshotGit:
    worktree: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, worktree: Path) -> SnapshotGit:
        confined = cls(worktree, {"GIT_CEILING_DIRECTORIES": str(worktree.parent)})
        listed = confined(*FILTER_QUERY, check=False)
        return cls(worktree, confined.env | filters_off(listed.stdout))

    def __call__(
        self,
        *args: str,
        check: bool = True,
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return git.run(self.worktree, *args, check=check, env=self.env | (env or {}), input=input)
