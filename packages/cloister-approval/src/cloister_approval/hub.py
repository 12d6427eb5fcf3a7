"""The decision hub: held requests in, the human's decisions out.

A service caller (the proxy for a domain, the hostexec gateway for a command) calls
:meth:`ApprovalHub.request_domain` / :meth:`request_command` and waits; the item is
pending (:mod:`~cloister_approval.pending`) until a human decides through the API, it
expires, its cloister's token goes away, or its caller goes away (withdrawn). One
cloister holds at most ``proxy.max_held_per_cloister`` items (429 past it). Decisions
are written and undone by :mod:`~cloister_approval.decisions`; session rules and the
effective views are in :mod:`~cloister_approval.effective`. Every change is published
to the :class:`Broadcaster` for the UI.

The cloisters are the token files of ``<config>/tokens`` (read-only), read through
cloister-core's :class:`~cloister_core.watch.TokenDirectory` as the proxy and the
gateway read them: the files are the only source of truth. When a token goes, the
hub drops its cloister's pending items and its session file.

Everything runs on the event loop; file writes go to a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from cloister_approval.broadcast import Broadcaster, Event
from cloister_approval.decisions import DecisionLog, DecisionRecord
from cloister_approval.effective import effective_line, effective_rules
from cloister_approval.errors import HubError, TooManyHeldError
from cloister_approval.models import (
    CommandDecisionIn,
    DecisionOut,
    DomainDecisionIn,
    EffectiveRulesOut,
    PendingOut,
)
from cloister_approval.pending import HeldLimit, Make, Pending, PendingBook
from cloister_core.audit import AuditLog
from cloister_core.commands import canonical_command
from cloister_core.config.models import RuleEntry
from cloister_core.decisions import command_pattern, remove_session_decisions
from cloister_core.hosts import normalize_host
from cloister_core.hub import (
    CommandDecision,
    CommandRequest,
    DomainDecision,
    DomainRequest,
)
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable
from cloister_core.suffixes import PublicSuffixes
from cloister_core.watch import SessionBook, TokenDirectory


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _report(message: str) -> None:
    print(f"cloister-approval: {message}", file=sys.stderr, flush=True)


class ApprovalHub:
    """All pending items and decisions of one guardian stack."""

    def __init__(
        self,
        paths: CloisterPaths,
        *,
        domain_timeout: timedelta,
        command_timeout: timedelta,
        max_pending: int,
        recent_limit: int,
        broadcaster: Broadcaster,
        suffixes: PublicSuffixes,
        audit: AuditLog | None = None,
        clock: Callable[[], datetime] = _utc_now,
        report: Callable[[str], None] = _report,
    ) -> None:
        self._paths = paths
        self._domain_timeout = domain_timeout
        self._command_timeout = command_timeout
        self._events = broadcaster
        self._suffixes = suffixes
        self._audit = audit
        self._clock = clock
        self._pending = PendingBook(
            max_pending=max_pending,
            clock=clock,
            on_expired=self._expired,
            on_withdrawn=self._withdrawn,
        )
        self._held_limit = HeldLimit(paths, report)
        self._decisions = DecisionLog(paths, recent_limit=recent_limit)
        self._sessions = SessionBook(paths, report)
        self._tokens = TokenDirectory(paths.tokens_dir, report)

    # -- helpers -------------------------------------------------------------------------

    def _log(self, event: str, **fields: Any) -> None:
        if self._audit is not None:
            self._audit.write(event, **fields)

    def _publish(self, name: str, **data: Any) -> None:
        # The count as of this event, so a page applying events in order is exact.
        self._events.publish(Event(name, {**data, "pending": len(self._pending)}))

    def _expired(self, item: Pending[Any]) -> None:
        self._publish(f"{item.kind}-removed", id=item.id, outcome="expired")
        self._log(f"approval.{item.kind}.expired", id=item.id, cloister=item.cloister)

    def _withdrawn(self, item: Pending[Any]) -> None:
        # Its requester hung up (the agent's connection to the proxy closed).
        self._publish(f"{item.kind}-removed", id=item.id, outcome="withdrawn")
        self._log(f"approval.{item.kind}.withdrawn", id=item.id, cloister=item.cloister)

    def _open(
        self, key: tuple[str, ...], make: Make, timeout: timedelta, cloister: str, kind: str
    ) -> tuple[Pending[Any], bool]:
        """:meth:`PendingBook.open` with the cloister's fair share; a refusal is audited."""
        limit = self._held_limit()
        try:
            return self._pending.open(key, make, timeout, cloister=cloister, per_cloister=limit)
        except TooManyHeldError:
            self._log(f"approval.{kind}.refused", cloister=cloister, reason="too-many-held",
                      held=self._pending.held(cloister), limit=limit)  # fmt: skip
            raise

    # -- tokens --------------------------------------------------------------------------

    def refresh_tokens(self) -> None:
        """Re-read the token directory if it changed; forget the cloisters whose token went.

        A cloister whose token file was replaced (stopped and started again) starts a
        new session: its old session file and held items go too.
        """
        before = self.cloisters()
        for record in self._tokens.refresh():
            self._forget(record.cloister)
        if self.cloisters() != before:
            self._publish("tokens")

    def cloisters(self) -> list[str]:
        """The cloisters that have a token, by name."""
        return sorted({record.cloister for record in self._tokens.registry})

    def _forget(self, cloister: str) -> None:
        self._sessions.forget(cloister)
        with contextlib.suppress(OSError):  # the CLI removes it too, at stop and start
            remove_session_decisions(self._paths, cloister)
        reason = f"cloister {cloister!r} was stopped (its token is gone)"
        for item in self._pending.of_cloister(cloister):
            self._pending.close(item, "dropped: its cloister was stopped")
            if item.kind == "domain":
                item.settle(DomainDecision(action="deny", reason=reason))
            else:
                item.settle(CommandDecision(action="deny", reason=reason))
            self._publish(f"{item.kind}-removed", id=item.id, outcome="dropped")
            self._log(f"approval.{item.kind}.dropped", id=item.id, cloister=cloister)

    # -- domains -------------------------------------------------------------------------

    async def request_domain(self, request: DomainRequest) -> DomainDecision:
        """Hold *request* until a human decides or it expires."""
        self.refresh_tokens()
        host = normalize_host(request.host)
        key = ("domain", request.cloister, host.name)
        wildcard = self._suffixes.wildcard_for(host)

        def make(item_id: str, now: datetime, expires: datetime) -> Pending[Any]:
            return Pending[DomainDecision](
                id=item_id,
                kind="domain",
                cloister=request.cloister,
                project=request.project,
                created_at=now,
                expires_at=expires,
                future=asyncio.get_running_loop().create_future(),
                key=key,
                host=host.name,
                port=request.port,
                wildcard=str(wildcard) if wildcard else None,
            )

        item, created = self._open(key, make, self._domain_timeout, request.cloister, "domain")
        if created:
            self._log("approval.domain.requested", id=item.id, cloister=item.cloister,
                      project=item.project, host=item.host, port=item.port)  # fmt: skip
            self._publish("domain-added", item=item.to_out().model_dump(mode="json"))
        seconds = self._pending.remaining(item, request.wait_seconds)
        return await self._pending.wait(item, seconds, DomainDecision(action="timeout"))

    async def decide_domain(
        self, item_id: str, decision: DomainDecisionIn, *, decided_by: str
    ) -> DecisionOut:
        self.refresh_tokens()
        item = self._pending.lookup(item_id, "domain")
        if decision.wildcard and item.wildcard is None:
            raise HubError(f"{item.host} has no wildcard form (an IP or a public suffix)")
        entry = (
            RuleEntry(pattern=item.wildcard) if decision.wildcard else RuleEntry(domain=item.host)
        )
        self._pending.close(item, "decided")  # before any await: a second decision gets a 409
        saved = await self._decisions.save_domain(
            decision.scope, decision.action, entry, project=item.project, cloister=item.cloister
        )
        scope = saved.scope
        item.settle(DomainDecision(action=decision.action, scope=scope, entry=entry))
        verb = "Allowed" if decision.action == "allow" else "Blocked"
        where = {
            "once": "once",
            "session": f"for the session of {item.cloister}",
            "project": f"for project {item.project}",
            "global": "for every project",
        }[scope]
        effective = await asyncio.to_thread(
            effective_line,
            self._paths,
            self._sessions,
            project=item.project,
            cloister=item.cloister,
            host=item.host,
            port=item.port,
        )
        out = DecisionOut(
            id=secrets.token_hex(8),
            kind="domain",
            decided_at=self._clock(),
            cloister=item.cloister,
            project=item.project,
            subject=normalize_host(item.host).authority(item.port),
            action=decision.action,
            scope=scope,
            rule=entry.target,
            file=str(saved.path) if saved.path else None,
            summary=f"{verb} {entry.target} {where}",
            effective=effective,
            warning=saved.warning,
            undoable=saved.written is not None,
            undone=False,
            decided_by=decided_by,
        )
        self._decisions.remember(DecisionRecord(out, saved.written))
        self._log("approval.domain.decided", id=item.id, cloister=item.cloister,
                  project=item.project, host=item.host, action=decision.action, scope=scope,
                  rule=entry.target, file=out.file, warning=saved.warning,
                  decided_by=decided_by)  # fmt: skip
        self._publish("domain-removed", id=item.id, outcome="decided")
        self._publish("decision", decision=out.model_dump(mode="json"))
        return out

    # -- commands --------------------------------------------------------------------

    async def request_command(self, request: CommandRequest) -> CommandDecision:
        self.refresh_tokens()
        key = ("command", request.cloister, request.cwd, *request.argv)
        # Shown to the human and logged: rendered here from argv, never taken from the
        # caller, so it cannot disagree with what will run.
        command = canonical_command(request.argv)

        def make(item_id: str, now: datetime, expires: datetime) -> Pending[Any]:
            return Pending[CommandDecision](
                id=item_id,
                kind="command",
                cloister=request.cloister,
                project=request.project,
                created_at=now,
                expires_at=expires,
                future=asyncio.get_running_loop().create_future(),
                key=key,
                argv=request.argv,
                command=command,
                cwd=request.cwd,
            )

        item, created = self._open(key, make, self._command_timeout, request.cloister, "command")
        if created:
            self._log("approval.command.requested", id=item.id, cloister=item.cloister,
                      project=item.project, argv=list(item.argv), cwd=item.cwd)  # fmt: skip
            self._publish("command-added", item=item.to_out().model_dump(mode="json"))
        seconds = self._pending.remaining(item, request.wait_seconds)
        return await self._pending.wait(item, seconds, CommandDecision(action="timeout"))

    async def decide_command(
        self, item_id: str, decision: CommandDecisionIn, *, decided_by: str
    ) -> DecisionOut:
        self.refresh_tokens()
        item = self._pending.lookup(item_id, "command")
        self._pending.close(item, "decided")
        saved = await self._decisions.save_command(
            decision.scope, item.command, project=item.project, cloister=item.cloister
        )
        item.settle(CommandDecision(action=decision.action, reason=decision.reason))
        verb = "Approved" if decision.action == "approve" else "Denied"
        where = {
            "once": "once",
            "session": f"for the session of {item.cloister}",
            "project": f"for project {item.project}",
            "global": "for every project",
        }[saved.scope]
        out = DecisionOut(
            id=secrets.token_hex(8),
            kind="command",
            decided_at=self._clock(),
            cloister=item.cloister,
            project=item.project,
            subject=item.command,
            action=decision.action,
            scope=saved.scope,
            rule=command_pattern(item.command) if saved.written else None,
            file=str(saved.path) if saved.path else None,
            summary=printable(
                f"{verb} {item.command} {where}, in {item.cwd}"
                + (f" ({decision.reason})" if decision.reason else "")
            ),
            warning=saved.warning,
            undoable=saved.written is not None,
            undone=False,
            decided_by=decided_by,
        )
        self._decisions.remember(DecisionRecord(out, saved.written))
        self._log("approval.command.decided", id=item.id, cloister=item.cloister,
                  project=item.project, action=decision.action, scope=saved.scope,
                  reason=decision.reason, command=item.command, file=out.file,
                  warning=saved.warning, decided_by=decided_by)  # fmt: skip
        self._publish("command-removed", id=item.id, outcome="decided")
        self._publish("decision", decision=out.model_dump(mode="json"))
        return out

    # -- decisions ---------------------------------------------------------------------

    def recent(self, cloister: str | None = None) -> list[DecisionOut]:
        """The kept decisions (the newest ``recent_limit``), newest first; of *cloister*."""
        return [out for out in self._decisions.recent() if cloister in (None, out.cloister)]

    async def undo(self, decision_id: str, *, undone_by: str) -> DecisionOut:
        """Remove exactly the entry the decision wrote."""
        out = await self._decisions.undo(decision_id, undone_by=undone_by)
        self._log("approval.decision.undone", id=decision_id, cloister=out.cloister,
                  project=out.project, kind=out.kind, subject=out.subject, action=out.action,
                  scope=out.scope, rule=out.rule, file=out.file,
                  undone_by=undone_by)  # fmt: skip
        self._publish("decision", decision=out.model_dump(mode="json"))
        return out

    # -- views -------------------------------------------------------------------------

    def pending(self) -> PendingOut:
        self.refresh_tokens()
        items = self._pending.items()
        return PendingOut(
            domains=[i.to_out() for i in items if i.kind == "domain"],  # type: ignore[misc]
            commands=[i.to_out() for i in items if i.kind == "command"],  # type: ignore[misc]
        )

    def pending_count(self) -> int:
        return len(self._pending)

    def effective_rules(self, project: str) -> EffectiveRulesOut:
        """Merged rules of *project*, each with its file (sessions: their cloisters' files)."""
        self.refresh_tokens()
        cloisters = {r.cloister for r in self._tokens.registry if r.project == project}
        cloisters |= self._decisions.cloisters_of(project)
        return effective_rules(self._paths, self._sessions, project, cloisters)

    @contextlib.contextmanager
    def events(self) -> Iterator[asyncio.Queue[Event]]:
        with self._events.subscribe() as queue:
            yield queue
