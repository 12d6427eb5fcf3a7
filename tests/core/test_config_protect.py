"""``protect:`` and the limits of ``defaults:`` in the config files: defaults, merging,
and mistakes reported with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.config import (
    GlobalConfig,
    ProjectConfig,
    default_config_text,
    load_global_config,
    load_project_config,
    parse_yaml,
    validate_document,
)
from cloister_core.config.models import DEFAULT_PROTECTED_PATHS, DefaultsConfig
from cloister_core.errors import ConfigError
from cloister_core.paths import CloisterPaths


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_defaults_are_the_commented_files_data() -> None:
    written = validate_document(
        parse_yaml(default_config_text(), Path("x")), GlobalConfig, Path("x")
    )
    assert written.protect == GlobalConfig().protect
    assert written.protect.paths == DEFAULT_PROTECTED_PATHS
    assert (written.defaults.shm_size, written.defaults.disk) == ("64m", None)
    assert ".envrc" in DEFAULT_PROTECTED_PATHS
    assert ".gitattributes" not in DEFAULT_PROTECTED_PATHS  # selects only your own drivers


def test_paths_are_normalised_and_unique(paths: CloisterPaths) -> None:
    write(
        paths.project_config("api"),
        "protect:\n  paths: [./tools//run.sh, tools/run.sh, .vscode/]\n  except: [.husky/]\n",
    )
    protect = load_project_config(paths, "api").protect
    assert protect.paths == ("tools/run.sh", ".vscode")
    assert protect.except_ == (".husky",)
    assert protect.applied_to(DEFAULT_PROTECTED_PATHS)[-2:] == ("tools/run.sh", ".vscode")
    assert ".husky" not in protect.applied_to(DEFAULT_PROTECTED_PATHS)


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ("protect:\n  paths:\n    - /etc/passwd\n", ":3:7:", "is absolute: write it relative"),
        ("protect:\n  paths:\n    - ~/.bashrc\n", ":3:7:", "is absolute"),
        ("protect:\n  paths:\n    - a\n    - ../x\n", ":4:7:", "protect.paths[1]: '../x' leaves"),
        ("protect:\n  paths: ['**/.envrc']\n", ":2:11:", "is a pattern: list each path"),
        ("protect:\n  paths: [.git/hooks]\n", ":2:11:", "is in a git directory"),
        ("protect:\n  paths: [sub/.git]\n", ":2:11:", "is in a git directory"),
        ("protect:\n  paths: ['.']\n", ":2:11:", "is the whole project"),
        ("protect:\n  paths: ['']\n", ":2:11:", "must not be empty"),
        ("protect:\n  paths: [1]\n", ":2:11:", "protect.paths[0]"),
        ("protect:\n  except: [.envrc]\n", ":2:3:", "unknown key 'except' in protect"),
        ("defaults:\n  shm_size: lots\n", ":2:13:", "not a size: 'lots'"),
        ("defaults:\n  disk: 20 GB\n", ":2:9:", "not a size: '20 GB'"),
    ],
)
def test_mistakes_in_config_yaml_name_file_and_line(
    paths: CloisterPaths, text: str, location: str, message: str
) -> None:
    write(paths.config_file, text)
    with pytest.raises(ConfigError) as caught:
        load_global_config(paths)
    rendered = str(caught.value)
    assert rendered.startswith(f"{paths.config_file}{location}"), rendered
    assert message in rendered


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        (
            "protect:\n  except:\n    - ../.envrc\n",
            ":3:7:",
            "protect.except[0]: '../.envrc' leaves",
        ),
        ("protect:\n  exept: [.envrc]\n", ":2:3:", "did you mean 'except'?"),
        ("protect:\n  except_: [.envrc]\n", ":2:3:", "unknown key 'except_'"),
    ],
)
def test_mistakes_in_a_project_file_name_file_and_line(
    paths: CloisterPaths, text: str, location: str, message: str
) -> None:
    path = write(paths.project_config("api"), text)
    with pytest.raises(ConfigError) as caught:
        load_project_config(paths, "api")
    rendered = str(caught.value)
    assert rendered.startswith(f"{path}{location}"), rendered
    assert message in rendered


def test_sizes_are_lowercased() -> None:
    limits = DefaultsConfig(shm_size="2G", disk="20G")
    assert (limits.shm_size, limits.disk) == ("2g", "20g")


def test_a_project_without_protect_changes_nothing() -> None:
    assert ProjectConfig().protect.applied_to(("a", "b")) == ("a", "b")
