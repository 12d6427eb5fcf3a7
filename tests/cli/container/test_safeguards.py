"""Protected paths from the config, the ``/.cloister`` marker, ``/dev/shm`` and the disk
quota: the decisions, with a fake ``docker info`` (no engine)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.container import safeguards
from cloister_core.config.models import (
    DEFAULT_PROTECTED_PATHS,
    DefaultsConfig,
    GlobalConfig,
    ProjectConfig,
)
from cloister_core.paths import CloisterPaths


def engine(driver: str, backing: str | None = None) -> Mapping[str, Any]:
    """What ``docker info`` says about storage (the keys Cloister reads)."""
    status = [["Backing Filesystem", backing]] if backing else []
    return {"Driver": driver, "DriverStatus": [*status, ["Supports d_type", "true"]]}


def never() -> Mapping[str, Any]:
    raise AssertionError("docker info was asked although no quota is configured")


# -- protected paths -----------------------------------------------------------------------


def test_a_project_adds_paths_and_drops_defaults() -> None:
    project = ProjectConfig.model_validate(
        {"protect": {"paths": ["Makefile", ".envrc"], "except": [".vscode/tasks.json"]}}
    )
    found = safeguards.protected_paths(GlobalConfig(), project)
    assert found == (
        ".devcontainer",
        ".devcontainer.json",
        ".cloister",
        ".envrc",
        ".husky",
        "Makefile",
    )
    assert safeguards.protected_paths(GlobalConfig(), ProjectConfig()) == DEFAULT_PROTECTED_PATHS


def test_the_global_list_replaces_the_defaults() -> None:
    config = GlobalConfig.model_validate({"protect": {"paths": ["tools/run.sh"]}})
    assert safeguards.protected_paths(config, ProjectConfig()) == ("tools/run.sh",)
    nothing = GlobalConfig.model_validate({"protect": {"paths": None}})
    assert safeguards.protected_paths(nothing, ProjectConfig()) == ()


def test_an_exception_that_drops_nothing_is_a_warning() -> None:
    project = ProjectConfig.model_validate({"protect": {"except": [".envrc", ".vscode/task.json"]}})
    warnings = safeguards.unused_exceptions(GlobalConfig(), project)
    assert len(warnings) == 1
    assert "'.vscode/task.json'" in warnings[0]
    assert "drops nothing" in warnings[0]


# -- the marker ----------------------------------------------------------------------------


def test_the_marker_file_is_written_and_removed(tmp_path: Path) -> None:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    path = safeguards.write_marker(paths, "api-feature", "api", "feature/x")
    assert path == paths.data_dir / "markers" / "api-feature.json"
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "version": 1,
        "name": "api-feature",
        "project": "api",
        "branch": "feature/x",
    }
    safeguards.remove_marker(paths, "api-feature")
    assert not path.exists()
    safeguards.remove_marker(paths, "api-feature")  # twice is fine (a stop after a stop)


# -- limits --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "quota"),
    [
        (engine("overlay2", "xfs"), True),
        (engine("btrfs", "btrfs"), True),
        (engine("zfs"), True),
        (engine("devicemapper"), True),
        (engine("overlay2", "extfs"), False),
        (engine("overlay2"), False),
        (engine("vfs", "extfs"), False),
        (engine("overlayfs"), False),  # the containerd image store: no size option
        ({}, False),
    ],
)
def test_a_quota_only_where_the_storage_driver_has_one(
    info: Mapping[str, Any], quota: bool
) -> None:
    storage, warning = safeguards.storage_options(DefaultsConfig(disk="20G"), lambda: info)
    if quota:
        assert (storage, warning) == ({"size": "20g"}, None)
    else:
        assert storage == {}
        assert warning is not None
        assert warning.startswith("defaults.disk is 20g, but no quota applies: ")


def test_the_warning_names_the_driver_and_filesystem() -> None:
    _, warning = safeguards.storage_options(
        DefaultsConfig(disk="5g"), lambda: engine("overlay2", "extfs")
    )
    assert warning is not None
    assert "overlay2 on extfs has no disk quota" in warning


def test_no_quota_configured_asks_nothing() -> None:
    assert safeguards.storage_options(DefaultsConfig(), never) == ({}, None)


def test_the_devcontainers_shm_size_wins() -> None:
    assert safeguards.shm_size(DefaultsConfig(), None) == "64m"
    assert safeguards.shm_size(DefaultsConfig(shm_size="1G"), None) == "1g"
    assert safeguards.shm_size(DefaultsConfig(shm_size="1g"), "2g") == "2g"


def test_the_plan_for_a_start(tmp_path: Path) -> None:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    config = GlobalConfig.model_validate({"defaults": {"disk": "10g"}})
    project = ProjectConfig.model_validate({"protect": {"except": ["nothing-here"]}})
    guards = safeguards.plan(paths, config, project, "api", lambda: engine("overlay2", "extfs"))
    assert guards.protect == DEFAULT_PROTECTED_PATHS
    assert guards.marker == paths.data_dir / "markers" / "api.json"
    assert not guards.marker.exists()  # decided, not written
    assert guards.storage_opt == {}
    assert len(guards.warnings) == 2  # the useless exception, the missing quota
