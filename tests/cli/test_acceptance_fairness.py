"""Fair shares of the approval hub, from real cloisters (issue 19).

One cloister opens 110 CONNECTs to names no rule mentions (one bash process, 110
``/dev/tcp`` connections, no extra processes): its share (``proxy.max_held_per_cloister``,
16 by default) is held for the human, the surplus is refused at once with the reason.
Another cloister's request still reaches the hub's pending list (polled with the hub
secret; how fast is measured by ``benchmarks/bench_fairness.py``), and a held client
that hangs up withdraws its pending item.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import httpx
import pytest

from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    container,
    docker_executable,
    exec_in,
    exec_ok,
    free_port,
    guardian,
    wait_until,
)
from tests.cli.test_acceptance import Cloisters, new_repo

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker

SHARE = 16
HELD = 110
UI_PORT = free_port()
CONFIG = f"""\
# Written by tests/cli/test_acceptance_fairness.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
guardian:
  ui_port: {UI_PORT}
proxy:
  approval_timeout: 300s
"""

# Opens the connections, keeps the answers of the refused ones, then closes the first
# held one when told to (/tmp/fair/close) and waits for the end (/tmp/fair/done).
HOG = r"""
set -u
mkdir -p /tmp/fair
p=${HTTPS_PROXY#*@}; p=${p%/}; host=${p%:*}; port=${p##*:}
auth=$(printf 'cloister:%s' "$CLOISTER_TOKEN" | base64 -w0)
fds=()
for i in $(seq 1 COUNT); do
  exec {fd}<>"/dev/tcp/$host/$port"
  name="held-$i.unknown.example:443"
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n' \
    "$name" "$name" "$auth" >&"$fd"
  fds+=("$fd")
done
touch /tmp/fair/sent
while [ ! -e /tmp/fair/read ]; do sleep 0.1; done
held=()
for i in "${!fds[@]}"; do
  fd=${fds[$i]}
  if read -r -t 0.3 line <&"$fd"; then
    { echo "$line"; while read -r -t 2 rest <&"$fd"; do echo "$rest"; done; } \
      > "/tmp/fair/answer-$((i + 1))"
  else
    held+=("$((i + 1)):$fd")
  fi
done
printf '%s\n' "${held[@]}" > /tmp/fair/held
while [ ! -e /tmp/fair/close ]; do sleep 0.1; done
first=${held[0]}
fd=${first#*:}
exec {fd}>&-
echo "${first%%:*}" > /tmp/fair/closed
while [ ! -e /tmp/fair/done ]; do sleep 0.1; done
""".replace("COUNT", str(HELD))


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> Iterator[CloisterCli]:
    root = tmp_path_factory.mktemp("cloister-fairness")
    with guardian(docker_client, root, CONFIG, skip_or_fail) as tool:
        yield tool


@pytest.fixture
def cloisters(cli: CloisterCli) -> Iterator[Cloisters]:
    started = Cloisters(cli)
    try:
        yield started
    finally:
        started.close()


def pending(hub: httpx.Client) -> list[dict[str, Any]]:
    response = hub.get("/api/v1/pending")
    response.raise_for_status()
    domains: list[dict[str, Any]] = response.json()["domains"]
    return domains


def test_one_cloister_cannot_hide_another_ones_requests(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    hog_repo, hog = new_repo(tmp_path, "hog")
    quiet_repo, quiet = new_repo(tmp_path, "quiet")
    cloisters.start(hog_repo, hog)
    cloisters.start(quiet_repo, quiet)
    secret = (cli.data_dir / "guardian" / "hub.secret").read_text(encoding="utf-8").strip()
    hub = httpx.Client(
        base_url=f"http://127.0.0.1:{UI_PORT}",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )
    holder = subprocess.Popen(
        [docker_executable(), "exec", container(hog), "bash", "-c", HOG],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    asking: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: exec_in(hog, "test -e /tmp/fair/sent").returncode == 0, 60, "sent")
        wait_until(lambda: len(pending(hub)) >= SHARE, 30, "the hog's share held")
        time.sleep(1)  # every CONNECT has been judged by now; no more may be held
        mine = [item for item in pending(hub) if item["cloister"] == hog]
        assert len(mine) == SHARE, mine

        # The other cloister's request reaches the hub past the hog's 110.
        asking = subprocess.Popen(
            [
                docker_executable(),
                "exec",
                container(quiet),
                "curl",
                "--silent",
                "--output",
                "/dev/null",
                "--max-time",
                "120",
                "--write-out",
                "%{http_connect}",
                "https://quiet.unknown.example/",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        wait_until(
            lambda: any(item["cloister"] == quiet for item in pending(hub)),
            10,
            "the quiet cloister's request at the hub",
        )
        (theirs,) = [item for item in pending(hub) if item["cloister"] == quiet]
        assert theirs["host"] == "quiet.unknown.example"

        # The hog's surplus was refused at once, with the reason.
        exec_ok(hog, "touch /tmp/fair/read")
        wait_until(lambda: exec_in(hog, "test -e /tmp/fair/held").returncode == 0, 120, "held")
        held = exec_ok(hog, "cat /tmp/fair/held").stdout.split()
        assert len(held) == SHARE, held
        answers = exec_ok(hog, "cat /tmp/fair/answer-*").stdout
        assert answers.count("HTTP/1.1 429 Too Many Requests") == HELD - SHARE, answers[:2000]
        assert answers.count("X-Cloister-Reason: too-many-held") == HELD - SHARE
        assert (
            f"requests of this cloister already wait for a human in the approval UI"
            f" (proxy.max_held_per_cloister: {SHARE})"
        ) in answers

        # A held client hangs up: its item leaves the pending list.
        exec_ok(hog, "touch /tmp/fair/close")
        wait_until(lambda: exec_in(hog, "test -e /tmp/fair/closed").returncode == 0, 30, "closed")
        closed = exec_ok(hog, "cat /tmp/fair/closed").stdout.strip()
        host = f"held-{closed}.unknown.example"
        assert host in {item["host"] for item in mine}
        wait_until(
            lambda: host not in {item["host"] for item in pending(hub)}, 10, "the withdrawal"
        )
        remaining = [item for item in pending(hub) if item["cloister"] == hog]
        assert len(remaining) == SHARE - 1

        # The quiet cloister's request is answered when the human decides.
        hub.post(
            f"/api/v1/domains/{theirs['id']}/decision", json={"action": "deny", "scope": "once"}
        ).raise_for_status()
        out, _ = asking.communicate(timeout=30)
        assert out.decode().strip() == "403"
    finally:
        exec_in(hog, "touch /tmp/fair/read /tmp/fair/close /tmp/fair/done")
        for process in (holder, asking):
            if process is not None:
                try:
                    process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
        hub.close()
