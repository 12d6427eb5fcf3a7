"""The proxy's live state: tokens, per-project policies and session rules, kept fresh.

Tokens and policies are polled by cloister-core's :mod:`~cloister_core.watch` (every
``reload_interval``, and at once on SIGHUP); session rules live here, per token, in
memory. Requests and tunnels in flight are never disturbed by a reload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cloister_core.config.models import ProxyRules, RuleEntry
from cloister_core.paths import CloisterPaths
from cloister_core.policy import ProjectPolicy
from cloister_core.rules import Policy, RuleAction, RuleSource, build_policy
from cloister_core.tokens import TokenRecord
from cloister_core.watch import PolicyBook, TokenDirectory
from cloister_proxy.addresses import AddressGuard, IPAddress


@dataclass(slots=True)
class _Session:
    allow: list[RuleEntry] = field(default_factory=list)
    deny: list[RuleEntry] = field(default_factory=list)
    policy: Policy | None = None


class Sessions:
    """Session-scope rules, per token, in memory; gone when the token is revoked."""

    def __init__(self) -> None:
        self._by_token: dict[str, _Session] = {}

    def add(self, record: TokenRecord, action: RuleAction, entry: RuleEntry) -> None:
        session = self._by_token.setdefault(record.secret, _Session())
        target = session.allow if action == "allow" else session.deny
        if entry not in target:
            target.append(entry)
        rules = ProxyRules(allow=tuple(session.allow), deny=tuple(session.deny))
        session.policy = build_policy([(RuleSource("session"), rules)])

    def policy(self, record: TokenRecord) -> Policy | None:
        session = self._by_token.get(record.secret)
        return session.policy if session is not None else None

    def drop(self, record: TokenRecord) -> None:
        self._by_token.pop(record.secret, None)


class ProxyState:
    """Everything a request is judged against, and the reloading of it."""

    def __init__(
        self,
        paths: CloisterPaths,
        *,
        own_addresses: Iterable[IPAddress],
        report: Callable[[str], None],
    ) -> None:
        self.paths = paths
        self._report = report
        self._own_addresses = tuple(own_addresses)
        self.policies = PolicyBook(paths, report)
        self.sessions = Sessions()
        self._tokens = TokenDirectory(paths.tokens_dir, report)
        self._guards: dict[tuple[object, ...], AddressGuard] = {}

    def is_own_address(self, address: IPAddress) -> bool:
        return address in self._own_addresses

    def guard_for(self, policy: ProjectPolicy) -> AddressGuard:
        """The SSRF guard for a policy's ``allow_private_networks`` (cached)."""
        networks = policy.config.proxy.allow_private_networks
        key = tuple(networks)
        guard = self._guards.get(key)
        if guard is None:
            guard = AddressGuard(networks, self._own_addresses)
            self._guards[key] = guard
        return guard

    @property
    def tokens(self) -> TokenDirectory:
        return self._tokens

    def refresh(self, *, force: bool = False) -> list[TokenRecord]:
        """One reload pass; returns revoked tokens (their tunnels should close)."""
        gone = self._tokens.refresh(force=force)
        for record in gone:
            self.sessions.drop(record)
        self.policies.refresh(force=force)
        return gone
