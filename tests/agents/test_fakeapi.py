"""The fake model APIs, and the real agent CLIs running a scripted turn against them.

The first half needs no engine: the server runs in a thread of this process, and its
answers are parsed as a client parses them (the SSE framing event by event, the tool
call's JSON put back together from its deltas). The docker-marked half builds the
``cloister-fakeapi`` and ``cloister-agents`` images and proves, with the CLI versions the
default agent image pins, that each agent runs the fake model's shell call unattended
(headless, permission prompts off, as a cloister's uid with its home on a tmpfs), that
the file it was told to write appears, and which key reached the API.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest

from tests.agents import fakeapi
from tests.agents.agent_images import (
    AGENT_HOME,
    FAKEAPI_URL,
    AgentLab,
    AgentVersions,
)

COMMAND = "echo cloister > /work/fakeapi-was-here.txt"
MADE_FILE = "/work/fakeapi-was-here.txt"
KEY = "test-key"
BUILD_AND_RUN_TIMEOUT = 1200  # seconds: the first run downloads ~550 MB and builds


# --- SSE, as a client reads it ----------------------------------------------------------


def parse_sse(text: str) -> list[tuple[str | None, dict[str, Any]]]:
    """Events separated by a blank line; ``event:`` names one, ``data:`` lines carry it."""
    assert text.endswith("\n\n"), "a stream ends with a complete event"
    events: list[tuple[str | None, dict[str, Any]]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        events.append((name, json.loads("\n".join(data))))
    return events


@pytest.fixture
def server(tmp_path: Path) -> Iterator[fakeapi.FakeApiServer]:
    with fakeapi.serving(log_path=tmp_path / "requests.jsonl", bash_command=COMMAND) as running:
        yield running


@pytest.fixture
def http(server: fakeapi.FakeApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client:
        yield client


BASH_TOOL = {"name": "Bash", "description": "run", "input_schema": {"type": "object"}}


def messages_request(*, with_result: bool, stream: bool = True) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "make the file"}]
    if with_result:
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": ""}],
            },
        ]
    return {
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": stream,
        "tools": [BASH_TOOL],
        "messages": messages,
    }


ANTHROPIC_HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


def test_anthropic_stream_is_framed_as_the_messages_api(http: httpx.Client) -> None:
    reply = http.post(
        "/v1/messages?beta=true",
        json=messages_request(with_result=False),
        headers=ANTHROPIC_HEADERS,
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(reply.text)
    names = [name for name, _ in events]
    # Every event is named, and its data says the same type.
    assert all(name == data["type"] for name, data in events)
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == []
    assert start["stop_reason"] is None
    assert start["model"] == "claude-test"
    assert start["role"] == "assistant"
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use"
    assert block["name"] == "Bash"
    assert block["input"] == {}
    assert block["id"].startswith("toolu_")
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert all(delta["type"] == "input_json_delta" for delta in deltas)
    assert deltas[0]["partial_json"] == ""  # the real API opens with an empty partial
    assert len(deltas) > 2  # the JSON arrives in pieces, as it does from the real API
    tool_input = json.loads("".join(delta["partial_json"] for delta in deltas))
    assert tool_input["command"] == COMMAND
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] > 0


def test_anthropic_tool_result_ends_the_turn_with_text(http: httpx.Client) -> None:
    reply = http.post(
        "/v1/messages", json=messages_request(with_result=True), headers=ANTHROPIC_HEADERS
    )
    events = parse_sse(reply.text)
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert text == fakeapi.FINAL_TEXT
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_anthropic_without_stream_is_one_message(http: httpx.Client) -> None:
    reply = http.post("/v1/messages", json=messages_request(with_result=False, stream=False))
    message = reply.json()
    assert reply.headers["content-type"] == "application/json"
    assert message["type"] == "message"
    assert message["stop_reason"] == "tool_use"
    assert message["content"][0]["input"]["command"] == COMMAND
    # A request that offers no Bash tool (a title, a summary) must not run the command.
    side = dict(messages_request(with_result=False, stream=False), tools=[])
    assert http.post("/v1/messages", json=side).json()["content"] == [
        {"type": "text", "text": fakeapi.SIDE_TEXT}
    ]


def test_anthropic_side_routes(http: httpx.Client) -> None:
    assert http.head("/api/hello").status_code == 200
    assert http.get("/").status_code == 200
    counted = http.post("/v1/messages/count_tokens", json=messages_request(with_result=False))
    assert counted.json()["input_tokens"] > 0
    models = http.get("/v1/models", headers=ANTHROPIC_HEADERS).json()
    assert models["data"][0]["type"] == "model"
    assert models["has_more"] is False
    missing = http.get("/v1/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"


def test_every_request_is_logged_with_all_headers(
    server: fakeapi.FakeApiServer, http: httpx.Client, tmp_path: Path
) -> None:
    http.post(
        "/v1/messages?beta=true",
        json=messages_request(with_result=False),
        headers={**ANTHROPIC_HEADERS, "X-Extra": "1"},
    )
    http.post(
        "/v1/responses",
        json={"model": "m", "input": []},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    entries = http.get(fakeapi.REQUESTS_PATH).json()
    assert [(entry["method"], entry["path"]) for entry in entries] == [
        ("POST", "/v1/messages?beta=true"),
        ("POST", "/v1/responses"),
    ]  # the /__ paths themselves are not logged
    first = entries[0]
    assert first["headers"]["x-api-key"] == KEY
    assert first["headers"]["x-extra"] == "1"
    assert first["headers"]["host"] == f"127.0.0.1:{server.port}"
    assert first["body"]["messages"][0]["content"] == "make the file"
    assert entries[1]["headers"]["authorization"] == f"Bearer {KEY}"
    lines = (tmp_path / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == entries
    assert http.delete(fakeapi.REQUESTS_PATH).status_code == 200
    assert http.get(fakeapi.REQUESTS_PATH).json() == []


def test_chunked_and_gzipped_bodies_are_read(http: httpx.Client) -> None:
    body = json.dumps(messages_request(with_result=False, stream=False)).encode()

    def pieces() -> Iterator[bytes]:
        yield from (body[index : index + 100] for index in range(0, len(body), 100))

    reply = http.post("/v1/messages", content=pieces())  # no length: chunked
    assert reply.json()["stop_reason"] == "tool_use"
    zipped = http.post(
        "/v1/messages", content=gzip.compress(body), headers={"Content-Encoding": "gzip"}
    )
    assert zipped.json()["stop_reason"] == "tool_use"


def responses_request(tools: list[dict[str, Any]], *, with_output: bool) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    ]
    if with_output:
        items.append({"type": "function_call_output", "call_id": "call_1", "output": "ok"})
    return {"model": "gpt-test", "stream": True, "tools": tools, "input": items}


def test_responses_stream_calls_codex_exec_command(http: httpx.Client) -> None:
    tools = [{"type": "function", "name": "exec_command", "parameters": {}}]
    events = parse_sse(
        http.post("/v1/responses", json=responses_request(tools, with_output=False)).text
    )
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    names = [name for name, _ in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-2:] == ["response.output_item.done", "response.completed"]
    done = events[-2][1]["item"]
    assert done["type"] == "function_call"
    assert done["name"] == "exec_command"
    assert json.loads(done["arguments"]) == {"cmd": COMMAND}
    streamed = "".join(
        data["delta"] for name, data in events if name == "response.function_call_arguments.delta"
    )
    assert streamed == done["arguments"]
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed"
    assert completed["output"] == [done]
    assert completed["usage"]["total_tokens"] > 0


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            {"type": "function", "name": "shell"},
            ("function_call", {"command": ["bash", "-lc", COMMAND]}),
        ),
        ({"type": "function", "name": "shell_command"}, ("function_call", {"command": COMMAND})),
        ({"type": "local_shell"}, ("local_shell_call", None)),
    ],
)
def test_responses_older_codex_shell_tools(
    http: httpx.Client, tool: dict[str, Any], expected: tuple[str, dict[str, Any] | None]
) -> None:
    body = dict(responses_request([tool], with_output=False), stream=False)
    item = http.post("/v1/responses", json=body).json()["output"][0]
    kind, arguments = expected
    assert item["type"] == kind
    if arguments is not None:
        assert json.loads(item["arguments"]) == arguments
    else:
        assert item["action"]["command"] == ["bash", "-lc", COMMAND]


def test_responses_tool_output_ends_with_a_message(http: httpx.Client) -> None:
    tools = [{"type": "function", "name": "exec_command", "parameters": {}}]
    events = parse_sse(
        http.post("/v1/responses", json=responses_request(tools, with_output=True)).text
    )
    text = "".join(data["delta"] for name, data in events if name == "response.output_text.delta")
    assert text == fakeapi.FINAL_TEXT
    message = events[-1][1]["response"]["output"][0]
    assert message["type"] == "message"
    assert message["content"][0]["text"] == fakeapi.FINAL_TEXT


def gemini_request(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    contents = [{"role": "user", "parts": [{"text": "go"}]}]
    contents += [{"role": "user", "parts": [part]} for part in parts]
    return {"contents": contents, **extra}


def test_gemini_routes(http: httpx.Client) -> None:
    tools = [{"functionDeclarations": [{"name": "run_shell_command"}]}]
    streamed = http.post(
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
        json=gemini_request(tools=tools),
    )
    [(name, chunk)] = parse_sse(streamed.text)
    assert name is None  # Gemini's stream has data lines only
    call = chunk["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert call["name"] == "run_shell_command"
    assert call["args"]["command"] == COMMAND

    result = {"functionResponse": {"name": "run_shell_command", "response": {}}}
    final = http.post(
        "/v1beta/models/gemini-test:generateContent", json=gemini_request(result, tools=tools)
    )
    assert final.json()["candidates"][0]["content"]["parts"] == [{"text": fakeapi.FINAL_TEXT}]

    schema = {
        "type": "OBJECT",
        "properties": {
            "reasoning": {"type": "STRING"},
            "score": {"type": "INTEGER"},
            "next": {"type": "string", "enum": ["user", "model"]},
        },
        "required": ["reasoning", "score", "next"],
    }
    config = {"responseMimeType": "application/json", "responseJsonSchema": schema}
    reply = http.post(
        "/v1beta/models/gemini-lite:generateContent",
        json=gemini_request(generationConfig=config),
    )
    value = json.loads(reply.json()["candidates"][0]["content"]["parts"][0]["text"])
    assert value == {"reasoning": fakeapi.SIDE_TEXT, "score": 1, "next": "user"}
    counted = http.post("/v1beta/models/gemini-test:countTokens", json=gemini_request())
    assert counted.json()["totalTokens"] > 0


def test_bash_command_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` reads ``$FAKEAPI_BASH_COMMAND``; the image's server gets it that way."""
    monkeypatch.setenv(fakeapi.BASH_COMMAND_VARIABLE, "true")
    seen: list[str] = []

    class StoppedError(Exception):
        pass

    def capture(self: fakeapi.FakeApiServer) -> None:
        seen.append(self.app.bash_command)
        raise StoppedError

    monkeypatch.setattr(fakeapi.FakeApiServer, "serve_forever", capture)
    with pytest.raises(StoppedError):
        fakeapi.main(["--host", "127.0.0.1", "--port", "0", "--quiet"])
    assert seen == ["true"]


# --- the real CLIs in containers ----------------------------------------------------------


LabFactory = Callable[[int], AgentLab]


@pytest.fixture
def lab(docker_client: docker.DockerClient, images: tuple[str, str]) -> Iterator[LabFactory]:
    """Starts an :class:`AgentLab` for a uid; every lab is removed after the test."""
    labs: list[AgentLab] = []

    def start(uid: int) -> AgentLab:
        started = AgentLab(docker_client, *images, uid=uid, bash_command=COMMAND)
        labs.append(started)
        started.start()
        return started

    yield start
    problems = [problem for started in labs for problem in started.close()]
    if problems:
        pytest.fail("cleanup failed: " + "; ".join(problems), pytrace=False)


# A cloister runs as the host user: uid 1000 on a developer's machine, root in CI.
UIDS = [pytest.param(1000, id="uid1000"), pytest.param(0, id="root")]


@pytest.mark.docker
@pytest.mark.timeout(BUILD_AND_RUN_TIMEOUT)
@pytest.mark.parametrize("uid", UIDS)
def test_cli_versions(lab: LabFactory, versions: AgentVersions, uid: int) -> None:
    agents = lab(uid)
    where = agents.run(["sh", "-c", 'id -u; stat -f -c %T "$HOME"; stat -c %u "$HOME"'])
    assert where.out.split() == [str(uid), "tmpfs", str(uid)], str(where)
    expected = {
        "claude": versions.claude_code,
        "codex": versions.codex,
        "gemini": versions.gemini_cli,
        "node": versions.node,
    }
    for program, version in expected.items():
        result = agents.run([program, "--version"], limit=60)
        assert result.exit_code == 0, f"{program}: {result}"
        assert version in result.out, f"{program}: {result}"


def _find_part(entry: dict[str, Any], key: str, value: str) -> bool:
    """Whether the logged body holds, anywhere, an object with *key* equal to *value*."""

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            return node.get(key) == value or any(walk(child) for child in node.values())
        if isinstance(node, list):
            return any(walk(child) for child in node)
        return False

    return walk(entry["body"])


CLAUDE_CONFIG_DIR = f"{AGENT_HOME}/.claude"


@pytest.mark.docker
@pytest.mark.timeout(BUILD_AND_RUN_TIMEOUT)
@pytest.mark.parametrize("uid", UIDS)
def test_claude_code_runs_the_scripted_bash_call_unattended(lab: LabFactory, uid: int) -> None:
    agents = lab(uid)
    settings = {"permissions": {"defaultMode": "bypassPermissions"}}
    state = {"hasCompletedOnboarding": True, "bypassPermissionsModeAccepted": True}
    agents.write(f"{CLAUDE_CONFIG_DIR}/settings.json", json.dumps(settings))
    agents.write(f"{CLAUDE_CONFIG_DIR}/.claude.json", json.dumps(state))
    environment = {
        "ANTHROPIC_BASE_URL": FAKEAPI_URL,
        "ANTHROPIC_API_KEY": KEY,
        "IS_SANDBOX": "1",  # as root, bypassPermissions is refused without it
        "CLAUDE_CONFIG_DIR": CLAUDE_CONFIG_DIR,
    }
    result = agents.run(["claude", "-p", "make the file"], environment=environment)
    assert result.exit_code == 0, str(result)
    assert fakeapi.FINAL_TEXT in result.out
    assert agents.read(MADE_FILE) == "cloister\n"

    messages = [e for e in agents.requests() if e["path"].startswith("/v1/messages")]
    assert len(messages) >= 2, messages
    for entry in messages:
        assert entry["method"] == "POST"
        assert entry["headers"]["x-api-key"] == KEY
        assert "authorization" not in entry["headers"]
        assert entry["headers"]["anthropic-version"] == "2023-06-01"
    assert not _find_part(messages[0], "type", "tool_result")
    assert _find_part(messages[-1], "type", "tool_result")

    # With CLAUDE_CONFIG_DIR set, Claude Code keeps its global state in
    # $CLAUDE_CONFIG_DIR/.claude.json (it read ours, kept our key, and added its own),
    # and never makes $HOME/.claude.json.
    assert agents.read(f"{AGENT_HOME}/.claude.json") is None
    kept = json.loads(agents.read(f"{CLAUDE_CONFIG_DIR}/.claude.json") or "{}")
    assert kept.get("hasCompletedOnboarding") is True
    assert set(kept) - set(state), kept


CODEX_CONFIG = f"""\
model = "gpt-5"
model_provider = "fakeapi"

[model_providers.fakeapi]
name = "cloister fake API"
base_url = "{FAKEAPI_URL}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


@pytest.mark.docker
@pytest.mark.timeout(BUILD_AND_RUN_TIMEOUT)
@pytest.mark.parametrize("uid", UIDS)
def test_codex_exec_runs_the_scripted_shell_call_unattended(lab: LabFactory, uid: int) -> None:
    agents = lab(uid)
    # A provider of its own: Codex ignores OPENAI_BASE_URL, and the built-in provider
    # tries a WebSocket first.
    agents.write(f"{AGENT_HOME}/.codex/config.toml", CODEX_CONFIG)
    result = agents.run(
        [
            "codex", "exec", "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check", "make the file",
        ],
        environment={"OPENAI_API_KEY": KEY},
    )  # fmt: skip
    assert result.exit_code == 0, str(result)
    assert fakeapi.FINAL_TEXT in result.out
    assert agents.read(MADE_FILE) == "cloister\n"

    responses = [e for e in agents.requests() if e["path"] == "/v1/responses"]
    assert len(responses) >= 2, responses
    for entry in responses:
        assert entry["method"] == "POST"
        assert entry["headers"]["authorization"] == f"Bearer {KEY}"
        assert entry["body"]["stream"] is True
    assert not _find_part(responses[0], "type", "function_call_output")
    assert _find_part(responses[-1], "type", "function_call_output")


@pytest.mark.docker
@pytest.mark.timeout(BUILD_AND_RUN_TIMEOUT)
@pytest.mark.parametrize("uid", UIDS)
def test_gemini_cli_runs_the_scripted_shell_call_unattended(lab: LabFactory, uid: int) -> None:
    agents = lab(uid)
    # GOOGLE_GEMINI_BASE_URL alone selects the "gateway" auth type, which headless mode
    # refuses; the API key type, chosen in the settings, takes the base URL too.
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    agents.write(f"{AGENT_HOME}/.gemini/settings.json", json.dumps(settings))
    environment = {
        "GEMINI_API_KEY": KEY,
        "GOOGLE_GEMINI_BASE_URL": FAKEAPI_URL,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # else --yolo falls back to asking
    }
    result = agents.run(["gemini", "-p", "make the file", "--yolo"], environment=environment)
    assert result.exit_code == 0, str(result)
    assert fakeapi.FINAL_TEXT in result.out
    assert agents.read(MADE_FILE) == "cloister\n"

    calls = [e for e in agents.requests() if e["path"].startswith("/v1beta/models/")]
    assert calls, "Gemini CLI sent nothing to the fake API"
    assert all(entry["headers"]["x-goog-api-key"] == KEY for entry in calls)
    assert any(_find_part(entry, "name", "run_shell_command") for entry in calls)
