"""Configuration: models, loading with file:line errors, and the default config.

Public entry points: :func:`load_global_config` (writes the commented default on first
use), :func:`load_project_config`, :func:`load_decision_file`, and the models in
:mod:`cloister_core.config.models`.
"""

from __future__ import annotations

import logging
from importlib.resources import files
from pathlib import Path

from cloister_core.config.legacy import Notice, legacy_notices
from cloister_core.config.loader import load_model, load_text, parse_yaml, validate_document
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
    "Notice",
    "ProjectConfig",
    "ProxyConfig",
    "ProxyRules",
    "RuleEntry",
    "default_config_text",
    "ensure_default_config",
    "legacy_notices",
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


_logger = logging.getLogger(__name__)
# (file, keys) this process has warned about: services reload the file on each change,
# and the same keys are said once.
_warned: set[tuple[Path, tuple[str, ...]]] = set()


def load_global_config(paths: CloisterPaths, *, create: bool = True) -> GlobalConfig:
    """Load ``<config>/config.yaml``, writing the commented default first if *create*.

    Keys of the Go implementation's file that Cloister sets aside or reads as others are
    named in one warning (logged once per process): ``cloister config check`` says what
    Cloister does instead of each, at its line.
    """
    if create:
        ensure_default_config(paths.config_file)
    path = paths.config_file
    text = load_text(path)
    if text is None:
        return GlobalConfig()
    document = parse_yaml(text, path)
    config = validate_document(document, GlobalConfig, path)
    keys = tuple(notice.message.split(" ", 1)[0] for notice in legacy_notices(document))
    if keys and (path, keys) not in _warned:
        _warned.add((path, keys))
        _logger.warning(
            "%s: %d key(s) of the Go implementation's format set aside or read as"
            " Cloister's: %s (`cloister config check` says what Cloister does instead)",
            path,
            len(keys),
            ", ".join(keys),
        )
    return config


def load_project_config(paths: CloisterPaths, project: str) -> ProjectConfig:
    """Load ``<config>/projects/<project>.yaml`` (empty defaults when absent)."""
    return load_model(paths.project_config(project), ProjectConfig)


def load_decision_file(path: Path) -> DecisionFile:
    """Load a decision file (empty when absent)."""
    return load_model(path, DecisionFile)
