"""Config and data directories: overrides, XDG, and file names."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.errors import CloisterError, CloisterNameError
from cloister_core.paths import CloisterPaths, PathsError


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
    # Not in logs/, where a cloister called "executor" keeps its log.
    assert paths.executor_log == Path("/d/guardian/executor.log")
    assert paths.session_file("my-api") == Path("/d/sessions/my-api.json")
    # The cloisters' own git directories, and the .git file of one whose /work/.git is a file.
    assert paths.git_dirs_dir == Path("/d/gitdirs")
    assert paths.cloister_git_dir("my-api") == Path("/d/gitdirs/my-api")
    assert paths.git_pointer("my-api") == Path("/d/gitdirs/my-api.pointer")


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ""])
def test_names_cannot_escape(name: str) -> None:
    paths = CloisterPaths(Path("/c"), Path("/d"))
    for make in (
        paths.project_config,
        paths.project_decisions,
        paths.token_file,
        paths.cloister_log,
        paths.session_file,
        paths.cloister_git_dir,
        paths.git_pointer,
    ):
        with pytest.raises(CloisterNameError):
            make(name)
    with pytest.raises(CloisterNameError):
        paths.worktree("p", name)


def test_relative_overrides_are_resolved_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    paths = CloisterPaths.from_env(
        {"CLOISTER_CONFIG_DIR": "conf", "CLOISTER_DATA_DIR": "./state/data", "HOME": "/h"}
    )
    assert paths == CloisterPaths(tmp_path / "conf", tmp_path / "state" / "data")
    assert paths.config_file.is_absolute()


@pytest.mark.parametrize("key", ["CLOISTER_CONFIG_DIR", "CLOISTER_DATA_DIR"])
def test_an_override_naming_a_file_is_one_clear_error(tmp_path: Path, key: str) -> None:
    file = tmp_path / "config.yaml"
    file.write_text("proxy: {}\n", encoding="utf-8")
    with pytest.raises(PathsError) as caught:
        CloisterPaths.from_env({key: str(file), "HOME": "/h"})
    assert str(caught.value) == (
        f"{key} is {str(file)!r}, which is not a directory; point it at a directory"
        " (Cloister creates a missing one)"
    )
    assert isinstance(caught.value, CloisterError)


def test_a_missing_override_is_fine(tmp_path: Path) -> None:
    missing = tmp_path / "not-yet"
    paths = CloisterPaths.from_env({"CLOISTER_CONFIG_DIR": str(missing), "HOME": "/h"})
    assert paths.config_dir == missing
