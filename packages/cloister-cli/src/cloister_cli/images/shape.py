"""The cloister's shape: the project files it is built from, approved by the human.

The agent writes the project, and the project holds what decides its own sandbox
(``.devcontainer/``, ``.devcontainer.json``, ``.cloister/``). So the agent must not be
able to widen the next cloister silently: :func:`check_shape` compares those files
with what the human last approved, shows the difference and asks before the start
uses them. The approved copy is ``<data>/shapes/<name>.json`` (0600): in Cloister's
data directory, which no cloister mounts, never in the project.

Reading the shape treats the project as hostile (:mod:`cloister_core.beneath` opens
each directory and file): every directory is entered with ``O_NOFOLLOW`` relative to its
parent's descriptor, only a regular file is opened (``O_NONBLOCK``, and checked to be
what ``lstat`` saw, so a FIFO swapped in never blocks), a symbolic link is recorded as
``-> target`` and never read through. A link that leads to another place *inside*
the project is recorded and that place is read too, under its own path: otherwise the
agent could point ``devcontainer.json`` at a file nobody compares. Everything is
bounded (bytes kept, bytes read, entries, depth); what a bound leaves out is still
compared, by digest or by ``lstat``, and a tree too large even for that makes the
shape differ every time, so the start asks every time.

A start with ``--no-devcontainer`` reads only ``.cloister/`` (scope ``cloister``): it
never asks about a file it does not use, and what it approves is kept apart from the
approval of every source, so the next start with the devcontainer still compares the
devcontainer's files with the last approval that saw them.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import secrets
import stat
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, cast

from cloister_core import beneath
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.names import validate_name
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable

# Relative to the project root: what the devcontainer loader and Cloister's project
# files are read from. An explicit ``--devcontainer`` path is added by the caller.
SHAPE_SOURCES: tuple[str, ...] = (
    ".devcontainer",
    ".devcontainer.json",
    ".devcontainer-lock.json",  # the Feature lock of a root .devcontainer.json
    ".cloister",
)
# With --no-devcontainer only these are read: nobody is asked about a file not used.
CLOISTER_SOURCES: tuple[str, ...] = (".cloister",)

Scope = Literal["all", "cloister"]
"""What a shape covers: ``all`` its sources, ``cloister`` only :data:`CLOISTER_SOURCES`
(a start with ``--no-devcontainer``). The record keeps the last approval of each, so an
approval that never saw the devcontainer files does not count for a start that uses them."""

FILE_LIMIT = 1024 * 1024  # a file up to this size is kept (and diffed) as text
TEXT_BUDGET = 8 * FILE_LIMIT  # text kept over all files; beyond it, a sha256
READ_BUDGET = 64 * FILE_LIMIT  # bytes read over all files; beyond it, the lstat facts
MAX_FILES = 2000  # entries recorded one by one; the rest go into one digest
MAX_ENTRIES = 100_000  # entries walked at all; beyond, the shape cannot be compared
MAX_DEPTH = 64  # directories deeper than this cannot be compared either

OVERFLOW_NAME = "the entries not recorded one by one"  # how changed_names lists the overflow

# A value that is a description (a link, a FIFO, a binary or too large file) rather
# than a file's text starts with NUL: a file holding NUL is never kept as text, so the
# two can never be confused (a text file saying "-> /etc/passwd" is not a link).
NOTE = "\0"
_CHUNK = 256 * 1024
_RECORD_VERSION = 2  # 1: one shape, of every source (read as scope "all")


class ShapeChangedError(CloisterError):
    """The shape changed and was not accepted (refused, or nobody could be asked)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """The shape's files: path -> text, or :data:`NOTE` + a description.

    A path is relative to the project root, or absolute for an explicit file outside
    it. *overflow* describes what was not recorded file by file ("" when nothing).
    """

    files: Mapping[str, str]
    overflow: str = ""
    scope: Scope = "all"

    @property
    def digest(self) -> str:
        hasher = hashlib.sha256()
        for part in (*_flatten(self.files), self.overflow):
            data = part.encode("utf-8", "surrogatepass")
            hasher.update(len(data).to_bytes(8, "big"))
            hasher.update(data)
        return hasher.hexdigest()


def _flatten(files: Mapping[str, str]) -> Iterator[str]:
    for name in sorted(files):
        yield name
        yield files[name]


def is_note(value: str) -> bool:
    """Whether a :attr:`Shape.files` value describes the entry rather than holding text."""
    return value.startswith(NOTE)


# -- reading -----------------------------------------------------------------------------


def read_shape(root: Path, extra: Sequence[Path] = (), *, scope: Scope = "all") -> Shape:
    """The shape of the project at *root*: :data:`SHAPE_SOURCES` (only
    :data:`CLOISTER_SOURCES` for *scope* ``cloister``) and the *extra* paths.

    A relative *extra* path is taken from the current directory (as ``--devcontainer``
    is); one inside the project is recorded by its project path, one outside by its
    absolute path (read without following a link either).
    """
    reader = _Reader(Path(os.path.realpath(root)))
    for source in SHAPE_SOURCES if scope == "all" else CLOISTER_SOURCES:
        reader.visit(reader.project, source)
    for path in extra:
        absolute = Path(os.path.normpath(path.absolute()))
        parent = Path(os.path.realpath(absolute.parent))
        relative = reader.relative(parent / absolute.name)
        if relative is not None:
            reader.visit(reader.project, relative)
        else:
            reader.visit(_Place(parent, f"{parent}/".replace("//", "/")), absolute.name)
    reader.follow_links()
    return replace(reader.shape(), scope=scope)


@dataclass(frozen=True, slots=True)
class _Place:
    """A directory walked from (never through a link) and the prefix of its keys."""

    anchor: Path
    prefix: str


class _Reader:
    """One walk over the sources, with its budgets; no state outlives it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.project = _Place(root, "")
        self.files: dict[str, str] = {}
        self.seen: set[str] = set()  # keys walked, directories too: each is walked once
        self.links: deque[str] = deque()  # project paths links lead to, walked after the rest
        self.entries = 0
        self.text_budget = TEXT_BUDGET
        self.read_budget = READ_BUDGET
        self.overflow_count = 0
        self.overflow = hashlib.sha256()
        self.uncomparable: str | None = None

    def relative(self, path: Path) -> str | None:
        """*path* as a project path ("" for the root); None when outside the project."""
        text = os.path.normpath(path)
        base = str(self.root)
        if text == base:
            return ""
        if text.startswith(base.rstrip("/") + "/"):
            return text[len(base.rstrip("/")) + 1 :]
        return None

    def shape(self) -> Shape:
        overflow = ""
        if self.overflow_count:
            overflow = (
                f"{self.overflow_count} more entries beyond the first {MAX_FILES},"
                f" compared together: sha256 {self.overflow.hexdigest()}"
            )
        if self.uncomparable is not None:
            # A different value each time: what cannot be compared is asked about.
            overflow = f"{overflow}\n" if overflow else ""
            overflow += f"{self.uncomparable}: asked every time ({secrets.token_hex(8)})"
        return Shape(files=dict(self.files), overflow=overflow)

    def visit(self, place: _Place, relative: str) -> None:
        """Record *relative* below *place* (the root itself when "")."""
        parts = [part for part in relative.split("/") if part]
        with beneath.open_directory(place.anchor, parts[:-1]) as fd:
            if fd is None:
                return  # missing, or a link on the way: never crossed
            if not parts:
                if place.prefix not in self.seen:
                    self.seen.add(place.prefix)
                    self.open_directory(fd, place, "", 0)
            else:
                self._entry(fd, parts[-1], place, "/".join(parts), len(parts))

    def _entry(self, dir_fd: int, name: str, place: _Place, relative: str, depth: int) -> None:
        key = place.prefix + relative
        if key in self.seen:
            return  # already read (a link led here again)
        self.seen.add(key)
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            self.uncomparable = f"more than {MAX_ENTRIES} entries"
            return
        try:
            info = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return
        except OSError as error:
            self._record(key, _note(f"cannot be read: {error.strerror}"))
            return
        if stat.S_ISDIR(info.st_mode):
            self._subdirectory(dir_fd, name, place, relative, depth)
        elif stat.S_ISLNK(info.st_mode):
            self._link(dir_fd, name, place, relative)
        elif stat.S_ISREG(info.st_mode):
            self._record(key, self._file(dir_fd, name, info))
        else:
            self._record(key, _note(f"{_kind(info.st_mode)}: not read"))

    def _subdirectory(
        self, dir_fd: int, name: str, place: _Place, relative: str, depth: int
    ) -> None:
        if depth > MAX_DEPTH:
            self.uncomparable = f"directories deeper than {MAX_DEPTH} levels"
            return
        try:
            fd = beneath.open_dir(name, dir_fd=dir_fd)
        except OSError as error:
            self._record(place.prefix + relative, _note(f"cannot be read: {error.strerror}"))
            return
        try:
            self.open_directory(fd, place, relative, depth)
        finally:
            os.close(fd)

    def open_directory(self, fd: int, place: _Place, relative: str, depth: int) -> None:
        names: list[str] = []
        try:
            with os.scandir(fd) as listing:
                for item in listing:
                    if item.name == ".git":
                        # Never part of a build (it is left out of every context), and
                        # it changes at each commit: recording it would ask every time.
                        continue
                    if len(names) >= MAX_ENTRIES:
                        self.uncomparable = f"more than {MAX_ENTRIES} entries"
                        break
                    names.append(item.name)
        except OSError as error:
            self._record(place.prefix + relative, _note(f"cannot be listed: {error.strerror}"))
            return
        for child in sorted(names):
            path = f"{relative}/{child}" if relative else child
            self._entry(fd, child, place, path, depth + 1)

    def _link(self, dir_fd: int, name: str, place: _Place, relative: str) -> None:
        key = place.prefix + relative
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as error:
            self._record(key, _note(f"link, cannot be read: {error.strerror}"))
            return
        self._record(key, _note(f"-> {target}"))
        # Where the loader would really arrive: read that too when it is in the
        # project (the agent controls it), never when it is outside.
        inside = self.relative(Path(os.path.realpath(place.anchor / relative)))
        if inside is not None:
            self.links.append(inside)

    def follow_links(self) -> None:
        # A queue, not recursion: a chain of links through directories cannot make the
        # walk deeper than a directory tree is (each place is still walked once).
        while self.links:
            self.visit(self.project, self.links.popleft())

    def _file(self, dir_fd: int, name: str, info: os.stat_result) -> str:
        unread = _note(
            f"{info.st_size} bytes, not read (beyond the reading budget):"
            f" inode {info.st_ino}, changed {info.st_ctime_ns}"
        )
        if info.st_size > self.read_budget:
            return unread
        try:
            fd = beneath.open_regular(name, dir_fd=dir_fd, expect=info)
        except beneath.ChangedError:
            return _note("changed while being read")
        except OSError as error:
            return _note(f"cannot be read: {error.strerror}")
        try:
            hasher = hashlib.sha256()
            kept = bytearray()
            total = 0
            while chunk := os.read(fd, _CHUNK):
                total += len(chunk)
                if total > self.read_budget:
                    return unread  # it grew while being read
                hasher.update(chunk)
                if total <= FILE_LIMIT:
                    kept += chunk
        except OSError as error:
            return _note(f"cannot be read: {error.strerror}")
        finally:
            os.close(fd)
        self.read_budget -= total
        if total <= FILE_LIMIT and total <= self.text_budget and b"\0" not in kept:
            with contextlib.suppress(UnicodeDecodeError):
                text = kept.decode("utf-8")
                self.text_budget -= total
                return text
        what = "binary" if total <= FILE_LIMIT and b"\0" in kept else "not kept as text"
        return _note(f"{what}, {total} bytes, sha256 {hasher.hexdigest()}")

    def _record(self, key: str, value: str) -> None:
        if len(self.files) < MAX_FILES:
            self.files[key] = value
            return
        self.overflow_count += 1
        for part in (key, value):
            data = part.encode("utf-8", "surrogatepass")
            self.overflow.update(len(data).to_bytes(8, "big"))
            self.overflow.update(data)


def _note(text: str) -> str:
    return NOTE + text


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


# -- the approved record -----------------------------------------------------------------


def approved_file(paths: CloisterPaths, project: str) -> Path:
    """``<data>/shapes/<project>.json``: what the human last approved for *project*."""
    return paths.data_dir / "shapes" / f"{validate_name(project, what='project')}.json"


def _record(paths: CloisterPaths, project: str) -> dict[str, object]:
    """The approved record's shapes by scope (empty when none or unusable)."""
    try:
        document = json.loads(approved_file(paths, project).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    if document.get("version") == 1:
        return {"all": document}  # before scopes, every source was read
    shapes = document.get("shapes") if document.get("version") == _RECORD_VERSION else None
    return shapes if isinstance(shapes, dict) else {}


def _cloister_part(document: object) -> dict[str, object] | None:
    """The files of :data:`CLOISTER_SOURCES` in a recorded shape of scope ``all``."""
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, dict):
        return None
    kept = {
        key: value
        for key, value in cast("dict[object, object]", files).items()
        if isinstance(key, str) and key.split("/")[0] in CLOISTER_SOURCES
    }
    return {"files": kept}


def load_approved(paths: CloisterPaths, project: str, scope: Scope = "all") -> Shape | None:
    """The shape of *scope* the human last approved; None if none (or the record is
    unusable, which then asks again rather than trusting it)."""
    record = _record(paths, project)
    document = record.get(scope)
    if document is None and scope == "cloister":
        # Never started without the devcontainer: the approval of Cloister's own files
        # in the last start with it counts (a place a link led to is then new: asked).
        document = _cloister_part(record.get("all"))
    if not isinstance(document, dict):
        return None
    files = document.get("files")
    overflow = document.get("overflow", "")
    if not isinstance(files, dict) or not isinstance(overflow, str):
        return None
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in files.items()):
        return None
    return Shape(files=files, overflow=overflow, scope=scope)


def save_approved(paths: CloisterPaths, project: str, shape: Shape) -> None:
    """Keep *shape* as the approved one of its scope (atomic, 0600); the other scope's
    approval is kept as it was."""
    shapes = _record(paths, project)
    shapes[shape.scope] = {"files": dict(shape.files), "overflow": shape.overflow}
    document = {"version": _RECORD_VERSION, "shapes": shapes}
    # ensure_ascii: a name that is not UTF-8 (a lone surrogate) survives as an escape.
    text = json.dumps(document, ensure_ascii=True, indent=1, sort_keys=True) + "\n"
    atomic_write(approved_file(paths, project), text, mode=0o600, dir_mode=0o700)


# -- showing the difference --------------------------------------------------------------


def _shown(text: str) -> str:
    # printable() leaves the line and paragraph separators, which a terminal may show
    # as a line break: escaped too, so one line of the file is one line on screen.
    return printable(text).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _lines(value: str | None) -> list[str]:
    if value is None:
        return []
    if is_note(value):
        return [f"({value[1:]})"]
    # Split on "\n" alone: any other break character (\r, \v, \x1c, …) stays in its
    # line and is shown as an escape rather than as a break the parser does not see.
    lines = value.split("\n")
    if lines[-1] == "":
        lines.pop()
    elif lines:
        lines.append("\\ No newline at end of file")
    return lines


def _size(value: str) -> str:
    if is_note(value):
        return value[1:]
    return f"{len(value.encode('utf-8', 'surrogatepass'))} bytes"


def changed_names(old: Shape | None, new: Shape) -> list[str]:
    """The paths whose record differs (all of *new*'s when nothing was approved),
    then a phrase for the entries not recorded one by one if they differ; not escaped."""
    before: Mapping[str, str] = old.files if old is not None else {}
    names = sorted(
        name for name in set(before) | set(new.files) if before.get(name) != new.files.get(name)
    )
    if (old.overflow if old is not None else "") != new.overflow:
        names.append(OVERFLOW_NAME)
    return names


def difference(old: Shape | None, new: Shape) -> str:
    """What changed from *old* to *new*, for a human; "" when nothing did.

    With nothing approved yet (*old* None), the files are listed with their sizes:
    the first start cannot tell the human's own files from the agent's, so it asks
    too, but a full copy of every file would bury the question.
    """
    if old is None:
        if not new.files and not new.overflow:
            return ""
        out = ["first start with these files (nothing approved for this project yet):"]
        out += [
            f"  {_shown(name)} ({_shown(_size(new.files[name]))})" for name in sorted(new.files)
        ]
        out += [f"  {_shown(line)}" for line in new.overflow.splitlines()]
        return "\n".join(out) + "\n"
    if old.digest == new.digest:
        return ""
    out = []
    for name in sorted(set(old.files) | set(new.files)):
        before, after = old.files.get(name), new.files.get(name)
        if before == after:
            continue
        state = "added" if before is None else "removed" if after is None else "changed"
        out.append(f"{_shown(name)}: {state}")
        if after is None:
            continue
        diff = difflib.unified_diff(
            _lines(before),
            _lines(after),
            fromfile="/dev/null" if before is None else f"approved/{name}",
            tofile=f"now/{name}",
            lineterm="",
        )
        out += [_shown(line) for line in diff]
    if old.overflow != new.overflow:
        out.append("beyond the files shown one by one: changed")
        out += [f"-{_shown(line)}" for line in old.overflow.splitlines()]
        out += [f"+{_shown(line)}" for line in new.overflow.splitlines()]
    return "\n".join(out) + "\n"


# -- the check at start ------------------------------------------------------------------


def check_shape(
    paths: CloisterPaths,
    project: str,
    root: Path,
    *,
    extra: Sequence[Path] = (),
    confirm: Callable[[str], bool] | None,
    assume_yes: bool = False,
    command: str = "start",
    scope: Scope = "all",
) -> Shape:
    """The current shape of *root*, accepted: unchanged, ``--yes``, or confirmed.

    *scope* ``cloister`` (``--no-devcontainer``) reads and compares only
    :data:`CLOISTER_SOURCES`, against the last approval of that scope.

    *command* is the ``cloister`` command asking (``start``, ``images build``); the
    refusal names it.

    *confirm* is shown the difference and says whether to go on; None means nobody
    can be asked (no terminal), which refuses a changed shape unless *assume_yes*.
    Raises :class:`ShapeChangedError` when refused. The caller saves the returned
    shape with :func:`save_approved` once the cloister has started, and uses the
    files right after this check (the shape read here is the one approved).
    """
    old = load_approved(paths, project, scope)
    shape = read_shape(root, extra, scope=scope)
    shown = difference(old, shape)
    if not shown or assume_yes:
        return shape
    names = [_shown(name) for name in changed_names(old, shape)]
    if len(names) > 5:
        names[5:] = [f"{len(names) - 5} more"]
    listed = ", ".join(names)
    refused = f"{project} not started" if command == "start" else f"{project}: nothing built"
    if confirm is None:
        what = "were never approved" if old is None else "changed since you last started it"
        raise ShapeChangedError(
            f"{refused}: the files its shape is read from {what} ({listed});"
            f" run `cloister {command}` in a terminal to see the difference and answer,"
            " or add --yes to accept it"
        )
    if not confirm(shown):
        what = "the files its shape is read from" if old is None else "the change to"
        raise ShapeChangedError(f"{refused}: you did not accept {what} {listed}")
    return shape
