"""Issue 23 acceptance 1, against a real Docker engine: the ``docker run`` that
``cloister start --dry-run --json`` shows is the one a start executes.

The dry run is the installed ``cloister`` command's; the start is the library's
(:func:`plan_start` then :func:`apply`, in this process, on this module's guardian and
directories), with the docker SDK's ``containers.run`` recorded as it is called. The
project's image is built first (``cloister images build``): what an image not yet built
sets is what a dry run says it cannot know. The token differs (each plan makes its
own): masked on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.models.containers import Container, ContainerCollection

from cloister_cli.container import devoverrides
from cloister_cli.context import Context
from cloister_cli.start import apply, dryrun, plan
from cloister_core.paths import CloisterPaths
from tests.cli.cli_support import (
    BASE_IMAGE,
    SLIM_IMAGE,
    CloisterCli,
    docker_executable,
    make_repo,
    run_command,
    unique,
)

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_plan.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  cpus: 1.5
  pids: 256
"""
DEVCONTAINER = {
    "image": BASE_IMAGE,
    "containerEnv": {"GREETING": "hello"},
    "mounts": ["type=volume,source=cache,target=/work/.cache"],
}


@pytest.fixture
def project(cli: CloisterCli, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    name = unique("plan")
    repo = make_repo(tmp_path / name)
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps(DEVCONTAINER), encoding="utf-8"
    )
    try:
        yield repo, name
    finally:
        cli.run("stop", name)
        # The devcontainer's named volume outlives the cloister (as a person's should).
        run_command(
            [docker_executable(), "volume", "rm", "-f", devoverrides.volume_name(name, "cache")],
            timeout=60,
        )


def test_the_dry_runs_docker_run_is_the_one_a_start_executes(
    cli: CloisterCli, project: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, name = project
    cli.ok("images", "build", "--yes", cwd=repo, timeout=600)
    shown = cli.ok("start", "--dry-run", "--json", cwd=repo).json()

    executed: list[dict[str, Any]] = []
    run = ContainerCollection.run

    def recorded(self: ContainerCollection, image: str, **kwargs: Any) -> Container:
        executed.append({"image": image, **kwargs})
        return run(self, image, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(ContainerCollection, "run", recorded)
    context = Context(paths=CloisterPaths(cli.config_dir, cli.data_dir), home=Path.home())
    started = plan.plan_start(context, repo, plan.StartOptions(assume_yes=True))
    assert isinstance(started, plan.StartPlan)
    outcome = apply.apply(context, started)
    assert outcome.created
    assert outcome.name == name

    (cloister,) = [item for item in executed if item["name"] == started.container.container]
    del cloister["networking_config"]  # its address on its network: made by the start
    assert dryrun.docker_run_argv(cloister, secret=started.secret) == shown["docker_run"]
