"""Where Cloister keeps its files.

Two roots, each overridable for tests and for the guardian containers:

* ``<config>``: ``$CLOISTER_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/cloister``, else
  ``~/.config/cloister``. Human-authored config, machine-written decisions, tokens.
* ``<data>``: ``$CLOISTER_DATA_DIR``, else ``$XDG_DATA_HOME/cloister``, else
  ``~/.local/share/cloister``. Audit log, per-cloister logs, worktrees, rendered stack,
  session records, the cloisters' own git directories, quarantined files.

XDG is used on every platform (also macOS), as the original tool does, so that the
paths printed in docs and error messages are the same everywhere. The environment is
passed in explicitly; nothing here reads it at import time.

A relative ``$CLOISTER_CONFIG_DIR`` or ``$CLOISTER_DATA_DIR`` is resolved against the
current directory when :meth:`CloisterPaths.from_env` runs (the paths are handed to
containers and daemons that run elsewhere). One that names something other than a
directory is refused there, with one line that says so, rather than failing later in
whatever first writes below it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cloister_core.errors import CloisterError
from cloister_core.names import validate_name

APP_NAME = "cloister"


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME", "")
    return Path(home) if home else Path.home()


class PathsError(CloisterError):
    """A directory override that Cloister cannot use."""


def _override(environ: Mapping[str, str], key: str) -> Path | None:
    value = environ.get(key, "").strip()
    if not value:
        return None
    path = Path(value).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise PathsError(
            f"{key} is {value!r}, which is not a directory; point it at a directory"
            " (Cloister creates a missing one)"
        )
    return path


def _xdg_base(environ: Mapping[str, str], key: str, fallback: str) -> Path:
    # The XDG spec says relative values are invalid and must be ignored. Written out
    # here (rather than platformdirs) because the environment is injected, not global.
    value = environ.get(key, "")
    if value and Path(value).is_absolute():
        return Path(value)
    return _home(environ) / fallback


@dataclass(frozen=True, slots=True)
class CloisterPaths:
    """The two roots and every well-known file below them."""

    config_dir: Path
    data_dir: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CloisterPaths:
        """Resolve both roots from *environ* (default: the process environment).

        Raises :class:`PathsError` when an override names a file.
        """
        env = os.environ if environ is None else environ
        config = _override(env, "CLOISTER_CONFIG_DIR")
        data = _override(env, "CLOISTER_DATA_DIR")
        if config is None:
            config = _xdg_base(env, "XDG_CONFIG_HOME", ".config") / APP_NAME
        if data is None:
            data = _xdg_base(env, "XDG_DATA_HOME", ".local/share") / APP_NAME
        return cls(config_dir=config, data_dir=data)

    # <config>
    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.yaml"

    @property
    def projects_dir(self) -> Path:
        return self.config_dir / "projects"

    def project_config(self, project: str) -> Path:
        return self.projects_dir / f"{validate_name(project, what='project')}.yaml"

    @property
    def decisions_dir(self) -> Path:
        return self.config_dir / "decisions"

    @property
    def global_decisions(self) -> Path:
        return self.decisions_dir / "global.yaml"

    @property
    def project_decisions_dir(self) -> Path:
        return self.decisions_dir / "projects"

    def project_decisions(self, project: str) -> Path:
        return self.project_decisions_dir / f"{validate_name(project, what='project')}.yaml"

    @property
    def session_decisions_dir(self) -> Path:
        return self.decisions_dir / "sessions"

    def session_decisions(self, cloister: str) -> Path:
        """A cloister's session decisions: removed when it stops (and before it starts)."""
        return self.session_decisions_dir / f"{validate_name(cloister, what='cloister')}.yaml"

    @property
    def tokens_dir(self) -> Path:
        return self.config_dir / "tokens"

    def token_file(self, cloister: str) -> Path:
        return self.tokens_dir / validate_name(cloister, what="cloister")

    # <data>
    @property
    def executor_state(self) -> Path:
        return self.data_dir / "executor.json"

    @property
    def audit_log(self) -> Path:
        return self.data_dir / "audit.log"

    @property
    def logs_dir(self) -> Path:
        """The cloisters' own logs (one per cloister, written by the guardian's services)."""
        return self.data_dir / "logs"

    def cloister_log(self, cloister: str) -> Path:
        return self.logs_dir / f"{validate_name(cloister, what='cloister')}.log"

    @property
    def worktrees_dir(self) -> Path:
        return self.data_dir / "worktrees"

    def worktree(self, project: str, branch_dir: str) -> Path:
        return (
            self.worktrees_dir
            / validate_name(project, what="project")
            / validate_name(branch_dir, what="branch directory")
        )

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    def session_file(self, cloister: str) -> Path:
        return self.sessions_dir / f"{validate_name(cloister, what='cloister')}.json"

    @property
    def quarantine_dir(self) -> Path:
        return self.data_dir / "quarantine"

    @property
    def snapshots_dir(self) -> Path:
        return self.data_dir / "snapshots"

    def snapshot_dir(self, project: str) -> Path:
        """A project's snapshots: ``objects/`` (the pool) and ``records/<id>.json``."""
        return self.snapshots_dir / validate_name(project, what="project")

    @property
    def git_dirs_dir(self) -> Path:
        """The cloisters' own git directories (never the human's)."""
        return self.data_dir / "gitdirs"

    def cloister_git_dir(self, cloister: str) -> Path:
        """Cloister *cloister*'s git directory, mounted over ``/work/.git`` inside it."""
        return self.git_dirs_dir / validate_name(cloister, what="cloister")

    def git_pointer(self, cloister: str) -> Path:
        """The ``.git`` file mounted at ``/work/.git`` when that is a file on the host."""
        return self.git_dirs_dir / f"{validate_name(cloister, what='cloister')}.pointer"

    @property
    def guardian_dir(self) -> Path:
        return self.data_dir / "guardian"

    @property
    def compose_file(self) -> Path:
        return self.guardian_dir / "compose.yaml"

    @property
    def executor_log(self) -> Path:
        """The host executor's own output (not in ``logs/``: a cloister may be called so)."""
        return self.guardian_dir / "executor.log"


def default_config_dir() -> Path:
    """``<config>`` from the process environment (a settings ``default_factory``)."""
    return CloisterPaths.from_env().config_dir


def default_data_dir() -> Path:
    """``<data>`` from the process environment (a settings ``default_factory``)."""
    return CloisterPaths.from_env().data_dir
