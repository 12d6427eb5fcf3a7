"""Config and data directories: overrides, XDG, and file names."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.errors import CloisterNameError
from cloister_core.paths import CloisterPaths


def test_overrides_win() -> None:
    paths = CloisterPaths.from_env(
        {
            "CLOISTER_CONFIG_DIR": "/x/config",
            "CLOISTER_DATA_DIR": "/x/data",
            "XDG_CONFIG_HOME": "/xdg/config",
            "HOME": "/home/me",
        }
    )
    assert paths == CloisterPaths(Path("/x/config"), Path("/x/data"))


def test_xdg_then_home() -> None:
    xdg = CloisterPaths.from_env(
        {"XDG_CONFIG_HOME": "/xdg/c", "XDG_DATA_HOME": "/xdg/d", "HOME": "/home/me"}
    )
    assert xdg == CloisterPaths(Path("/xdg/c/cloister"), Path("/xdg/d/cloister"))
    home = CloisterPaths.from_env({"HOME": "/home/me", "XDG_CONFIG_HOME": "relative/ignored"})
    assert home == CloisterPaths(
        Path("/home/me/.config/cloister"), Path("/home/me/.local/share/cloister")
    )


def test_well_known_files() -> None:
    paths = CloisterPaths(Path("/c"), Path("/d"))
    assert paths.config_file == Path("/c/config.yaml")
    assert paths.project_config("my-api") == Path("/c/projects/my-api.yaml")
    assert paths.global_decisions == Path("/c/decisions/global.yaml")
    assert paths.project_decisions("my-api") == Path("/c/decisions/projects/my-api.yaml")
    assert paths.token_file("my-api") == Path("/c/tokens/my-api")
    assert paths.executor_state == Path("/d/executor.json")
    assert paths.audit_log == Path("/d/audit.log")
    assert paths.cloister_log("my-api") == Path("/d/logs/my-api.log")
    assert paths.worktree("my-api", "feature-x") == Path("/d/worktrees/my-api/feature-x")
    assert paths.compose_file == Path("/d/guardian/compose.yaml")


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ""])
def test_names_cannot_escape(name: str) -> None:
    paths = CloisterPaths(Path("/c"), Path("/d"))
    for make in (paths.project_config, paths.project_decisions, paths.token_file):
        with pytest.raises(CloisterNameError):
            make(name)
    with pytest.raises(CloisterNameError):
        paths.worktree("p", name)
