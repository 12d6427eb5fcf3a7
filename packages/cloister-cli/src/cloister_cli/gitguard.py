"""The git guard: settings the human's own git gets while a cloister works in a repository.

A repository the agent creates inside the project and adds to the index as a gitlink
is entered by the human's ``git status``, ``git diff`` and ``git commit -a``, which then
run whatever that repository's config says (``core.fsmonitor``, filters). While a
cloister runs, the repository's own ``config`` (read-only inside) includes
``<data>/git-guard.gitconfig``, which keeps git out of submodules: their status is not
checked, nothing recurses into them. The per-submodule settings that could override
this live in ``.gitmodules``, which :mod:`cloister_cli.gitmounts` keeps read-only.

The include is three marked lines at the end of the config, added before the first
cloister of the repository starts and removed (exactly those lines; the human's own
edits stay) when the last one stops and ``cloister review`` found nothing that the
human's git would enter. Writes follow git's own locking protocol (``config.lock``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write

# What the human's git must not do in a repository an agent may have planted: enter it.
GUARD_SETTINGS = {
    "diff": {"ignoreSubmodules": "all", "submodule": "short"},
    "status": {"submoduleSummary": "false"},
    "submodule": {"recurse": "false"},
    "fetch": {"recurseSubmodules": "false"},
    "push": {"recurseSubmodules": "no"},
}
MARK = (
    "# cloister: keeps git out of submodules while a cloister works here (cloister stop removes it)"
)
LOCK_TIMEOUT = 5.0


class GitGuardError(CloisterError):
    """The repository's config could not be changed."""


def guard_file_text() -> str:
    lines = ["# Written by Cloister; included by repositories a cloister works in.\n"]
    for section, values in GUARD_SETTINGS.items():
        lines.append(f"[{section}]\n")
        lines += [f"\t{key} = {value}\n" for key, value in values.items()]
    return "".join(lines)


def write_guard_file(path: Path) -> None:
    """(Re)write the shared settings file if its content is not current."""
    text = guard_file_text()
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8") == text:
            return
    atomic_write(path, text, mode=0o644)


def _block(guard: Path) -> list[str]:
    # Quoted: a data directory may contain spaces, '#' or ';'.
    escaped = str(guard).replace("\\", "\\\\").replace('"', '\\"')
    return [MARK + "\n", "[include]\n", f'\tpath = "{escaped}"\n']


def _lock(config: Path) -> tuple[int, Path]:
    """git's lock: ``config.lock`` created exclusively (git's writers wait or fail on it
    as they do for each other); the open descriptor and its path."""
    lock = config.with_name(config.name + ".lock")
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        try:
            return os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), lock
        except FileExistsError:
            if time.monotonic() > deadline:
                raise GitGuardError(
                    f"{str(lock)!r} exists: another git command is changing the config;"
                    " if none is, remove the file and try again"
                ) from None
            time.sleep(0.05)


Edit = Callable[[list[str]], list[str] | None]


def _rewrite(config: Path, change: str, editor: Edit) -> bool:
    """Write the edited config into the lock file and rename it over the config.

    Once renamed, the lock is released: another process may hold ``config.lock`` by
    then, so it is never removed after that point.
    """
    try:
        fd, lock = _lock(config)
    except OSError as error:
        raise GitGuardError(f"cannot {change} {str(config)!r}: {error}") from None
    renamed = False
    try:
        new = editor(config.read_text(encoding="utf-8").splitlines(keepends=True))
        if new is None:
            return False
        os.fchmod(fd, config.stat().st_mode & 0o777)
        data = "".join(new).encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
        lock.replace(config)
        renamed = True
    except OSError as error:
        raise GitGuardError(f"cannot {change} {str(config)!r}: {error}") from None
    finally:
        os.close(fd)
        if not renamed:
            lock.unlink(missing_ok=True)
    return True


def is_guarded(common: Path, guard: Path) -> bool:
    try:
        lines = (common / "config").read_text(encoding="utf-8").splitlines(keepends=True)
    except OSError:
        return False
    return _find(lines, guard) is not None


def _find(lines: list[str], guard: Path) -> int | None:
    block = _block(guard)
    for index in range(len(lines) - 2):
        if lines[index].rstrip("\n") == block[0].rstrip("\n") and [
            line.rstrip("\n") for line in lines[index + 1 : index + 3]
        ] == [line.rstrip("\n") for line in block[1:]]:
            return index
    return None


def add_guard(common: Path, guard: Path) -> bool:
    """Include *guard* from the repository's config; False when it is there already."""
    write_guard_file(guard)

    def edit(lines: list[str]) -> list[str] | None:
        if _find(lines, guard) is not None:
            return None
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        return [*lines, *_block(guard)]

    return _rewrite(common / "config", "add Cloister's git guard to", edit)


def remove_guard(common: Path, guard: Path) -> bool:
    """Remove exactly the lines :func:`add_guard` wrote; False when they are not there.

    Keys the human (or ``git config``) added to that ``[include]`` section since stay,
    under their section header.
    """

    def edit(lines: list[str]) -> list[str] | None:
        index = _find(lines, guard)
        if index is None:
            return None
        rest = lines[index + 3 :]
        following = next((line.strip() for line in rest if line.strip()), "")
        keep_header = (
            bool(following) and not following.startswith("[") and not following.startswith("#")
        )
        return [*lines[:index], *(["[include]\n"] if keep_header else []), *rest]

    if not (common / "config").exists():
        return False
    return _rewrite(common / "config", "remove Cloister's git guard from", edit)
