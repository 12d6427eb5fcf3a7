"""The few questions a review asks git itself, asked the hardened way.

Where the human's hooks are, which paths the human's index holds as gitlinks, and what
a config file says; nothing else of the git directories is looked at.

Every call goes through :func:`cloister_core.gitrun.run_git` (argv, the hardened
environment of :mod:`cloister_core.gitsafety`: no fsmonitor, no hooks, no submodule
recursion; stdin closed unless it carries a config to parse; a timeout), with ``-z``
output. A failing or hanging git answers "nothing": a review reports what it can see and
never raises for what the agent left.

Config files are never given to git by path: their bytes, read without following
links (:mod:`.files`), go to ``git config --file -`` on stdin, so what is parsed is
exactly what was checked.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cloister_core.gitrun import GitError, run_git

CALL_TIMEOUT_SECONDS = 60.0
CONFIG_TIMEOUT_SECONDS = 15.0
GITLINK_MODE = "160000"


@dataclass(frozen=True, slots=True)
class ParsedConfig:
    """A config file's entries as git reads them (lower-cased section and key names)."""

    entries: tuple[tuple[str, str | None], ...] = ()
    error: str | None = None  # git could not parse it


def _shown(text: str) -> str:
    """*text* as git wrote it, its bytes that are not UTF-8 replaced (it is shown)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Git:
    """The git questions of one review."""

    @staticmethod
    def _run(
        args: list[str],
        *,
        cwd: Path | None = None,
        stdin: bytes | None = None,
        timeout: float = CALL_TIMEOUT_SECONDS,
        hooks: bool = False,
    ) -> subprocess.CompletedProcess[str] | None:
        try:
            return run_git(*args, cwd=cwd, check=False, input=stdin, hooks=hooks, timeout=timeout)
        except GitError:
            return None

    def gitlinks(self, worktree: Path) -> dict[str, str]:
        """The gitlinks of the human's index (mode 160000): path -> commit."""
        result = self._run(["-C", str(worktree), "ls-files", "-s", "-z"])
        if result is None or result.returncode != 0:
            return {}
        gitlinks: dict[str, str] = {}
        for record in result.stdout.split("\0"):
            meta, tab, name = record.partition("\t")
            fields = meta.split()
            if tab and len(fields) == 3 and fields[0] == GITLINK_MODE:
                gitlinks[name] = _shown(fields[1])
        return gitlinks

    def hooks_dir(self, worktree: Path) -> Path | None:
        """Where git looks for this work tree's hooks (``core.hooksPath`` honoured)."""
        # Hardened but for core.hooksPath, which is otherwise pointed at /dev/null: only
        # to ask where the human's hooks are (rev-parse runs no hook).
        result = self._run(["-C", str(worktree), "rev-parse", "--git-path", "hooks"], hooks=True)
        if result is None or result.returncode != 0:
            return None
        text = result.stdout.strip()
        if not text:
            return None
        path = Path(text)
        return Path(os.path.normpath(path if path.is_absolute() else worktree / path))

    def parse_config(self, content: bytes) -> ParsedConfig:
        """*content* parsed by ``git config --file - --no-includes --list -z``."""
        result = self._run(
            ["config", "--file", "-", "--no-includes", "--list", "-z"],
            cwd=Path("/"),
            stdin=content,
            timeout=CONFIG_TIMEOUT_SECONDS,
        )
        if result is None:
            return ParsedConfig(error="git could not be run")
        if result.returncode != 0:
            message = _shown(result.stderr).strip().splitlines()
            return ParsedConfig(error=message[0] if message else f"exit {result.returncode}")
        entries: list[tuple[str, str | None]] = []
        for record in _shown(result.stdout).split("\0"):
            if not record:
                continue
            key, newline, value = record.partition("\n")
            entries.append((key, value if newline else None))
        return ParsedConfig(tuple(entries))
