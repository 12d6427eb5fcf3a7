"""Taking a snapshot of a repository when a cloister starts, and expiring old ones.

A snapshot is the repository's refs (symbolic ones as such), ``HEAD``, the stash's
entries, ``.git/shallow``, two trees for the uncommitted work (the index as staged,
and the work tree: tracked changes plus untracked files that are not ignored, each up
to ``snapshots.untracked_file_limit``), and the object files all of that needs, placed
in the project's pool (:mod:`cloister_cli.session.snapshots.pool`). The trees are written by
git with a copy of the index and a temporary object directory (the repository's as an
alternate): nothing is written into the repository, and no filter runs
(:mod:`cloister_cli.session.snapshots.gitrun`).

What git reads happens before the pool's lock is taken; placing the files, checking
that the pool holds every object the snapshot names, writing the record and expiring
old ones happen under it (a prune never removes what a snapshot is placing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cloister_cli.repo import git
from cloister_cli.session.snapshots.gitrun import SnapshotGit
from cloister_cli.session.snapshots.pool import Placer, object_files, prune, transfer
from cloister_core import beneath
from cloister_core.config.models import SnapshotsConfig
from cloister_core.fileio import locked
from cloister_core.paths import CloisterPaths
from cloister_core.snapshots import (
    SnapshotError,
    SnapshotKind,
    SnapshotRecord,
    expired,
    needed_files,
    new_snapshot_id,
    pool_dir,
    read_records,
    remove_record,
    unreadable_records,
    write_record,
)

# Untracked files beyond this many are left out (a dependency tree nobody ignored).
MAX_UNTRACKED_FILES = 20_000
# Left-out names kept in the record (the count is kept whole).
MAX_SKIPPED_NAMES = 100
# The index is copied, never linked: bounded, and a sparse one is refused (git never
# writes one; an agent's `truncate -s 4G .git/index` would cost that much disk).
MAX_INDEX_BYTES = 1024**3


@dataclass(frozen=True, slots=True)
class Target:
    """What to snapshot: a work tree and its git directories, for one cloister."""

    cloister: str
    project: str
    worktree: Path
    git_dir: Path
    common_dir: Path

    @classmethod
    def of(cls, cloister: str, project: str, worktree: Path) -> Target:
        layout = git.layout(worktree)
        return cls(cloister, project, worktree, layout.git_dir, layout.common_dir)


def pool_lock(paths: CloisterPaths, project: str) -> Path:
    """The file whose lock keeps a prune from removing what a snapshot just placed."""
    return paths.snapshot_dir(project) / "pool"


@contextlib.contextmanager
def holding_pool(paths: CloisterPaths, project: str) -> Iterator[None]:
    paths.snapshot_dir(project).mkdir(parents=True, exist_ok=True, mode=0o700)
    with locked(pool_lock(paths, project)):
        yield


@dataclass(slots=True)
class _Read:
    """What git said about the repository (before anything is placed)."""

    refs: dict[str, str] = field(default_factory=dict)
    symrefs: dict[str, str] = field(default_factory=dict)
    unsupported_refs: int = 0
    head_ref: str | None = None
    head_commit: str | None = None
    object_format: str = "sha1"
    stash: list[tuple[str, str]] = field(default_factory=list)
    index_tree: str | None = None
    worktree_tree: str | None = None
    skipped: list[str] = field(default_factory=list)


def take(
    paths: CloisterPaths,
    target: Target,
    config: SnapshotsConfig,
    *,
    kind: SnapshotKind = "start",
    now: datetime | None = None,
    pool_held: bool = False,
) -> SnapshotRecord:
    """Snapshot *target* into its project's pool and records.

    A start's snapshot expires old ones; a ``before-restore`` one (the undo of a
    restore) keeps every file, whatever its size, and expires nothing. *pool_held*: the
    caller holds the pool's lock (a restore, for its whole length).
    """
    now = now or datetime.now(UTC)
    snapshot_id = new_snapshot_id(now)
    base = paths.snapshot_dir(target.project)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = base / "tmp" / snapshot_id
    scratch.mkdir(parents=True, mode=0o700)
    try:
        read = _read(target, config, kind, scratch)
        lock = contextlib.nullcontext() if pool_held else holding_pool(paths, target.project)
        with lock:
            record = _place(
                paths, target, read, scratch, kind=kind, snapshot_id=snapshot_id, now=now
            )
            write_record(paths, record)
            if kind == "start":
                expire_project(paths, target.project, config, now=now, pool_held=True)
    except (OSError, git.GitError) as error:
        raise SnapshotError(f"no snapshot of {target.worktree}: {error}") from None
    finally:
        with contextlib.suppress(OSError):
            beneath.remove_tree(scratch)
    return record


def _read(target: Target, config: SnapshotsConfig, kind: SnapshotKind, scratch: Path) -> _Read:
    run = SnapshotGit.of(target.worktree)
    read = _Read()
    listed = run("for-each-ref", "--format=%(objectname) %(refname) %(symref)").stdout
    for line in listed.splitlines():
        target_id, name, symref = [*line.split(" ", 2), ""][:3]
        if not _printable_name(name) or not _printable_name(symref):
            read.unsupported_refs += 1
        elif symref:
            read.symrefs[name] = symref
        elif name.startswith("refs/"):
            read.refs[name] = target_id
    read.head_ref = run("symbolic-ref", "-q", "HEAD", check=False).stdout.strip() or None
    if read.head_ref is not None:
        read.head_commit = read.refs.get(read.head_ref)
    else:
        head = run("rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).stdout.strip()
        read.head_commit = head or None
    read.object_format = run("rev-parse", "--show-object-format").stdout.strip()
    if "refs/stash" in read.refs:
        entries = run("log", "-g", "--format=%H %gs", "refs/stash", check=False).stdout
        read.stash = [
            (commit, message)
            for commit, _, message in (line.partition(" ") for line in entries.splitlines())
        ]
    # The undo of a restore keeps everything: the restore is about to overwrite it.
    limit = None if kind == "before-restore" else config.untracked_file_bytes
    _uncommitted(run, target, scratch, read, limit=limit)
    return read


def _printable_name(name: str) -> bool:
    """A ref name git printed as UTF-8 (others come back with surrogate escapes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _copy_index(git_dir: Path, destination: Path) -> None:
    """``git_dir/index`` copied (with its time, so git's stat cache stays valid), when it
    is a regular file git could have written; no index is no copy."""
    try:
        with beneath.parent_of(git_dir, "index") as (directory, name):
            source = beneath.open_regular(name, dir_fd=directory)
    except FileNotFoundError:
        return
    except beneath.NotRegularError:
        raise SnapshotError(f"{git_dir / 'index'} is not a regular file") from None
    try:
        info = os.fstat(source)
        if info.st_size > MAX_INDEX_BYTES or info.st_blocks * 512 < info.st_size // 2:
            raise SnapshotError(
                f"{git_dir / 'index'} is {info.st_size} bytes"
                f" ({info.st_blocks * 512} on disk): not an index git wrote"
            )
        with open(source, "rb", closefd=False) as reader, destination.open("wb") as writer:
            shutil.copyfileobj(reader, writer, 1024 * 1024)
        os.utime(destination, ns=(info.st_atime_ns, info.st_mtime_ns))
    finally:
        os.close(source)


def _uncommitted(
    run: SnapshotGit,
    target: Target,
    scratch: Path,
    read: _Read,
    *,
    limit: int | None,
) -> None:
    """The index's tree (None when it has conflicts) and the work tree's, written into
    *scratch*'s object directory, never the repository's."""
    index = scratch / "index"
    _copy_index(target.git_dir, index)
    objects = scratch / "objects"
    objects.mkdir()
    env = {
        "GIT_INDEX_FILE": str(index),
        "GIT_OBJECT_DIRECTORY": str(objects),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(target.common_dir / "objects"),
    }
    staged = run("write-tree", check=False, env=env)
    read.index_tree = staged.stdout.strip() if staged.returncode == 0 else None
    changed = run("diff-files", "-z", "--name-only", env=env).stdout
    untracked = run("ls-files", "-z", "--others", "--exclude-standard", env=env).stdout
    tracked, skipped = _keepable(target.worktree, changed.split("\0"), limit, tracked=True)
    others, more = _keepable(target.worktree, untracked.split("\0"), limit, tracked=False)
    if tracked or others:
        run(
            "update-index",
            "--add",
            "--remove",
            "-z",
            "--stdin",
            check=False,
            env=env,
            input="\0".join([*tracked, *others]) + "\0",
        )
    tree = run("write-tree", check=False, env=env)
    read.worktree_tree = tree.stdout.strip() if tree.returncode == 0 else None
    read.skipped = skipped + more


def _keepable(
    worktree: Path, names: list[str], limit: int | None, *, tracked: bool
) -> tuple[list[str], list[str]]:
    """Which of the changed or untracked *names* go into the work tree's tree, and which
    are left out: bigger than *limit*, beyond :data:`MAX_UNTRACKED_FILES` (both only
    with a *limit*), neither a regular file nor a link (a FIFO git would refuse), a
    repository of its own. A tracked file that is gone is kept (as gone); one left out
    keeps the index's version."""
    taken: list[str] = []
    skipped: list[str] = []
    for name in filter(None, names):
        info = beneath.lstat_below(worktree, name.rstrip("/"))
        if info is None:
            if tracked:
                taken.append(name)  # deleted: update-index --remove drops it
            continue
        regular, link = stat.S_ISREG(info.st_mode), stat.S_ISLNK(info.st_mode)
        too_big = limit is not None and regular and info.st_size > limit
        too_many = limit is not None and not tracked and len(taken) >= MAX_UNTRACKED_FILES
        if name.endswith("/") or not (regular or link) or too_big or too_many:
            skipped.append(name)
            continue
        taken.append(name)
    return taken, skipped


def _place(
    paths: CloisterPaths,
    target: Target,
    read: _Read,
    scratch: Path,
    *,
    kind: SnapshotKind,
    snapshot_id: str,
    now: datetime,
) -> SnapshotRecord:
    common = target.common_dir
    pool = pool_dir(paths, target.project)
    placer = Placer()
    files = transfer(common / "objects", pool, object_files(common / "objects"), placer)
    written = scratch / "objects"
    files += transfer(written, pool, object_files(written), placer)
    wanted = [*read.refs.values(), read.head_commit, read.index_tree, read.worktree_tree]
    wanted += [commit for commit, _ in read.stash]
    alternates = beneath.read_regular(common, "objects/info/alternates")
    elsewhere = [
        str(common / "objects" / line.strip())  # a relative one is relative to objects/
        for line in (alternates or "").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return SnapshotRecord(
        id=snapshot_id,
        kind=kind,
        cloister=target.cloister,
        project=target.project,
        created_at=now,
        worktree=str(target.worktree),
        git_dir=str(target.git_dir),
        common_dir=str(common),
        object_format="sha256" if read.object_format == "sha256" else "sha1",
        head_ref=read.head_ref,
        head_commit=read.head_commit,
        refs=read.refs,
        symrefs=read.symrefs,
        stash=tuple(read.stash),
        shallow=beneath.read_regular(common, "shallow", limit=16 * 1024 * 1024),
        index_tree=read.index_tree,
        worktree_tree=read.worktree_tree,
        skipped=tuple(read.skipped[:MAX_SKIPPED_NAMES]),
        skipped_count=len(read.skipped),
        alternates=alternates,
        files=tuple(sorted(set(files))),
        missing=tuple(
            _missing(target.worktree, pool, elsewhere, [item for item in wanted if item])
        ),
        unsupported_refs=read.unsupported_refs,
    )


def _missing(worktree: Path, pool: Path, alternates: list[str], objects: list[str]) -> list[str]:
    """Which of *objects* the pool (with the repository's alternates, outside the
    snapshot) cannot give: the repository changed while it was read, or is damaged. The
    snapshot is then incomplete, and says so."""
    if not objects:
        return []
    result = git.run(
        worktree,
        "cat-file",
        "--batch-check=%(objectname)",
        check=False,
        env={
            "GIT_OBJECT_DIRECTORY": str(pool),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.pathsep.join(alternates),
            "GIT_CEILING_DIRECTORIES": str(worktree.parent),
        },
        input="\n".join(dict.fromkeys(objects)) + "\n",
    )
    return [line.split()[0] for line in result.stdout.splitlines() if line.endswith(" missing")]


def expire_project(
    paths: CloisterPaths,
    project: str,
    config: SnapshotsConfig,
    *,
    now: datetime | None = None,
    pool_held: bool = False,
) -> list[SnapshotRecord]:
    """Remove the project's expired records and the pool files only they needed (none
    while a record cannot be read: it may need them)."""
    now = now or datetime.now(UTC)
    lock = contextlib.nullcontext() if pool_held else holding_pool(paths, project)
    with lock:
        records = read_records(paths, project)
        gone = expired(records, keep=config.keep, max_age=config.max_age, now=now)
        if not gone:
            return []
        for record in gone:
            remove_record(paths, record)
        gone_ids = {record.id for record in gone}
        kept = [record for record in records if record.id not in gone_ids]
        if not unreadable_records(paths, project):
            prune(pool_dir(paths, project), needed_files(kept))
    return gone
