"""``cloister images build | list | prune``: their options offline, and the real thing.

Offline, the group runs with a Context whose engine is the fake of
``tests/fake_engine.py``; the docker-marked test drives the installed ``cloister``
command on a project whose Dockerfiles download nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands.images import images
from cloister_cli.context import Context
from cloister_cli.images.projectimages import PROJECT_LABEL
from cloister_core.paths import CloisterPaths
from tests.cli.cli_support import BASE_IMAGE, CloisterCli, unique
from tests.cli.images.test_projectimages_docker import remove_project_images, write_project
from tests.conftest import SkipOrFail
from tests.fake_engine import FakeEngine


def invoke(tmp_path: Path, engine: FakeEngine, *args: str, stdin: str | None = None) -> Result:
    context = Context(CloisterPaths(tmp_path / "config", tmp_path / "data"), home=tmp_path)
    context.__dict__["docker"] = engine  # the cached property, filled in
    return CliRunner().invoke(images, list(args), obj=context, input=stdin)


def test_devcontainer_and_no_devcontainer_exclude_each_other(tmp_path: Path) -> None:
    result = invoke(
        tmp_path, FakeEngine(), "build", "--devcontainer", "x.json", "--no-devcontainer"
    )
    assert result.exit_code == 2
    assert "not both" in result.output


def test_list_and_prune_with_nothing(tmp_path: Path) -> None:
    assert invoke(tmp_path, FakeEngine(), "list", "--json").output.strip() == "[]"
    assert "no project images" in invoke(tmp_path, FakeEngine(), "list").output
    assert invoke(tmp_path, FakeEngine(), "prune").output.strip() == "nothing to prune"


def test_prune_asks_first(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image(
        "cloister-project-gone:kkkkkkkkkkkk",
        id="sha256:0123456789abcdef",
        labels={PROJECT_LABEL: "gone", "org.cloister.image-key": "k" * 64},
        attrs={"Created": "2025-01-01T00:00:00Z", "Size": 5_000_000},
    )
    refused = invoke(tmp_path, engine, "prune", stdin="n\n")
    assert refused.exit_code == 1  # aborted
    assert "cloister-project-gone:kkkkkkkkkkkk" in refused.output
    assert "project 'gone' was removed" in refused.output
    assert engine.called("images.remove") == []
    done = invoke(tmp_path, engine, "prune", "-y", "--json")
    assert done.exit_code == 0, done.output
    assert engine.log == ["rmi cloister-project-gone:kkkkkkkkkkkk"]
    document = json.loads(done.output[done.output.index("[") :])
    assert [(item["tag"], item["removed"]) for item in document] == [
        ("cloister-project-gone:kkkkkkkkkkkk", True)
    ]


# -- for real ----------------------------------------------------------------------------


@pytest.fixture
def project_name(docker_client: docker.DockerClient, skip_or_fail: SkipOrFail) -> Iterator[str]:
    try:
        docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        skip_or_fail(f"{BASE_IMAGE} is not present locally (and nothing is pulled)")
    name = unique("pic")
    try:
        yield name
    finally:
        remove_project_images(docker_client, name)


@pytest.mark.docker
def test_build_list_prune(project_name: str, tmp_path: Path) -> None:
    tool = CloisterCli(tmp_path)
    root = tmp_path / "repo"
    write_project(root, "hi")

    planned = tool.ok("images", "build", "-p", project_name, "--dry-run", cwd=root)
    assert planned.stdout.splitlines()[-1].startswith(f"tag it cloister-project-{project_name}:")
    # The Dockerfiles are the agent's to write: never approved yet, so not built unasked.
    refused = tool.fails("images", "build", "-p", project_name, cwd=root)
    assert f"{project_name}: nothing built: the files" in refused.stderr
    assert "never approved (.cloister/Dockerfile" in refused.stderr
    assert "run `cloister images build` in a terminal" in refused.stderr
    assert "--yes" in refused.stderr
    first = tool.ok("images", "build", "-p", project_name, "--yes", cwd=root)
    tag = first.stdout.strip()
    assert tag.startswith(f"cloister-project-{project_name}:")
    assert f"built {tag}" in first.stderr
    again = tool.ok("images", "build", "-p", project_name, str(root))
    assert again.stdout.strip() == tag
    assert "up to date" in again.stderr

    write_project(root, "ho")
    assert "changed" in tool.fails("images", "build", "-p", project_name, cwd=root).stderr
    newer = tool.ok("images", "build", "-p", project_name, "-y", cwd=root).stdout.strip()
    assert newer != tag
    listed = {item["tag"]: item for item in tool.json("images", "list", "--json")}
    assert listed[newer]["current"]
    assert not listed[tag]["current"]
    assert listed[tag]["project"] == project_name

    # -p: every other project is "removed" for this test's config (and not ours to touch).
    pruned = tool.ok("images", "prune", "-p", project_name, "-y", "--json")
    assert [(item["tag"], item["removed"]) for item in pruned.json()] == [(tag, True)]
    assert [item["tag"] for item in tool.json("images", "list", "-p", project_name, "--json")] == [
        newer
    ]


def test_a_dry_run_says_a_refused_feature_would_fail_the_build(tmp_path: Path) -> None:
    """As `cloister images build` would stop on it (and `cloister start`): the dry run
    does not print a build that cannot happen."""
    root = tmp_path / "api"
    (root / ".devcontainer").mkdir(parents=True)
    features: dict[str, object] = {"https://example.invalid/features/tool.tgz": {}}
    document = {"image": "debian:bookworm-slim", "features": features}
    (root / ".devcontainer" / "devcontainer.json").write_text(json.dumps(document))
    engine = FakeEngine()
    engine.add_image("debian:bookworm-slim")
    result = invoke(tmp_path, engine, "build", str(root), "--dry-run")
    assert result.exit_code == 1
    message = str(result.exception)
    assert message.startswith("`cloister images build` would fail: cannot install these Features: ")
    assert "example.invalid/features/tool.tgz" in message
    assert result.output == ""  # no steps of a build that would not run
    assert engine.builds == []
