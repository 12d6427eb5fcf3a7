"""cloister-core: the pure library every Cloister service and tool shares.

No Docker, no network, no module-level state. The public API is re-exported here (each
name imported on first use, so that importing one submodule stays cheap) and
documented in this package's README; submodules hold the details:

``paths``      where files live (``CloisterPaths``)
``config``     models and loading of config, project and decision files
``hosts``      host/IP/pattern normalisation
``rules``      the domain policy and its verdicts
``policy``     loading the merged policy of one project
``decisions``  the decision store (atomic, locked, comment-preserving)
``tokens``     cloister tokens and the constant-time registry
``names``      project, cloister, branch and container names
``commands``   hostexec canonical commands and pattern verdicts
``gitsafety``  the environment git gets when the host runs it for the agent
``gitargv``    the argv rules for that git
``gitdir``     what an agent can plant in a git directory, against a baseline
``sessions``   a cloister's session record and the guard's events
``snapshots``  session snapshots: their records, pool file names and expiry
``audit``      the JSON-lines audit log
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the types, for mypy; at run time each name is imported when first used
    from cloister_core.audit import AuditLog
    from cloister_core.commands import CommandPolicy, CommandVerdict, canonical_command
    from cloister_core.config import (
        DecisionFile,
        GlobalConfig,
        ProjectConfig,
        RuleEntry,
        load_decision_file,
        load_global_config,
        load_project_config,
    )
    from cloister_core.decisions import DecisionChange, DecisionStore
    from cloister_core.errors import (
        CloisterError,
        CloisterNameError,
        ConfigError,
        InvalidCommandError,
        InvalidHostError,
        TokenError,
    )
    from cloister_core.gitargv import UnsafeGitCommandError, check_git_argv, is_git_program
    from cloister_core.gitsafety import HARDENED_GIT_CONFIG, git_environment, hardened_git_config
    from cloister_core.hosts import (
        DomainPattern,
        Host,
        normalize_authority,
        normalize_host,
        normalize_pattern,
    )
    from cloister_core.names import (
        cloister_name,
        project_name_from_path,
        sanitize_branch,
        validate_name,
    )
    from cloister_core.paths import CloisterPaths
    from cloister_core.policy import ProjectPolicy, load_project_policy
    from cloister_core.rules import DomainRule, Policy, RuleSource, Verdict, build_policy
    from cloister_core.tokens import (
        TokenRecord,
        TokenRegistry,
        generate_token,
        read_token_file,
        write_token_file,
    )

__version__ = "0.1.0"

# public name -> the submodule that defines it. Imported on first use (PEP 562): the
# config models pull in pydantic and ruamel.yaml, and every ``cloister`` command pays
# for what importing this package imports.
_EXPORTS = {
    "AuditLog": "audit",
    "CommandPolicy": "commands",
    "CommandVerdict": "commands",
    "canonical_command": "commands",
    "DecisionFile": "config",
    "GlobalConfig": "config",
    "ProjectConfig": "config",
    "RuleEntry": "config",
    "load_decision_file": "config",
    "load_global_config": "config",
    "load_project_config": "config",
    "DecisionChange": "decisions",
    "DecisionStore": "decisions",
    "CloisterError": "errors",
    "CloisterNameError": "errors",
    "ConfigError": "errors",
    "InvalidCommandError": "errors",
    "InvalidHostError": "errors",
    "TokenError": "errors",
    "UnsafeGitCommandError": "gitargv",
    "check_git_argv": "gitargv",
    "is_git_program": "gitargv",
    "HARDENED_GIT_CONFIG": "gitsafety",
    "git_environment": "gitsafety",
    "hardened_git_config": "gitsafety",
    "DomainPattern": "hosts",
    "Host": "hosts",
    "normalize_authority": "hosts",
    "normalize_host": "hosts",
    "normalize_pattern": "hosts",
    "cloister_name": "names",
    "project_name_from_path": "names",
    "sanitize_branch": "names",
    "validate_name": "names",
    "CloisterPaths": "paths",
    "ProjectPolicy": "policy",
    "load_project_policy": "policy",
    "DomainRule": "rules",
    "Policy": "rules",
    "RuleSource": "rules",
    "Verdict": "rules",
    "build_policy": "rules",
    "TokenRecord": "tokens",
    "TokenRegistry": "tokens",
    "generate_token": "tokens",
    "read_token_file": "tokens",
    "write_token_file": "tokens",
}

__all__ = [
    "HARDENED_GIT_CONFIG",
    "AuditLog",
    "CloisterError",
    "CloisterNameError",
    "CloisterPaths",
    "CommandPolicy",
    "CommandVerdict",
    "ConfigError",
    "DecisionChange",
    "DecisionFile",
    "DecisionStore",
    "DomainPattern",
    "DomainRule",
    "GlobalConfig",
    "Host",
    "InvalidCommandError",
    "InvalidHostError",
    "Policy",
    "ProjectConfig",
    "ProjectPolicy",
    "RuleEntry",
    "RuleSource",
    "TokenError",
    "TokenRecord",
    "TokenRegistry",
    "UnsafeGitCommandError",
    "Verdict",
    "build_policy",
    "canonical_command",
    "check_git_argv",
    "cloister_name",
    "generate_token",
    "git_environment",
    "hardened_git_config",
    "is_git_program",
    "load_decision_file",
    "load_global_config",
    "load_project_config",
    "load_project_policy",
    "normalize_authority",
    "normalize_host",
    "normalize_pattern",
    "project_name_from_path",
    "read_token_file",
    "sanitize_branch",
    "validate_name",
    "write_token_file",
]


if not TYPE_CHECKING:  # hidden from mypy, so that a misspelt name stays a type error

    def __getattr__(name: str) -> object:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # once: later lookups do not come back here
        return value

    def __dir__() -> list[str]:
        return sorted([*globals(), *_EXPORTS])
