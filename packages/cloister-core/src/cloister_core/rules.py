"""The domain policy: compiled allow/deny rules and the verdict for one destination.

Rules come from five scopes, merged: the global ``config.yaml``, the project's
``projects/<p>.yaml``, the global and project decision files, and the cloister's
session file (``decisions/sessions/<cloister>.yaml``, gone when it stops). Evaluation
order, across all scopes at once:

1. exact deny, 2. pattern deny, 3. exact allow, 4. pattern allow, 5. unlisted.

So a deny anywhere beats every allow. A verdict names the rule that decided and the
file it came from, for the audit log and the approval UI's "why".

Ports: an allow rule opens ``allowed_ports`` unless it lists its own ``ports``; a deny
rule without ``ports`` denies every port. A host that an allow rule matches on another
port gets ``port-not-allowed``.

Speed: rules are indexed by the name they are anchored to, so a decision costs one
dict lookup per label of the host, whatever the number of rules. Pure and
synchronous; the proxy builds one :class:`Policy` per project and reuses it until a
file changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from cloister_core.config.models import ProxyRules, RuleEntry
from cloister_core.hosts import Host, normalize_host, normalize_pattern

RuleAction = Literal["allow", "deny"]
RuleKind = Literal["exact", "one-level", "any-depth"]
Scope = Literal["global", "project", "global-decisions", "project-decisions", "session"]
VerdictAction = Literal["allow", "deny", "unlisted"]
VerdictReason = Literal["allowed", "denied", "port-not-allowed", "unlisted"]

SCOPES: tuple[Scope, ...] = (
    "global",
    "project",
    "global-decisions",
    "project-decisions",
    "session",
)


@dataclass(frozen=True, slots=True)
class RuleSource:
    """Where a rule was written: its scope and file (``None`` for rules built in code)."""

    scope: Scope
    file: Path | None = None

    def __str__(self) -> str:
        return str(self.file) if self.file is not None else f"{self.scope} (in memory)"


@dataclass(frozen=True, slots=True)
class DomainRule:
    """One compiled rule: what it matches, on which ports, and where it came from."""

    action: RuleAction
    kind: RuleKind
    # The exact host name, or the suffix a pattern is anchored to.
    anchor: str
    ports: frozenset[int] | None
    source: RuleSource

    @property
    def text(self) -> str:
        """The rule as a human writes it: ``api.x.com``, ``*.x.com``, ``**.x.com``."""
        prefix = {"exact": "", "one-level": "*.", "any-depth": "**."}[self.kind]
        return prefix + self.anchor

    def describe(self) -> str:
        ports = f" ports {sorted(self.ports)}" if self.ports is not None else ""
        return f"{self.action} {self.text}{ports} ({self.source})"

    @classmethod
    def from_entry(cls, entry: RuleEntry, action: RuleAction, source: RuleSource) -> DomainRule:
        ports = frozenset(entry.ports) if entry.ports is not None else None
        if entry.domain is not None:
            return cls(action, "exact", normalize_host(entry.domain).name, ports, source)
        pattern = normalize_pattern(str(entry.pattern))
        return cls(action, pattern.kind, pattern.suffix, ports, source)


class Verdict(NamedTuple):
    """The policy's answer for one host and port (a named tuple: built per request)."""

    action: VerdictAction
    reason: VerdictReason
    host: Host
    port: int
    rule: DomainRule | None = None

    @property
    def source(self) -> RuleSource | None:
        return self.rule.source if self.rule is not None else None


def rules_from(rules: ProxyRules, source: RuleSource) -> list[DomainRule]:
    """Compile the ``allow`` and ``deny`` lists of one file."""
    compiled = [DomainRule.from_entry(entry, "deny", source) for entry in rules.deny]
    compiled += [DomainRule.from_entry(entry, "allow", source) for entry in rules.allow]
    return compiled


# Precedence ranks: exact deny, pattern deny, exact allow, pattern allow.
_EXACT_DENY, _PATTERN_DENY, _EXACT_ALLOW, _PATTERN_ALLOW = range(4)
_NO_MATCH = 4


def _rank(rule: DomainRule, depth: int) -> int:
    """Rank of *rule* for a host *depth* labels below its anchor; _NO_MATCH if none."""
    if rule.kind == "exact":
        if depth:
            return _NO_MATCH
        return _EXACT_DENY if rule.action == "deny" else _EXACT_ALLOW
    if rule.kind == "one-level" and depth > 1:
        return _NO_MATCH
    return _PATTERN_DENY if rule.action == "deny" else _PATTERN_ALLOW


class Policy:
    """A compiled, immutable set of domain rules.

    Rules are kept in one table keyed by their anchor (the exact name, or the suffix
    of a pattern). A host is looked up once per suffix (``a.b.c``, ``b.c``, ``c``),
    and each rule found is ranked by precedence for the depth it was found at, so a
    decision is a handful of dict lookups whatever the number of rules.

    ``Policy(rules, allowed_ports)``; a session's rules are a second, small policy
    passed to :meth:`decide`, so the big shared one is compiled once per project.
    """

    __slots__ = ("_by_anchor", "_default_ports", "_size")

    def __init__(
        self,
        rules: Iterable[DomainRule] = (),
        allowed_ports: Iterable[int] = (80, 443),
    ) -> None:
        by_anchor: dict[str, list[DomainRule]] = {}
        size = 0
        for rule in rules:
            by_anchor.setdefault(rule.anchor, []).append(rule)
            size += 1
        # Within one anchor, denies first, so the first applicable rule is the best.
        self._by_anchor = {
            anchor: tuple(sorted(found, key=lambda rule: rule.action != "deny"))
            for anchor, found in by_anchor.items()
        }
        self._default_ports = frozenset(allowed_ports)
        self._size = size

    @property
    def allowed_ports(self) -> frozenset[int]:
        return self._default_ports

    def __len__(self) -> int:
        return self._size

    def rules(self) -> list[DomainRule]:
        """Every rule, denies first, for listings ("effective rules")."""
        every = [rule for found in self._by_anchor.values() for rule in found]
        return sorted(every, key=lambda rule: rule.action != "deny")

    def _scan(
        self,
        host: Host,
        port: int,
        ports: frozenset[int],
        best: tuple[int, DomainRule | None, DomainRule | None],
    ) -> tuple[int, DomainRule | None, DomainRule | None]:
        """Improve *best* = (rank, rule, any allow rule naming the host) with this policy."""
        best_rank, best_rule, named = best
        table = self._by_anchor
        for depth, suffix in enumerate(host.suffixes):
            found = table.get(suffix)
            if found is None:
                continue
            for rule in found:
                rank = _rank(rule, depth)
                if rank == _NO_MATCH:
                    continue
                if rule.ports is not None:
                    opens = port in rule.ports
                else:
                    opens = rule.action == "deny" or port in ports
                if not opens:
                    if named is None and rule.action == "allow":
                        named = rule
                    continue
                if rank < best_rank:
                    best_rank, best_rule = rank, rule
                    if rank == _EXACT_DENY:
                        return best_rank, best_rule, named
        return best_rank, best_rule, named

    def decide(self, host: Host | str, port: int, session: Policy | None = None) -> Verdict:
        """The verdict for *host* on *port*, with an optional session policy on top."""
        if isinstance(host, str):
            host = normalize_host(host)
        ports = self._default_ports
        best = self._scan(host, port, ports, (_NO_MATCH, None, None))
        if session is not None and best[0] != _EXACT_DENY:
            best = session._scan(host, port, ports, best)
        rank, rule, named = best
        if rule is not None:
            if rank <= _PATTERN_DENY:
                return Verdict("deny", "denied", host, port, rule)
            return Verdict("allow", "allowed", host, port, rule)
        if named is not None:
            return Verdict("deny", "port-not-allowed", host, port, named)
        return Verdict("unlisted", "unlisted", host, port, None)


def build_policy(
    layers: Sequence[tuple[RuleSource, ProxyRules]],
    allowed_ports: Iterable[int] = (80, 443),
) -> Policy:
    """Compile several scopes (in the order of :data:`SCOPES`) into one :class:`Policy`."""
    rules: list[DomainRule] = []
    for source, file_rules in layers:
        rules.extend(rules_from(file_rules, source))
    return Policy(rules, allowed_ports)
