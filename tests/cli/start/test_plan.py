"""``plan_start`` without an engine: what a start refuses before building anything, and
what its dry run shows instead."""

from __future__ import annotations

import json
from pathlib import Path

import docker.errors
import pytest

from cloister_cli.container.cloisters import CloisterStartError
from cloister_cli.context import Context
from cloister_cli.images.features.resolve import FeaturesError
from cloister_cli.repo.projects import Project
from cloister_cli.start import apply, plan
from cloister_core.paths import CloisterPaths
from tests.fake_engine import FakeEngine


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

    monkeypatch.setattr(apply, "ensure_guardian", building)
    monkeypatch.setattr(apply, "ensure_agent_image", building)
    monkeypatch.setattr(apply, "build_image", building)
    with pytest.raises(CloisterStartError, match=r"ref '.*/my-api/\.\./missing' does not exist"):
        apply.apply(
            context, plan.plan_start(context, directory, plan.StartOptions(allow_no_git=True))
        )


TARBALL = "https://example.invalid/features/tool.tgz"


def _refused_only(tmp_path: Path) -> tuple[Context, Project]:
    """A project whose devcontainer's one Feature is a tarball URL (refused by name)."""
    root = tmp_path / "api"
    (root / ".devcontainer").mkdir(parents=True)
    document = {"image": "debian:bookworm-slim", "features": {TARBALL: {}}}
    (root / ".devcontainer" / "devcontainer.json").write_text(json.dumps(document))
    engine = FakeEngine()
    engine.add_image("debian:bookworm-slim")
    context = Context(
        paths=CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data"),
        home=tmp_path / "home",
    )
    context.__dict__["docker"] = engine  # the cached property, filled in
    return context, Project("api", root, git=False)


def test_a_devcontainer_whose_every_feature_is_refused_stops_the_start(tmp_path: Path) -> None:
    """None is left to install, and still the start stops on them (as on any refused)."""
    context, project = _refused_only(tmp_path)
    options = plan.StartOptions()
    with pytest.raises(FeaturesError, match=r"^cannot install these Features: .*tool\.tgz"):
        plan.plan_image_part(context, project, options, dry_run=False)
    shown = plan.plan_image_part(context, project, options, dry_run=True)
    assert shown.unbuildable is not None
    assert shown.unbuildable.startswith("cannot install these Features: ")
    assert TARBALL in shown.unbuildable
    assert shown.image.steps  # the rest is still planned, to be shown
