"""Project images built for real, with the classic builder, from local images only.

The Dockerfiles download nothing (this machine has no registry and no internet):
``debian:bookworm-slim`` must be present. Every image a test makes carries the
project label of a unique project name and is removed at the end; nothing else on
the engine (another CI job may share it) is touched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from cloister_cli import projectimages
from cloister_cli.projectimages import PROJECT_LABEL, ImagePlan
from cloister_core.devcontainer import load_devcontainer
from cloister_core.paths import CloisterPaths
from tests.cli.cli_support import BASE_IMAGE, unique
from tests.conftest import SkipOrFail

REPOSITORY = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.docker


def write_project(root: Path, greeting: str) -> None:
    (root / ".devcontainer").mkdir(parents=True, exist_ok=True)
    (root / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "Dockerfile", "args": {"GREETING": greeting}}})
    )
    (root / ".devcontainer" / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nARG GREETING\nRUN echo $GREETING > /greeting\n"
    )
    (root / ".cloister").mkdir(exist_ok=True)
    (root / ".cloister" / "Dockerfile").write_text(
        "ARG CLOISTER_BASE\nFROM ${CLOISTER_BASE}\nCOPY extra.txt /extra.txt\n"
    )
    (root / ".cloister" / "extra.txt").write_text("from .cloister\n")


def remove_project_images(client: docker.DockerClient, project: str) -> None:
    for image in client.images.list(filters={"label": f"{PROJECT_LABEL}={project}"}):
        for tag in image.tags:
            client.images.remove(tag)
        if not image.tags:
            client.images.remove(str(image.id))


@pytest.fixture
def project_name(docker_client: docker.DockerClient, skip_or_fail: SkipOrFail) -> Iterator[str]:
    try:
        docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        skip_or_fail(f"{BASE_IMAGE} is not present locally (and nothing is pulled)")
    name = unique("pi")
    try:
        yield name
    finally:
        remove_project_images(docker_client, name)


def build(
    client: docker.DockerClient, paths: CloisterPaths, root: Path, project: str
) -> tuple[ImagePlan, float]:
    devcontainer = load_devcontainer(
        root / ".devcontainer" / "devcontainer.json",
        project_root=root,
        home=root.parent / "home",
        environ={},
    )
    started = time.perf_counter()
    plan = projectimages.ensure_project_image(
        client,
        paths,
        project=project,
        root=root,
        devcontainer=devcontainer,
        base_image="cloister:latest",  # unused: the devcontainer gives the image
        source=REPOSITORY,
    )
    return plan, time.perf_counter() - started


def run(client: docker.DockerClient, image: str, script: str) -> str:
    output: bytes = client.containers.run(
        image, ["sh", "-c", script], remove=True, network_mode="none", user="0:0"
    )
    return output.decode()


def test_a_devcontainer_build_with_a_cloister_dockerfile(
    docker_client: docker.DockerClient, project_name: str, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    write_project(root, "hi")
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")

    first, fresh_seconds = build(docker_client, paths, root, project_name)
    assert not first.cached
    assert first.key is not None
    image = docker_client.images.get(first.tag)
    assert image.labels[projectimages.KEY_LABEL] == first.key
    assert image.labels[PROJECT_LABEL] == project_name
    inside = run(
        docker_client,
        first.tag,
        "cat /greeting /extra.txt && test -x /usr/local/bin/hostexec && test -d /work && echo ok",
    )
    assert inside.splitlines() == ["hi", "from .cloister", "ok"]
    assert projectimages.read_record(paths, project_name)["key"] == first.key  # type: ignore[index]

    count = len(docker_client.images.list(filters={"label": f"{PROJECT_LABEL}={project_name}"}))
    again, cached_seconds = build(docker_client, paths, root, project_name)
    assert again.cached
    assert (again.key, again.tag) == (first.key, first.tag)
    assert docker_client.images.get(again.tag).id == image.id
    assert (
        len(docker_client.images.list(filters={"label": f"{PROJECT_LABEL}={project_name}"}))
        == count
    )
    print(f"fresh build {fresh_seconds:.2f}s, cached {cached_seconds:.2f}s")

    write_project(root, "ho")
    changed, _ = build(docker_client, paths, root, project_name)
    assert not changed.cached
    assert changed.key != first.key
    assert run(docker_client, changed.tag, "cat /greeting").strip() == "ho"

    found = projectimages.list_project_images(docker_client, paths)
    mine = [item for item in found if item.project == project_name]
    assert [(item.tag, item.current) for item in mine] == [
        (changed.tag, True),
        (first.tag, False),
    ]
    chosen = projectimages.prunable(mine, lambda name: True)
    assert [item.image.tag for item in chosen] == [first.tag]
    results = projectimages.prune_project_images(docker_client, paths, chosen, lambda n: True)
    assert [result.removed for result in results] == [True]
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(first.tag)
    docker_client.images.get(changed.tag)  # the current one stays
