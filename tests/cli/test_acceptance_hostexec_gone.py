"""A held ``hostexec`` command whose client goes away leaves the approval UI, from a real
cloister.

``cloister exec NAME -- hostexec touch MARKER`` asks for a command the config leaves to
the human, so it waits in the hub's pending list (polled with the hub secret). Its curl
is then killed (found among the host's processes: a cloister's processes are host
processes): the gateway sees its client's connection close, cancels its question, and
the hub withdraws the item. Nothing runs on the host, the cloister's log says why, and
a command whose client stays is still run when the human approves it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
)
from tests.cli.test_acceptance import Cloisters, new_repo
from tests.waiting import free_port, wait_until

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.docker

UI_PORT = free_port()
CONFIG = f"""\
# Written by tests/cli/test_acceptance_hostexec_gone.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
guardian:
  ui_port: {UI_PORT}
hostexec:
  auto_approve: []
  manual_approve:
    - pattern: "^touch [a-z0-9-]+$"
"""
PENDING_WAIT = 60.0  # for the command to reach the hub
GONE_WAIT = 10.0  # for the item to leave it (the gateway waits minutes for a human)


def pending_commands(hub: httpx.Client, name: str) -> list[dict[str, Any]]:
    response = hub.get("/api/v1/pending")
    response.raise_for_status()
    return [item for item in response.json()["commands"] if item["cloister"] == name]


def hostexec_curl(marker: str) -> int | None:
    """The host pid of the curl that ``hostexec touch MARKER`` started, if it runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if Path(argv[0].decode()).name != "curl" or not any(
                arg.endswith(b"/request") for arg in argv
            ):
                continue
            # The fields after the command's name, which is in parentheses.
            parent = (entry / "stat").read_text().rpartition(")")[2].split()[1]
            asking = (Path("/proc") / parent / "cmdline").read_bytes()
        except (OSError, IndexError, UnicodeDecodeError):  # gone meanwhile, or not ours
            continue
        if b"hostexec\0touch\0" + marker.encode() + b"\0" in asking:
            return int(entry.name)
    return None


def records(cli: CloisterCli, name: str) -> list[dict[str, Any]]:
    """Cloister *name*'s log (``cloister logs --json``: one JSON record a line)."""
    return [json.loads(line) for line in cli.ok("logs", name, "--json").stdout.splitlines()]


def test_a_killed_hostexec_client_withdraws_its_command(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "gone")
    cloisters.start(repo, name)
    secret = (cli.data_dir / "guardian" / "hub.secret").read_text(encoding="utf-8").strip()
    hub = httpx.Client(
        base_url=f"http://127.0.0.1:{UI_PORT}",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )
    marker = f"gone-{name}".lower()
    waiting: subprocess.Popen[str] | None = None
    try:
        waiting = subprocess.Popen(
            cli.command("exec", name, "--", "hostexec", "touch", marker),
            cwd=repo,
            env=cli.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        (item,) = wait_until(
            lambda: pending_commands(hub, name), PENDING_WAIT, "the command to wait for a human"
        )
        assert item["argv"] == ["touch", marker]

        # The agent is killed: its client's connection closes.
        curl = wait_until(lambda: hostexec_curl(marker), 10, "the hostexec client's curl")
        os.kill(curl, signal.SIGKILL)
        _out, err = waiting.communicate(timeout=30)
        assert waiting.returncode == 1, err
        assert "did not answer" in err, err

        wait_until(
            lambda: not pending_commands(hub, name), GONE_WAIT, "the command to be withdrawn"
        )
        refused = hub.post(f"/api/v1/commands/{item['id']}/decision", json={"action": "approve"})
        assert refused.status_code >= 400, refused.text
        lines = records(cli, name)
        (gone,) = [line for line in lines if line.get("status") == "client-gone"]
        assert (gone["event"], gone["command"]) == ("hostexec.decision", f"touch {marker}")
        assert gone["reason"] == "the client closed the connection while waiting for approval"
        assert not [line for line in lines if line.get("id") == gone["id"]][2:]
        assert any(
            line["event"] == "approval.command.withdrawn" and line["id"] == item["id"]
            for line in lines
        )
        assert not (repo / marker).exists()

        # A client that stays still gets its command run when the human approves it.
        waiting = subprocess.Popen(
            cli.command("exec", name, "--", "hostexec", "touch", f"stayed-{marker}"),
            cwd=repo,
            env=cli.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        (item,) = wait_until(
            lambda: pending_commands(hub, name), PENDING_WAIT, "the second command"
        )
        hub.post(
            f"/api/v1/commands/{item['id']}/decision", json={"action": "approve"}
        ).raise_for_status()
        _out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert (repo / f"stayed-{marker}").exists()
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
        hub.close()
