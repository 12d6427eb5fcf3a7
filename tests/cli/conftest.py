"""Fixtures the CLI's acceptance modules share: a guardian of the module's own, from its
``CONFIG``, and the cloisters a test starts (stopped at its end)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.cli.cli_support import CloisterCli, guardian
from tests.cli.test_acceptance import Cloisters

if TYPE_CHECKING:
    import docker

    from tests.conftest import SkipOrFail


@pytest.fixture(scope="module")
def cli(
    request: pytest.FixtureRequest,
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    """The guardian of the requesting module, started with its ``CONFIG`` text."""
    module = request.module
    config: str = module.CONFIG
    topic = module.__name__.rsplit(".", 1)[-1].removeprefix("test_acceptance_")
    root = tmp_path_factory.mktemp(f"cloister-{topic.replace('_', '-')}")
    with guardian(docker_client, root, config, skip_or_fail) as tool:
        yield tool


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()
