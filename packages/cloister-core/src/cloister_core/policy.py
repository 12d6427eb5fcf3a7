"""Load everything that decides for one project: domains and host commands.

The only I/O step between the files (docs/architecture.md) and the pure :class:`Policy` /
:class:`CommandPolicy`: it reads ``config.yaml``, ``projects/<p>.yaml`` and both
decision files, in that (scope) order, and compiles them. Services call it again
when one of :meth:`ProjectPolicy.files` changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cloister_core.commands import CommandPolicy
from cloister_core.config import (
    CommandRules,
    GlobalConfig,
    ProjectConfig,
    load_decision_file,
    load_global_config,
    load_project_config,
)
from cloister_core.paths import CloisterPaths
from cloister_core.rules import Policy, RuleSource, build_policy


@dataclass(frozen=True, slots=True)
class ProjectPolicy:
    """The merged policy of one project (or of no project: global files only)."""

    project: str | None
    config: GlobalConfig
    project_config: ProjectConfig
    domains: Policy
    commands: CommandPolicy
    files: tuple[Path, ...]

    def rule_files(self, config_dir: Path | None = None) -> tuple[Path, ...]:
        """config.yaml, then the project's file: where a human writes rules.

        With *config_dir*, the same files under it: the config directory as the human
        sees it, when this runs in a container that mounts it elsewhere.
        """
        mine = self.files[:2] if self.project is not None else self.files[:1]
        return tuple(self.as_seen_from(file, config_dir) for file in mine)

    def as_seen_from(self, file: Path, config_dir: Path | None) -> Path:
        """*file* (one of this policy's) under *config_dir* instead: the config
        directory as the human sees it; unchanged without one."""
        if config_dir is None:
            return file
        root = self.files[0].parent  # config.yaml is at the top of the config directory
        try:
            return config_dir / file.relative_to(root)
        except ValueError:
            return file

    def where_to_write(self, key: str, config_dir: Path | None = None) -> str:
        """``<key> in <config.yaml> (every project) or in <project file> (project p)``."""
        files = self.rule_files(config_dir)
        text = f"{key} in {files[0]} (every project)"
        if len(files) > 1:
            text += f" or in {files[1]} (project {self.project})"
        return text


def load_project_policy(
    paths: CloisterPaths, project: str | None, *, create_config: bool = False
) -> ProjectPolicy:
    """Read and compile every file that applies to *project*.

    Raises :class:`~cloister_core.errors.ConfigError` (file and line) on the first
    broken file; the caller keeps its previous policy in that case.
    """
    config = load_global_config(paths, create=create_config)
    project_config = ProjectConfig()
    global_decisions = load_decision_file(paths.global_decisions)
    layers = [
        (RuleSource("global", paths.config_file), config.proxy),
        (RuleSource("global-decisions", paths.global_decisions), global_decisions),
    ]
    files = [paths.config_file, paths.global_decisions]
    command_layers: list[tuple[Path, CommandRules]] = [
        (paths.config_file, config.hostexec),
        (paths.global_decisions, global_decisions.hostexec),
    ]
    if project is not None:
        project_config = load_project_config(paths, project)
        decisions_path = paths.project_decisions(project)
        project_decisions = load_decision_file(decisions_path)
        layers.insert(
            1, (RuleSource("project", paths.project_config(project)), project_config.proxy)
        )
        layers.append((RuleSource("project-decisions", decisions_path), project_decisions))
        files[1:1] = [paths.project_config(project)]
        files.append(decisions_path)
        command_layers.append((paths.project_config(project), project_config.hostexec))
        command_layers.append((decisions_path, project_decisions.hostexec))
    return ProjectPolicy(
        project=project,
        config=config,
        project_config=project_config,
        domains=build_policy(layers, config.proxy.allowed_ports),
        commands=CommandPolicy.from_rules(command_layers),
        files=tuple(files),
    )
