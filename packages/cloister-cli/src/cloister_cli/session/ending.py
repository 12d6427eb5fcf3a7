"""How a cloister's session ends: ``cloister stop`` as a library call (the container, its
token, its commits brought back, the review of what it left) and the stand-ins unfinished
stops left behind.

The syncer's module (and the HTTP client under it) is imported only when a stop has
commits to bring back: ``cloister start`` imports this module, and would pay for it on
every start (measured: about 0.15 s). The snapshots' modules only when a git directory
is lost (about 0.04 s of a stop).
"""

from __future__ import annotations

import stat
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import docker
import docker.errors

from cloister_cli.agents import agentstate
from cloister_cli.container import accounts, cloisters, listing, ports, safeguards, services
from cloister_cli.context import Context
from cloister_cli.repo import gitdirs, gitmounts
from cloister_cli.session import sessions
from cloister_core import stack
from cloister_core.errors import CloisterError
from cloister_core.sessions import SessionRecord, list_sessions, read_session

if TYPE_CHECKING:
    from cloister_executor.gitsync import SyncOutcome


@dataclass(frozen=True, slots=True)
class StopOutcome:
    stopped: bool
    report: sessions.Report | None  # None: no session record, or the review failed
    sync: SyncOutcome | None = None  # the last sync of its commits
    sync_error: str | None = None  # why they could not be brought back (its git directory stays)
    moved: tuple[str, ...] = ()  # repositories the agent made, moved to the quarantine
    review_error: str | None = None  # why the review failed
    # Stand-ins other cloisters' unfinished stops left, removed now (remove_stand_ins).
    left_behind: tuple[Path, ...] = ()
    lost: LostGitDir | None = None  # why its commits cannot come back, if a git directory went
    # What failed of the cleanup done on threads (its container's removal, the proxy told):
    # reported with the rest, never in the way of the review's report.
    cleanup_errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LostGitDir:
    """A git directory a stopped cloister's commits cannot come back from."""

    whose: Literal["cloister", "repository"]  # its own (/work/.git inside), or the human's
    what: Literal["removed", "replaced"]
    path: Path
    # ``cloister restore NAME``'s snapshot: the newest kept at a start; None: none kept.
    snapshot: str | None


def _is(path: Path, kind: int) -> bool:
    try:
        return stat.S_IFMT(path.lstat().st_mode) == kind
    except OSError:
        return False


def lost_git_dir(context: Context, session: SessionRecord) -> LostGitDir | None:
    """Whether *session*'s sync failed because a git directory is gone: the cloister's own
    removed (``rm -rf /work/.git`` inside leaves its empty mount points) or replaced by
    another repository (no ``objects/info/alternates``: every start writes one), or the
    human's repository's missing. Judged by names alone: nothing the agent wrote is read."""
    if not session.is_git:
        return None
    own = context.paths.cloister_git_dir(session.cloister)
    common = Path(str(session.common_dir))
    # Only here: a stop whose commits came back never loads the snapshot modules.
    from cloister_cli.session.snapshots.choose import records_of  # noqa: PLC0415

    records = records_of(context.paths, session.cloister)
    kept = next((record.id for record in records if record.kind == "start"), None)
    if not _is(common / "HEAD", stat.S_IFREG) or not _is(common / "objects", stat.S_IFDIR):
        return LostGitDir("repository", "removed", common, kept)
    if not _is(own / "HEAD", stat.S_IFREG) or not _is(own / "objects", stat.S_IFDIR):
        return LostGitDir("cloister", "removed", own, kept)
    if not _is(own / "objects" / "info" / "alternates", stat.S_IFREG):
        return LostGitDir("cloister", "replaced", own, kept)
    return None


def stop(context: Context, name: str) -> StopOutcome:
    """Remove the cloister, revoke its token everywhere, bring its commits back, and
    review what it left in the work tree.

    Its last sync starts on a thread at once (the syncer's module imported, the human's
    repository asked) and makes its export container only once the engine says the
    cloister's is not running, and a sync still running is gone (:class:`_Gate`). Once
    the container is killed and the token gone, the container's removal and the
    proxy's reload run on threads too; what fails there is in the outcome's
    ``cleanup_errors``: raised, it would lose the review's report, and the session is
    released by then (no later start reviews it again). Its network stays for its next
    start (:mod:`cloister_cli.container.networks`).
    """
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="cloister-stop") as pool:
        gate = _Gate()
        session = read_session(context.paths, name)
        syncing = (
            pool.submit(sync_stopped, context, session, ready=gate.wait)
            if session is not None and _has_commits(context, session)
            else None
        )
        meanwhile: list[tuple[str, Future[None]]] = []
        try:
            outcome = _stop(
                context, name, pool=pool, gate=gate, syncing=syncing, meanwhile=meanwhile
            )
        finally:
            gate.open(go=False)  # a stop that failed makes no export container
        errors = tuple(
            what.format(error=f"{type(error).__name__}: {error}")
            for what, each in meanwhile
            if (error := each.exception()) is not None
        )
    return replace(outcome, cleanup_errors=errors) if errors else outcome


class _NoSync(Exception):  # noqa: N818 - not an error: the stop syncs nothing after all
    """What :meth:`_Gate.wait` raises in a sync that is not to make its container."""


class _Gate:
    """Where the stop's last sync waits before it makes its export container: the git
    directory it reads must be quiet (the cloister dead), and a sync still running (the
    watch's), whose container the stop removes, must not take its container with it."""

    def __init__(self) -> None:
        self._opened = threading.Event()
        self._go = False
        self._lock = threading.Lock()

    def open(self, *, go: bool) -> None:
        """Let the sync go on (*go*) or end it; only the first call counts."""
        with self._lock:
            if not self._opened.is_set():
                self._go = go
                self._opened.set()

    def wait(self) -> None:
        self._opened.wait()
        if not self._go:
            raise _NoSync


def _reload_proxy(context: Context) -> None:
    context.guardian.reload_proxy()  # closes its open tunnels now


def _stop(
    context: Context,
    name: str,
    *,
    pool: ThreadPoolExecutor,
    gate: _Gate,
    syncing: Future[tuple[SyncOutcome | None, str | None]] | None,
    meanwhile: list[tuple[str, Future[None]]],  # what failing means ({error}), the thread
) -> StopOutcome:
    instance = context.instance
    # Its published ports (`cloister port`) first: their forwarders are on its network.
    ports.remove_all(context.docker, instance, name)
    # Its compose services too (on its network, or in its network namespace).
    services.remove_all(context.docker, instance, name)
    result = cloisters.stop(context.docker, context.paths, instance, name, pool=pool)
    removing = [result.removed] if result.removed is not None else []
    if result.removed is not None:
        failed = (
            f"its container {instance.cloister(name)} could not be removed ({{error}});"
            f" `docker rm -f {instance.cloister(name)}` removes it"
        )
        meanwhile.append((failed, result.removed))
    # A sync running now (the watch's) would hold the last one up: its container goes,
    # and the sync gives up at once (a FIFO of the agent's can keep git waiting). One
    # that ends and goes while listed is skipped (ignore_removed).
    syncs = [instance.label_filter, f"{stack.LABEL_SYNC}={name}"]
    for running in context.docker.containers.list(
        all=True, filters={"label": syncs}, ignore_removed=True
    ):
        try:
            running.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            if error.status_code != 409:  # 409: its own removal (a finished sync) is under way
                raise
    session = read_session(context.paths, name)
    gate.open(go=session is not None and _has_commits(context, session))
    accounts.remove(context.paths, name)
    safeguards.remove_marker(context.paths, name)
    if result.project is not None:
        agentstate.disarm(context.paths, result.project)
    # The hub and the gateway see the token file go on their own.
    failed = (
        "the proxy could not be told at once ({error}); it forgets the cloister's token at"
        " its next reload"
    )
    meanwhile.append((failed, pool.submit(_reload_proxy, context)))
    if session is None:
        return StopOutcome(result.stopped, None, left_behind=_sweep(context, removing))
    # A session still open is a cloister to finish, its container gone or not.
    stopped = result.stopped or session.running
    synced, sync_error = _synced(syncing)
    lost = lost_git_dir(context, session) if sync_error is not None else None
    if lost is not None and lost.whose == "cloister" and lost.what == "removed":
        gitdirs.remove(context.paths, name)  # nothing in it to bring back, ever
    moved: list[str] = []
    try:
        report = sessions.report(session, sessions.review_target(session))
        moved = sessions.move_new_repositories(context.paths, report)
        if moved:
            report = sessions.report(session, sessions.review_target(session))
    except Exception as error:  # what the agent left must not hide what it left
        sessions.release(context.paths, session)
        return StopOutcome(
            stopped,
            None,
            synced,
            sync_error,
            tuple(moved),
            f"{type(error).__name__}: {error}",
            _sweep(context, removing),
            lost,
        )
    sessions.release(context.paths, session)
    return StopOutcome(
        stopped, report, synced, sync_error, tuple(moved), None, _sweep(context, removing), lost
    )


def _synced(
    syncing: Future[tuple[SyncOutcome | None, str | None]] | None,
) -> tuple[SyncOutcome | None, str | None]:
    """The stop's last sync, once done: (None, None) when it had none to make."""
    if syncing is None:
        return None, None
    try:
        return syncing.result()
    except _NoSync:
        return None, None


def _finished_placeholders(context: Context) -> tuple[dict[str, list[Path]], set[str]]:
    """What the records of stopped cloisters still list as made, by cloister, less what
    a live cloister keeps read-only (returned too): a cloister with a container, or a
    session still open (a start under way, or a dead cloister, which its own ``stop`` or
    ``gc``'s, or the next ``start``'s, finishes, review included). A live cloister may
    share the work tree and mount a stand-in another one made."""
    records = list_sessions(context.paths)
    if not any(record.placeholders and not record.running for record in records):
        return {}, set()  # the engine is not asked: nothing to find
    live = {info.name for info in listing.list_cloisters(context.docker, context.instance)}
    live |= {record.cloister for record in records if record.running}
    in_use = sessions.kept_read_only(records, live)
    finished = {
        record.cloister: [Path(path) for path in record.placeholders if path not in in_use]
        for record in records
        if record.placeholders and record.cloister not in live
    }
    return finished, in_use


def left_stand_ins(context: Context) -> dict[str, list[Path]]:
    """The stand-ins (:mod:`cloister_cli.repo.gitmounts`) that stopped cloisters left in
    their work trees, by cloister: a stop killed after it recorded the end. Only what a
    session record lists as made, and only what is still there."""
    finished, _ = _finished_placeholders(context)
    found = {
        name: [path for path in paths if path.exists() or path.is_symlink()]
        for name, paths in finished.items()
    }
    return {name: paths for name, paths in found.items() if paths}


def remove_stand_ins(context: Context) -> list[Path]:
    """Remove what :func:`left_stand_ins` finds, if still empty, and forget all that the
    stopped cloisters' records list (one that is not empty is the human's now, and so is
    what is made again later under such a name) but what a live cloister keeps
    read-only; the stand-ins removed."""
    removed: list[Path] = []
    finished, in_use = _finished_placeholders(context)
    for name, paths in finished.items():
        session = read_session(context.paths, name)
        if session is None or session.running:
            continue  # started again meanwhile
        before = {path for path in paths if path.exists()}
        sessions.forget_placeholders(context.paths, session, in_use)
        removed.extend(path for path in before if not path.exists())
    return gitmounts.stand_ins(removed)


def _sweep(context: Context, removing: list[Future[None]]) -> tuple[Path, ...]:
    """:func:`remove_stand_ins` after a stop, once its container is gone (a container of
    it would count it live): what it cannot do is no reason to fail one."""
    wait(removing)  # what failed there is in the outcome's cleanup_errors
    try:
        return tuple(remove_stand_ins(context))
    except (OSError, CloisterError, docker.errors.DockerException):
        return ()


def _has_commits(context: Context, session: SessionRecord) -> bool:
    """Whether *session*'s cloister has a git directory whose commits may come back."""
    return session.is_git and context.paths.cloister_git_dir(session.cloister).exists()


def sync_stopped(
    context: Context, session: SessionRecord, *, ready: Callable[[], None] | None = None
) -> tuple[SyncOutcome | None, str | None]:
    """The last sync of a cloister whose container is gone (or, with *ready*, will be
    once it returns: :meth:`cloister_executor.gitsync.Syncer.sync`); its git directory
    goes once its commits are in (it stays, and `cloister sync` retries, when they are
    not)."""
    if not _has_commits(context, session):
        return None, None
    from cloister_executor.gitsync import SyncError  # noqa: PLC0415 - see the module docstring

    try:
        outcome = context.syncer.sync(session.cloister, running=False, ready=ready)
    except SyncError as error:
        return None, str(error)
    gitdirs.remove(context.paths, session.cloister)
    return outcome, None
