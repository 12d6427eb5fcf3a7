"""The hostexec gateway: tokens, argv checks, patterns, the hub, the executor, audit.

The gateway runs under Starlette's TestClient (or uvicorn, where its client must be able
to hang up); the executor daemon runs for real on a Unix socket in a background thread;
manual approvals go to the real approval hub (or a silent one that records its asker).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import struct
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pydantic import SecretStr
from starlette.testclient import TestClient

from cloister_core.decisions import DecisionStore, remove_session_decisions
from cloister_core.tokens import TokenRecord, write_token_file
from cloister_executor.daemon import ExecutorDaemon, ExecutorSettings
from cloister_executor.gateway import (
    ClientGoneError,
    GatewaySettings,
    _while_connected,
    create_app,
)
from cloister_executor.locations import secret_path, socket_path
from tests.approval.conftest import CREDENTIAL, TIMEOUT, Background, LiveHub
from tests.waiting import free_port, wait_until

CONFIG = """hostexec:
  auto_approve:
    - pattern: "^(echo|pwd|true|printf)( .*)?$"
  manual_approve:
    - pattern: "^git push( .*)?$"
    - pattern: "^touch [a-z-]+$"
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


CLOISTER_IP = "172.30.0.7"  # the cloister's address on its network (its token is bound to it)


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


def test_a_refusal_names_the_files_to_edit_on_the_host(world: dict[str, Any]) -> None:
    host = Path("/home/me/.config/cloister")
    settings = world["settings"].model_copy(update={"host_config_dir": host})
    with TestClient(create_app(settings), client=(CLOISTER_IP, 40000)) as client:
        response = client.post(
            "/request",
            json={"args": ["rm", "-rf", "/"]},
            headers={"X-Cloister-Token": world["record"].secret},
        )
    reason = response.json()["reason"]
    assert reason == (
        "`rm -rf /` matches no auto_approve or manual_approve pattern; to allow it, add a"
        " pattern (a regular expression of the whole command) to hostexec.auto_approve in"
        " /home/me/.config/cloister/config.yaml (every project) or in"
        " /home/me/.config/cloister/projects/api.yaml (project api), or to"
        " hostexec.manual_approve there to be asked each time"
    )


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
        (item,) = wait_until(
            lambda: human.get("/api/v1/pending").json()["commands"], TIMEOUT, "the held command"
        )
        assert item["argv"] == ["git", "push", "origin", "main"]
        assert item["cwd"] == str(world["project"])
        assert item["command"] == "git push origin main"
        human.post(f"/api/v1/commands/{item['id']}/decision", json={"action": "approve"})
        code, body = waiting.join()
        assert body["status"] == "approved"
        assert body["exit_code"] != 0  # not a git repository; the point is that it ran
        assert body["stderr"]

        waiting = Background(lambda: post(world, {"args": ["git", "push", "--force"]}))
        (item,) = wait_until(
            lambda: human.get("/api/v1/pending").json()["commands"], TIMEOUT, "the held command"
        )
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
        (item,) = wait_until(
            lambda: human.get("/api/v1/pending").json()["commands"], TIMEOUT, "the held command"
        )
        decision = human.post(
            f"/api/v1/commands/{item['id']}/decision", json={"action": "approve", "scope": scope}
        ).json()
        assert waiting.join()[1]["status"] == "approved"
        # The same command again: from the decision file, nobody is asked (the policy
        # files are re-read at most twice a second).
        wait_until(
            lambda: post(world, push)[1]["status"] == "auto_approved",
            TIMEOUT,
            "the push to be auto-approved",
        )
        # Another command still waits for a human (and times out here).
        assert post(world, {"args": ["git", "push", "--force"]})[1]["status"] == "timeout"
        # Undone: the human is asked again.
        human.post(f"/api/v1/decisions/{decision['id']}/undo").raise_for_status()
        wait_until(
            lambda: post(world, push)[1]["status"] == "timeout",
            TIMEOUT,
            "the push to wait for a human again",
        )


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
    assert "`cloister guardian start`" in body["reason"]  # what the human does about it


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


def test_a_command_past_the_cloisters_share_is_refused_with_the_reason(
    world: dict[str, Any],
) -> None:
    config = world["settings"].paths.config_file
    config.write_text(CONFIG + "proxy:\n  max_held_per_cloister: 1\n", encoding="utf-8")
    hub: LiveHub = world["hub"]
    with hub.human() as human:
        held = Background(
            lambda: human.post(
                "/api/v1/service/domains",
                json={"cloister": "api", "project": "api", "host": "held.test", "port": 443},
                headers={"Authorization": f"Bearer {CREDENTIAL}"},
                timeout=30,
            )
        )
        (item,) = wait_until(
            lambda: human.get("/api/v1/pending").json()["domains"], TIMEOUT, "the held domain"
        )
        code, body = post(world, {"args": ["git", "push"]})
        assert (code, body["status"]) == (200, "denied")
        assert body["reason"].startswith("not asked: the approval hub refused to hold it")
        assert "max_held_per_cloister: 1" in body["reason"]
        assert human.get("/api/v1/pending").json()["commands"] == []
        human.post(
            f"/api/v1/domains/{item['id']}/decision", json={"action": "deny", "scope": "once"}
        ).raise_for_status()
        assert held.join().json()["action"] == "deny"


# --- a client that hangs up while its command waits for a human ----------------------------


class LiveGateway:
    """The gateway served by uvicorn on 127.0.0.1: a real connection its client can close."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.port = free_port()
        settings = settings.model_copy(update={"host": "127.0.0.1", "port": self.port})
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)
        self._thread.start()
        wait_until(lambda: self.server.started, TIMEOUT, "the gateway to start")

    def ask(self, token: str, argv: list[str]) -> socket.socket:
        """A connection with a request for *argv* sent on it (the answer left unread)."""
        body = json.dumps({"args": argv}).encode()
        head = (
            "POST /request HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"X-Cloister-Token: {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        client = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        client.sendall(head.encode() + body)
        return client

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)


class SilentHub:
    """A hub that holds the one question it is asked and never answers; it records the
    request, and whether the asker then closed the connection."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.request = b""
        self.asked = threading.Event()
        self.gone = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _peer = self._listener.accept()
        with conn:
            conn.settimeout(60)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)", head)
            assert length is not None
            while len(body) < int(length[1]):
                body += conn.recv(65536)
            self.request = head + b"\r\n\r\n" + body
            self.asked.set()
            try:
                while conn.recv(65536):
                    pass
            except TimeoutError:
                return  # still connected: not gone
            except OSError:
                pass  # reset: gone as well
            self.gone.set()

    def stop(self) -> None:
        self._listener.close()


def hang_up(client: socket.socket, how: str) -> None:
    if how == "reset":  # an RST rather than a FIN: the kernel drops the connection
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


def audit_of(path: Path, request_id: str | None = None) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [line for line in lines if request_id is None or line.get("id") == request_id]


@pytest.fixture
def near(world: dict[str, Any]) -> TokenRecord:
    """A cloister whose address is 127.0.0.1, where a LiveGateway's clients come from."""
    record = TokenRecord.create(
        cloister="near", project="api", path=world["project"], address="127.0.0.1"
    )
    write_token_file(world["settings"].config_dir / "tokens", record)
    return record


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_client_that_hangs_up_cancels_its_question(
    world: dict[str, Any], near: TokenRecord, how: str
) -> None:
    """While its command waits for a human the client goes: the gateway closes its
    request to the hub at once (well before its own timeout), writes why, runs nothing."""
    hub = SilentHub()
    settings = world["settings"].model_copy(
        update={"approval_url": hub.url, "approval_timeout": timedelta(minutes=10)}
    )
    gateway = LiveGateway(settings)
    try:
        client = gateway.ask(near.secret, ["touch", "ran"])
        assert hub.asked.wait(10)
        assert b"POST /api/v1/service/commands " in hub.request
        assert b'"argv":["touch","ran"]' in hub.request
        assert not hub.gone.is_set()
        hang_up(client, how)
        assert hub.gone.wait(10), "the question to the hub was not cancelled"
        (gone,) = wait_until(
            lambda: [r for r in audit_of(world["audit"]) if r.get("status") == "client-gone"],
            TIMEOUT,
            "the client-gone audit line",
        )
        assert gone == {
            "time": gone["time"],
            "event": "hostexec.decision",
            "id": gone["id"],
            "cloister": "near",
            "project": "api",
            "command": "touch ran",
            "status": "client-gone",
            "reason": "the client closed the connection while waiting for approval",
        }
        assert [r["event"] for r in audit_of(world["audit"], gone["id"])] == [
            "hostexec.request",
            "hostexec.decision",
        ]
        assert not (world["project"] / "ran").exists()
    finally:
        gateway.stop()
        hub.stop()


def test_the_hub_withdraws_a_command_whose_client_went(
    world: dict[str, Any], near: TokenRecord
) -> None:
    """With the real hub: the pending item leaves the UI, the hub says it was withdrawn,
    and the gateway goes on serving that client (its slot was given back)."""
    settings = world["settings"].model_copy(update={"approval_timeout": timedelta(minutes=10)})
    gateway = LiveGateway(settings)
    hub: LiveHub = world["hub"]
    hub_audit = hub.settings.audit_log
    assert hub_audit is not None
    try:
        with hub.human() as human:
            client = gateway.ask(near.secret, ["touch", "ran"])
            (item,) = wait_until(
                lambda: human.get("/api/v1/pending").json()["commands"], TIMEOUT, "the held command"
            )
            assert (item["cloister"], item["argv"]) == ("near", ["touch", "ran"])
            hang_up(client, "close")
            wait_until(
                lambda: not human.get("/api/v1/pending").json()["commands"],
                TIMEOUT,
                "the withdrawn command to go",
            )
            assert any(
                r["event"] == "approval.command.withdrawn" and r["id"] == item["id"]
                for r in audit_of(hub_audit)
            )
            refused = human.post(
                f"/api/v1/commands/{item['id']}/decision", json={"action": "approve"}
            )
            assert refused.status_code >= 400
            wait_until(
                lambda: any(r.get("status") == "client-gone" for r in audit_of(world["audit"])),
                TIMEOUT,
                "the client-gone audit line",
            )
            assert not (world["project"] / "ran").exists()

            # A client that stays gets its command run once a human approves it.
            with gateway.ask(near.secret, ["touch", "stayed"]) as staying:
                (item,) = wait_until(
                    lambda: human.get("/api/v1/pending").json()["commands"],
                    TIMEOUT,
                    "the held command",
                )
                human.post(
                    f"/api/v1/commands/{item['id']}/decision", json={"action": "approve"}
                ).raise_for_status()
                reply = staying.makefile("rb").readline()
            assert reply.startswith(b"HTTP/1.1 200 "), reply
            assert (world["project"] / "stayed").exists()
    finally:
        gateway.stop()


def test_a_client_gone_as_the_answer_came_counts_as_gone() -> None:
    """Both at once (the human approved as the client hung up): nothing runs."""

    async def approved() -> str:
        return "approve"

    async def gone() -> None:
        return None

    async def race() -> None:
        with pytest.raises(ClientGoneError):
            await _while_connected(gone, approved())

    asyncio.run(race())
