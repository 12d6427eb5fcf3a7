"""Keeping policies and tokens fresh while a service runs: poll, compare, reload.

Files are the source of truth (docs/architecture.md): token files in ``<config>/tokens/`` and the
config and decision YAML files. Services poll them (a few dozen ``stat`` calls) by
comparing signatures, because inotify does not cross into containers on every
platform (Docker Desktop's file sharing drops it).

A changed file is re-read and compiled off to the side, then swapped in whole, so work
in flight is never disturbed. A file that no longer parses keeps the last good policy
in force and is reported (file and line) once per change.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cloister_core.commands import CommandPolicy
from cloister_core.config import load_decision_file
from cloister_core.errors import CloisterError, ConfigError
from cloister_core.paths import CloisterPaths
from cloister_core.policy import ProjectPolicy, load_project_policy
from cloister_core.rules import Policy, RuleSource, build_policy
from cloister_core.tokens import TokenRecord, TokenRegistry

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


@dataclass(frozen=True, slots=True)
class Session:
    """A cloister's session decisions: its domain rules and its approved commands."""

    domains: Policy | None
    commands: CommandPolicy


EMPTY_SESSION = Session(None, CommandPolicy())


class SessionBook:
    """Each cloister's ``decisions/sessions/<cloister>.yaml``, re-read when it changes.

    The approval hub writes it; a lookup costs one ``stat``. A file that does not parse
    keeps the last good session (reported once).
    """

    def __init__(self, paths: CloisterPaths, report: Callable[[str], None]) -> None:
        self._paths = paths
        self._report = report
        self._loaded: dict[str, tuple[Signature, Session]] = {}
        self._errors: dict[str, str] = {}

    def get(self, cloister: str) -> Session:
        path = self._paths.session_decisions(cloister)
        signature = file_signature(path)
        loaded = self._loaded.get(cloister)
        if loaded is not None and loaded[0] == signature:
            return loaded[1]
        if signature is None:
            self._loaded.pop(cloister, None)
            return EMPTY_SESSION
        try:
            rules = load_decision_file(path)
        except (ConfigError, CloisterError, OSError) as error:
            if self._errors.get(cloister) != str(error):
                self._errors[cloister] = str(error)
                self._report(f"session decisions unreadable, keeping the last good: {error}")
            return loaded[1] if loaded is not None else EMPTY_SESSION
        self._errors.pop(cloister, None)
        domains = (
            build_policy([(RuleSource("session", path), rules)])
            if rules.allow or rules.deny
            else None
        )
        session = Session(domains, CommandPolicy.from_rules([(path, rules.hostexec)]))
        self._loaded[cloister] = (signature, session)
        return session

    def forget(self, cloister: str) -> None:
        self._loaded.pop(cloister, None)


class TokenDirectory:
    """The token registry of ``<config>/tokens``, re-read when the directory changes."""

    def __init__(self, tokens_dir: Path, report: Callable[[str], None]) -> None:
        self._dir = tokens_dir
        self._report = report
        self._signature: tuple[tuple[str, Signature], ...] | None = None
        self._files: dict[str, Signature] = {}
        self._directory_mtime: int | None = None
        self._gone: list[TokenRecord] = []
        self.registry = TokenRegistry()

    def lookup(self, token: str) -> TokenRecord | None:
        """The record of *token*, if its file still exists, unchanged.

        One ``stat`` per request makes revocation immediate: the moment ``cloister stop``
        has deleted the file (or ``start`` replaced it), the token stops working, without
        waiting for a poll. An
        unknown token costs one ``stat`` of the directory, and a re-read if it changed,
        so a cloister's first request right after ``cloister start`` is not refused.
        """
        record = self.registry.lookup(token)
        if record is None:
            if self._directory_changed():
                self._reload()
                record = self.registry.lookup(token)
            if record is None:
                return None
        current = file_signature(self._dir / record.cloister)
        if current is None:
            return None
        if current != self._files.get(record.cloister):
            # Replaced (stopped and started again): only the new file's token counts.
            self._reload()
            return self.registry.lookup(token)
        return record

    def refresh(self, *, force: bool = False) -> list[TokenRecord]:
        """Re-read the directory if it changed; returns the tokens that went away.

        Those include tokens a :meth:`lookup` found gone since the last call, so a
        caller that closes the connections of revoked tokens misses none.
        """
        signature = directory_signature(self._dir)
        if force or signature != self._signature:
            self._reload(signature)
        gone, self._gone = self._gone, []
        return gone

    def _directory_changed(self) -> bool:
        try:
            return self._dir.stat().st_mtime_ns != self._directory_mtime
        except OSError:
            return False

    def _reload(self, signature: tuple[tuple[str, Signature], ...] | None = None) -> None:
        # Both marks are taken before reading, so a file added meanwhile is seen next time.
        try:
            self._directory_mtime = self._dir.stat().st_mtime_ns
        except OSError:
            self._directory_mtime = None
        if signature is None:
            signature = directory_signature(self._dir)
        registry, errors = TokenRegistry.load(self._dir)
        for error in errors:
            self._report(f"ignoring token file: {error}")
        self._gone += [record for record in self.registry if record.secret not in registry]
        self.registry = registry
        self._signature = signature
        self._files = dict(signature)
