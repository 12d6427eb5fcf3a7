"""A cloister's session record: what the host needs to know of it while it runs.

``cloister start`` writes ``<data>/sessions/<cloister>.json`` before the container runs;
the host executor reads it to run ``hostexec`` commands in the right repository and to
sync the cloister's own git directory; ``cloister stop`` reviews the work tree against
what was there at start (the human's own setup is never reported as the agent's). The
sync keeps ``bases`` up to date: per branch, the last commit the human's repository
and the cloister's agreed on (where the agent's work on it began). It outlives the
container (``stopped_at`` set) until the next start of the same cloister replaces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError, field_validator

from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write, locked
from cloister_core.names import validate_cloister_name
from cloister_core.paths import CloisterPaths


class SessionError(CloisterError):
    """A session record that cannot be read."""


def _absolute(value: str | None) -> str | None:
    if value is not None and not Path(value).is_absolute():
        raise ValueError(f"path must be absolute, got {value!r}")
    return value


class SessionRecord(BaseModel):
    """``<data>/sessions/<cloister>.json``.

    Fields a record of an older Cloister has and this one does not know are ignored, so
    its cloisters can still be stopped.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    cloister: str
    project: str
    worktree: str  # the host directory mounted at /work
    # Where the human's git runs for this project (the checkout the project was started
    # in); the same as worktree unless the cloister works in a worktree of its own.
    checkout: str | None = None
    common_dir: str | None = None  # the human's repository's shared git directory
    branch: str | None = None  # a worktree cloister's branch (`start -b`)
    started_at: AwareDatetime
    stopped_at: AwareDatetime | None = None
    synced_at: AwareDatetime | None = None
    bases: dict[str, str] = {}  # branch -> the last commit both sides agreed on
    host_heads: dict[str, str] = {}  # the human's branches as the cloister shows them (host/…)
    protected: tuple[str, ...] = ()  # work-tree paths read-only inside (relative)
    nested: tuple[str, ...] = ()  # repositories nested in the work tree at start (relative)
    findings_at_start: tuple[str, ...] = ()  # fingerprints of what review found at start
    placeholders: tuple[str, ...] = ()  # made by Cloister to be kept read-only; removed at the end

    @field_validator("cloister")
    @classmethod
    def _cloister(cls, value: str) -> str:
        return validate_cloister_name(value)

    @field_validator("worktree", "checkout", "common_dir")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return _absolute(value)

    @property
    def running(self) -> bool:
        return self.stopped_at is None

    @property
    def is_git(self) -> bool:
        return self.checkout is not None and self.common_dir is not None

    @property
    def shared(self) -> bool:
        """Whether the cloister works in the human's own checkout (not a worktree of its own)."""
        return self.checkout == self.worktree


def write_session(paths: CloisterPaths, record: SessionRecord) -> Path:
    path = paths.session_file(record.cloister)
    atomic_write(path, record.model_dump_json(indent=2) + "\n", mode=0o600, dir_mode=0o700)
    return path


def update_session(
    paths: CloisterPaths, cloister: str, change: Callable[[SessionRecord], SessionRecord]
) -> SessionRecord | None:
    """Read, change and write *cloister*'s record under a lock (a sync and a stop may
    write it at once); None when there is none."""
    with locked(paths.session_file(cloister)):
        record = read_session(paths, cloister)
        if record is None:
            return None
        changed = change(record)
        write_session(paths, changed)
        return changed


def read_session(paths: CloisterPaths, cloister: str) -> SessionRecord | None:
    """The record of *cloister*, None if there is none; :class:`SessionError` if broken."""
    path = paths.session_file(cloister)
    try:
        return SessionRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as error:
        raise SessionError(f"{path}: cannot read the session record: {error}") from None


def list_sessions(paths: CloisterPaths) -> list[SessionRecord]:
    """Every readable session record (broken ones are skipped), by cloister name."""
    records = []
    try:
        names = sorted(paths.sessions_dir.glob("*.json"))
    except OSError:
        return []
    for file in names:
        try:
            records.append(SessionRecord.model_validate_json(file.read_bytes()))
        except (OSError, ValidationError):
            continue
    return records


def deepest_worktree(directory: Path, worktrees: Iterable[tuple[str, str]]) -> str | None:
    """Of *worktrees* (``(worktree, cloister)`` pairs, from session or snapshot records),
    the cloister whose work tree is the deepest one holding *directory*; None if none."""
    resolved = directory.resolve()
    best: tuple[int, str] | None = None
    for worktree_text, cloister in worktrees:
        worktree = Path(worktree_text)
        if resolved == worktree or worktree in resolved.parents:
            depth = len(worktree.parts)
            if best is None or depth > best[0]:
                best = (depth, cloister)
    return best[1] if best else None
