"""The proxy's live state: tokens, per-project policies and session rules, kept fresh.

Files are the source of truth (DESIGN.md): token files in ``<config>/tokens/`` and the
config and decision YAML files. They are polled (every ``reload_interval``, and at
once on SIGHUP) by comparing ``stat`` signatures, because inotify does not cross
into containers on every platform (Docker Desktop's file sharing drops it) and a
poll of a few dozen ``stat`` calls costs nothing.

A changed file is re-read and compiled off to the side, then swapped in whole, so
requests (and tunnels) in flight are never disturbed. A file that no longer parses
keeps the last good policy in force and is reported (file and line) once per change.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cloister_core.config.models import ProxyRules, RuleEntry
from cloister_core.errors import CloisterError, ConfigError
from cloister_core.paths import CloisterPaths
from cloister_core.policy import ProjectPolicy, load_project_policy
from cloister_core.rules import Policy, RuleAction, RuleSource, build_policy
from cloister_core.tokens import TokenRecord, TokenRegistry
from cloister_proxy.addresses import AddressGuard, IPAddress

Signature = tuple[int, int, int] | None


def file_signature(path: Path) -> Signature:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def directory_signature(path: Path) -> tuple[tuple[str, Signature], ...]:
    try:
        names = sorted(entry.name for entry in os.scandir(path) if not entry.name.startswith("."))
    except OSError:
        return ()
    return tuple((name, file_signature(path / name)) for name in names)


@dataclass(slots=True)
class _Loaded:
    policy: ProjectPolicy
    signature: tuple[Signature, ...]


class PolicyBook:
    """Compiled :class:`ProjectPolicy` per project, loaded on first use."""

    def __init__(self, paths: CloisterPaths, report: Callable[[str], None]) -> None:
        self._paths = paths
        self._report = report
        self._loaded: dict[str, _Loaded] = {}
        self._errors: dict[str, str] = {}

    def _signature(self, project: str) -> tuple[Signature, ...]:
        policy_files = (
            self._paths.config_file,
            self._paths.project_config(project),
            self._paths.global_decisions,
            self._paths.project_decisions(project),
        )
        return tuple(file_signature(path) for path in policy_files)

    def _load(self, project: str) -> _Loaded | None:
        signature = self._signature(project)
        try:
            loaded = _Loaded(load_project_policy(self._paths, project), signature)
        except (ConfigError, CloisterError, OSError) as error:
            message = str(error)
            if self._errors.get(project) != message:
                self._errors[project] = message
                self._report(f"configuration error, keeping the last good policy: {message}")
            return None
        self._errors.pop(project, None)
        self._loaded[project] = loaded
        return loaded

    def get(self, project: str) -> ProjectPolicy | None:
        """The project's policy; None only if its files never loaded successfully."""
        loaded = self._loaded.get(project)
        if loaded is None:
            loaded = self._load(project)
        return loaded.policy if loaded is not None else None

    def error(self, project: str) -> str | None:
        return self._errors.get(project)

    def refresh(self, *, force: bool = False) -> list[str]:
        """Reload the projects whose files changed; returns the projects reloaded."""
        reloaded = []
        for project, loaded in list(self._loaded.items()):
            changed = force or self._signature(project) != loaded.signature
            if changed and self._load(project) is not None:
                reloaded.append(project)
        return reloaded

    def forget(self, project: str) -> None:
        self._loaded.pop(project, None)


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
        self.tokens = TokenRegistry()
        self._tokens_signature: tuple[tuple[str, Signature], ...] | None = None
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

    def reload_tokens(self, *, force: bool = False) -> list[TokenRecord]:
        """Re-read the token directory if it changed; returns the tokens that went away."""
        signature = directory_signature(self.paths.tokens_dir)
        if not force and signature == self._tokens_signature:
            return []
        registry, errors = TokenRegistry.load(self.paths.tokens_dir)
        for error in errors:
            self._report(f"ignoring token file: {error}")
        gone = [record for record in self.tokens if record.secret not in registry]
        for record in gone:
            self.sessions.drop(record)
        self.tokens = registry
        self._tokens_signature = signature
        return gone

    def refresh(self, *, force: bool = False) -> list[TokenRecord]:
        """One reload pass; returns revoked tokens (their tunnels should close)."""
        gone = self.reload_tokens(force=force)
        self.policies.refresh(force=force)
        return gone
