"""A home directory with a project in it, and a helper that writes and loads a file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cloister_core.devcontainer import Devcontainer, load_devcontainer


@dataclass(frozen=True)
class Workspace:
    home: Path
    project: Path
    environ: Mapping[str, str]

    def write(self, text: str, relative: str = ".devcontainer/devcontainer.json") -> Path:
        path = self.project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def load(
        self, text: str, relative: str = ".devcontainer/devcontainer.json", **options: Any
    ) -> Devcontainer:
        return load_devcontainer(
            self.write(text, relative),
            project_root=self.project,
            home=self.home,
            environ=self.environ,
            **options,
        )


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    home = tmp_path / "home" / "dev"
    project = home / "src" / "web-app"
    (home / ".ssh").mkdir(parents=True)
    project.mkdir(parents=True)
    # A link in the project (which the agent writes) to the SSH keys.
    (project / "keys").symlink_to(home / ".ssh")
    # Data in the project, and a link to it (inside the project, but a link all the same).
    (project / "data").mkdir()
    (project / "data-link").symlink_to(project / "data")
    environ = {
        "HOME": str(home),
        "USER": "dev",
        "LANG": "C.UTF-8",
        "GITHUB_TOKEN": "ghp_not-for-the-agent",
        "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1",
    }
    return Workspace(home=home, project=project, environ=environ)
