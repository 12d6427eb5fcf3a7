"""What a command gets when it runs in a cloister's git project, and the checks around it.

Before the command: the git guard settles (everything it was told about is undone),
then the repository's git directory is checked for what the cloister did not have when
it started (a symbolic link or FIFO anywhere in it, a new or changed
``objects/info/alternates``): if anything is there, or the guard had to undo something
of this cloister's, the command is refused with a message naming the file. Every
command then runs with git's hardened settings in its environment (so the git that
``make`` or ``gh`` runs is hardened too); a ``git`` command's argv is checked for
options that would override them, and its writes are confined to the project, its git
directories and a few of the user's files git itself writes (Landlock, where the
kernel has it: a link planted after the check still cannot send a write elsewhere).

After the command: the same check again; if something appeared while it ran, its
output is withheld (git may have printed the content of a file it was tricked into
reading).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cloister_core.config.models import HostexecConfig
from cloister_core.gitargv import (
    UnsafeGitCommandError,
    check_git_argv,
    is_git_program,
    writes_only_the_index,
)
from cloister_core.gitdir import SpecialScanner, planted
from cloister_core.gitsafety import git_environment
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import GuardEvent, SessionRecord, read_events, replaced
from cloister_core.watch import Signature, file_signature
from cloister_executor import index
from cloister_executor.guard import GitGuard
from cloister_executor.landlock import WriteConfinement, landlock_abi, preexec
from cloister_executor.protocol import ExecRefusal

# What the guard does to a cloister that makes it hostile (a link cannot be an accident).
TAINTING = frozenset({"removed", "restored", "rebuilt", "refused", "paused"})
# Landlock ABI 1 refuses every rename across directories, which git does for each object.
MIN_LANDLOCK_ABI = 2
# Files in the home directory git (or what it runs: ssh, credential helpers, gpg) writes.
HOME_WRITABLE = (".ssh/known_hosts", ".cache/git", ".git-credentials", ".gnupg")


@dataclass(slots=True)
class Prepared:
    """How one command runs, and what to compare with after it ran."""

    env: dict[str, str]
    preexec: Callable[[], None] | None = None
    session: SessionRecord | None = None
    events_before: int = 0


@dataclass(slots=True)
class _Cached:
    signature: Signature
    record: SessionRecord | None


@dataclass(slots=True)
class ProjectChecks:
    """The checks of :mod:`hostgit` for every cloister, with their caches."""

    paths: CloisterPaths
    guard: GitGuard | None
    report: Callable[[str], None]
    _sessions: dict[str, _Cached] = field(default_factory=dict)
    _scanners: dict[str, SpecialScanner] = field(default_factory=dict)
    _landlock_warned: bool = False

    def session(self, cloister: str) -> SessionRecord | None:
        """The cloister's session record (re-read when the file changed); None if none."""
        path = self.paths.session_file(cloister)
        signature = file_signature(path)
        cached = self._sessions.get(cloister)
        if cached is None or cached.signature != signature:
            try:
                record = SessionRecord.model_validate_json(path.read_bytes())
            except (OSError, ValueError):
                record = None
            cached = _Cached(signature, record if record and record.running else None)
            self._sessions[cloister] = cached
        return cached.record

    async def before(
        self,
        cloister: str,
        argv: tuple[str, ...],
        env: Mapping[str, str],
        config: HostexecConfig,
    ) -> Prepared | ExecRefusal:
        session = self.session(cloister)
        prepared = Prepared(dict(env), session=session)
        if is_git_program(argv[0]):
            try:
                check_git_argv(argv)
            except UnsafeGitCommandError as error:
                return ExecRefusal(reason=str(error))
        if session is None or session.common_dir is None:
            return prepared
        problem = await self._problems(session, deep=True)
        if problem:
            return ExecRefusal(reason=problem)
        prepared.events_before = len(read_events(self.paths, cloister))
        prepared.env = git_environment(env, hooks=config.git_hooks)
        if is_git_program(argv[0]) and not writes_only_the_index(argv):
            prepared.preexec = self._confinement(session, env)
        return prepared

    async def after(self, prepared: Prepared) -> str | None:
        """Why the output must be withheld, or None."""
        session = prepared.session
        if session is None or session.common_dir is None:
            return None
        events = read_events(self.paths, session.cloister)
        problem = await self._problems(session, deep=False) or (
            _describe(events[prepared.events_before :])
            if len(events) > prepared.events_before
            else None
        )
        if problem is None:
            return None
        return f"the command ran, but its output is withheld: {problem}"

    async def _problems(self, session: SessionRecord, *, deep: bool) -> str | None:
        """What is wrong with the cloister's repository now; *deep*: the indexes too
        (before a command; after one, they are checked in the background)."""
        if self.guard is not None:
            try:
                if deep:
                    await self.guard.settle(session.cloister)
                else:
                    self.guard.settle_links()
            except Exception as error:  # fail closed, and say why
                return f"the git guard failed ({type(error).__name__}: {error}); refused"
        gone = replaced(session)
        if gone:
            return (
                f"{', '.join(gone)} is not what it was when cloister {session.cloister} started;"
                " refused"
            )
        events = read_events(self.paths, session.cloister)
        hostile = [event for event in events if event.action in TAINTING]
        if hostile:
            return (
                f"{_describe(hostile)}; commands of cloister {session.cloister} are refused"
                f" from now on (`cloister review {session.cloister}`)"
            )
        common = session.common_dir or session.worktree
        scanner = self._scanners.setdefault(common, SpecialScanner())
        found = planted(Path(common), session.git_baseline, scanner)
        if found:
            what = "; ".join(item.describe() for item in found)
            return (
                f"{what}, which the repository did not have when cloister {session.cloister}"
                " started: host git would follow it out of the project"
            )
        if self.guard is not None:
            notices = self.guard.take_notices(session.cloister)
            if notices:
                return "; ".join(notices) + "; run the command again"
        elif deep and session.git_dir:  # what the guard would have checked (after the links)
            return await _index_problem(Path(session.git_dir))
        return None

    def _confinement(
        self, session: SessionRecord, env: Mapping[str, str]
    ) -> Callable[[], None] | None:
        abi = landlock_abi()
        if abi < MIN_LANDLOCK_ABI:
            if not self._landlock_warned:
                self._landlock_warned = True
                self.report(
                    f"Landlock ABI {abi} (need {MIN_LANDLOCK_ABI}): host git commands run"
                    " without write confinement"
                )
            return None
        home = Path(env.get("HOME") or Path.home())
        writable = [Path(session.worktree), Path(tempfile.gettempdir()), Path("/tmp")]  # noqa: S108
        writable += [Path(value) for value in (session.git_dir, session.common_dir) if value]
        writable += [home / name for name in HOME_WRITABLE]
        if runtime := os.environ.get("XDG_RUNTIME_DIR"):
            writable.append(Path(runtime))
        return preexec(WriteConfinement(tuple(dict.fromkeys(writable))))


async def _index_problem(git_dir: Path) -> str | None:
    try:
        scanned = await index.scan(git_dir)
    except OSError as error:
        return f"cannot read the index: {error}; refused"
    if scanned.unsafe:
        names = ", ".join(repr(path) for path, _ in scanned.unsafe[:5])
        return f"the index names {names}, outside the project or in .git; refused"
    return None


def _describe(events: list[GuardEvent]) -> str:
    return "; ".join(f"Cloister {event.action} {event.path} ({event.detail})" for event in events)
