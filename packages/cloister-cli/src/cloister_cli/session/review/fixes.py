"""``--fix``: move what a review found into a quarantine, never deleting data.

Each call makes a new ``<quarantine>/<UTC time>/`` whose layout mirrors the work tree
and writes ``MANIFEST.json`` there, so the human can look at, or put back, anything
moved. Nothing is deleted: a link is moved as a link, never followed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from cloister_cli.session.review.findings import Finding, Fix
from cloister_core.fileio import atomic_write

MANIFEST = "MANIFEST.json"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"


def _new_directory(parent: Path) -> Path:
    """A directory of its own below *parent*, named after the current UTC time."""
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = datetime.now(UTC).strftime(STAMP_FORMAT)
    for attempt in range(1, 1000):
        candidate = parent / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            candidate.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{parent}: no free quarantine directory for {stamp}")


def _destination(directory: Path, relative: str) -> Path:
    """``directory/relative``, with anything that would climb out of it dropped."""
    parts = [part for part in PurePosixPath(relative).parts if part not in {"/", ".", ".."}]
    return directory.joinpath(*parts) if parts else directory / "unnamed"


def _move(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.path.lexists(destination):
        raise FileExistsError(errno.EEXIST, "already in the quarantine", str(destination))
    try:
        source.rename(destination)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        shutil.move(source, destination)  # another file system: links are moved as links


def _link_target(path: Path, mode: int) -> str | None:
    if not stat.S_ISLNK(mode):
        return None
    try:
        return str(path.readlink())
    except OSError:
        return None


class _Run:
    """One ``apply_fixes`` call: its quarantine directory, lines and manifest."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self.directory: Path | None = None
        self.lines: list[str] = []
        self.manifest: list[dict[str, Any]] = []

    def where(self, fix: Fix) -> Path:
        if self.directory is None:
            self.directory = _new_directory(self.parent)
        return _destination(self.directory, fix.relative)

    def record(self, fix: Fix, item: Finding, moved_to: Path, link: str | None) -> None:
        self.manifest.append(
            {
                "original": str(fix.target),
                "action": fix.action,
                "moved_to": str(moved_to),
                "kind": item.kind,
                "link_target": link,
            }
        )

    def quarantine(self, fix: Fix, item: Finding, shown: str) -> None:
        try:
            info = os.lstat(fix.target)
        except FileNotFoundError:
            self.lines.append(f"skipped {shown}: it is no longer there")
            return
        link = _link_target(fix.target, info.st_mode)
        destination = self.where(fix)
        try:
            _move(fix.target, destination)
        except OSError as error:
            self.lines.append(f"could not move {shown}: {error}")
            return
        self.record(fix, item, destination, link)
        self.lines.append(f"moved {shown} to {destination}")

    def finish(self) -> None:
        if self.directory is not None:
            atomic_write(
                self.directory / MANIFEST,
                json.dumps(self.manifest, indent=2) + "\n",
                mode=0o600,
                dir_mode=0o700,
            )


def _within(target: Path, roots: Sequence[Path]) -> bool:
    """Whether *target* is below one of *roots*, reached through no link (the agent
    shaped the tree a finding names: a directory on the way may now be a link out)."""
    for root in roots:
        try:
            parts = Path(os.path.normpath(target)).relative_to(os.path.normpath(root)).parts
        except ValueError:
            continue
        current = Path(os.path.normpath(root))
        for part in parts[:-1]:
            current /= part
            if current.is_symlink() or not current.is_dir():
                return False
        return bool(parts)
    return False


def apply_fixes(
    findings: Sequence[Finding], quarantine: Path, *, within: Sequence[Path]
) -> list[str]:
    """Do each distinct fix of *findings* once; one line per action, for the human.

    Only for targets below *within* (the work tree), reached through no link. The
    quarantine directory is made only when there is something to move.
    """
    distinct: dict[tuple[str, Path], tuple[Fix, Finding]] = {}
    for item in findings:
        if item.fix is not None:
            distinct.setdefault((item.fix.action, item.fix.target), (item.fix, item))
    run = _Run(quarantine)
    for fix, item in distinct.values():
        shown = fix.relative
        if not _within(fix.target, within):
            run.lines.append(f"skipped {shown}: it is not inside the project")
        else:
            run.quarantine(fix, item, shown)
    run.finish()
    return run.lines
