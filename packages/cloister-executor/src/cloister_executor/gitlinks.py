"""Gitlinks of a work tree's index, and moving a repository away from one.

A gitlink (a submodule entry) makes the human's git enter the directory it names and
obey the repository there. The guard lists them (quickly: most indexes have none) and
moves a repository that appears at one out of the project, never following a link on
the way (the agent chooses what a gitlink names).
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from pathlib import Path

from cloister_core import beneath
from cloister_core.gitsafety import git_environment

GIT_TIMEOUT = 30.0


async def move_repository_away(root: Path, gitlink: str, into: Path) -> Path | None:
    """Move ``<root>/<gitlink>/.git`` to ``<into>/<gitlink>/.git``; where it went, or
    None when there is nothing there. Raises :class:`OSError` when it cannot be moved
    (a link on the way, a path climbing out)."""
    try:
        with beneath.parent_of(root, f"{gitlink}/.git") as (fd, name):
            os.stat(name, dir_fd=fd, follow_symlinks=False)  # there at all?
            destination = into.joinpath(*Path(gitlink).parts, ".git")
            destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                os.rename(name, destination, src_dir_fd=fd)
            except OSError as error:
                if error.errno != errno.EXDEV:
                    raise
                source = beneath.proc_path(fd, name)
                await asyncio.to_thread(shutil.move, source, destination)
    except FileNotFoundError:
        return None
    return destination


# A gitlink's mode in an index entry (0o160000, 32-bit big-endian).
GITLINK_MODE = (0o160000).to_bytes(4, "big")


def none_in(index: Path) -> bool:
    """Whether the index certainly holds no gitlink (a quick look at its bytes).

    Every entry's mode is stored as four bytes; when that pattern occurs nowhere, there
    is none, and git need not be asked. Otherwise (or for a split index, whose entries
    live in ``sharedindex.*`` files) git lists them.
    """
    try:
        fd = os.open(index, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    finally:
        os.close(fd)
    if GITLINK_MODE in data:
        return False
    return not any(index.parent.glob("sharedindex.*"))


async def listed(worktree: Path) -> list[str] | None:
    """The gitlink paths of the work tree's index (git's own reader; hardened)."""
    git = shutil.which("git")
    if git is None:
        return None
    process = await asyncio.create_subprocess_exec(
        git,
        "-C",
        str(worktree),
        "ls-files",
        "--stage",
        "-z",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=git_environment(os.environ, hooks=False),
    )
    try:
        async with asyncio.timeout(GIT_TIMEOUT):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    if process.returncode != 0:
        return None
    found = []
    for entry in output.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = entry.partition("\t")
        if meta.startswith("160000 "):
            found.append(path)
    return found
