"""The one way Cloister runs host git: argv, hardened, bounded, git's own message on error.

Every call gets :func:`cloister_core.gitsafety.git_environment` (no fsmonitor, no hooks,
no submodule recursion, network transports only), stdin closed unless it carries
input, and a timeout. File names are bytes and some are the agent's choice, so text is
decoded with ``surrogateescape`` and no newline is translated (a ``\r`` in a name stays
one): nothing is lost, nothing raises.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from cloister_core.errors import CloisterError
from cloister_core.gitsafety import git_environment

__all__ = ["GIT_TIMEOUT", "GitError", "run_git"]

GIT_TIMEOUT = 60.0
_CODEC = ("utf-8", "surrogateescape")


class GitError(CloisterError):
    """A git command failed; the message is git's."""


def run_git(
    *args: str,
    cwd: Path | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    stdin: int | None = None,
    hooks: bool = False,
    timeout: float = GIT_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` (in *cwd*), hardened.

    *env* adds variables of Cloister's own (a temporary index, an object directory)
    after the hardening; *hooks* keeps the repository's hooks setting, only to read
    it. *stdin* is a descriptor to read from (a pack), *input* what to send (text is
    encoded as the output is decoded, so a name read from git goes back the same).
    """
    program = shutil.which("git")
    if program is None:
        raise GitError("git is not installed")
    if stdin is not None:
        feed: dict[str, object] = {"stdin": stdin}
    elif input is not None:
        feed = {"input": input if isinstance(input, bytes) else input.encode(*_CODEC)}
    else:
        feed = {"stdin": subprocess.DEVNULL}
    try:
        # Bytes: text mode would turn every "\r" into "\n".
        result = subprocess.run(  # type: ignore[call-overload]
            [program, *args],
            cwd=cwd,
            capture_output=True,
            check=False,
            env=git_environment(os.environ, hooks=hooks) | dict(env or {}),
            timeout=timeout,
            **feed,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)} took over {timeout:g}s") from None
    except OSError as error:
        raise GitError(f"cannot run git: {error}") from None
    completed = subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(*_CODEC), result.stderr.decode(*_CODEC)
    )
    if check and completed.returncode != 0:
        where = f" in {cwd}" if cwd is not None else ""
        raise GitError(f"git {' '.join(args)} failed{where}: {completed.stderr.strip()}")
    return completed
