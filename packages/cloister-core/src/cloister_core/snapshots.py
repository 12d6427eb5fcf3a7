"""Session snapshots: what a repository was when a cloister started, kept to undo it.

``cloister start`` keeps, under ``<data>/snapshots/<project>/``:

* ``objects/``: a pool laid out like git's object directory (``pack/pack-*.pack``,
  ``ab/cdef…`` loose objects). Every file is named by its content (a pack by its
  checksum, a loose object by its id), so a name already in the pool is never copied
  again: each start adds only what is new since the last one.
* ``records/<id>.json``: one :class:`SnapshotRecord` per snapshot: the refs, ``HEAD``,
  the trees of the index and of the work tree (tracked changes and untracked files),
  and the pool files it needs. A pool file no kept record names is removed.

This module is the file format and the expiry rule; taking and restoring are the
CLI's (``cloister_cli.session.snapshots``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError, field_validator

from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.names import validate_cloister_name
from cloister_core.paths import CloisterPaths

SnapshotKind = Literal["start", "before-restore"]

# A pool file: a pack's files, or a loose object (sha1 or sha256 ids).
POOL_FILE = re.compile(
    r"pack/pack-[0-9a-f]{40}(?:[0-9a-f]{24})?\.(?:pack|idx|rev|bitmap|mtimes|promisor)"
    r"|[0-9a-f]{2}/(?:[0-9a-f]{38}|[0-9a-f]{62})"
)
_OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_SNAPSHOT_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{4}")


class SnapshotError(CloisterError):
    """A snapshot that cannot be taken, read or restored."""


def _object_id(value: str | None) -> str | None:
    if value is not None and not _OBJECT_ID.fullmatch(value):
        raise ValueError(f"not an object id: {value!r}")
    return value


class SnapshotRecord(BaseModel):
    """``<data>/snapshots/<project>/records/<id>.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: SnapshotKind = "start"
    cloister: str
    project: str
    created_at: AwareDatetime
    worktree: str  # the host directory the cloister works in
    git_dir: str  # its own git directory
    common_dir: str  # the repository's
    object_format: Literal["sha1", "sha256"] = "sha1"
    head_ref: str | None = None  # HEAD is this branch (maybe unborn) ...
    head_commit: str | None = None  # ... at this commit; or detached here when no head_ref
    refs: dict[str, str] = {}  # every ref under refs/ -> its object id
    symrefs: dict[str, str] = {}  # symbolic refs (refs/remotes/origin/HEAD) -> their target
    stash: tuple[tuple[str, str], ...] = ()  # the stash entries (id, message), newest first
    shallow: str | None = None  # .git/shallow, for a shallow clone
    index_tree: str | None = None  # the staged state (None: the index had conflicts)
    worktree_tree: str | None = None  # tracked changes and untracked files, as a tree
    skipped: tuple[str, ...] = ()  # files left out (too big, too many), the first few
    skipped_count: int = 0  # how many were left out in all
    missing: tuple[str, ...] = ()  # objects the pool lacked when it was taken (incomplete)
    unsupported_refs: int = 0  # refs whose names are not UTF-8, not kept
    alternates: str | None = None  # objects/info/alternates, when the repository has one
    files: tuple[str, ...] = ()  # the pool files the snapshot needs

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _SNAPSHOT_ID.fullmatch(value):
            raise ValueError(f"not a snapshot id: {value!r}")
        return value

    @field_validator("cloister")
    @classmethod
    def _cloister(cls, value: str) -> str:
        return validate_cloister_name(value)

    @field_validator("head_commit", "index_tree", "worktree_tree")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        return _object_id(value)

    @field_validator("files")
    @classmethod
    def _files(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not POOL_FILE.fullmatch(name):
                raise ValueError(f"not a pool file: {name!r}")
        return value

    @field_validator("refs")
    @classmethod
    def _refs(cls, value: dict[str, str]) -> dict[str, str]:
        for name, target in value.items():
            _ref_name(name)
            _object_id(target)
        return value

    @field_validator("symrefs")
    @classmethod
    def _symrefs(cls, value: dict[str, str]) -> dict[str, str]:
        for name, target in value.items():
            _ref_name(name)
            _ref_name(target)
        return value

    @field_validator("stash")
    @classmethod
    def _stash(cls, value: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        for commit, message in value:
            _object_id(commit)
            if "\n" in message:
                raise ValueError(f"not a stash message: {message!r}")
        return value


def _ref_name(name: str) -> str:
    if not name.startswith("refs/") or any(char in name for char in " \n\0") or ".." in name:
        raise ValueError(f"not a ref name: {name!r}")
    return name


def new_snapshot_id(now: datetime) -> str:
    """``20261125T110714Z-3f2a``: sorts by time; unique among a project's records."""
    return f"{now:%Y%m%dT%H%M%S}Z-{secrets.token_hex(2)}"


def pool_dir(paths: CloisterPaths, project: str) -> Path:
    return paths.snapshot_dir(project) / "objects"


def records_dir(paths: CloisterPaths, project: str) -> Path:
    return paths.snapshot_dir(project) / "records"


def write_record(paths: CloisterPaths, record: SnapshotRecord) -> Path:
    path = records_dir(paths, record.project) / f"{record.id}.json"
    atomic_write(path, record.model_dump_json(indent=1) + "\n", mode=0o600, dir_mode=0o700)
    return path


def unreadable_records(paths: CloisterPaths, project: str) -> list[Path]:
    """Record files that do not read as a record (a newer Cloister's, a damaged one):
    while there is one, no pool file may be removed, as it may be one that record needs."""
    broken = []
    with contextlib.suppress(OSError):
        for file in sorted(records_dir(paths, project).glob("*.json")):
            try:
                SnapshotRecord.model_validate_json(file.read_bytes())
            except (OSError, ValidationError):
                broken.append(file)
    return broken


def read_records(paths: CloisterPaths, project: str) -> list[SnapshotRecord]:
    """A project's records, oldest first; unreadable ones are skipped."""
    found: list[SnapshotRecord] = []
    try:
        files = sorted(records_dir(paths, project).glob("*.json"))
    except OSError:
        return []
    for file in files:
        try:
            found.append(SnapshotRecord.model_validate_json(file.read_bytes()))
        except (OSError, ValidationError):
            continue
    return sorted(found, key=lambda record: (record.created_at, record.id))


def all_records(paths: CloisterPaths) -> list[SnapshotRecord]:
    """Every project's records, oldest first."""
    try:
        projects = sorted(entry.name for entry in os.scandir(paths.snapshots_dir) if entry.is_dir())
    except OSError:
        return []
    records = [record for project in projects for record in read_records(paths, project)]
    return sorted(records, key=lambda record: (record.created_at, record.id))


def remove_record(paths: CloisterPaths, record: SnapshotRecord) -> None:
    (records_dir(paths, record.project) / f"{record.id}.json").unlink(missing_ok=True)


def expired(
    records: Iterable[SnapshotRecord], *, keep: int, max_age: timedelta, now: datetime
) -> list[SnapshotRecord]:
    """The records of one project that expire: all but the newest *keep*, and those
    older than *max_age*; never a cloister's newest start (the undo of its last session,
    which no number of restores, each snapshotting what was there first, pushes out)."""
    ordered = sorted(records, key=lambda record: (record.created_at, record.id), reverse=True)
    newest_start: dict[str, str] = {}
    for record in ordered:
        if record.kind == "start":
            newest_start.setdefault(record.cloister, record.id)
    gone = []
    for position, record in enumerate(ordered):
        if newest_start.get(record.cloister) == record.id:
            continue
        if position >= keep or now - record.created_at > max_age:
            gone.append(record)
    return gone


def needed_files(records: Iterable[SnapshotRecord]) -> set[str]:
    """The pool files some of *records* need."""
    return {name for record in records for name in record.files}


def find_record(records: Iterable[SnapshotRecord], prefix: str) -> SnapshotRecord:
    """The record whose id starts with *prefix* (unique), else :class:`SnapshotError`."""
    matches = [record for record in records if record.id.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SnapshotError(f"no snapshot {prefix!r} (`cloister restore NAME --list`)")
    listed = ", ".join(record.id for record in matches[:5])
    raise SnapshotError(f"{prefix!r} names {len(matches)} snapshots ({listed}); give more of it")
