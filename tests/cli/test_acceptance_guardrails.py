"""Issue 13 acceptance: the git guardrails inside real cloisters (a real engine).

Driven as a person (or an agent) drives it: ``cloister start -d`` in a repository whose
pre-commit hook leaves a trace, then git inside with ``docker exec``, in a plain shell
and in a login shell (``bash -lc``, whose /etc/profile sets PATH afresh). ``git commit
--no-verify`` and ``git push --force`` (to a bare remote made inside) are refused with
the reason and the way to do it on the host, changing nothing; a normal commit and push
work and run the hook.

Images: the slim one, and the default one: ``cloister:latest`` when this machine has it,
else the real agent CLIs the default image pins on the slim base, as tests/agents builds
them (``cloister:latest`` itself starts from a registry's Ubuntu and downloads Go and
Node.js, which machines without a registry cannot do); and a devcontainer's image with a
PATH of its own.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import docker.errors
import pytest

from cloister_cli.context import Context
from cloister_cli.start.ensure import ensure_agent_image
from cloister_core.paths import CloisterPaths
from tests.agents.agent_images import agents_image, pinned_versions
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    exec_in,
    exec_ok,
    git,
    guardian,
    make_repo,
    remove_containers,
    squash,
    unique,
)

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

CONFIG = f"""\
# Written by tests/cli/test_acceptance_guardrails.py
defaults:
  image: {SLIM_IMAGE}
  memory: 1g
"""
DEFAULT_IMAGE = "cloister:latest"
START_TIMEOUT = 600.0
REFUSED = 2
# Inside the cloister: a bare remote holding the project's branch as main.
REMOTE = "/tmp/remote.git"
SET_UP_REMOTE = f"git init -q --bare {REMOTE} && git push -q {REMOTE} HEAD:refs/heads/main"


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    with guardian(
        docker_client, tmp_path_factory.mktemp("cloister-guardrails"), CONFIG, skip_or_fail
    ) as tool:
        yield tool


@pytest.fixture(scope="module")
def default_image(
    cli: CloisterCli, docker_client: docker.DockerClient, skip_or_fail: SkipOrFail
) -> str:
    """``cloister:latest`` if present, else the agent CLIs on the (current) slim image."""
    try:
        docker_client.images.get(DEFAULT_IMAGE)
    except docker.errors.ImageNotFound:
        pass
    else:
        return DEFAULT_IMAGE
    context = Context(paths=CloisterPaths(config_dir=cli.config_dir, data_dir=cli.data_dir))
    ensure_agent_image(context, SLIM_IMAGE, lambda image, line: None)  # as a start would
    return agents_image(
        docker_client, SLIM_IMAGE, versions=pinned_versions(), unavailable=skip_or_fail
    )


def project(cli: CloisterCli, prefix: str) -> tuple[Path, str]:
    """A repository whose pre-commit hook leaves /tmp/hook-ran: the project's own, in the
    work tree (``core.hooksPath``), which the agent's commits go through (read-only
    inside); hooks in the human's ``.git/hooks`` stay the human's."""
    name = unique(prefix)
    repo = make_repo(cli.root / name)
    hook = repo / ".githooks" / "pre-commit"
    hook.parent.mkdir()
    hook.write_text("#!/bin/sh\necho ran >> /tmp/hook-ran\n", encoding="utf-8")
    hook.chmod(0o755)
    git(repo, "add", ".githooks")
    git(repo, "commit", "-q", "-m", "the project's hooks")
    git(repo, "config", "core.hooksPath", ".githooks")
    return repo, name


def start(cli: CloisterCli, repo: Path, name: str, *args: str) -> None:
    result = cli.ok("start", "-d", *args, cwd=repo, timeout=START_TIMEOUT)
    assert f"cloister {name} " in squash(result.stderr), result.describe()


def stop(cli: CloisterCli, name: str) -> None:
    cli.run("stop", name)
    remove_containers([name])


def login(script: str) -> str:
    """*script* in a login shell (``bash -lc``), as exec_in runs it."""
    return f"bash -lc {shlex.quote(script)}"


def inside(name: str, *args: str) -> str:
    """git in the cloister (its own git directory): its output, stripped."""
    return exec_ok(name, shlex.join(["/usr/bin/git", *args])).stdout.strip()


def assert_refused(name: str, script: str, command: str, why: str) -> None:
    result = exec_in(name, script)
    assert result.returncode == REFUSED, result.describe()
    assert result.stderr.splitlines() == [
        f"cloister: the git guardrails refused `git {command}`: {why}.",
        "cloister: to do it anyway, run it on the host:",
        f'  git -C "$(cloister path {name})" {command}',
        f"cloister: (this cloister's branches are refs/cloister/{name}/BRANCH there, after"
        f" `cloister sync {name}`)",
    ], result.describe()


@pytest.mark.parametrize("kind", ["slim", "default"])
def test_no_verify_and_force_push_are_refused_a_normal_commit_works(
    cli: CloisterCli, request: pytest.FixtureRequest, kind: str
) -> None:
    image = SLIM_IMAGE if kind == "slim" else str(request.getfixturevalue("default_image"))
    repo, name = project(cli, f"rails-{kind}")
    try:
        start(cli, repo, name, "--image", image)
        for shell in (lambda script: script, login):
            found = exec_ok(name, shell('echo "$PATH"; command -v git')).stdout.split()
            assert found[0].startswith("/opt/cloister/bin:"), found
            assert found[1] == "/opt/cloister/bin/git", found
        exec_ok(name, SET_UP_REMOTE)
        head = inside(name, "rev-parse", "HEAD")
        (repo / "README.md").write_text("changed by the agent\n", encoding="utf-8")

        skip = "commit -a --no-verify -m 'skip the checks'"
        hooks = "skipping the hooks skips the project's checks (fix what they report instead)"
        assert_refused(name, f"git {skip}", skip, hooks)
        assert_refused(name, login(f"git {skip}"), skip, hooks)
        assert_refused(name, login("git commit -anm quick"), "commit -anm quick", hooks)
        force = f"push --force {REMOTE} HEAD:main"
        rewrites = "a force push rewrites history others may already have"
        assert_refused(name, f"git {force}", force, rewrites)
        assert_refused(name, login(f"git {force}"), force, rewrites)
        assert_refused(name, f"git push {REMOTE} +HEAD:main", f"push {REMOTE} +HEAD:main", rewrites)
        assert inside(name, "rev-parse", "HEAD") == head
        assert exec_in(name, "test -e /tmp/hook-ran").returncode == 1  # no hook ran

        exec_ok(name, "git commit -q -a -m 'a normal commit'")
        assert inside(name, "log", "-1", "--format=%s") == "a normal commit"
        assert inside(name, "rev-parse", "HEAD~1") == head
        cli.ok("sync", name)  # and it comes back to the human's repository
        assert git(repo, "log", "-1", "--format=%s") == "a normal commit"
        assert exec_ok(name, "cat /tmp/hook-ran").stdout == "ran\n"  # the checks ran
        exec_ok(name, login(f"git push -q {REMOTE} HEAD:main"))
        remote = exec_ok(name, f"git --git-dir={REMOTE} rev-parse main").stdout.strip()
        assert remote == inside(name, "rev-parse", "HEAD")

        # The wrapper cannot be changed from inside; the real git, named, is not guarded
        # (a guard against accidents, not a boundary: the README says so).
        assert exec_in(name, "echo exit 0 > /opt/cloister/bin/git").returncode != 0
        exec_ok(name, "/usr/bin/git commit -q --allow-empty -n -m named")
        assert inside(name, "log", "-1", "--format=%s") == "named"
    finally:
        stop(cli, name)


def test_a_devcontainers_image_and_path(cli: CloisterCli) -> None:
    """The devcontainer's own PATH is kept, after the guarded git."""
    repo, name = project(cli, "rails-dev")
    devcontainer = repo / ".devcontainer" / "devcontainer.json"
    devcontainer.parent.mkdir()
    devcontainer.write_text(
        f'{{"image": "{SLIM_IMAGE}",'
        ' "containerEnv": {"PATH": "/opt/tools/bin:/usr/local/bin:/usr/bin:/bin"}}\n',
        encoding="utf-8",
    )
    git(repo, "add", ".devcontainer")
    git(repo, "commit", "-q", "-m", "a devcontainer")
    try:
        start(cli, repo, name, "--yes")
        path = exec_ok(name, 'echo "$PATH"').stdout.strip()
        assert path == "/opt/cloister/bin:/opt/tools/bin:/usr/local/bin:/usr/bin:/bin"
        skip = "commit --allow-empty -n -m skip"
        hooks = "skipping the hooks skips the project's checks (fix what they report instead)"
        assert_refused(name, login(f"git {skip}"), skip, hooks)
        exec_ok(name, "git commit -q --allow-empty -m fine")
        assert inside(name, "log", "-1", "--format=%s") == "fine"
    finally:
        stop(cli, name)


def test_off_for_a_project_leaves_git_alone(cli: CloisterCli) -> None:
    repo, name = project(cli, "rails-off")
    cli.write_project_config(name, "git_guardrails:\n  enabled: false\n")
    try:
        start(cli, repo, name)
        assert exec_ok(name, "command -v git").stdout.strip() == "/usr/bin/git"
        assert exec_in(name, "test -e /opt/cloister/bin").returncode == 1
        exec_ok(name, "git commit -q --allow-empty --no-verify -m unguarded")
        assert inside(name, "log", "-1", "--format=%s") == "unguarded"
    finally:
        stop(cli, name)
