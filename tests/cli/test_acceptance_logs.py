"""Per-cloister logs against a real Docker engine: two cloisters each make a proxy
request and run a ``hostexec`` command; ``cloister logs A`` shows A's lines (proxy,
hostexec, decisions) and none of B's, also after A stopped.

The module starts a guardian of its own (``guardian(...)``: an instance of its own, on a
free UI port) and stops it at the end, as tests/cli/test_acceptance.py does.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import pytest

from tests.cli.cli_support import (
    CONNECT_ACCEPTED,
    SLIM_IMAGE,
    CloisterCli,
    exec_in,
    exec_ok,
    guardian,
    make_repo,
    remove_containers,
    squash,
    unique,
)

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker

DENIED_PARENT = "denied.cloister.test"
CONFIG = f"""\
# Written by tests/cli/test_acceptance_logs.py
defaults:
  image: {SLIM_IMAGE}
proxy:
  deny:
    - pattern: "*.{DENIED_PARENT}"
hostexec:
  auto_approve:
    - pattern: "^echo( .*)?$"
"""


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    with guardian(
        docker_client, tmp_path_factory.mktemp("cloister-logs"), CONFIG, skip_or_fail
    ) as tool:
        yield tool


@pytest.fixture
def pair(cli: CloisterCli, tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Two running cloisters, by name: their repositories."""
    repos = {}
    for prefix in ("loga", "logb"):
        name = unique(prefix)
        repos[name] = make_repo(tmp_path / name)
    try:
        for name, repo in repos.items():
            started = cli.ok("start", "-d", cwd=repo)
            assert f"cloister {name} " in squash(started.stderr), started.describe()
        yield repos
    finally:
        for name in repos:
            cli.run("stop", name)
        remove_containers(list(repos))


def act(name: str) -> None:
    """What the agent of *name* does: a CONNECT the config denies, and a host command."""
    host = f"{name}.{DENIED_PARENT}"
    curl = exec_in(
        name,
        "curl --silent --output /dev/null --max-time 10 --write-out '%{http_connect}'"
        f' --proxy "$HTTPS_PROXY" https://{host}/',
    )
    assert curl.stdout.strip() == CONNECT_ACCEPTED, curl.describe()  # 403: denied by the rule
    said = exec_ok(name, shlex.join(["hostexec", "echo", f"marker-{name}"]))
    assert said.stdout == f"marker-{name}\n"


def records(cli: CloisterCli, name: str, cwd: Path | None = None) -> list[dict[str, Any]]:
    result = cli.ok("logs", name, "--json", cwd=cwd)
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_cloisters_logs_are_its_own(cli: CloisterCli, pair: dict[str, Path]) -> None:
    (a, repo_a), (b, _repo_b) = pair.items()
    act(a)
    act(b)

    mine = records(cli, a)
    assert mine, "no lines"
    assert {record["cloister"] for record in mine} == {a}
    assert b not in json.dumps(mine)
    proxy = [r for r in mine if r["event"] == "proxy.request"]
    assert [(r["host"], r["port"], r["verdict"], r["status"]) for r in proxy] == [
        (f"{a}.{DENIED_PARENT}", 443, "deny", 403)
    ]
    hostexec = [r for r in mine if r["event"].startswith("hostexec.")]
    assert [r["event"] for r in hostexec] == [
        "hostexec.request",
        "hostexec.decision",
        "hostexec.complete",
    ]
    assert hostexec[0]["argv"] == ["echo", f"marker-{a}"]
    assert hostexec[1]["status"] == "auto_approved"
    assert hostexec[2]["exit_code"] == 0
    # The same lines are in the audit log, with B's.
    audit = (cli.data_dir / "audit.log").read_text(encoding="utf-8")
    assert all(json.dumps(r, ensure_ascii=False, separators=(",", ":")) in audit for r in mine)
    assert f"marker-{b}" in audit

    shown = cli.ok("logs", a).stdout
    assert f"CONNECT {a}.{DENIED_PARENT}:443 deny 403" in shown
    assert f"echo marker-{a}" in shown
    assert f"auto_approved: echo marker-{a}" in shown
    assert "exit 0" in shown
    assert b not in shown
    theirs = records(cli, b)
    assert {record["cloister"] for record in theirs} == {b}
    assert a not in json.dumps(theirs)

    # Stopped, its log stays; found from its directory too.
    cli.ok("stop", a)
    after = cli.ok("logs", "--json", cwd=repo_a)
    assert [json.loads(line) for line in after.stdout.splitlines()] == mine
    assert cli.ok("logs", a, "-n", "1", "--json").stdout.strip() == json.dumps(
        mine[-1], separators=(",", ":")
    )


def test_an_unknown_cloister_has_no_log(cli: CloisterCli) -> None:
    result = cli.fails("logs", "never-started")
    assert "no cloister 'never-started' on this machine has a log" in result.stderr
