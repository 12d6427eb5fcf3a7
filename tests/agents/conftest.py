"""The images of the agent tests: the fake API and the real agent CLIs (module-scoped)."""

from __future__ import annotations

from pathlib import Path

import docker
import docker.errors
import pytest

from cloister_cli.images.builds import SLIM_AGENT_IMAGE, assemble_context, build_image
from cloister_cli.images.sourcetree import find_workspace
from tests.agents.agent_images import (
    DEFAULT_BASE,
    AgentVersions,
    fakeapi_image,
    pinned_versions,
)
from tests.agents.agent_images import agents_image as build_agents_image
from tests.conftest import SkipOrFail


@pytest.fixture(scope="module")
def versions() -> AgentVersions:
    return pinned_versions()


@pytest.fixture(scope="module")
def base_image(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``cloister-slim:latest`` when present, else the slim image built from this tree."""
    try:
        docker_client.images.get(DEFAULT_BASE)
    except docker.errors.ImageNotFound:
        pass
    else:
        return DEFAULT_BASE
    tag = "cloister-slim:test"
    workspace = find_workspace(Path(__file__).resolve().parent)
    architecture = docker_client.info()["Architecture"]
    context = assemble_context(
        workspace, SLIM_AGENT_IMAGE, tmp_path_factory.mktemp("slim") / "ctx", architecture
    )
    build_image(docker_client, context, tag)
    return tag


@pytest.fixture(scope="module")
def agents_image(
    docker_client: docker.DockerClient,
    base_image: str,
    versions: AgentVersions,
    skip_or_fail: SkipOrFail,
) -> str:
    """The agents' image (built only when its inputs changed)."""
    return build_agents_image(
        docker_client, base_image, versions=versions, unavailable=skip_or_fail
    )


@pytest.fixture(scope="module")
def images(docker_client: docker.DockerClient, agents_image: str) -> tuple[str, str]:
    """The fake API's image (built only when ``fakeapi.py`` changed) and the agents'."""
    return fakeapi_image(docker_client), agents_image
