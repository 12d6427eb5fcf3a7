"""``git_guardrails:`` in the config files: defaults, branch names, the project's keys
over the global ones, and mistakes reported with file and line."""

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
from cloister_core.config.models import GitGuardrailsConfig
from cloister_core.errors import ConfigError
from cloister_core.paths import CloisterPaths


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_on_by_default_protecting_main_and_master() -> None:
    written = validate_document(
        parse_yaml(default_config_text(), Path("x")), GlobalConfig, Path("x")
    )
    assert written.git_guardrails == GlobalConfig().git_guardrails
    assert GlobalConfig().git_guardrails == GitGuardrailsConfig(
        enabled=True, protected_branches=("main", "master")
    )
    assert "git_guardrails:" in default_config_text()


def test_branch_names_and_patterns(paths: CloisterPaths) -> None:
    write(
        paths.config_file,
        "git_guardrails:\n  protected_branches: [trunk, refs/heads/release/*, 'hot-fix_2.x']\n",
    )
    assert load_global_config(paths).git_guardrails.protected_branches == (
        "trunk",
        "release/*",  # as a branch name: refs/heads/ dropped
        "hot-fix_2.x",
    )
    write(paths.config_file, "git_guardrails:\n  protected_branches:\n")
    assert load_global_config(paths).git_guardrails.protected_branches == ()  # none


def test_a_projects_keys_replace_the_global_ones(paths: CloisterPaths) -> None:
    base = GitGuardrailsConfig(protected_branches=("main", "develop"))
    assert ProjectConfig().git_guardrails.applied_to(base) == base
    write(paths.project_config("api"), "git_guardrails:\n  enabled: false\n")
    assert load_project_config(paths, "api").git_guardrails.applied_to(base) == (
        GitGuardrailsConfig(enabled=False, protected_branches=("main", "develop"))
    )
    write(paths.project_config("api"), "git_guardrails:\n  protected_branches: [trunk]\n")
    assert load_project_config(paths, "api").git_guardrails.applied_to(base) == (
        GitGuardrailsConfig(enabled=True, protected_branches=("trunk",))
    )
    write(paths.project_config("api"), "git_guardrails:\n  protected_branches: []\n")
    assert (
        load_project_config(paths, "api").git_guardrails.applied_to(base).protected_branches == ()
    )
    off = GitGuardrailsConfig(enabled=False)
    write(paths.project_config("api"), "git_guardrails:\n  enabled: true\n")
    assert load_project_config(paths, "api").git_guardrails.applied_to(off).enabled is True


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        (
            "git_guardrails:\n  protected_branches: [main, 'two words']\n",
            ":2:30:",
            "not a branch name: 'two words' (write e.g. 'main' or 'release/*')",
        ),
        ("git_guardrails:\n  protected_branches: ['-x']\n", ":2:24:", "not a branch name"),
        ("git_guardrails:\n  protected_branches: ['a..b']\n", ":2:24:", "not a branch name"),
        ("git_guardrails:\n  protected_branches: ['rel?']\n", ":2:24:", "not a branch name"),
        ("git_guardrails:\n  protected_branches: ['x.lock']\n", ":2:24:", "not a branch name"),
        ("git_guardrails:\n  protected_branches: ['refs/heads/']\n", ":2:24:", "not a branch"),
        ("git_guardrails:\n  protected_branches: main\n", ":2:23:", "protected_branches"),
        ("git_guardrails:\n  enabled: maybe\n", ":2:12:", "git_guardrails.enabled"),
        ("git_guardrails:\n  protected: [main]\n", ":2:3:", "unknown key 'protected'"),
    ],
)
def test_mistakes_name_file_and_line(
    paths: CloisterPaths, text: str, location: str, message: str
) -> None:
    for path, load in (
        (paths.config_file, lambda: load_global_config(paths)),
        (paths.project_config("api"), lambda: load_project_config(paths, "api")),
    ):
        write(path, text)
        with pytest.raises(ConfigError) as caught:
            load()
        rendered = str(caught.value)
        assert rendered.startswith(f"{path}{location}"), rendered
        assert message in rendered
        path.unlink()
