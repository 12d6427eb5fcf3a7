"""Project images built for real, with the classic builder, from local images only.

The Dockerfiles download nothing (this machine has no registry and no internet):
``debian:bookworm-slim`` must be present, and Cloister's slim agent image is built from
this tree when it is missing or stale (as ``cloister start`` would). Every image a test
makes carries the project label of a unique project name and is removed at the end;
nothing else on the engine (another CI job may share it) is touched.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from cloister_cli.images import builds, projectimages
from cloister_cli.images.projectimages import PROJECT_LABEL, ImagePlan, ProjectImageError
from cloister_core.devcontainer import load_devcontainer
from cloister_core.paths import CloisterPaths
from tests.cli.cli_support import BASE_IMAGE, unique
from tests.conftest import SkipOrFail

REPOSITORY = Path(__file__).resolve().parents[3]

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


@pytest.fixture(scope="module")
def agent_image(
    docker_client: docker.DockerClient,
    skip_or_fail: SkipOrFail,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """``cloister-slim:latest`` as this tree builds it (built here when missing or stale)."""
    try:
        docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        skip_or_fail(f"{BASE_IMAGE} is not present locally (and nothing is pulled)")
    spec = builds.SLIM_AGENT_IMAGE
    fingerprint = builds.source_fingerprint(REPOSITORY, spec)
    if not builds.is_current(docker_client, spec.tag, fingerprint):
        context = builds.assemble_context(
            REPOSITORY,
            spec,
            tmp_path_factory.mktemp("slim") / "context",
            docker_client.info()["Architecture"],
        )
        builds.build_image(docker_client, context, spec.tag, fingerprint=fingerprint)
    return spec.tag


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


# What people write on top of an agent image: steps that need root, none the network.
ROOT_STEPS = (
    "RUN apt-get clean && dpkg --configure -a && mkdir /opt/tool"
    " && useradd --no-create-home extra && id -u > /opt/tool/built-by\n"
)


def write_dockerfile(root: Path, where: str, agent_image: str, steps: str) -> None:
    """A ``.cloister/Dockerfile`` on the agent image (the documented base), or a
    devcontainer whose Dockerfile starts ``FROM`` it."""
    if where == ".cloister":
        (root / ".cloister").mkdir(parents=True)
        (root / ".cloister" / "Dockerfile").write_text(
            "ARG CLOISTER_BASE\nFROM ${CLOISTER_BASE}\n" + steps
        )
        return
    (root / ".devcontainer").mkdir(parents=True)
    (root / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "Dockerfile"}})
    )
    (root / ".devcontainer" / "Dockerfile").write_text(f"FROM {agent_image}\n" + steps)


def ensure(
    client: docker.DockerClient, tmp_path: Path, root: Path, project: str, agent_image: str
) -> ImagePlan:
    found = root / ".devcontainer" / "devcontainer.json"
    devcontainer = (
        load_devcontainer(found, project_root=root, home=tmp_path / "home", environ={})
        if found.exists()
        else None
    )
    return projectimages.ensure_project_image(
        client,
        CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data"),
        project=project,
        root=root,
        devcontainer=devcontainer,
        base_image=agent_image,
        source=REPOSITORY,
    )


@pytest.mark.parametrize("where", [".cloister", ".devcontainer"])
def test_a_dockerfile_from_the_agent_image_runs_its_steps_as_root(
    docker_client: docker.DockerClient,
    agent_image: str,
    project_name: str,
    tmp_path: Path,
    where: str,
) -> None:
    assert (docker_client.images.get(agent_image).attrs["Config"].get("User") or "root") == "root"
    root = tmp_path / "project"
    write_dockerfile(root, where, agent_image, ROOT_STEPS)

    plan = ensure(docker_client, tmp_path, root, project_name, agent_image)

    assert not plan.cached
    inside = run(docker_client, plan.tag, "cat /opt/tool/built-by && id -un extra && ls -d /work")
    assert inside.splitlines() == ["0", "extra", "/work"]


def test_a_failing_step_shows_its_output_in_the_error(
    docker_client: docker.DockerClient, agent_image: str, project_name: str, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    failing = "RUN echo working on it; echo the-reason >&2; exit 3"
    write_dockerfile(root, ".cloister", agent_image, f"RUN true\n{failing}\n")

    with pytest.raises(ProjectImageError) as raised:
        ensure(docker_client, tmp_path, root, project_name, agent_image)

    lines = str(raised.value).split("\n")
    assert lines[0] == (
        "building .cloister/Dockerfile: The command"
        " '/bin/sh -c echo working on it; echo the-reason >&2; exit 3' returned a non-zero code: 3"
    )
    assert re.fullmatch(rf"  at Step 4/\d+ : {re.escape(failing)}", lines[1]), lines[1]
    assert lines[2] == "  its output:"
    assert sorted(lines[3:]) == ["  | the-reason", "  | working on it"]  # stderr may come first
