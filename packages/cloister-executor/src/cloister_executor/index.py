"""What a git index names, checked; moving a repository away from a gitlink; rebuilding
an index the agent forged.

git checks an entry's path when it puts it into an index, never when it reads one
back, and the agent can write the index file itself: an entry ``../x`` makes host
``git diff`` print a file of the human's and ``git checkout``/``restore`` write one, an
entry ``.git/hooks/x`` plants a hook. A gitlink (a submodule entry) makes the human's
git enter the directory it names and obey the repository there. The guard reads every
index of a guarded repository with git's own reader (``git ls-files``, hardened) when
it changes, and acts on both.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from cloister_core import beneath
from cloister_core.gitdir import unsafe_index_path
from cloister_core.gitsafety import git_environment

GIT_TIMEOUT = 30.0


class GitIndexError(OSError):
    """git could not read or rebuild an index."""


@dataclass(frozen=True, slots=True)
class IndexScan:
    gitlinks: tuple[str, ...]  # paths of the gitlinks (all of them safe paths)
    unsafe: tuple[tuple[str, str], ...]  # (path, why) of the entries git must not be given


async def _git(git_dir: Path, *args: str) -> bytes:
    program = shutil.which("git")
    if program is None:
        raise GitIndexError("git is not installed")
    process = await asyncio.create_subprocess_exec(
        program,
        f"--git-dir={git_dir}",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=git_environment(os.environ, hooks=False),
    )
    try:
        async with asyncio.timeout(GIT_TIMEOUT):
            output, errors = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise GitIndexError(f"git {args[0]} took over {GIT_TIMEOUT:g}s in {git_dir}") from None
    if process.returncode != 0:
        message = errors.decode("utf-8", "replace").strip()
        raise GitIndexError(f"git {args[0]} failed in {git_dir}: {message}")
    return output


async def scan(git_dir: Path) -> IndexScan:
    """The gitlinks and the unsafe entries of the index of *git_dir*."""
    output = await _git(git_dir, "ls-files", "--stage", "-z")
    gitlinks: list[str] = []
    unsafe: list[tuple[str, str]] = []
    for entry in output.split(b"\0"):
        if not entry:
            continue
        meta, _, raw = entry.partition(b"\t")
        path = os.fsdecode(raw)
        reason = unsafe_index_path(path)
        if reason is not None:
            unsafe.append((path, reason))
        elif meta.startswith(b"160000 "):
            gitlinks.append(path)
    return IndexScan(tuple(gitlinks), tuple(unsafe))


async def rebuild(git_dir: Path, into: Path) -> Path:
    """Move the index of *git_dir* to *into* and make a new one from ``HEAD`` (the work
    tree is not touched; what was staged is in the moved file). Where it went."""
    destination = _move_index(git_dir, into)
    try:
        await _git(git_dir, "read-tree", "HEAD")
    except GitIndexError:
        await _git(git_dir, "read-tree", "--empty")  # no commit yet
    return destination


def _move_index(git_dir: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True, mode=0o700)
    destination = into / "index"
    with beneath.parent_of(git_dir, "index") as (fd, name):
        os.rename(name, destination, src_dir_fd=fd)
    return destination


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
