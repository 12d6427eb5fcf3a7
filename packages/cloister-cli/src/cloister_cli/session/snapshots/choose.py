"""Which snapshots a cloister has, and which one ``cloister restore`` brings back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloister_core.paths import CloisterPaths
from cloister_core.sessions import deepest_worktree
from cloister_core.snapshots import SnapshotError, SnapshotRecord, all_records, find_record


def records_of(paths: CloisterPaths, cloister: str) -> list[SnapshotRecord]:
    """The kept snapshots of *cloister*, newest first."""
    found = [record for record in all_records(paths) if record.cloister == cloister]
    return sorted(found, key=lambda record: (record.created_at, record.id), reverse=True)


def chosen(records: list[SnapshotRecord], prefix: str | None) -> SnapshotRecord:
    """The snapshot *prefix* names, else the newest taken at a start (*records* newest
    first: what a session began with, not what a restore set aside)."""
    if prefix is not None:
        return find_record(records, prefix)
    for record in records:
        if record.kind == "start":
            return record
    if records:
        return records[0]
    raise SnapshotError("no snapshot kept")


def cloister_for_directory(paths: CloisterPaths, directory: Path) -> str:
    """The cloister with snapshots whose work tree holds *directory* (the deepest)."""
    found = deepest_worktree(
        directory, ((record.worktree, record.cloister) for record in all_records(paths))
    )
    if found is None:
        raise SnapshotError(
            f"no snapshot of a cloister working in {directory}; name the cloister"
            " (`cloister restore NAME --list`)"
        )
    return found


def summary(record: SnapshotRecord) -> dict[str, Any]:
    """A record as ``cloister restore --list --json`` prints it."""
    return {
        "id": record.id,
        "kind": record.kind,
        "cloister": record.cloister,
        "project": record.project,
        "created_at": record.created_at.isoformat(),
        "worktree": record.worktree,
        "head": record.head_ref or record.head_commit,
        "head_commit": record.head_commit,
        "refs": len(record.refs),
        "uncommitted": record.worktree_tree is not None,
        "skipped": list(record.skipped),
        "skipped_count": record.skipped_count,
        "incomplete": bool(record.missing),
    }
