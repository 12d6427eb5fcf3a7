"""A cloister's session on the host: prepared before it starts, reviewed when it stops.

:func:`prepare` runs before the container exists: it reviews the work tree (what is
there now is the human's own and never reported later), plans the git mounts, adds
the git guard to the repository and writes the session record the host executor
guards the repository by. :func:`finish` runs after the container is gone: it
reviews the work tree again against that baseline, and releases what the start put
in the repository (guard, ``commondir`` pin, placeholders) once no cloister uses it,
unless the review found a repository the human's git would enter: then the guard
stays until ``cloister review --fix`` has dealt with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import docker

from cloister_cli import cloisters, git, gitguard, gitmounts
from cloister_cli.cloisters import Workspace
from cloister_cli.gitmounts import GitPlan
from cloister_cli.review import (
    Finding,
    ReviewTarget,
    apply_fixes,
    nested_git_entries,
    new_findings,
    review,
)
from cloister_cli.review.findings import finding
from cloister_core.errors import CloisterError
from cloister_core.gitdir import GitDirBaseline, take_baseline
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import (
    GuardEvent,
    SessionRecord,
    clear_events,
    identity,
    list_sessions,
    read_events,
    read_session,
    replaced,
    write_session,
)


@dataclass(frozen=True, slots=True)
class Prepared:
    git_plan: GitPlan
    session: SessionRecord


@dataclass(frozen=True, slots=True)
class Report:
    """What a review found that was not there at start, and what the guard undid (with
    what each repository it moved away would have run)."""

    session: SessionRecord | None
    target: ReviewTarget
    findings: list[Finding]
    events: list[GuardEvent]
    moved: dict[str, list[Finding]] = field(default_factory=dict)  # event path -> its findings
    gitlinks: frozenset[str] = frozenset()  # of the work tree's index, now

    @property
    def holds_guard(self) -> bool:
        """Whether the human's git would enter a planted repository (the guard keeps it out)."""
        return any(
            item.severity == "runs-code"
            and (
                item.kind == "gitlink-without-gitmodules"
                or (item.kind == "nested-repository" and item.path.rstrip("/") in self.gitlinks)
            )
            for item in self.findings
        )


def review_target(session: SessionRecord) -> ReviewTarget:
    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    return ReviewTarget(Path(session.worktree), path(session.git_dir), path(session.common_dir))


def prepare(
    paths: CloisterPaths,
    workspace: Workspace,
    name: str,
    *,
    home: Path,
    protect: Sequence[str] = (),
) -> Prepared:
    """Everything the host needs before the cloister's container may start; *protect*
    are the protected paths (:func:`gitmounts.plan`)."""
    directory = workspace.directory
    is_git = workspace.project.git
    nested = nested_git_entries(directory) if is_git else []
    git_plan = gitmounts.plan(directory, is_git=is_git, home=home, nested=nested, protect=protect)
    layout = git_plan.layout
    target = ReviewTarget(
        directory, layout.git_dir if layout else None, layout.common_dir if layout else None
    )
    baseline = tuple(sorted({finding.fingerprint for finding in review(target)}))
    if layout is not None:
        gitguard.add_guard(layout.common_dir, paths.git_guard_config)
    session = SessionRecord(
        cloister=name,
        project=workspace.project.name,
        worktree=str(directory),
        git_dir=str(layout.git_dir) if layout else None,
        common_dir=str(layout.common_dir) if layout else None,
        started_at=datetime.now(UTC),
        git_baseline=take_baseline(layout.common_dir) if layout else GitDirBaseline(),
        gitlinks=tuple(git_plan.gitlinks),
        findings_at_start=baseline,
        placeholders=tuple(str(path) for path in git_plan.placeholders),
        pins=tuple(str(path) for path in git_plan.pins),
        nested=tuple(str(path.parent.relative_to(directory)) for path in nested),
        identities=_identities(directory, layout),
    )
    clear_events(paths, name)
    write_session(paths, session)
    return Prepared(git_plan, session)


def _identities(worktree: Path, layout: git.Layout | None) -> dict[str, tuple[int, int]]:
    places = [worktree, worktree / ".git"]
    if layout is not None:
        places += [layout.git_dir, layout.common_dir]
    found = {str(path): identity(path) for path in dict.fromkeys(places)}
    return {path: known for path, known in found.items() if known is not None}


def report(paths: CloisterPaths, session: SessionRecord | None, target: ReviewTarget) -> Report:
    found = review(target)
    if session is not None:
        found = _replaced_findings(session) + new_findings(found, session.findings_at_start)
    events = read_events(paths, session.cloister) if session is not None else []
    moved = {
        event.path: _what_it_would_run(paths, session.project, Path(event.moved_to))
        for event in events
        if session is not None and event.moved_to
    }
    links = frozenset(git.gitlinks(target.worktree)) if target.git_dir is not None else frozenset()
    return Report(session, target, found, events, moved, links)


def _replaced_findings(session: SessionRecord) -> list[Finding]:
    """The work tree or a git directory that is no longer the one the cloister started
    with (none can be replaced from inside; one that was is the agent's now)."""
    return [
        finding(
            "replaced",
            path,
            "runs-code",
            f"{path} is not what it was when the cloister started: git in the project may now"
            " read a configuration and hooks of the agent's; look before you run git there",
            content=str(identity(Path(path))),
        )
        for path in replaced(session)
    ]


def _what_it_would_run(paths: CloisterPaths, project: str, moved_to: Path) -> list[Finding]:
    """Review the quarantine directory a repository was moved into, as a work tree."""
    base = paths.quarantine_dir / project
    try:
        stamp = base / moved_to.relative_to(base).parts[0]
    except (ValueError, IndexError):
        return []
    if not stamp.is_dir():
        return []
    return review(ReviewTarget(stamp, None, None))


def release(
    client: docker.DockerClient, paths: CloisterPaths, session: SessionRecord, *, held: bool
) -> SessionRecord:
    """Record the outcome; undo what the start put in the repository when nothing needs it."""
    session = session.model_copy(
        update={"stopped_at": session.stopped_at or datetime.now(UTC), "guard_held": held}
    )
    write_session(paths, session)
    if held:
        return session
    roots = [Path(value) for value in (session.worktree, session.common_dir) if value]
    gitmounts.remove_placeholders((Path(path) for path in session.placeholders), roots)
    for pin in session.pins:
        gitmounts.unpin_commondir(Path(pin).parent)
    if session.common_dir:
        release_repository(client, paths, Path(session.common_dir))
    return session


def release_repository(client: docker.DockerClient, paths: CloisterPaths, common: Path) -> bool:
    """Remove the guard and the ``commondir`` pin once no cloister and no held session
    needs them; True if removed."""
    if cloisters.repository_in_use(client, common):
        return False
    for other in list_sessions(paths):
        if other.common_dir == str(common) and (
            other.guard_held or (other.running and cloisters.find(client, other.cloister))
        ):
            return False
    gitguard.remove_guard(common, paths.git_guard_config)
    gitmounts.unpin_commondir(common)
    return True


def find(paths: CloisterPaths, name: str | None, directory: Path) -> SessionRecord | None:
    """The session of cloister *name*, or of the deepest work tree containing *directory*."""
    if name is not None:
        return read_session(paths, name)
    resolved = directory.resolve()
    best: SessionRecord | None = None
    for session in list_sessions(paths):
        worktree = Path(session.worktree)
        if (resolved == worktree or worktree in resolved.parents) and (
            best is None or len(worktree.parts) > len(Path(best.worktree).parts)
        ):
            best = session
    return best


@dataclass(frozen=True, slots=True)
class FixOutcome:
    actions: list[str]
    after: Report
    released: bool  # the guard and the repository's placeholders were removed


def fix(client: docker.DockerClient, paths: CloisterPaths, before: Report) -> FixOutcome:
    """Apply every fix *before* offers, review again, and release the guard if it may go.

    Not while the agent runs: it could rearrange, between the review and the moves, the
    directories on the way to what is moved.
    """
    if before.session is not None:
        container = cloisters.find(client, before.session.cloister)
        if container is not None and container.status == "running":
            name = before.session.cloister
            raise CloisterError(
                f"cloister {name!r} is running: stop it first (`cloister stop {name}`), so that"
                " the agent cannot rearrange what --fix moves"
            )
    project = before.session.project if before.session else before.target.worktree.name
    target = before.target
    within = [path for path in (target.worktree, target.git_dir, target.common_dir) if path]
    actions = apply_fixes(before.findings, paths.quarantine_dir / project, within=within)
    after = report(paths, before.session, before.target)
    released = False
    session = before.session
    if session is not None and session.guard_held and not after.holds_guard:
        running = cloisters.find(client, session.cloister) is not None
        if not running:
            release(client, paths, session, held=False)
            released = True
    return FixOutcome(actions, after, released)
