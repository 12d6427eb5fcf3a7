"""The few questions a review asks git itself, asked the hardened way.

Where the human's hooks are, which paths the human's index holds as gitlinks, and what
a config file says; nothing else of the git directories is looked at.

Every call is an argv list with :func:`cloister_core.gitsafety.git_environment` (no
fsmonitor, no hooks, no submodule recursion), stdin closed unless it carries a config
to parse, ``-z`` output and a timeout. A failing or hanging git answers "nothing":
a review reports what it can see and never raises for what the agent left.

Config files are never given to git by path: their bytes, read without following
links (:mod:`.files`), go to ``git config --file -`` on stdin, so what is parsed is
exactly what was checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cloister_core.gitsafety import git_environment

CALL_TIMEOUT_SECONDS = 60.0
CONFIG_TIMEOUT_SECONDS = 15.0
GITLINK_MODE = b"160000"


@dataclass(frozen=True, slots=True)
class ParsedConfig:
    """A config file's entries as git reads them (lower-cased section and key names)."""

    entries: tuple[tuple[str, str | None], ...] = ()
    error: str | None = None  # git could not parse it


@dataclass(slots=True)
class Git:
    """Runs git for one review (the program and its environment looked up once)."""

    program: str | None = field(default_factory=lambda: shutil.which("git"))
    environment: Mapping[str, str] = field(
        default_factory=lambda: git_environment(os.environ, hooks=False)
    )
    # Hardened but for core.hooksPath, which hooks=False points at /dev/null: only to
    # ask where the human's hooks are (rev-parse runs no hook).
    hooks_environment: Mapping[str, str] = field(
        default_factory=lambda: git_environment(os.environ, hooks=True)
    )

    def _run(
        self,
        args: list[str],
        *,
        cwd: Path | None = None,
        stdin: bytes | None = None,
        timeout: float = CALL_TIMEOUT_SECONDS,
        environment: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes] | None:
        if self.program is None:
            return None
        try:
            return subprocess.run(
                [self.program, *args],
                cwd=cwd,
                input=stdin if stdin is not None else b"",
                capture_output=True,
                env=dict(self.environment if environment is None else environment),
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None

    def gitlinks(self, worktree: Path) -> dict[str, str]:
        """The gitlinks of the human's index (mode 160000): path -> commit."""
        result = self._run(["-C", str(worktree), "ls-files", "-s", "-z"])
        if result is None or result.returncode != 0:
            return {}
        gitlinks: dict[str, str] = {}
        for record in result.stdout.split(b"\0"):
            meta, tab, name = record.partition(b"\t")
            fields = meta.split()
            if tab and len(fields) == 3 and fields[0] == GITLINK_MODE:
                gitlinks[os.fsdecode(name)] = fields[1].decode("ascii", "replace")
        return gitlinks

    def hooks_dir(self, worktree: Path) -> Path | None:
        """Where git looks for this work tree's hooks (``core.hooksPath`` honoured)."""
        result = self._run(
            ["-C", str(worktree), "rev-parse", "--git-path", "hooks"],
            environment=self.hooks_environment,
        )
        if result is None or result.returncode != 0:
            return None
        text = os.fsdecode(result.stdout).strip()
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
            message = result.stderr.decode("utf-8", "replace").strip().splitlines()
            return ParsedConfig(error=message[0] if message else f"exit {result.returncode}")
        entries: list[tuple[str, str | None]] = []
        for record in result.stdout.decode("utf-8", "replace").split("\0"):
            if not record:
                continue
            key, newline, value = record.partition("\n")
            entries.append((key, value if newline else None))
        return ParsedConfig(tuple(entries))
