"""The decision hub: held requests, the human's decisions, undo, and the token registry.

A service caller (the proxy for a domain, the hostexec gateway for a command) calls
:meth:`ApprovalHub.request_domain` / :meth:`request_command` and waits; the item is
pending until a human decides through the API or it expires. Concurrent requests of
one cloister for one host (or one command in one directory) share a single pending
item. Every change is published to the :class:`Broadcaster` for the UI.

Persisting is the decision store's job (atomic, locked, comment-preserving). When a
project or global decision cannot be written, it is not dropped: it is applied for
the session instead and the record says why. Undo removes exactly the entry a
decision wrote, and only if it wrote one.

Everything runs on the event loop; file writes go to a worker thread so a slow disk
or a held lock never stalls the UI.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from cloister_approval.broadcast import Broadcaster, Event
from cloister_approval.models import (
    CommandDecisionIn,
    DecisionKind,
    DecisionOut,
    DomainDecisionIn,
    EffectiveRulesOut,
    PendingCommandOut,
    PendingDomainOut,
    PendingOut,
    RuleOut,
    TokenIn,
    TokenOut,
)
from cloister_core.audit import AuditLog
from cloister_core.commands import canonical_command
from cloister_core.config.models import ProxyRules, RuleEntry
from cloister_core.decisions import DecisionScope, DecisionStore
from cloister_core.errors import CloisterError
from cloister_core.hosts import normalize_host
from cloister_core.hub import (
    CommandDecision,
    CommandRequest,
    DomainDecision,
    DomainRequest,
    DomainScope,
)
from cloister_core.paths import CloisterPaths
from cloister_core.policy import load_project_policy
from cloister_core.rules import RuleAction, RuleSource, build_policy
from cloister_core.suffixes import PublicSuffixes
from cloister_core.tokens import TokenRecord, TokenRegistry

DecisionT = TypeVar("DecisionT", DomainDecision, CommandDecision)


class HubError(Exception):
    """A request the hub refuses; ``status`` is the HTTP status to answer with."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFoundError(HubError):
    status = 404


class ConflictError(HubError):
    status = 409


class BusyError(HubError):
    status = 503


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(eq=False, slots=True)
class Pending(Generic[DecisionT]):
    """One held item and the future its waiters share."""

    id: str
    kind: DecisionKind
    cloister: str
    project: str
    created_at: datetime
    expires_at: datetime
    future: asyncio.Future[DecisionT]
    key: tuple[str, ...]
    waiting: int = 0
    host: str = ""
    port: int = 0
    wildcard: str | None = None
    argv: tuple[str, ...] = ()
    command: str = ""
    cwd: str = ""

    def to_out(self) -> PendingDomainOut | PendingCommandOut:
        if self.kind == "domain":
            return PendingDomainOut(
                id=self.id,
                cloister=self.cloister,
                project=self.project,
                host=self.host,
                port=self.port,
                created_at=self.created_at,
                expires_at=self.expires_at,
                wildcard=self.wildcard,
                waiting=self.waiting,
            )
        return PendingCommandOut(
            id=self.id,
            cloister=self.cloister,
            project=self.project,
            argv=self.argv,
            command=self.command,
            cwd=self.cwd,
            created_at=self.created_at,
            expires_at=self.expires_at,
        )


@dataclass(slots=True)
class DecisionRecord:
    """A decision and what it changed (kept for the UI and for undo)."""

    out: DecisionOut
    action: RuleAction | None = None
    entry: RuleEntry | None = None
    scope: str | None = None
    written: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


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
    ) -> None:
        self._paths = paths
        self._store = DecisionStore(paths)
        self._domain_timeout = domain_timeout
        self._command_timeout = command_timeout
        self._max_pending = max_pending
        self._events = broadcaster
        self._suffixes = suffixes
        self._audit = audit
        self._clock = clock
        self._pending: dict[str, Pending[Any]] = {}
        self._by_key: dict[tuple[str, ...], str] = {}
        self._finished: dict[str, str] = {}  # id → "decided" | "expired", for clear 409s
        self._recent: deque[DecisionRecord] = deque(maxlen=recent_limit)
        self._sessions: dict[str, list[tuple[RuleAction, RuleEntry]]] = {}
        self.tokens = TokenRegistry()

    # -- helpers -------------------------------------------------------------------------

    def _log(self, event: str, **fields: Any) -> None:
        if self._audit is not None:
            self._audit.write(event, **fields)

    def _publish(self, name: str, **data: Any) -> None:
        # The count as of this event, so a page applying events in order is exact.
        self._events.publish(Event(name, {**data, "pending": len(self._pending)}))

    def _remember_finished(self, item_id: str, how: str) -> None:
        self._finished[item_id] = how
        while len(self._finished) > 4 * self._max_pending:
            self._finished.pop(next(iter(self._finished)))

    def _lookup(self, item_id: str, kind: DecisionKind) -> Pending[Any]:
        item = self._pending.get(item_id)
        if item is not None and item.kind == kind:
            return item
        how = self._finished.get(item_id)
        if how is not None:
            raise ConflictError(f"{kind} request {item_id!r} was already {how}")
        raise NotFoundError(f"no pending {kind} request {item_id!r}")

    def _open(
        self,
        key: tuple[str, ...],
        make: Callable[[str, datetime, datetime], Pending[Any]],
        timeout: timedelta,
    ) -> tuple[Pending[Any], bool]:
        existing = self._by_key.get(key)
        if existing is not None:
            return self._pending[existing], False
        if len(self._pending) >= self._max_pending:
            raise BusyError(f"{len(self._pending)} requests are already waiting for a human")
        now = self._clock()
        item = make(secrets.token_hex(8), now, now + timeout)
        self._pending[item.id] = item
        self._by_key[key] = item.id
        return item, True

    def _close(self, item: Pending[Any], how: str) -> None:
        self._pending.pop(item.id, None)
        if self._by_key.get(item.key) == item.id:
            del self._by_key[item.key]
        self._remember_finished(item.id, how)

    async def _wait(
        self, item: Pending[DecisionT], seconds: float, expired: DecisionT
    ) -> DecisionT:
        item.waiting += 1
        try:
            async with asyncio.timeout(seconds):
                return await asyncio.shield(item.future)
        except TimeoutError:
            if item.id in self._pending:
                self._close(item, "expired")
                self._publish(f"{item.kind}-removed", id=item.id, outcome="expired")
                self._log(f"approval.{item.kind}.expired", id=item.id, cloister=item.cloister)
                if not item.future.done():
                    item.future.set_result(expired)
            return item.future.result() if item.future.done() else expired
        finally:
            item.waiting -= 1

    def _remaining(self, item: Pending[Any], requested: float | None) -> float:
        left = (item.expires_at - self._clock()).total_seconds()
        return max(0.0, min(left, requested) if requested else left)

    # -- domains -------------------------------------------------------------------------

    async def request_domain(self, request: DomainRequest) -> DomainDecision:
        """Hold *request* until a human decides or it expires."""
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

        item, created = self._open(key, make, self._domain_timeout)
        if created:
            self._log("approval.domain.requested", id=item.id, cloister=item.cloister,
                      project=item.project, host=item.host, port=item.port)  # fmt: skip
            self._publish("domain-added", item=item.to_out().model_dump(mode="json"))
        return await self._wait(
            item, self._remaining(item, request.wait_seconds), DomainDecision(action="timeout")
        )

    async def decide_domain(self, item_id: str, decision: DomainDecisionIn) -> DecisionOut:
        item = self._lookup(item_id, "domain")
        if decision.wildcard and item.wildcard is None:
            raise HubError(f"{item.host} has no wildcard form (an IP or a public suffix)")
        entry = (
            RuleEntry(pattern=item.wildcard) if decision.wildcard else RuleEntry(domain=item.host)
        )
        self._close(item, "decided")  # before any await: a second decision gets a 409
        scope: DomainScope = decision.scope
        written, path, warning = False, None, None
        if scope in ("project", "global"):
            try:
                change = await asyncio.to_thread(
                    self._store.add,
                    "project" if scope == "project" else "global",
                    decision.action,
                    entry,
                    item.project,
                )
            except (OSError, CloisterError) as error:
                warning = f"could not save the decision ({error}); applied for this session only"
                scope = "session"
            else:
                written, path = change.changed, change.path
        if scope == "session":
            rules = self._sessions.setdefault(item.cloister, [])
            if (decision.action, entry) not in rules:
                rules.append((decision.action, entry))
        outcome = DomainDecision(action=decision.action, scope=scope, entry=entry)
        if not item.future.done():
            item.future.set_result(outcome)
        verb = "Allowed" if decision.action == "allow" else "Blocked"
        where = {
            "once": "once",
            "session": f"for the session of {item.cloister}",
            "project": f"for project {item.project}",
            "global": "for every project",
        }[scope]
        authority = normalize_host(item.host).authority(item.port)
        effective = await asyncio.to_thread(
            self._effective, item.project, item.cloister, item.host, item.port
        )
        out = DecisionOut(
            id=secrets.token_hex(8),
            kind="domain",
            decided_at=self._clock(),
            cloister=item.cloister,
            project=item.project,
            subject=authority,
            action=decision.action,
            scope=scope,
            rule=entry.target,
            file=str(path) if path else None,
            summary=f"{verb} {entry.target} {where}",
            effective=effective,
            warning=warning,
            undoable=written,
            undone=False,
        )
        self._recent.appendleft(DecisionRecord(out, decision.action, entry, scope, written))
        self._log("approval.domain.decided", id=item.id, cloister=item.cloister,
                  project=item.project, host=item.host, action=decision.action, scope=scope,
                  rule=entry.target, file=out.file, warning=warning)  # fmt: skip
        self._publish("domain-removed", id=item.id, outcome="decided")
        self._publish("decision", decision=out.model_dump(mode="json"))
        return out

    def _effective(self, project: str, cloister: str, host: str, port: int) -> str:
        """One line: what the merged policy (with this cloister's session) now says."""
        try:
            policy = load_project_policy(self._paths, project)
        except CloisterError as error:
            return f"effective state unknown: {error}"
        session = build_policy(
            [
                (
                    RuleSource("session"),
                    ProxyRules(
                        allow=tuple(e for a, e in self._sessions.get(cloister, ()) if a == "allow"),
                        deny=tuple(e for a, e in self._sessions.get(cloister, ()) if a == "deny"),
                    ),
                )
            ]
        )
        verdict = policy.domains.decide(host, port, session)
        where = f" by {verdict.rule.text} in {verdict.rule.source}" if verdict.rule else ""
        state = {
            "allowed": "allowed",
            "denied": "denied",
            "port-not-allowed": "not allowed on this port",
            "unlisted": "on no list (the next request will be held again)",
        }[verdict.reason]
        return f"{normalize_host(host).authority(port)} is now {state}{where}"

    # -- commands --------------------------------------------------------------------

    async def request_command(self, request: CommandRequest) -> CommandDecision:
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

        item, created = self._open(key, make, self._command_timeout)
        if created:
            self._log("approval.command.requested", id=item.id, cloister=item.cloister,
                      project=item.project, argv=list(item.argv), cwd=item.cwd)  # fmt: skip
            self._publish("command-added", item=item.to_out().model_dump(mode="json"))
        return await self._wait(
            item, self._remaining(item, request.wait_seconds), CommandDecision(action="timeout")
        )

    async def decide_command(self, item_id: str, decision: CommandDecisionIn) -> DecisionOut:
        item = self._lookup(item_id, "command")
        self._close(item, "decided")
        outcome = CommandDecision(action=decision.action, reason=decision.reason)
        if not item.future.done():
            item.future.set_result(outcome)
        verb = "Approved" if decision.action == "approve" else "Denied"
        out = DecisionOut(
            id=secrets.token_hex(8),
            kind="command",
            decided_at=self._clock(),
            cloister=item.cloister,
            project=item.project,
            subject=item.command,
            action=decision.action,
            scope=None,
            rule=None,
            file=None,
            summary=f"{verb} `{item.command}` in {item.cwd}"
            + (f" ({decision.reason})" if decision.reason else ""),
            warning=None,
            undoable=False,
            undone=False,
        )
        self._recent.appendleft(DecisionRecord(out))
        self._log("approval.command.decided", id=item.id, cloister=item.cloister,
                  action=decision.action, reason=decision.reason, command=item.command)  # fmt: skip
        self._publish("command-removed", id=item.id, outcome="decided")
        self._publish("decision", decision=out.model_dump(mode="json"))
        return out

    # -- decisions ---------------------------------------------------------------------

    def recent(self) -> list[DecisionOut]:
        return [record.out for record in self._recent]

    async def undo(self, decision_id: str) -> DecisionOut:
        """Remove exactly the entry the decision wrote."""
        record = next((r for r in self._recent if r.out.id == decision_id), None)
        if record is None:
            raise NotFoundError(f"no recent decision {decision_id!r}")
        if record.out.undone:
            raise ConflictError(f"decision {decision_id!r} was already undone")
        if not record.out.undoable or record.entry is None or record.action is None:
            raise ConflictError(
                f"decision {decision_id!r} wrote nothing to a file, so there is nothing to undo"
            )
        scope: DecisionScope = "project" if record.scope == "project" else "global"
        try:
            await asyncio.to_thread(
                self._store.remove, scope, record.action, record.entry, record.out.project
            )
        except (OSError, CloisterError) as error:
            raise HubError(f"could not undo: {error}") from None
        record.out = record.out.model_copy(
            update={"undone": True, "undoable": False, "summary": f"Undone: {record.out.summary}"}
        )
        self._log("approval.decision.undone", id=decision_id, rule=record.out.rule,
                  file=record.out.file)  # fmt: skip
        self._publish("decision", decision=record.out.model_dump(mode="json"))
        return record.out

    # -- views -------------------------------------------------------------------------

    def pending(self) -> PendingOut:
        items = sorted(self._pending.values(), key=lambda item: item.created_at)
        return PendingOut(
            domains=[i.to_out() for i in items if i.kind == "domain"],  # type: ignore[misc]
            commands=[i.to_out() for i in items if i.kind == "command"],  # type: ignore[misc]
        )

    def pending_count(self) -> int:
        return len(self._pending)

    def effective_rules(self, project: str) -> EffectiveRulesOut:
        """Merged rules of *project*, each with its file (session rules: in memory)."""
        policy = load_project_policy(self._paths, project)
        rules = [
            RuleOut(
                action=rule.action,
                rule=rule.text,
                ports=sorted(rule.ports) if rule.ports is not None else None,
                scope=rule.source.scope,
                file=str(rule.source.file) if rule.source.file else None,
            )
            for rule in policy.domains.rules()
        ]
        cloisters = {record.cloister for record in self.tokens if record.project == project}
        cloisters |= {
            record.out.cloister for record in self._recent if record.out.project == project
        }
        for cloister in sorted(cloisters):
            for action, entry in self._sessions.get(cloister, ()):
                rules.append(
                    RuleOut(
                        action=action,
                        rule=entry.target,
                        ports=None,
                        scope=f"session ({cloister})",
                        file=None,
                    )
                )
        proxy = policy.config.proxy
        return EffectiveRulesOut(
            project=project,
            rules=rules,
            allowed_ports=sorted(proxy.allowed_ports),
            unlisted_domain_behavior=proxy.unlisted_domain_behavior,
        )

    # -- tokens --------------------------------------------------------------------------

    def load_tokens(self) -> list[str]:
        """Read ``<config>/tokens``; returns the problems of files that were skipped."""
        registry, errors = TokenRegistry.load(self._paths.tokens_dir)
        self.tokens = registry
        return [str(error) for error in errors]

    def register(self, token: TokenIn) -> TokenOut:
        try:
            record = TokenRecord.model_validate({**token.model_dump(), "created_at": self._clock()})
        except ValueError as error:
            raise HubError(f"invalid token registration: {error}") from None
        self.tokens.revoke_cloister(record.cloister)
        self.tokens.add(record)
        self._publish("tokens")
        return _token_out(record)

    def revoke(self, cloister: str) -> None:
        if not self.tokens.revoke_cloister(cloister):
            raise NotFoundError(f"no registered cloister {cloister!r}")
        self._sessions.pop(cloister, None)
        self._publish("tokens")

    def token_list(self) -> list[TokenOut]:
        return sorted((_token_out(record) for record in self.tokens), key=lambda t: t.cloister)

    @contextlib.contextmanager
    def events(self) -> Iterator[asyncio.Queue[Event]]:
        with self._events.subscribe() as queue:
            yield queue


def _token_out(record: TokenRecord) -> TokenOut:
    return TokenOut(
        cloister=record.cloister,
        project=record.project,
        branch=record.branch,
        path=record.path,
        created_at=record.created_at,
    )
