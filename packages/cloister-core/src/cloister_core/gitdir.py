"""What an agent can plant in a git directory that host git would follow out of it.

An agent that can write ``.git`` (it must, to commit) can leave there what git itself
never makes: a symbolic link, which host git follows when it reads the file (and
prints the target's lines in its errors: ``packed-refs``, ``shallow``,
``info/grafts``, ``objects/info/alternates``) or writes it (``COMMIT_EDITMSG``,
reflogs, ``FETCH_HEAD``: a file of the human's overwritten or appended to); a FIFO,
on which host git blocks; or an ``objects/info/alternates`` file, which makes host
git read another repository's objects (and lets ``git cat-file`` print them).

:func:`take_baseline` records what a repository has when a cloister starts (the
human's own links are not the agent's doing); :func:`planted` lists what is new.
:class:`SpecialScanner` makes repeated checks cheap: a directory whose change time
is old and unchanged is not read again (git's "racily clean" rule: a change within
the same clock tick as the last scan would not move the time, so recent directories
are always re-read).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

SpecialKind = Literal["symlink", "fifo"]
PlantKind = Literal["symlink", "fifo", "alternates"]

# Files that make git read objects from other directories (``http-alternates`` is
# the dumb-HTTP form; both are plain lists of paths or URLs).
ALTERNATES_FILES = ("objects/info/alternates", "objects/info/http-alternates")
# A directory whose change time is within this of "now" is re-read on every scan:
# file-system timestamps come from a coarse clock that ticks every few milliseconds.
RACY_NANOSECONDS = 1_000_000_000
ALTERNATES_READ_LIMIT = 64 * 1024


class SpecialEntry(BaseModel):
    """A symbolic link or FIFO inside a git directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str  # relative to the git directory, with "/" separators
    kind: SpecialKind
    target: str | None = None  # what a symbolic link points at, as written


class GitDirBaseline(BaseModel):
    """What a git directory held when the cloister started (the human's own setup)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    special: tuple[SpecialEntry, ...] = ()
    alternates: dict[str, str] = {}  # relative path -> content, for ALTERNATES_FILES that exist


@dataclass(frozen=True, slots=True)
class Planted:
    """Something in the git directory that was not there at start."""

    path: Path  # absolute
    relative: str  # relative to the git directory
    kind: PlantKind
    detail: str  # "a symbolic link to '/home/u/.bashrc'"

    def describe(self) -> str:
        return f"{self.path} is {self.detail}"


def _classify(entry: os.DirEntry[str]) -> SpecialEntry | None:
    if entry.is_symlink():
        try:
            target: str | None = os.readlink(entry.path)  # noqa: PTH115 - str paths: hot loop
        except OSError:
            target = None
        return SpecialEntry(path="", kind="symlink", target=target)
    if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
        return None
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError:
        return None
    # Sockets (git's own fsmonitor daemon keeps one in .git) cannot be opened as files.
    return SpecialEntry(path="", kind="fifo") if stat.S_ISFIFO(mode) else None


@dataclass(slots=True)
class _Directory:
    key: tuple[int, int, int]  # st_dev, st_ino, st_ctime_ns
    special: list[SpecialEntry]
    subdirectories: list[str]


@dataclass(slots=True)
class SpecialScanner:
    """Finds special entries below a root, re-reading only directories that changed.

    Every directory is ``lstat``-ed on each scan (a change deep below does not touch
    its parents' times); only new, changed or recently changed ones are listed.
    """

    _cache: dict[str, _Directory] = field(default_factory=dict)

    def scan(self, root: Path) -> dict[str, SpecialEntry]:
        """Every symbolic link and FIFO below *root*, by relative path."""
        started = time.time_ns()
        found: dict[str, SpecialEntry] = {}
        seen: set[str] = set()
        pending: list[tuple[str, str]] = [(str(root), "")]
        while pending:
            directory, relative = pending.pop()
            seen.add(directory)
            listing = self._listing(directory, started)
            if listing is None:
                continue
            for entry in listing.special:
                path = f"{relative}{entry.path}"
                found[path] = entry.model_copy(update={"path": path})
            pending.extend(
                (os.path.join(directory, name), f"{relative}{name}/")  # noqa: PTH118 - hot loop
                for name in listing.subdirectories
            )
        for gone in self._cache.keys() - seen:
            del self._cache[gone]
        return found

    def _listing(self, directory: str, started: int) -> _Directory | None:
        try:
            info = os.lstat(directory)
        except OSError:
            return None
        if not stat.S_ISDIR(info.st_mode):
            return None
        key = (info.st_dev, info.st_ino, info.st_ctime_ns)
        cached = self._cache.get(directory)
        if cached is not None and cached.key == key and key[2] < started - RACY_NANOSECONDS:
            return cached
        special: list[SpecialEntry] = []
        subdirectories: list[str] = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        subdirectories.append(entry.name)
                        continue
                    kind = _classify(entry)
                    if kind is not None:
                        special.append(kind.model_copy(update={"path": entry.name}))
        except OSError:
            return None
        listing = _Directory(key, special, subdirectories)
        self._cache[directory] = listing
        return listing


def _read_alternates(path: Path) -> str | None:
    """The content of a regular alternates file; None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, ALTERNATES_READ_LIMIT).decode("utf-8", "replace")
    finally:
        os.close(fd)


def take_baseline(root: Path) -> GitDirBaseline:
    """What *root* (a repository's common git directory) holds now."""
    special = SpecialScanner().scan(root)
    alternates = {
        name: content
        for name in ALTERNATES_FILES
        if (content := _read_alternates(root / name)) is not None
    }
    return GitDirBaseline(
        special=tuple(special[path] for path in sorted(special)), alternates=alternates
    )


def _describe(entry: SpecialEntry) -> str:
    if entry.kind == "symlink":
        return f"a symbolic link to {entry.target!r}"
    return "a FIFO (git would block on it)"


def planted(
    root: Path, baseline: GitDirBaseline, scanner: SpecialScanner | None = None
) -> list[Planted]:
    """What is in *root* now that *baseline* did not have, sorted by path."""
    known = {entry.path: entry for entry in baseline.special}
    found: list[Planted] = []
    for relative, entry in (scanner or SpecialScanner()).scan(root).items():
        if known.get(relative) != entry:
            found.append(Planted(root / relative, relative, entry.kind, _describe(entry)))
    for name in ALTERNATES_FILES:
        content = _read_alternates(root / name)
        if content is not None and content != baseline.alternates.get(name):
            sources = ", ".join(repr(line) for line in content.split() if line) or "nothing"
            found.append(
                Planted(
                    root / name,
                    name,
                    "alternates",
                    f"a list of other object directories git would read ({sources})",
                )
            )
    return sorted(found, key=lambda item: item.relative)


def unsafe_index_path(path: str) -> str | None:
    """Why git must not be given *path* as an index entry, or None when it is fine.

    git checks a path when it writes one into the index, never when it reads the index
    back; an agent that writes the index file itself can name ``../x`` (git diff prints
    that file, git checkout writes it) or ``.git/hooks/x``. These are git's own rules
    (``verify_path``): no empty, ``.``, ``..`` or ``.git`` component (any case), no
    leading or trailing ``/``.
    """
    if not path:
        return "an empty path"
    if path.startswith("/"):
        return "an absolute path"
    for component in path.split("/"):
        if component == "":
            return "an empty component"
        if component in (".", ".."):
            return f"a {component!r} component"
        if component.lower() == ".git":
            return "a .git component"
    return None
