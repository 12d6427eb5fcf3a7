"""The git guard: undoing, as it happens, what a running cloister plants for host git.

For every running cloister with a session record (``<data>/sessions``, whose token
still exists) the guard watches the repository's git directory and, through its
index, the gitlinks of its work tree (inotify, so it acts within microseconds; where
inotify is missing it sweeps every half second instead):

* a symbolic link or FIFO that was not there at start is removed at once (a link has
  only its target, which the event records), a new ``objects/info/alternates`` is
  removed and a changed one restored; git makes none of these itself, so the agent
  is hostile: its container is paused (and its hostexec commands are refused);
* a repository at a gitlink path of the index that was not there at start (git would
  enter it, and run its config, when the human runs ``git status`` or ``git add`` in
  the project) has its ``.git`` moved to ``<data>/quarantine`` (that can be an
  accident: nothing is paused; the agent's next hostexec command says so).

Each action is a line in the cloister's ``<cloister>.events`` file, which ``cloister
review`` and ``cloister stop`` show, and an audit line (``guard.<action>``, also in the
cloister's own log that ``cloister logs`` shows). The guard narrows what a racing agent
can do (one that plants in the instant between the human starting git and git reading
the file) but cannot close it: only the checks around ``hostexec`` are race-free (see
:mod:`cloister_executor.hostgit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import stat
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloister_core import beneath
from cloister_core.audit import AuditLog
from cloister_core.config.models import GitGuardMode
from cloister_core.gitdir import (
    ALTERNATES_FILES,
    GitDirBaseline,
    SpecialEntry,
    SpecialScanner,
    planted,
)
from cloister_core.names import container_name
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import (
    GuardAction,
    SessionRecord,
    append_event,
    displayable,
    list_sessions,
)
from cloister_core.watch import TokenDirectory
from cloister_executor import index, inotify
from cloister_executor.engine import Engine

REFRESH_SECONDS = 0.5  # how often the set of running cloisters is re-read
# inotify watches the guard may take (a budget of the user's; a git directory has a few
# hundred directories, one grown past this is the agent's doing).
MAX_WATCHES = 20_000


@dataclass(slots=True)
class _WorkTree:
    """One running cloister's work tree and its index."""

    session: SessionRecord
    gitlinks_at_start: frozenset[str]
    new_gitlinks: list[str] = field(default_factory=list)  # in the index, not at start
    watched: set[Path] = field(default_factory=set)  # gitlink directories watched for .git

    @property
    def root(self) -> Path:
        return Path(self.session.worktree)

    @property
    def index(self) -> Path:
        return Path(self.session.git_dir or self.session.worktree) / "index"


@dataclass(slots=True)
class _Repository:
    """A git directory shared by the running cloisters of one repository."""

    common: Path
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    scanner: SpecialScanner = field(default_factory=SpecialScanner)
    watched: bool = False  # inotify watches it (else it is swept on every settle)
    flooded: bool = False  # grown past the watches the guard may take

    @property
    def baseline(self) -> GitDirBaseline:
        """What every session saw at its start (the first one's alternates)."""
        records = list(self.sessions.values())
        special = set(records[0].git_baseline.special)
        for record in records[1:]:
            special &= set(record.git_baseline.special)
        return GitDirBaseline(
            special=tuple(sorted(special, key=lambda entry: entry.path)),
            alternates=records[0].git_baseline.alternates,
        )


class GitGuard:
    """Watches the git directories of running cloisters; see the module docstring."""

    def __init__(
        self,
        paths: CloisterPaths,
        report: Callable[[str], None],
        engine: Engine | None,
        *,
        use_inotify: bool = True,
        mode: Callable[[], GitGuardMode] = lambda: "pause",
        audit: AuditLog | None = None,
    ) -> None:
        self._paths = paths
        self._audit = audit
        self._report = report
        self._engine = engine
        self._mode = mode
        self._tokens = TokenDirectory(paths.tokens_dir, report)
        self._watcher = (
            inotify.TreeWatcher(max_watches=MAX_WATCHES)
            if use_inotify and inotify.available()
            else None
        )
        self._repositories: dict[Path, _Repository] = {}
        self._worktrees: dict[str, _WorkTree] = {}  # by cloister
        self._dirty_indexes: set[Path] = set()  # git directories whose index changed
        self._to_pause: set[str] = set()
        self._notices: dict[str, list[str]] = {}
        self._lock = asyncio.Lock()

    # -- the set of guarded cloisters ------------------------------------------------------

    def _running(self) -> dict[str, SessionRecord]:
        self._tokens.refresh()
        names = {record.cloister for record in self._tokens.registry}
        return {
            session.cloister: session
            for session in list_sessions(self._paths)
            if session.running and session.cloister in names and session.common_dir
        }

    def refresh(self) -> None:
        """Start guarding new cloisters (sweeping them once), stop guarding gone ones."""
        running = self._running()
        for name in set(self._worktrees) - set(running):
            self._forget(name)
        for name, session in running.items():
            known = self._worktrees.get(name)
            if known is None or known.session.started_at != session.started_at:
                if known is not None:
                    self._forget(name)
                self._adopt(session)

    def _adopt(self, session: SessionRecord) -> None:
        common = Path(session.common_dir or session.worktree)
        repository = self._repositories.get(common)
        if repository is None:
            repository = self._repositories[common] = _Repository(common)
            repository.watched = self._add_tree(common)
        repository.sessions[session.cloister] = session
        self._worktrees[session.cloister] = _WorkTree(session, frozenset(session.gitlinks))
        self._sweep(repository)
        self._dirty_indexes.update(_index_owners(common))

    def _forget(self, name: str) -> None:
        worktree = self._worktrees.pop(name)
        for directory in worktree.watched:
            self._unwatch(directory)
        common = Path(worktree.session.common_dir or "")
        repository = self._repositories.get(common)
        if repository is not None:
            repository.sessions.pop(name, None)
            if not repository.sessions:
                del self._repositories[common]
                self._unwatch(common)
        self._notices.pop(name, None)

    def _add_tree(self, root: Path) -> bool:
        if self._watcher is None:
            return False
        try:
            self._watcher.add_tree(root)
        except OSError as error:  # a watch limit: sweeps still run
            self._report(f"git guard: cannot watch {root} ({error}); sweeping it instead")
            return False
        return True

    def _unwatch(self, root: Path) -> None:
        if self._watcher is not None:
            with contextlib.suppress(OSError, KeyError):
                self._watcher.remove(root)

    # -- undoing what was planted ------------------------------------------------------------

    def _event(
        self,
        cloister: str,
        action: GuardAction,
        path: str,
        detail: str,
        *,
        moved_to: str | None = None,
    ) -> None:
        """One action on *cloister*'s behalf: its events file, and the audit log."""
        event = append_event(self._paths, cloister, action, path, detail, moved_to=moved_to)
        if self._audit is not None:
            self._audit.write(
                f"guard.{action}",
                cloister=cloister,
                path=event.path,
                detail=event.detail,
                moved_to=event.moved_to,
            )

    def _record(
        self, repository: _Repository, action: GuardAction, path: Path, detail: str
    ) -> None:
        for name in repository.sessions:
            self._event(name, action, str(path), detail)
        self._report(f"git guard: {action} {path}: {detail}")

    def _sweep(self, repository: _Repository) -> None:
        """Find and undo everything planted in the repository's git directory."""
        for item in planted(repository.common, repository.baseline, repository.scanner):
            self._neutralise(repository, item.path)

    def _neutralise(self, repository: _Repository, path: Path) -> None:
        """Undo *path* if it is something planted (every step without following a link:
        the agent may rearrange the directories on the way meanwhile)."""
        try:
            relative = path.relative_to(repository.common).as_posix()
        except ValueError:
            return
        info = beneath.lstat_below(repository.common, relative)
        if info is None:
            return
        baseline = repository.baseline
        if stat.S_ISLNK(info.st_mode) or stat.S_ISFIFO(info.st_mode):
            link = stat.S_ISLNK(info.st_mode)
            entry = SpecialEntry(
                path=relative,
                kind="symlink" if link else "fifo",
                target=beneath.readlink_below(repository.common, relative) if link else None,
            )
            if entry in baseline.special:
                return  # the human's own
            try:
                target = beneath.unlink_special(repository.common, relative)
            except OSError:
                return
            if target is None:
                return
            what = f"a symbolic link to {target!r}" if target else "a FIFO"
            self._record(repository, "removed", path, f"{what} the cloister planted")
            self._to_pause.update(repository.sessions)
        elif relative in ALTERNATES_FILES and stat.S_ISREG(info.st_mode):
            self._alternates(repository, path, relative, baseline)

    def _alternates(
        self, repository: _Repository, path: Path, relative: str, baseline: GitDirBaseline
    ) -> None:
        content = beneath.read_regular(repository.common, relative)
        original = baseline.alternates.get(relative)
        if content is None or content == original:
            return
        listed = ", ".join(repr(line) for line in content.split()) or "nothing"
        try:
            if original is None:
                beneath.unlink_regular(repository.common, relative)
                self._record(repository, "removed", path, f"it listed {listed}")
            else:
                beneath.replace_file(repository.common, relative, original)
                self._record(repository, "restored", path, f"it had been changed to list {listed}")
        except OSError as error:
            self._report(f"git guard: cannot undo {path}: {error}")
            return
        self._to_pause.update(repository.sessions)

    # -- indexes and gitlinks ------------------------------------------------------------------

    async def _check_index(self, git_dir: Path) -> None:
        """Check the index of *git_dir*: rebuild a forged one, quarantine new gitlinks."""
        repository = self._repository_of(git_dir)
        if repository is None:
            return
        try:
            found = await index.scan(git_dir)
        except OSError as error:  # no index (yet), git missing
            self._report(f"git guard: cannot read the index of {git_dir}: {error}")
            return
        if found.unsafe:
            await self._rebuild(repository, git_dir, found.unsafe)
            return
        for worktree in self._worktrees.values():
            if Path(worktree.session.git_dir or "") == git_dir:
                nested = set(worktree.session.nested)
                worktree.new_gitlinks = [
                    path
                    for path in found.gitlinks
                    if path not in worktree.gitlinks_at_start and path not in nested
                ]
                await self._watch_and_quarantine(worktree)

    async def _rebuild(
        self, repository: _Repository, git_dir: Path, unsafe: tuple[tuple[str, str], ...]
    ) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        project = next(iter(repository.sessions.values())).project
        relative = git_dir.relative_to(repository.common).as_posix()
        into = self._paths.quarantine_dir / project / stamp / ".git" / relative
        try:
            moved = await index.rebuild(git_dir, into)
        except OSError as error:
            self._report(f"git guard: cannot rebuild the index of {git_dir}: {error}")
            moved = None
        entries = "; ".join(f"{path!r} ({why})" for path, why in unsafe[:5])
        more = f" and {len(unsafe) - 5} more" if len(unsafe) > 5 else ""
        detail = (
            f"it named {entries}{more}, which git would read or write outside the project;"
            f" rebuilt from HEAD, the forged one moved to {moved}"
        )
        for name in repository.sessions:
            self._event(
                name,
                "rebuilt",
                str(git_dir / "index"),
                detail,
                moved_to=str(moved) if moved else None,
            )
        self._report(f"git guard: rebuilt {git_dir / 'index'}: {detail}")
        self._to_pause.update(repository.sessions)

    async def _watch_and_quarantine(self, worktree: _WorkTree) -> None:
        """Quarantine a repository at any new gitlink path; watch those paths for one."""
        new = worktree.new_gitlinks
        # Only paths reached through no link: the agent chooses what a gitlink names.
        wanted = {
            worktree.root / path for path in new if beneath.is_real_directory(worktree.root, path)
        }
        if self._watcher is not None:
            for directory in wanted - worktree.watched:
                with contextlib.suppress(OSError):
                    self._watcher.add_directory(directory)
                    worktree.watched.add(directory)
            for directory in worktree.watched - wanted:
                self._unwatch(directory)
                worktree.watched.discard(directory)
        for path in new:
            await self._quarantine(worktree, path)

    async def _quarantine(self, worktree: _WorkTree, gitlink: str) -> None:
        """Move ``<gitlink>/.git`` out of the project, if there is one (no link followed)."""
        dot_git = worktree.root / gitlink / ".git"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        into = self._paths.quarantine_dir / worktree.session.project / stamp
        try:
            destination = await index.move_repository_away(worktree.root, gitlink, into)
        except OSError as error:
            self._report(f"git guard: cannot move {dot_git} away: {error}")
            return
        if destination is None:
            return
        detail = (
            f"a repository at gitlink {gitlink!r}, which your git would enter (and run its"
            f" configuration), moved to {destination}"
        )
        self._event(
            worktree.session.cloister,
            "quarantined",
            str(dot_git),
            detail,
            moved_to=str(destination),
        )
        self._report(f"git guard: quarantined {dot_git}: {detail}")
        self._notices.setdefault(worktree.session.cloister, []).append(
            displayable(
                f"Cloister moved {gitlink}/.git out of the project ({destination}): a"
                " repository at a gitlink path would make the human's git run its"
                " configuration"
            )
        )

    # -- events --------------------------------------------------------------------------------

    def _route(self, changes: Iterable[inotify.Change]) -> None:
        for change in changes:
            if change.kind == "overflow":
                for repository in self._repositories.values():
                    self._sweep(repository)
                for repository in self._repositories.values():
                    self._dirty_indexes.update(_index_owners(repository.common))
                continue
            if change.path.name == "index" and self._repository_of(change.path) is not None:
                self._dirty_indexes.add(change.path.parent)
            for worktree in self._worktrees.values():
                if change.path.name == ".git" and change.path.parent in worktree.watched:
                    self._dirty_indexes.add(Path(worktree.session.git_dir or ""))
            owner = self._repository_of(change.path)
            if owner is not None and change.kind in ("created", "moved_in", "written"):
                try:
                    self._neutralise(owner, change.path)
                except Exception as error:  # reported; the next change is still handled
                    self._report(f"git guard: {change.path}: {type(error).__name__}: {error}")

    def _take_changes(self) -> None:
        """Route pending events; sweep what events cannot vouch for."""
        watcher = self._watcher
        if watcher is None:
            for repository in self._repositories.values():
                self._sweep(repository)
                self._dirty_indexes.update(_index_owners(repository.common))
            return
        try:
            self._route(watcher.read())
        except inotify.WatchLimitError as error:  # a directory it could not watch: sweep
            self._report(f"git guard: {error}")
            self._route(error.changes)
        blind = watcher.unwatchable
        for repository in self._repositories.values():
            unwatched = [
                path
                for path in blind
                if path == repository.common or repository.common in path.parents
            ]
            if watcher.full and unwatched and not repository.flooded:
                repository.flooded = True
                self._record(
                    repository,
                    "refused",
                    repository.common,
                    f"the git directory grew past {MAX_WATCHES} directories (git never makes"
                    " that many): the cloister is hostile; swept instead of watched",
                )
                self._to_pause.update(repository.sessions)
            if not repository.watched or unwatched:
                self._sweep(repository)

    def _repository_of(self, path: Path) -> _Repository | None:
        for common, repository in self._repositories.items():
            if path == common or common in path.parents:
                return repository
        return None

    def settle_links(self) -> None:
        """Act on the events pending now, indexes aside (cheap, no lock: what runs after a
        hostexec command; the index is checked in the background and before the next)."""
        self._take_changes()

    async def settle(self, cloister: str | None = None) -> None:
        """Act on everything that happened so far (events pending now, index changes)."""
        async with self._lock:
            self._take_changes()
            if cloister is not None and cloister not in self._worktrees:
                self.refresh()  # started since the last refresh
            while self._dirty_indexes:
                git_dir = self._dirty_indexes.pop()
                await self._each(str(git_dir), self._check_index(git_dir))
            for worktree in list(self._worktrees.values()):
                if worktree.new_gitlinks:  # a repository may have been moved in since
                    await self._each(
                        worktree.session.cloister, self._watch_and_quarantine(worktree)
                    )
            await self._pause_pending()

    async def _each(self, what: str, action: Coroutine[Any, Any, None]) -> None:
        """One part; what fails there (names the agent chose, say) is reported and does not
        keep the others unguarded."""
        try:
            await action
        except Exception as error:
            self._report(f"git guard: {what}: {type(error).__name__}: {error}")

    async def _pause_pending(self) -> None:
        if self._mode() != "pause":
            self._to_pause.clear()
        while self._to_pause:
            name = self._to_pause.pop()
            if self._engine is None:
                continue
            problem = await self._engine.pause(container_name(name))
            if problem is None:
                self._event(
                    name,
                    "paused",
                    container_name(name),
                    "it planted a link for host git",
                )
                self._report(f"git guard: paused {container_name(name)}")
            else:
                self._report(f"git guard: {problem}")

    def take_notices(self, cloister: str) -> list[str]:
        return self._notices.pop(cloister, [])

    async def run(self) -> None:
        """Guard until cancelled; a failure is reported and the next round tries again
        (whatever the agent planted must not stop the guard for every cloister)."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        if self._watcher is not None:
            loop.add_reader(self._watcher.fileno(), ready.set)
        try:
            while True:
                try:
                    self.refresh()
                    await self.settle()
                except Exception as error:
                    self._report(f"git guard: {type(error).__name__}: {error}")
                ready.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(REFRESH_SECONDS):
                        await ready.wait()
        finally:
            if self._watcher is not None:
                loop.remove_reader(self._watcher.fileno())
                self._watcher.close()

    def guarded(self) -> list[str]:
        return sorted(self._worktrees)


def _index_owners(common: Path) -> list[Path]:
    """The git directories of a repository that have an index: its own, its worktrees'."""
    owners = [common]
    with contextlib.suppress(OSError):
        owners += [entry for entry in (common / "worktrees").iterdir() if entry.is_dir()]
    return owners
