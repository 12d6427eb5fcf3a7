"""The hostexec gateway: tokens, argv checks, patterns, the hub, the executor, audit.

The gateway runs under Starlette's TestClient; the executor daemon runs for real on a
Unix socket in a background thread; manual approvals go to the real approval hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from cloister_core.decisions import DecisionStore, remove_session_decisions
from cloister_core.tokens import TokenRecord, write_token_file
from cloister_executor.daemon import ExecutorDaemon, ExecutorSettings
from cloister_executor.gateway import GatewaySettings, create_app
from cloister_executor.locations import secret_path, socket_path
from tests.approval.conftest import CREDENTIAL, Background, LiveHub, wait_for

CONFIG = """hostexec:
  auto_approve:
    - pattern: "^(echo|pwd|true|printf)( .*)?$"
  manual_approve:
    - pattern: "^git push( .*)?$"
  timeout: 5s
"""


class DaemonThread:
    """The executor daemon serving in its own thread and event loop."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self.messages: list[str] = []
        self.daemon = ExecutorDaemon(settings, self.messages.append)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        with contextlib.suppress(asyncio.CancelledError):
            await self.daemon.serve(ready=self._ready.set)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        assert self._loop is not None
        assert self._task is not None
        self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(10)


CLOISTER_IP = "172.30.0.7"  # the cloister's address on cloister-net (its token is bound to it)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    config, data, project = tmp_path / "config", tmp_path / "data", tmp_path / "project"
    config.mkdir()
    project.mkdir()
    (config / "config.yaml").write_text(CONFIG, encoding="utf-8")
    record = TokenRecord.create(cloister="api", project="api", path=project, address=CLOISTER_IP)
    write_token_file(config / "tokens", record)
    daemon = DaemonThread(ExecutorSettings(config_dir=config, data_dir=data))
    hub = LiveHub(tmp_path / "hub", config_dir=config)  # one config directory, as in the stack
    settings = GatewaySettings(
        config_dir=config,
        data_dir=data,
        executor=f"unix:{socket_path(daemon.daemon._paths)}",
        executor_secret_file=secret_path(daemon.daemon._paths),
        approval_url=hub.url,
        approval_credential=SecretStr(CREDENTIAL),
        approval_timeout=timedelta(seconds=2),
        audit_log=tmp_path / "audit.log",
        cloister_logs=tmp_path / "logs",
    )
    with TestClient(create_app(settings), client=(CLOISTER_IP, 40000)) as client:
        yield {
            "client": client,
            "record": record,
            "project": project,
            "hub": hub,
            "audit": tmp_path / "audit.log",
            "logs": tmp_path / "logs",
            "daemon": daemon,
            "settings": settings,
        }
    hub.stop()
    daemon.stop()


OWN_TOKEN = object()  # stands for the cloister's own token


def post(world: dict[str, Any], body: object, token: str | object | None = OWN_TOKEN) -> Any:
    if token is OWN_TOKEN:
        token = world["record"].secret
    headers = {} if token is None else {"X-Cloister-Token": str(token)}
    response = world["client"].post("/request", json=body, headers=headers)
    return response.status_code, response.json()


def test_auto_approved_runs_in_the_cloister_directory(world: dict[str, Any]) -> None:
    assert post(world, {"args": ["echo", "hi"]}) == (
        200,
        {
            "status": "auto_approved",
            "exit_code": 0,
            "stdout": "hi\n",
            "stderr": "",
            "stdout_truncated": False,
            "stderr_truncated": False,
            "reason": None,
        },
    )
    _status, body = post(world, {"args": ["pwd"]})
    assert body["stdout"] == f"{world['project']}\n"


def test_cmd_field_is_informational_only(world: dict[str, Any]) -> None:
    status, body = post(world, {"cmd": "echo harmless", "args": ["rm", "-rf", "/"]})
    assert (status, body["status"]) == (200, "denied")
    assert "`rm -rf /` matches no auto_approve or manual_approve pattern" in body["reason"]


def test_one_argument_is_one_argument(world: dict[str, Any], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _status, body = post(world, {"args": ["echo", f"a; touch {marker}"]})
    assert body["stdout"] == f"a; touch {marker}\n"
    assert not marker.exists()
    _status, body = post(world, {"args": [f"true; touch {marker}"]})
    assert body["status"] == "denied"
    assert not marker.exists()


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("0" * 64, 401), ("", 401)],
)
def test_token_is_required(world: dict[str, Any], token: str | None, status: int) -> None:
    code, body = post(world, {"args": ["true"]}, token=token)
    assert code == status
    assert body["status"] == "error"
    assert "X-Cloister-Token" in body["reason"]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"args": []}, "argv must not be empty"),
        ({"args": ["echo", "a\x00b"]}, "NUL"),
        ({"args": "echo hi"}, "invalid request"),
        ({"args": ["echo", 3]}, "invalid request"),
        ({"argv": ["echo"]}, "invalid request"),
        ([], "invalid request"),
    ],
)
def test_malformed_requests(world: dict[str, Any], body: object, problem: str) -> None:
    code, answer = post(world, body)
    assert code == 400
    assert answer["status"] == "error"
    assert problem in answer["reason"]


def test_oversized_body_is_refused(world: dict[str, Any]) -> None:
    code, answer = post(world, {"args": ["echo", "x" * 70_000]})
    assert code == 413
    assert "over 65536 bytes" in answer["reason"]


def test_manual_approval_through_the_hub(world: dict[str, Any]) -> None:
    hub: LiveHub = world["hub"]
    with hub.human() as human:
        waiting = Background(lambda: post(world, {"args": ["git", "push", "origin", "main"]}))
        (item,) = wait_for(lambda: human.get("/api/v1/pending").json()["commands"])
        assert item["argv"] == ["git", "push", "origin", "main"]
        assert item["cwd"] == str(world["project"])
        assert item["command"] == "git push origin main"
        human.post(f"/api/v1/commands/{item['id']}/decision", json={"action": "approve"})
        code, body = waiting.join()
        assert body["status"] == "approved"
        assert body["exit_code"] != 0  # not a git repository; the point is that it ran
        assert body["stderr"]

        waiting = Background(lambda: post(world, {"args": ["git", "push", "--force"]}))
        (item,) = wait_for(lambda: human.get("/api/v1/pending").json()["commands"])
        human.post(
            f"/api/v1/commands/{item['id']}/decision", json={"action": "deny", "reason": "not now"}
        )
        code, body = waiting.join()
        assert (code, body["status"], body["reason"]) == (200, "denied", "not now")
        assert body["exit_code"] is None

    code, body = post(world, {"args": ["git", "push"]})  # nobody answers within 2 s
    assert (body["status"], body["reason"]) == ("timeout", "nobody approved it in time")


@pytest.mark.parametrize("scope", ["session", "project"])
def test_a_command_approved_beyond_once_runs_again_without_asking(
    world: dict[str, Any], scope: str
) -> None:
    hub: LiveHub = world["hub"]
    push = {"args": ["git", "push", "origin", "main"]}
    with hub.human() as human:
        waiting = Background(lambda: post(world, push))
        (item,) = wait_for(lambda: human.get("/api/v1/pending").json()["commands"])
        decision = human.post(
            f"/api/v1/commands/{item['id']}/decision", json={"action": "approve", "scope": scope}
        ).json()
        assert waiting.join()[1]["status"] == "approved"
        # The same command again: from the decision file, nobody is asked (the policy
        # files are re-read at most twice a second).
        wait_for(lambda: post(world, push)[1]["status"] == "auto_approved")
        # Another command still waits for a human (and times out here).
        assert post(world, {"args": ["git", "push", "--force"]})[1]["status"] == "timeout"
        # Undone: the human is asked again.
        human.post(f"/api/v1/decisions/{decision['id']}/undo").raise_for_status()
        wait_for(lambda: post(world, push)[1]["status"] == "timeout")


def test_a_stopped_cloister_forgets_its_session_commands(world: dict[str, Any]) -> None:
    paths = world["settings"].paths
    DecisionStore(paths).add_command("session", "git push origin main", "api")
    push = {"args": ["git", "push", "origin", "main"]}
    assert post(world, push)[1]["status"] == "auto_approved"
    remove_session_decisions(paths, "api")  # what `cloister stop` does
    assert post(world, push)[1]["status"] == "timeout"


def test_executor_down_is_an_error(world: dict[str, Any]) -> None:
    world["daemon"].stop()
    _code, body = post(world, {"args": ["true"]})
    assert body["status"] == "error"
    assert "host executor unavailable" in body["reason"]


def test_audit_lines(world: dict[str, Any]) -> None:
    post(world, {"args": ["printf", "x"]})
    post(world, {"args": ["rm", "x"]})
    records = [json.loads(line) for line in world["audit"].read_text().splitlines()]
    assert [r["event"] for r in records] == [
        "hostexec.request",
        "hostexec.decision",
        "hostexec.complete",
        "hostexec.request",
        "hostexec.decision",
    ]
    assert records[1]["status"] == "auto_approved"
    assert records[1]["pattern"] == "^(echo|pwd|true|printf)( .*)?$"
    assert records[2]["exit_code"] == 0
    assert records[2]["duration_ms"] > 0
    assert records[4]["status"] == "denied"
    assert world["record"].secret not in world["audit"].read_text()


def test_health(world: dict[str, Any]) -> None:
    assert world["client"].get("/healthz").json() == {"status": "ok"}


def test_unsafe_git_is_denied_before_anyone_is_asked(world: dict[str, Any]) -> None:
    """`git push` waits for a human (manual_approve); one that names a program to run is
    refused at once, not shown to the human for a yes the executor would refuse anyway."""
    status, body = post(world, {"args": ["git", "push", "--receive-pack=touch x", "origin"]})
    assert (status, body["status"]) == (200, "denied")
    assert "'--receive-pack=touch x'" in body["reason"]


def test_a_token_from_another_address_is_refused(world: dict[str, Any]) -> None:
    record: TokenRecord = world["record"]
    settings: GatewaySettings = world["settings"]
    with TestClient(create_app(settings), client=("172.30.0.8", 40000)) as other:
        response = other.post(
            "/request", headers={"X-Cloister-Token": record.secret}, json={"args": ["echo", "x"]}
        )
    assert response.status_code == 401
    assert "another cloister" in response.json()["reason"]
    lines = [json.loads(line) for line in Path(world["audit"]).read_text().splitlines()]
    assert {
        "event": "hostexec.refused",
        "peer": "172.30.0.8",
        "reason": "token-address",
    }.items() <= (next(line for line in lines if line["event"] == "hostexec.refused").items())


def test_the_cloisters_own_log(world: dict[str, Any]) -> None:
    """Every line charged to the token's cloister is in its own log too; a request with
    its token from another address is charged to nobody (audit.log only)."""
    post(world, {"args": ["echo", "x"]})
    post(world, {"args": ["rm", "x"]})
    with TestClient(create_app(world["settings"]), client=("172.30.0.8", 40000)) as other:
        headers = {"X-Cloister-Token": world["record"].secret}
        assert other.post("/request", headers=headers, json={"args": ["true"]}).status_code == 401
    audit = [json.loads(line) for line in world["audit"].read_text().splitlines()]
    assert audit[-1]["event"] == "hostexec.refused"
    own = [json.loads(line) for line in (world["logs"] / "api.log").read_text().splitlines()]
    assert own == audit[:-1]
    assert [(r["event"], r["cloister"]) for r in own] == [
        ("hostexec.request", "api"),
        ("hostexec.decision", "api"),
        ("hostexec.complete", "api"),
        ("hostexec.request", "api"),
        ("hostexec.decision", "api"),
    ]
    assert sorted(path.name for path in world["logs"].iterdir()) == ["api.log"]
