"""``starting.start`` without an engine: what it refuses before building anything."""

from __future__ import annotations

from pathlib import Path

import docker.errors
import pytest

from cloister_cli.container.cloisters import CloisterStartError
from cloister_cli.context import Context
from cloister_cli.start import starting
from cloister_core.paths import CloisterPaths


class _NoContainers:
    def get(self, name: str) -> None:
        raise docker.errors.NotFound(f"no container {name}")


class _Engine:
    """Just enough of a DockerClient for ``cloisters.find``: no cloister exists."""

    containers = _NoContainers()


def test_bad_refs_fail_before_any_image_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    directory = tmp_path / "my-api"
    directory.mkdir()
    project_file = paths.project_config("my-api")
    project_file.parent.mkdir(parents=True)
    project_file.write_text(f"root: {directory}\nrefs: [../missing]\n", encoding="utf-8")
    context = Context(paths=paths, home=tmp_path / "home")
    context.__dict__["docker"] = _Engine()  # the cached property, filled in

    def building(*args: object, **kwargs: object) -> None:
        raise AssertionError("built or started something before checking the refs")

    monkeypatch.setattr(starting, "ensure_guardian", building)
    monkeypatch.setattr(starting, "ensure_agent_image", building)
    monkeypatch.setattr(starting, "ensure_image", building)
    with pytest.raises(CloisterStartError, match=r"ref '.*/my-api/\.\./missing' does not exist"):
        starting.start(context, directory, starting.StartOptions(allow_no_git=True))
