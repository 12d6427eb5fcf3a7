"""A cloister's session on the host: prepared before it starts, reviewed when it stops.

:func:`prepare` runs before the container exists: it reviews the work tree (what is
there now is the human's own and never reported later), makes the cloister's own git
directory (:mod:`cloister_cli.repo.gitdirs`), plans the mounts (:mod:`cloister_cli.repo.gitmounts`)
and writes the session record. :func:`report` runs after the container is gone: it
reviews the work tree again against that baseline. :func:`release` removes what the
start put in the work tree and, once the cloister's work is synced, its git directory;
:func:`move_new_repositories` moves the git directories of repositories the agent made
in the work tree to the quarantine (the human's git would obey their config).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cloister_cli.container import cloisters
from cloister_cli.container.cloisters import Workspace
from cloister_cli.container.engine import Engine
from cloister_cli.repo import gitdirs, gitmounts
from cloister_cli.repo.gitmounts import GitPlan
from cloister_cli.session.review import (
    Finding,
    ReviewTarget,
    apply_fixes,
    nested_git_entries,
    new_findings,
    review,
)
from cloister_core import stack
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from cloister_core.sessions import (
    SessionRecord,
    list_sessions,
    read_session,
    update_session,
    write_session,
)


@dataclass(frozen=True, slots=True)
class Prepared:
    git_plan: GitPlan
    session: SessionRecord
    notes: tuple[str, ...] = ()  # about the agent's branches of an earlier session


@dataclass(frozen=True, slots=True)
class Report:
    """What a review found that was not there at start."""

    session: SessionRecord | None
    target: ReviewTarget
    findings: list[Finding]


def review_target(session: SessionRecord) -> ReviewTarget:
    common = Path(session.common_dir) if session.common_dir else None
    return ReviewTarget(Path(session.worktree), common, common)


def check_repository(paths: CloisterPaths, home: Path, repository: HumanRepository) -> None:
    """Refuse a repository whose object stores a cloister must not see: they are mounted
    (read-only) wherever they are, outside the work tree too (a worktree cloister of a
    repository in ``~/.config``, a checkout whose ``.git`` file points there)."""
    forbidden = cloisters.Forbidden.for_host(paths, home)
    forbidden.check(repository.common, "the repository")
    for store in repository.alternates():
        forbidden.check(store, "the repository's alternate object store")


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
    repository = HumanRepository.of(workspace.project.root) if workspace.project.git else None
    own: gitdirs.OwnGitDir | None = None
    if repository is not None:  # first: a new worktree's files are written with it
        check_repository(paths, home, repository)
        own = gitdirs.create(paths, name, repository, worktree=directory, branch=workspace.branch)
    try:
        nested = nested_git_entries(directory) if repository is not None else []
        common = repository.common if repository is not None else None
        baseline = tuple(
            sorted({item.fingerprint for item in review(ReviewTarget(directory, common, common))})
        )
        git_plan = gitmounts.plan(
            directory, repository=repository, home=home, nested=nested, protect=protect
        )
        if repository is not None and own is not None:
            pointer = gitdirs.write_pointer(paths, name)
            git_plan.own_mounts = gitmounts.own_git_mounts(
                directory, own.path, repository, own.alternates, pointer
            )
    except BaseException:
        gitdirs.remove(paths, name)
        raise
    session = SessionRecord(
        cloister=name,
        project=workspace.project.name,
        worktree=str(directory),
        checkout=str(repository.checkout) if repository else None,
        common_dir=str(repository.common) if repository else None,
        branch=workspace.branch,
        started_at=datetime.now(UTC),
        bases=own.bases if own else {},
        host_heads=own.host_heads if own else {},
        protected=git_plan.protected,
        findings_at_start=baseline,
        placeholders=tuple(str(path) for path in git_plan.placeholders),
        nested=tuple(str(path.parent.relative_to(directory)) for path in nested),
    )
    write_session(paths, session)
    return Prepared(git_plan, session, own.notes if own else ())


def report(session: SessionRecord | None, target: ReviewTarget) -> Report:
    found = review(target)
    if session is not None:
        found = new_findings(found, session.findings_at_start)
    return Report(session, target, found)


def move_new_repositories(paths: CloisterPaths, found: Report) -> list[str]:
    """Move the ``.git`` of every repository the agent made in the work tree to the
    quarantine (not while the cloister runs: it could rearrange the way there). The
    human's git obeys a repository's own config when it enters one (a gitlink the
    human merges, a ``git status`` run inside)."""
    if found.session is None:
        return []
    made = [
        item
        for item in found.findings
        if item.kind == "nested-repository"
        and item.fix is not None
        and item.path.rstrip("/") not in found.session.nested
    ]
    if not made:
        return []
    return apply_fixes(
        made, paths.quarantine_dir / found.session.project, within=[found.target.worktree]
    )


def release(paths: CloisterPaths, session: SessionRecord) -> SessionRecord:
    """Record the stop and remove the placeholders the start made (if still empty).

    Then the record forgets them: one still there is no longer empty, so not Cloister's
    to remove (a stop killed before that leaves them to the next start, stop or gc)."""
    stopped = update_session(
        paths,
        session.cloister,
        lambda record: record.model_copy(
            update={"stopped_at": record.stopped_at or datetime.now(UTC)}
        ),
    )
    return forget_placeholders(paths, stopped or session)


def kept_read_only(records: Sequence[SessionRecord], live: set[str]) -> set[str]:
    """The work-tree paths the cloisters named in *live* keep read-only: those they made
    and those they found and mount. Two cloisters may share a work tree (``start`` and
    ``start -p other`` in one directory): removing a stand-in the other one mounts would
    take its read-only mount away with it (the kernel detaches it)."""
    return {
        path
        for record in records
        if record.cloister in live
        for path in (
            *record.placeholders,
            *(str(Path(record.worktree) / relative) for relative in record.protected),
        )
    }


def forget_placeholders(
    paths: CloisterPaths, session: SessionRecord, in_use: set[str] | None = None
) -> SessionRecord:
    """Remove *session*'s placeholders that are still empty, and drop them from its
    record, but those another cloister keeps read-only (*in_use*; by default what the
    other open sessions list): they stay listed, for a later start, stop or gc."""
    if in_use is None:
        records = list_sessions(paths)
        others = {r.cloister for r in records if r.running and r.cloister != session.cloister}
        in_use = kept_read_only(records, others)
    shared = tuple(path for path in session.placeholders if path in in_use)
    gitmounts.remove_placeholders(
        (Path(path) for path in session.placeholders if path not in in_use),
        Path(session.worktree),
    )
    if not session.placeholders:
        return session
    forgot = update_session(
        paths,
        session.cloister,
        lambda record: (
            record.model_copy(update={"placeholders": shared})
            if record.started_at == session.started_at
            else record
        ),  # a new start's record by now: its placeholders are in use
    )
    return forgot or session


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


def fix(client: Engine, paths: CloisterPaths, before: Report) -> FixOutcome:
    """Apply every fix *before* offers and review again.

    Not while the agent runs: it could rearrange, between the review and the moves, the
    directories on the way to what is moved.
    """
    if before.session is not None:
        instance = stack.Instance.of(paths, os.getuid())
        container = cloisters.find(client, instance, before.session.cloister)
        if container is not None and container.status == "running":
            name = before.session.cloister
            raise CloisterError(
                f"cloister {name!r} is running: stop it first (`cloister stop {name}`), so that"
                " the agent cannot rearrange what --fix moves"
            )
    project = before.session.project if before.session else before.target.worktree.name
    actions = apply_fixes(
        before.findings, paths.quarantine_dir / project, within=[before.target.worktree]
    )
    return FixOutcome(actions, report(before.session, before.target))
