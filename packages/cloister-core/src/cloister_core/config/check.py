"""``cloister config check`` as a library call: every file, its errors and warnings.

Unlike :func:`cloister_core.policy.load_project_policy`, which stops at the first
broken file (a service keeps its previous policy then), this loads each file that
applies to a project once, keeps going past errors so a human sees them all, and keeps
the parsed documents so the warnings of :mod:`cloister_core.config.lint` name a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from cloister_core import credentials
from cloister_core.config.legacy import legacy_notices
from cloister_core.config.lint import (
    Finding,
    Location,
    WarningKind,
    command_findings,
    domain_findings,
    network_findings,
    provider_finding,
)
from cloister_core.config.loader import (
    key_position,
    load_text,
    parse_yaml,
    position,
    validate_document,
)
from cloister_core.config.models import DecisionFile, GlobalConfig, ProjectConfig, ProxyRules
from cloister_core.errors import ConfigError, ConfigProblem
from cloister_core.paths import CloisterPaths
from cloister_core.rules import RuleSource, Scope, build_policy
from cloister_core.suffixes import PublicSuffixes

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ConfigWarning:
    """A valid rule that opens too much, at a 1-based line and column of its file."""

    path: Path
    kind: WarningKind
    message: str
    line: int | None = None
    column: int | None = None

    def render(self) -> str:
        """``<file>:<line>:<column>: warning: <message>``."""
        return ConfigProblem(f"warning: {self.message}", self.line, self.column).render(self.path)

    def to_json(self) -> dict[str, object]:
        return {
            "file": str(self.path),
            "line": self.line,
            "column": self.column,
            "kind": self.kind,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class CheckedFile:
    """One file as loaded: absent (defaults), ok, or with its error."""

    path: Path
    scope: Scope
    exists: bool
    document: Any = None
    error: ConfigError | None = None

    @property
    def state(self) -> str:
        if self.error is not None:
            return "invalid"
        return "ok" if self.exists else "absent"

    def position(self, loc: Location) -> tuple[int, int]:
        """1-based (line, column) of *loc*, or of the nearest thing above it."""
        return position(self.document, loc)

    def warnings(self, findings: list[Finding]) -> list[ConfigWarning]:
        return [
            ConfigWarning(self.path, found.kind, found.message, *self.position(found.loc))
            for found in findings
        ]


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Every file that applies, what is wrong in them, and what opens too much."""

    project: str | None
    files: tuple[CheckedFile, ...]
    warnings: tuple[ConfigWarning, ...]
    # None when a file has errors (the merged policy could not be built).
    domain_rules: int | None
    project_config: ProjectConfig | None

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        return tuple(file.error for file in self.files if file.error is not None)

    def file(self, scope: Scope) -> CheckedFile | None:
        return next((file for file in self.files if file.scope == scope), None)


def _load(path: Path, model: type[ModelT], scope: Scope) -> tuple[CheckedFile, ModelT | None]:
    try:
        text = load_text(path)
        if text is None:
            return CheckedFile(path, scope, exists=False), model()
        document = parse_yaml(text, path)
        loaded = validate_document(document, model, path)
    except ConfigError as error:
        return CheckedFile(path, scope, exists=True, error=error), None
    return CheckedFile(path, scope, exists=True, document=document), loaded


def check_configuration(
    paths: CloisterPaths, project: str | None, *, suffixes: PublicSuffixes | None = None
) -> CheckReport:
    """Load and lint ``config.yaml``, the global decisions and, for *project*, its files."""
    suffixes = suffixes if suffixes is not None else PublicSuffixes()
    files: list[CheckedFile] = []
    warnings: list[ConfigWarning] = []
    layers: list[tuple[RuleSource, ProxyRules]] = []

    config_file, config = _load(paths.config_file, GlobalConfig, "global")
    files.append(config_file)
    if config is not None:
        layers.append((RuleSource("global", config_file.path), config.proxy))
        # Keys set aside: at the key (a list's first item may be lines below it).
        warnings += [
            ConfigWarning(
                config_file.path,
                notice.kind,
                notice.message,
                *key_position(config_file.document, notice.loc),
            )
            for notice in legacy_notices(config_file.document)
        ]
        warnings += config_file.warnings(
            network_findings(config.proxy, config.guardian.network_pool)
            + domain_findings(config.proxy, ("proxy",), suffixes)
            + command_findings(config.hostexec, ("hostexec",))
        )

    project_config: ProjectConfig | None = None
    if project is not None:
        project_path = paths.project_config(project)
        project_file, project_config = _load(project_path, ProjectConfig, "project")
        files.append(project_file)
        if project_config is not None:
            layers.append((RuleSource("project", project_file.path), project_config.proxy))
            warnings += project_file.warnings(
                domain_findings(project_config.proxy, ("proxy",), suffixes)
                + command_findings(project_config.hostexec, ("hostexec",))
            )

    decision_paths: list[tuple[Path, Scope]] = [(paths.global_decisions, "global-decisions")]
    if project is not None:
        decision_paths.append((paths.project_decisions(project), "project-decisions"))
    for path, scope in decision_paths:
        decision_file, decisions = _load(path, DecisionFile, scope)
        files.append(decision_file)
        if decisions is not None:
            layers.append((RuleSource(scope, path), decisions))
            warnings += decision_file.warnings(domain_findings(decisions, (), suffixes))

    domain_rules: int | None = None
    if config is not None and not any(file.error for file in files):
        policy = build_policy(layers, config.proxy.allowed_ports)
        domain_rules = len(policy)
        found = provider_finding(policy, ("proxy", "allow"), credentials.listing(paths))
        if found is not None:
            warnings += config_file.warnings([found])
    order = {file.path: index for index, file in enumerate(files)}
    warnings.sort(key=lambda found: (order[found.path], found.line or 0, found.column or 0))
    return CheckReport(project, tuple(files), tuple(warnings), domain_rules, project_config)
