"""The git guard on real repositories: what it undoes, how fast, and what it leaves alone."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cloister_core.audit import AuditLog
from cloister_core.gitdir import take_baseline
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, read_events, write_session
from cloister_core.tokens import TokenRecord, remove_token_file, write_token_file
from cloister_executor import guard as guard_module
from cloister_executor import inotify
from cloister_executor.engine import Engine
from cloister_executor.guard import GitGuard
from tests.git_support import blob, forge_index, hermetic_git, run_git

GIT = shutil.which("git") or "git"

pytestmark = pytest.mark.usefixtures("_hermetic")


@pytest.fixture
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


class FakeEngine(Engine):
    def __init__(self) -> None:
        super().__init__(None)
        self.paused: list[str] = []

    async def pause(self, container: str) -> str | None:
        self.paused.append(container)
        return None


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    run_git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("hello\n", encoding="utf-8")
    run_git(path, "add", "README")
    run_git(path, "commit", "-q", "-m", "first")
    return path


class Setup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = CloisterPaths(config_dir=root / "config", data_dir=root / "data")
        self.repo = make_repo(root / "repo")
        self.secret = root / "secret"
        self.secret.write_text("SECRET-LINE\n", encoding="utf-8")
        self.engine = FakeEngine()
        self.messages: list[str] = []

    def session(
        self, name: str = "api", worktree: Path | None = None, git_dir: Path | None = None
    ) -> None:
        record = TokenRecord.create(cloister=name, project="api", path=worktree or self.repo)
        write_token_file(self.paths.tokens_dir, record)
        write_session(
            self.paths,
            SessionRecord(
                cloister=name,
                project="api",
                worktree=str(worktree or self.repo),
                git_dir=str(git_dir or self.repo / ".git"),
                common_dir=str(self.repo / ".git"),
                started_at=datetime.now(UTC),
                git_baseline=take_baseline(self.repo / ".git"),
                gitlinks=(),
            ),
        )

    def guard(self, *, use_inotify: bool = True) -> GitGuard:
        return GitGuard(self.paths, self.messages.append, self.engine, use_inotify=use_inotify)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


@contextlib.asynccontextmanager
async def running(guard: GitGuard) -> AsyncIterator[None]:
    task = asyncio.create_task(guard.run())
    try:
        await guard.settle()
        guard.refresh()
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def synchronous(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (no plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


async def until(condition: Callable[[], bool], within: float = 2.0) -> float:
    """Seconds until *condition* held (polled every millisecond: a file has no event)."""
    started = time.monotonic()
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - polling the file system
            await asyncio.sleep(0.001)
    return time.monotonic() - started


def human_git(repo: Path, *args: str) -> str:
    """The human's own git on the host: its whole output."""
    result = subprocess.run(
        [GIT, "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=60
    )
    return result.stdout + result.stderr


@pytest.mark.skipif(not inotify.available(), reason="needs inotify")
@synchronous
async def test_a_planted_link_is_removed_as_it_appears(setup: Setup) -> None:
    setup.session()
    guard = setup.guard()
    async with running(guard):
        packed = setup.repo / ".git" / "packed-refs"
        packed.symlink_to(setup.secret)
        seconds = await until(lambda: not packed.is_symlink())
        await until(lambda: setup.engine.paused == ["cloister-api"])
    assert seconds < 0.5
    assert "SECRET-LINE" not in await asyncio.to_thread(human_git, setup.repo, "status")
    events = read_events(setup.paths, "api")
    assert [event.action for event in events] == ["removed", "paused"]
    assert repr(str(setup.secret)) in events[0].detail


@pytest.mark.skipif(not inotify.available(), reason="needs inotify")
@synchronous
async def test_links_in_new_directories_and_fifos_too(setup: Setup) -> None:
    setup.session()
    guard = setup.guard()
    async with running(guard):
        deep = setup.repo / ".git" / "refs" / "heads" / "a" / "b"
        deep.mkdir(parents=True)
        (deep / "c").symlink_to(setup.secret)
        fifo = setup.repo / ".git" / "FETCH_HEAD"
        os.mkfifo(fifo)
        await until(lambda: not (deep / "c").is_symlink() and not fifo.exists())


@synchronous
async def test_alternates_removed_or_restored(setup: Setup) -> None:
    alternates = setup.repo / ".git" / "objects" / "info" / "alternates"
    setup.session("api")
    guard = setup.guard()
    guard.refresh()
    alternates.write_text("/home/someone/private/.git/objects\n", encoding="utf-8")
    await guard.settle()
    assert not alternates.exists()
    # A repository that had its own alternates gets them back.
    alternates.write_text("/ref/objects\n", encoding="utf-8")
    setup.session("api")  # a new start: this is the human's
    guard.refresh()
    alternates.write_text("/evil/objects\n", encoding="utf-8")
    await guard.settle()
    assert alternates.read_text(encoding="utf-8") == "/ref/objects\n"
    assert [event.action for event in read_events(setup.paths, "api")][-2:] == [
        "restored",
        "paused",
    ]


@synchronous
async def test_the_humans_own_links_stay(setup: Setup) -> None:
    exclude = setup.repo / ".git" / "info" / "exclude"
    exclude.unlink()
    exclude.symlink_to(setup.root / "shared-excludes")
    setup.session()
    guard = setup.guard()
    guard.refresh()
    await guard.settle()
    assert exclude.is_symlink()
    assert read_events(setup.paths, "api") == []


@synchronous
async def test_sweeping_without_inotify(setup: Setup) -> None:
    setup.session()
    guard = setup.guard(use_inotify=False)
    guard.refresh()
    (setup.repo / ".git" / "shallow").symlink_to(setup.secret)
    await guard.settle()
    assert not (setup.repo / ".git" / "shallow").exists()


@synchronous
async def test_a_stopped_cloister_is_no_longer_guarded(setup: Setup) -> None:
    setup.session()
    guard = setup.guard()
    guard.refresh()
    assert guard.guarded() == ["api"]
    remove_token_file(setup.paths.tokens_dir, "api")
    guard.refresh()
    assert guard.guarded() == []
    (setup.repo / ".git" / "shallow").symlink_to(setup.secret)
    await guard.settle()
    assert (setup.repo / ".git" / "shallow").is_symlink()  # the human's business now


@synchronous
async def test_an_action_is_recorded_for_every_cloister_of_the_repository(setup: Setup) -> None:
    run_git(setup.repo, "worktree", "add", "-q", str(setup.root / "side"), "-b", "side")
    setup.session("api")
    setup.session(
        "api-side", worktree=setup.root / "side", git_dir=setup.repo / ".git" / "worktrees" / "side"
    )
    guard = setup.guard()
    guard.refresh()
    (setup.repo / ".git" / "worktrees" / "side" / "HEAD.lock").symlink_to(setup.secret)
    await guard.settle()
    assert {event.action for event in read_events(setup.paths, "api")} == {"removed", "paused"}
    assert {event.action for event in read_events(setup.paths, "api-side")} == {"removed", "paused"}
    assert sorted(setup.engine.paused) == ["cloister-api", "cloister-api-side"]


@synchronous
async def test_actions_are_audited_in_each_cloisters_own_log(setup: Setup) -> None:
    setup.session("api")
    logs = setup.paths.logs_dir
    with AuditLog(setup.paths.audit_log, cloister_dir=logs) as audit:
        guard = GitGuard(setup.paths, setup.messages.append, setup.engine, audit=audit)
        guard.refresh()
        (setup.repo / ".git" / "packed-refs").symlink_to(setup.secret)
        await guard.settle()
    lines = setup.paths.audit_log.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["event"], r["cloister"]) for r in records] == [
        ("guard.removed", "api"),
        ("guard.paused", "api"),
    ]
    assert records[0]["path"] == str(setup.repo / ".git" / "packed-refs")
    assert repr(str(setup.secret)) in records[0]["detail"]
    assert (logs / "api.log").read_text(encoding="utf-8").splitlines() == lines
    assert [event.action for event in read_events(setup.paths, "api")] == ["removed", "paused"]


def nested_repo(parent: Path, name: str, marker: Path) -> Path:
    sub = make_repo(parent / name)
    run_git(sub, "config", "core.fsmonitor", f"touch '{marker}'; echo")
    return sub


@synchronous
async def test_a_repository_at_a_new_gitlink_is_quarantined(setup: Setup) -> None:
    setup.session()
    guard = setup.guard()
    guard.refresh()
    marker = setup.root / "fsmonitor-ran"
    nested_repo(setup.repo, "sub", marker)
    run_git(setup.repo, "add", "sub")
    await guard.settle("api")
    assert not (setup.repo / "sub" / ".git").exists()
    (moved,) = (setup.paths.quarantine_dir / "api").glob("*/sub/.git")
    assert (moved / "config").is_file()
    assert guard.take_notices("api")
    assert setup.engine.paused == []
    await asyncio.to_thread(human_git, setup.repo, "add", "-A")
    assert not marker.exists()
    # The agent puts a repository back there: it goes too.
    nested_repo(setup.root, "again", marker)
    (setup.root / "again" / ".git").rename(setup.repo / "sub" / ".git")
    await guard.settle("api")
    assert not (setup.repo / "sub" / ".git").exists()


@synchronous
async def test_gitlinks_of_the_start_are_the_humans(setup: Setup) -> None:
    marker = setup.root / "fsmonitor-ran"
    nested_repo(setup.repo, "vendor", marker)
    run_git(setup.repo, "add", "vendor")
    record = TokenRecord.create(cloister="api", project="api", path=setup.repo)
    write_token_file(setup.paths.tokens_dir, record)
    write_session(
        setup.paths,
        SessionRecord(
            cloister="api",
            project="api",
            worktree=str(setup.repo),
            git_dir=str(setup.repo / ".git"),
            common_dir=str(setup.repo / ".git"),
            started_at=datetime.now(UTC),
            git_baseline=take_baseline(setup.repo / ".git"),
            gitlinks=("vendor",),
        ),
    )
    guard = setup.guard()
    guard.refresh()
    await guard.settle("api")
    assert (setup.repo / "vendor" / ".git").is_dir()


@synchronous
async def test_a_gitlink_through_a_link_moves_nothing_of_the_humans(setup: Setup) -> None:
    """The gitlink's path is the agent's to choose: through a link it leads outside."""
    setup.session()
    guard = setup.guard()
    guard.refresh()
    human = make_repo(setup.root / "human-dotfiles")  # a repository of the human's
    make_repo(setup.repo / "sub")
    run_git(setup.repo, "add", "sub")
    (setup.repo / "sub").rename(setup.root / "sub-moved")
    (setup.repo / "sub").symlink_to(human)  # the index still names sub
    await guard.settle("api")
    assert (human / ".git").is_dir()
    assert not list(setup.paths.quarantine_dir.glob("**/.git"))


@synchronous
async def test_undoing_never_follows_a_directory_swapped_for_a_link(setup: Setup) -> None:
    setup.session()
    guard = setup.guard(use_inotify=False)
    guard.refresh()
    human = setup.root / "human"
    human.mkdir()
    (human / "y").symlink_to("/etc/hostname")  # the human's own link, same name
    planted = setup.repo / ".git" / "refs" / "x"
    planted.mkdir()
    (planted / "y").symlink_to(setup.secret)
    planted.rename(setup.root / "x-moved")
    planted.symlink_to(human)  # .git/refs/x is now itself the planted link
    await guard.settle()
    assert (human / "y").is_symlink()
    assert not planted.is_symlink()  # removed: it is the planted link now


@synchronous
async def test_names_that_are_no_utf8_neither_stop_the_guard(setup: Setup) -> None:
    setup.session()
    guard = setup.guard()
    guard.refresh()
    name = os.fsdecode(b"x\xffy")
    make_repo(setup.repo / name)
    run_git(setup.repo, "add", name)
    await guard.settle("api")
    assert not (setup.repo / name / ".git").exists()
    (event,) = read_events(setup.paths, "api")
    assert "x\\xffy" in event.path
    (setup.repo / ".git" / "shallow").symlink_to(setup.secret)
    await guard.settle("api")
    assert not (setup.repo / ".git" / "shallow").is_symlink()


@synchronous
async def test_a_forged_index_is_rebuilt_and_the_cloister_paused(setup: Setup) -> None:
    setup.session()
    guard = setup.guard()
    guard.refresh()
    await guard.settle()
    forge_index(setup.repo, [(0o100644, blob(setup.repo, "x"), "../outside-written")])
    await guard.settle("api")
    assert "../outside-written" not in human_git(setup.repo, "ls-files")
    await asyncio.to_thread(human_git, setup.repo, "restore", ".")
    assert not (setup.root / "outside-written").exists()
    actions = [event.action for event in read_events(setup.paths, "api")]
    assert actions == ["rebuilt", "paused"]
    (moved,) = setup.paths.quarantine_dir.glob("api/*/.git/index")
    assert moved.is_file()


@synchronous
async def test_the_humans_nested_repositories_are_never_moved(setup: Setup) -> None:
    """A repository that was in the work tree at start is the human's (its config and
    hooks are read-only in the cloister): made a gitlink, it stays where it is."""
    lib = make_repo(setup.repo / "lib")
    setup.session()
    record = setup.paths.session_file("api")
    session = SessionRecord.model_validate_json(record.read_bytes())
    write_session(setup.paths, session.model_copy(update={"nested": ("lib",)}))
    guard = setup.guard()
    guard.refresh()
    run_git(setup.repo, "add", "lib")
    await guard.settle("api")
    assert (lib / ".git").is_dir()


@pytest.mark.skipif(not inotify.available(), reason="needs inotify")
@synchronous
async def test_a_git_directory_grown_past_the_watch_budget_is_hostile(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """inotify watches are the user's budget; the guard takes at most MAX_WATCHES."""
    monkeypatch.setattr(guard_module, "MAX_WATCHES", 400)
    setup.session()
    guard = setup.guard()
    guard.refresh()
    for index in range(500):
        (setup.repo / ".git" / "junk" / f"d{index}").mkdir(parents=True)
    await guard.settle()
    await guard.settle()
    actions = [event.action for event in read_events(setup.paths, "api")]
    assert actions == ["refused", "paused"]
    deep = setup.repo / ".git" / "junk" / "d499" / "link"
    deep.symlink_to(setup.secret)
    await guard.settle()  # swept, where no watch sees it
    assert not deep.is_symlink()
