"""Bringing a repository back to a snapshot: history, branches, ``HEAD``, uncommitted work.

Works on what an agent can leave behind: a git directory emptied (``rm -rf .git``
inside a cloister removes all but the read-only mounts), packs pruned
(``gc --prune=now``), branches force-moved, object files swapped, links planted. The
steps, all under the pool's lock (nothing it needs is pruned meanwhile):

1. the snapshot is checked whole (every pool file there) before anything changes;
2. links, FIFOs and stale lock files in the git directories are removed (git makes
   none of the first two; no git runs now that could own a lock);
3. what is there now is snapshotted first (``before-restore``, without size limits),
   so a restore is undone by restoring that one; a repository too broken for git gets
   it after step 5, and keeps at least its work tree. If this fails, the restore stops;
4. the git directory's skeleton is made again where missing, and the snapshot's object
   files are placed back (one of the same name with other contents is moved aside);
5. the snapshot's trees are read into a scratch index first (a path git refuses stops
   the restore here), then every ref is set, symbolic refs and the stash's entries
   too, and ``HEAD``. Refs made since are kept and listed; a branch checked out in
   another worktree is left alone and listed; a ref in the way of one (``main/x``
   against ``main``) is deleted, being in the step-3 snapshot;
6. ignored files the work tree's update would overwrite or remove (the step-3 snapshot
   has no ignored file) are moved to ``<data>/snapshots/<project>/displaced/<id>/``
   (copied, when that is another filesystem: a sparse file, one over 1 GiB or one that
   is no file, link or FIFO is not, and is said in the notes: git replaces it);
7. the work tree and the index get the snapshot's trees (``git read-tree``).

No filter runs, and git looks for the repository in the work tree only
(:mod:`cloister_cli.session.snapshots.gitrun`). The cloister must not run.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cloister_cli.session.snapshots.gitrun import SnapshotGit
from cloister_cli.session.snapshots.pool import DISPLACE_LIMIT, Placer, transfer
from cloister_cli.session.snapshots.take import Target, holding_pool, take
from cloister_core import beneath
from cloister_core.config.models import SnapshotsConfig
from cloister_core.paths import CloisterPaths
from cloister_core.snapshots import SnapshotError, SnapshotRecord, pool_dir

# The git directory's entries that are the human's (read-only inside a cloister): a link
# there is theirs, not planted.
_HUMANS = frozenset({"hooks", "config", "worktrees", "modules"})


@dataclass(frozen=True, slots=True)
class RestoreOutcome:
    record: SnapshotRecord
    before: SnapshotRecord | None  # what was there, snapshotted first (the undo)
    changed: list[str] = field(default_factory=list)  # refs set to another value (or deleted)
    kept: list[str] = field(default_factory=list)  # refs made since, left as they are
    rebuilt: list[str] = field(default_factory=list)  # parts of the git directory made again
    displaced: Path | None = None  # where files in the way were moved, if any were
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Refs:
    plain: dict[str, str]
    symbolic: dict[str, str]


def restore(
    paths: CloisterPaths, record: SnapshotRecord, config: SnapshotsConfig
) -> RestoreOutcome:
    """Bring *record*'s repository back to it (no cloister may work in it meanwhile)."""
    worktree = Path(record.worktree)
    notes: list[str] = []
    rebuilt: list[str] = []
    with holding_pool(paths, record.project):
        _check_pool(paths, record, notes)
        _clear_planted(record, notes)
        before = _before(paths, record, config) if _healthy(worktree) else None
        displaced = paths.snapshot_dir(record.project) / "displaced" / record.id
        try:
            _skeleton(record, rebuilt)
            transfer(
                pool_dir(paths, record.project),
                Path(record.common_dir) / "objects",
                record.files,
                Placer(),
                displace=displaced / "objects",
                notes=notes,
            )
        except OSError as error:
            raise SnapshotError(f"cannot rebuild {record.common_dir}: {error}") from None
        run = SnapshotGit.of(worktree)
        _preflight(run, record, paths.snapshot_dir(record.project) / "tmp")
        changed, kept = _set_refs(run, record, notes)
        if before is None:
            before = _before(paths, record, config, refs_moved=True)  # the work tree at least
        moved = _displace(run, record, displaced / "worktree", notes)
        if moved:
            notes.append(f"{moved} ignored file(s) in the way were moved to {displaced}")
        _work_tree(run, record, notes)
    if record.skipped_count:
        notes.append(
            f"{record.skipped_count} file(s) were not kept in the snapshot (too big or too"
            f" many), e.g. {record.skipped[0]!r}: they are as they are now"
        )
    return RestoreOutcome(
        record,
        before,
        changed,
        kept,
        rebuilt,
        displaced if displaced.exists() else None,
        notes,
    )


def _check_pool(paths: CloisterPaths, record: SnapshotRecord, notes: list[str]) -> None:
    pool = pool_dir(paths, record.project)
    lacking = [name for name in record.files if beneath.lstat_below(pool, name) is None]
    if lacking:
        raise SnapshotError(
            f"snapshot {record.id} lacks {len(lacking)} of its object files (e.g."
            f" {lacking[0]}): nothing was changed; choose another (`--list`)"
        )
    if record.missing:
        notes.append(
            f"snapshot {record.id} was incomplete when it was taken ({len(record.missing)}"
            " object(s) missing): some refs may not come back"
        )


def _clear_planted(record: SnapshotRecord, notes: list[str]) -> None:
    """Remove links, FIFOs and lock files from the git directories (not the human's
    hooks, config and other worktrees): git would follow a link out of the repository."""
    common, git_dir = Path(record.common_dir), Path(record.git_dir)
    removed: list[str] = []
    places = [(common, _HUMANS)]
    if git_dir != common:  # a linked worktree's own, under the skipped worktrees/
        places.append((git_dir, frozenset({"config.worktree", "commondir", "gitdir"})))
    for directory, skip in places:
        if not directory.is_dir():
            continue
        # Relative to each directory as listed: however deep the agent nested it.
        for root, directories, files, fd in beneath.fwalk(directory):
            here = Path(root)
            if here == directory:
                directories[:] = [name for name in directories if name not in skip]
            names = [*files, *directories]
            for name in names if here != directory else [n for n in names if n not in skip]:
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                special = not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
                if special or (stat.S_ISREG(mode) and name.endswith(".lock")):
                    os.unlink(name, dir_fd=fd)
                    removed.append(str(here / name))
    if removed:
        notes.append(f"removed from the git directory (links, FIFOs, locks): {', '.join(removed)}")


def _healthy(worktree: Path) -> bool:
    """Whether git reads the work tree's own repository well enough to snapshot it."""
    run = SnapshotGit(worktree, {"GIT_CEILING_DIRECTORIES": str(worktree.parent)})
    top = run("rev-parse", "--show-toplevel", check=False)
    listed = run("for-each-ref", "--count=1", check=False)
    return top.returncode == 0 and top.stdout.strip() == str(worktree) and listed.returncode == 0


def _before(
    paths: CloisterPaths,
    record: SnapshotRecord,
    config: SnapshotsConfig,
    *,
    refs_moved: bool = False,
) -> SnapshotRecord:
    target = Target(
        record.cloister,
        record.project,
        Path(record.worktree),
        Path(record.git_dir),
        Path(record.common_dir),
    )
    try:
        return take(paths, target, config, kind="before-restore", pool_held=True)
    except SnapshotError as error:
        done = (
            "its refs were set back, its work tree was not touched"
            if refs_moved
            else "nothing was changed"
        )
        raise SnapshotError(
            f"what is there now could not be snapshotted first, so that the restore could"
            f" be undone ({error}); {done}"
        ) from None


def _real_directory(parent: Path, name: str, rebuilt: list[str]) -> None:
    """*parent*/*name* as a directory (a link or other non-directory there is removed)."""
    fd = beneath.open_dir(parent)
    try:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            return
        if info is not None:
            os.unlink(name, dir_fd=fd)
        os.mkdir(name, 0o755, dir_fd=fd)
        rebuilt.append(str(parent / name))
    finally:
        os.close(fd)


def _file_if_missing(directory: Path, name: str, content: str, rebuilt: list[str]) -> None:
    if beneath.lstat_below(directory, name) is None:
        beneath.replace_file(directory, name, content)
        rebuilt.append(str(directory / name))


def _skeleton(record: SnapshotRecord, rebuilt: list[str]) -> None:
    common, git_dir, worktree = (
        Path(record.common_dir),
        Path(record.git_dir),
        Path(record.worktree),
    )
    for directory in (worktree, common):
        if not directory.is_dir():
            directory.mkdir(parents=True)
            rebuilt.append(str(directory))
    for name in ("objects", "refs"):
        _real_directory(common, name, rebuilt)
    for name in ("heads", "tags"):
        _real_directory(common / "refs", name, rebuilt)
    _real_directory(common / "objects", "pack", rebuilt)
    _real_directory(common / "objects", "info", rebuilt)
    format_line = "\trepositoryformatversion = 0\n"
    extensions = ""
    if record.object_format == "sha256":
        format_line = "\trepositoryformatversion = 1\n"
        extensions = "[extensions]\n\tobjectformat = sha256\n"
    config = f"[core]\n{format_line}\tfilemode = true\n\tbare = false\n{extensions}"
    _file_if_missing(common, "config", config, rebuilt)
    head = f"ref: {record.head_ref}\n" if record.head_ref else f"{record.head_commit}\n"
    if git_dir != common:  # a linked worktree: its own directory and pointers
        if not git_dir.is_dir():
            git_dir.mkdir(parents=True)
            rebuilt.append(str(git_dir))
        _file_if_missing(git_dir, "commondir", "../..\n", rebuilt)
        _file_if_missing(git_dir, "gitdir", f"{worktree / '.git'}\n", rebuilt)
        _file_if_missing(worktree, ".git", f"gitdir: {git_dir}\n", rebuilt)
    _file_if_missing(git_dir, "HEAD", head, rebuilt)
    if record.shallow is not None:
        _file_if_missing(common, "shallow", record.shallow, rebuilt)
    if record.alternates is not None:
        _file_if_missing(common / "objects" / "info", "alternates", record.alternates, rebuilt)


def _preflight(run: SnapshotGit, record: SnapshotRecord, scratch: Path) -> None:
    """The snapshot's trees read into a scratch index: a path git refuses (a forged
    index's ``../x``) stops the restore before a ref moves."""
    scratch.mkdir(parents=True, exist_ok=True)
    index = scratch / f"check-{record.id}"
    # As the index (not --index-output, which git renames into from beside the real
    # index: across filesystems that fails).
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        for tree in dict.fromkeys(filter(None, (record.worktree_tree, record.index_tree))):
            result = run("read-tree", tree, check=False, env=env)
            if result.returncode != 0:
                raise SnapshotError(
                    f"snapshot {record.id} cannot be checked out ({result.stderr.strip()}):"
                    " its refs and work tree were not changed"
                )
    finally:
        index.unlink(missing_ok=True)


def _current(run: SnapshotGit) -> _Refs:
    result = run("for-each-ref", "--format=%(objectname) %(refname) %(symref)", check=False)
    plain: dict[str, str] = {}
    symbolic: dict[str, str] = {}
    for line in result.stdout.splitlines():
        target, name, symref = [*line.split(" ", 2), ""][:3]
        if symref:
            symbolic[name] = symref
        elif name:
            plain[name] = target
    return _Refs(plain, symbolic)


def _checked_out_elsewhere(run: SnapshotGit, worktree: Path) -> set[str]:
    """Branches checked out in the repository's other worktrees (someone works there)."""
    listed = run("worktree", "list", "--porcelain", check=False).stdout
    found: set[str] = set()
    path: str | None = None
    for line in listed.splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line.startswith("branch ") and path != str(worktree):
            found.add(line.removeprefix("branch "))
    return found


def _set_refs(
    run: SnapshotGit, record: SnapshotRecord, notes: list[str]
) -> tuple[list[str], list[str]]:
    """Every ref, symbolic ref, stash entry and ``HEAD`` as the snapshot had them; the
    refs changed (or deleted) and the ones kept."""
    current = _current(run)
    # A branch checked out in another worktree that still exists: someone works there.
    busy = _checked_out_elsewhere(run, Path(record.worktree)) & set(current.plain)
    wanted = {name: value for name, value in record.refs.items() if name != "refs/stash"}
    left = sorted(
        name for name in wanted if name in busy and current.plain.get(name) != wanted[name]
    )
    if left:
        notes.append(
            f"left as they are, checked out in another worktree: {', '.join(left)}"
            " (set them there, from the snapshot's list, if you want)"
        )
    updates = {
        name: value
        for name, value in wanted.items()
        if name not in busy and current.plain.get(name) != value
    }
    deletes = {
        name
        for name in current.plain
        if name not in record.refs
        and name not in busy
        and any(name.startswith(f"{other}/") or other.startswith(f"{name}/") for other in updates)
    }
    if record.head_ref and record.head_commit is None and record.head_ref in current.plain:
        deletes.add(record.head_ref)  # unborn then: a commit made since goes
    # Deletions first, on their own: git checks a new ref's name against the refs that
    # exist before a transaction, those it deletes included.
    if deletes:
        lines = "".join(f"delete {name}\n" for name in sorted(deletes))
        _git_or_fail(run, "update-ref", "--stdin", input=lines)
    if updates:
        lines = "".join(f"update {name} {value}\n" for name, value in sorted(updates.items()))
        _git_or_fail(run, "update-ref", "--stdin", input=lines)
    for name, target in sorted(record.symrefs.items()):
        if current.symbolic.get(name) != target:
            _git_or_fail(run, "symbolic-ref", name, target)
    _stash(run, record)
    if record.head_ref is not None:
        _git_or_fail(run, "symbolic-ref", "HEAD", record.head_ref)
    elif record.head_commit is not None:
        _git_or_fail(run, "update-ref", "--no-deref", "HEAD", record.head_commit)
    kept = sorted(set(current.plain) - set(record.refs) - deletes - {"refs/stash"})
    return sorted([*updates, *deletes]), kept


def _stash(run: SnapshotGit, record: SnapshotRecord) -> None:
    """The stash's entries as they were (``git stash store``, oldest first)."""
    if not record.stash:
        return
    listed = run("log", "-g", "--format=%H", "refs/stash", check=False).stdout.split()
    if listed == [commit for commit, _ in record.stash]:
        return
    if listed:
        _git_or_fail(run, "update-ref", "-d", "refs/stash")
    for commit, message in reversed(record.stash):
        _git_or_fail(run, "stash", "store", "-m", message, commit)


def _displace(run: SnapshotGit, record: SnapshotRecord, destination: Path, notes: list[str]) -> int:
    """Move ignored files the work tree's update would overwrite or remove (where the
    snapshot has a file, or a file at a directory above them) to *destination*; how
    many. Untracked files that are not ignored are in the step-3 snapshot already. One
    that cannot be moved (another filesystem: see :func:`beneath.move_out`) is said in
    *notes* and left to the update, which replaces it."""
    tree = record.worktree_tree
    if tree is None:
        return 0
    tracked = set(run("ls-tree", "-r", "-z", "--name-only", tree).stdout.split("\0"))
    ignored = run("ls-files", "-z", "--others", "--ignored", "--exclude-standard").stdout
    worktree = Path(record.worktree)
    moved = 0
    for name in filter(None, ignored.split("\0")):
        parts = name.split("/")
        if not any("/".join(parts[:end]) in tracked for end in range(1, len(parts) + 1)):
            continue
        with beneath.parent_of(worktree, name) as (directory, leaf):
            try:
                info = os.stat(leaf, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone since git listed it: nothing in the way
            try:
                beneath.move_out(
                    directory, leaf, destination / name, expect=info, limit=DISPLACE_LIMIT
                )
            except (beneath.NotRegularError, beneath.TooLargeError, beneath.ChangedError) as error:
                notes.append(
                    f"{name!r} was in the way and not moved aside ({error}): git replaced it"
                )
                continue
        moved += 1
    return moved


def _work_tree(run: SnapshotGit, record: SnapshotRecord, notes: list[str]) -> None:
    tree = record.worktree_tree
    if tree is None:
        notes.append("the snapshot has no work tree (git could not read it then): not changed")
        return
    _git_or_fail(run, "read-tree", "--reset", "-u", tree)
    _git_or_fail(run, "read-tree", record.index_tree or tree)
    run("update-index", "-q", "--refresh", check=False)
    sparse = run("config", "--bool", "core.sparseCheckout", check=False).stdout.strip()
    if sparse == "true" and run("sparse-checkout", "reapply", check=False).returncode != 0:
        notes.append("`git sparse-checkout reapply` failed: run it yourself")
    if record.index_tree is None:
        notes.append("the index had conflicts at the snapshot: it now holds the work tree")


def _git_or_fail(run: SnapshotGit, *args: str, input: str | None = None) -> None:
    result = run(*args, check=False, input=input)
    if result.returncode != 0:
        raise SnapshotError(f"git {args[0]} failed in {run.worktree}: {result.stderr.strip()}")
