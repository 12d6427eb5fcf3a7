"""Configuration: models, loading with file:line errors, and the default config.

Public entry points: :func:`load_global_config` (writes the commented default on first
use), :func:`load_project_config`, :func:`load_decision_file`, and the models in
:mod:`cloister_core.config.models`.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from cloister_core.config.loader import load_model, parse_yaml, validate_document
from cloister_core.config.models import (
    CommandPattern,
    CommandRules,
    DecisionFile,
    GlobalConfig,
    HostexecConfig,
    ProjectConfig,
    ProxyConfig,
    ProxyRules,
    RuleEntry,
    parse_duration,
)
from cloister_core.fileio import atomic_write
from cloister_core.paths import CloisterPaths

__all__ = [
    "CommandPattern",
    "CommandRules",
    "DecisionFile",
    "GlobalConfig",
    "HostexecConfig",
    "ProjectConfig",
    "ProxyConfig",
    "ProxyRules",
    "RuleEntry",
    "default_config_text",
    "ensure_default_config",
    "load_decision_file",
    "load_global_config",
    "load_project_config",
    "parse_duration",
    "parse_yaml",
    "validate_document",
]


def default_config_text() -> str:
    """The commented ``config.yaml`` Cloister writes on first use."""
    return (files(__package__) / "default_config.yaml").read_text(encoding="utf-8")


def ensure_default_config(path: Path) -> bool:
    """Write the default config to *path* unless a file is there; True if written."""
    if path.exists():
        return False
    atomic_write(path, default_config_text(), mode=0o644, exclusive=True)
    return True


def load_global_config(paths: CloisterPaths, *, create: bool = True) -> GlobalConfig:
    """Load ``<config>/config.yaml``, writing the commented default first if *create*."""
    if create:
        ensure_default_config(paths.config_file)
    return load_model(paths.config_file, GlobalConfig)


def load_project_config(paths: CloisterPaths, project: str) -> ProjectConfig:
    """Load ``<config>/projects/<project>.yaml`` (empty defaults when absent)."""
    return load_model(paths.project_config(project), ProjectConfig)


def load_decision_file(path: Path) -> DecisionFile:
    """Load a decision file (empty when absent)."""
    return load_model(path, DecisionFile)
