"""The proxy's live state: tokens, per-project policies and session rules, kept fresh.

Tokens and policies are polled by cloister-core's :mod:`~cloister_core.watch` (every
``reload_interval``, and at once on SIGHUP); a cloister's session rules are its session
decision file, written by the approval hub and checked (one ``stat``) per request.
Requests and tunnels in flight are never disturbed by a reload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cloister_core.paths import CloisterPaths
from cloister_core.policy import ProjectPolicy
from cloister_core.rules import Policy
from cloister_core.tokens import TokenRecord
from cloister_core.watch import PolicyBook, SessionBook, TokenDirectory
from cloister_proxy.addresses import NO_NETWORKS, AddressGuard, IPAddress, IPNetwork, NetworkSet

OwnNetworkReader = Callable[..., NetworkSet]
"""Called as ``reader(ipv6=bool)`` at dial time: :class:`cloister_proxy.netinfo.OwnNetworks`."""


class ProxyState:
    """Everything a request is judged against, and the reloading of it."""

    def __init__(
        self,
        paths: CloisterPaths,
        *,
        own_addresses: Iterable[IPAddress],
        report: Callable[[str], None],
        guardian_networks: Iterable[IPNetwork] = (),
        own_networks: OwnNetworkReader | None = None,
    ) -> None:
        self.paths = paths
        self._report = report
        self._own_addresses = tuple(own_addresses)
        self._guardian = NetworkSet(guardian_networks)
        self._own_networks = own_networks
        self.policies = PolicyBook(paths, report)
        self._sessions = SessionBook(paths, report)
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
            guard = AddressGuard(networks, self._own_addresses, self._guardian)
            self._guards[key] = guard
        return guard

    def own_networks(self, *, ipv6: bool) -> NetworkSet:
        """The networks of the proxy's interfaces and loopback, as they are now."""
        if self._own_networks is None:
            return NO_NETWORKS
        return self._own_networks(ipv6=ipv6)

    def session_policy(self, record: TokenRecord) -> Policy | None:
        """The domain rules decided for this cloister's session (None: none)."""
        return self._sessions.get(record.cloister).domains

    @property
    def tokens(self) -> TokenDirectory:
        return self._tokens

    def refresh(self, *, force: bool = False) -> list[TokenRecord]:
        """One reload pass; returns revoked tokens (their tunnels should close)."""
        gone = self._tokens.refresh(force=force)
        for record in gone:
            self._sessions.forget(record.cloister)
        self.policies.refresh(force=force)
        return gone
