"""Family 8, fail closed: without its guardian a cloister reaches nothing.

The cloister's network is internal: its only way out is the guardian's proxy, its only
way to the host the hostexec gateway. So when the guardian is stopped or has crashed, a
running cloister, and a cloister container the engine starts again meanwhile, have
neither egress nor hostexec — they fail, promptly, rather than find another way. And
``cloister start`` never leaves a cloister running without its guardian.

Each module's guardian is its own (this family stops and kills it), one per host user.

=====================================================  =====================================
attack (from inside the cloister)                      result
=====================================================  =====================================
``test_guardian_stopped``: allowed HTTPS, plain HTTP,   every request fails (no proxy name,
hostexec, direct TCP to the fake internet, while        no route); hostexec fails with its
``cloister guardian stop`` has stopped it               error; works again after a start
… the cloister's container restarted by the engine     the restarted cloister has no egress
while the guardian is down                              and no hostexec either
… ``cloister start`` when the guardian cannot come up   fails naming the port, and leaves no
(someone else listens on its hub port)                  cloister container
``test_guardian_crashed``: the same with every service  the same: nothing reaches the fake
container killed (``docker kill``) and the host         internet (its log proves it)
executor killed
=====================================================  =====================================
"""

from __future__ import annotations

import os
import signal
import socket

import pytest

from cloister_core import stack as stack_names
from tests.cli.cli_support import docker_executable, make_repo, run_command, unique
from tests.e2e.harness import ALLOWED, Cloister, Stack
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SERVICES = ("proxy", "approval", "gateway", "credentials")


def works(cloister: Cloister) -> None:
    """The control: through the guardian, egress and hostexec work."""
    status, body = cloister.curl(f"https://{ALLOWED}/control")
    assert status == "200", (status, body)
    assert cloister.ok("hostexec echo through").stdout == "through\n"


def reaches_nothing(cloister: Cloister, marker: str) -> None:
    """Nothing the cloister tries gets anywhere: through the proxy (HTTPS, plain HTTP),
    past it (TCP straight to the fake internet's address), hostexec. The tries run at
    once (each waits out a name the engine's DNS no longer knows)."""
    address = cloister.stack.internet.address
    tries = {
        "https": f"curl -s -o /dev/null --max-time 20 https://{ALLOWED}/{marker}-https",
        "http": f"curl -s -o /dev/null --max-time 20 http://{ALLOWED}/{marker}-http",
        "direct": f"curl -s -o /dev/null --noproxy '*' --max-time 5 http://{address}/{marker}",
        "hostexec": "hostexec echo escaped",
    }
    script = "".join(
        f"( {command} > /tmp/{name}.out 2>&1; echo $? > /tmp/{name}.status ) &\n"
        for name, command in tries.items()
    )
    script += "wait\n" + "".join(
        f"echo {name} $(cat /tmp/{name}.status); cat /tmp/{name}.out\n" for name in tries
    )
    result = cloister.ok(script, timeout=120)
    statuses = {
        line.split()[0]: line.split()[1]
        for line in result.stdout.splitlines()
        if line.split() and line.split()[0] in tries and len(line.split()) == 2
    }
    assert set(statuses) == set(tries), result.describe()
    assert all(status != "0" for status in statuses.values()), result.describe()
    assert "escaped" not in result.stdout.replace("hostexec echo escaped", ""), result.describe()
    assert "guardian" in result.stdout, result.describe()  # hostexec says what is missing
    assert not cloister.stack.internet.seen(marker), "a request reached the fake internet"


def executor_pid(stack: Stack) -> int | None:
    status = stack.cli.json("guardian", "status", "--json")
    pid = status.get("executor_pid")
    return int(pid) if pid else None


def test_guardian_stopped(own_stack: Stack) -> None:
    """Stopped: the running cloister, the same container restarted by the engine, and a
    start that cannot bring the guardian up."""
    cloister = own_stack.cloister("closed")
    works(cloister)
    own_stack.cli.ok("guardian", "stop")
    try:
        reaches_nothing(cloister, unique("stopped"))
        restarted = run_command(
            [docker_executable(), "restart", "--time", "1", cloister.container], timeout=120
        )
        assert restarted.returncode == 0, restarted.describe()
        wait_until(lambda: cloister.sh("true").returncode == 0, 60, "the restarted cloister")
        reaches_nothing(cloister, unique("restarted"))
        no_start_without_guardian(own_stack)
    finally:
        own_stack.guardian_start()
    works(cloister)


def no_start_without_guardian(stack: Stack) -> None:
    """``cloister start`` while the guardian cannot come up (someone else listens on the
    hub's port) fails naming the port, and leaves no cloister container."""
    name = unique("noguardian")
    repo = make_repo(stack.cli.root / name, user=stack.user)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", stack.ui_port))
        squatter.listen()
        failed = stack.cli.run("start", "-d", cwd=repo)
    assert failed.returncode != 0, failed.describe()
    assert str(stack.ui_port) in failed.output, failed.describe()
    found = run_command(
        [
            docker_executable(),
            "ps",
            "-aq",
            "--filter",
            f"label={stack_names.LABEL_CLOISTER}={name}",
        ],
        timeout=30,
    )
    assert found.stdout.strip() == "", found.describe()


def test_guardian_crashed(own_stack: Stack) -> None:
    cloister = own_stack.cloister("crashed")
    works(cloister)
    pid = executor_pid(own_stack)
    containers = [own_stack.cli.instance.service(service) for service in SERVICES]
    killed = run_command([docker_executable(), "kill", *containers], timeout=60)
    assert killed.returncode == 0, killed.describe()
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    try:
        reaches_nothing(cloister, unique("crashed"))
    finally:
        own_stack.guardian_start()
    works(cloister)
