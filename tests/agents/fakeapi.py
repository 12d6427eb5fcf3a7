"""Fake model APIs, so the real agent CLIs can run a scripted turn without a real model.

Standard library only: the ``cloister-fakeapi`` image runs this file with Debian's
python3 (``python3 fakeapi.py --port 8080 --log /log/requests.jsonl``), and the tests
import it and serve it from a thread (the cloister tests, on the host's address on
Docker's default bridge). Three APIs, each as the CLIs use them:

* Anthropic's Messages API (Claude Code): ``POST /v1/messages`` (Claude Code adds
  ``?beta=true``), streamed as server-sent events framed exactly as the real API frames
  them, or as one JSON message; ``count_tokens``, the model list, and the
  ``HEAD /api/hello`` preconnect Claude Code makes at startup.
* OpenAI's Responses API (Codex): ``POST /v1/responses``, streamed as Responses
  events (Codex reads the items from ``response.output_item.done`` and needs
  ``response.completed``); the model list.
* Gemini's ``generateContent`` and ``streamGenerateContent`` (Gemini CLI, with
  ``GOOGLE_GEMINI_BASE_URL``), as JSON or, with ``alt=sse``, as server-sent events.

The conversation is scripted, and the same for every agent: a request that offers a
shell tool (Claude Code's ``Bash``, Codex's ``exec_command`` or older shell tools,
Gemini CLI's ``run_shell_command``) and carries no tool result yet is answered with one
call of that tool, whose command is ``$FAKEAPI_BASH_COMMAND`` (default: write
``/work/fakeapi-was-here.txt``); a request that carries the tool's result is answered
with a short text that ends the turn. Anything else (a title, a summary, a quota probe)
gets a short text, because an agent's side requests must not run the command a second
time; a Gemini request for JSON (its model router, its next-speaker check) gets the
smallest value its schema accepts, since a text would be retried with back-off.

Every request is logged as one JSON object (method, path, every header, the parsed
body) to the ``--log`` file, a line each, and ``GET /__requests`` answers the log as a
JSON list (``DELETE /__requests`` empties it), so a test can check what arrived, with
which key. The ``/__`` paths are not logged.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import secrets
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BASH_COMMAND_VARIABLE = "FAKEAPI_BASH_COMMAND"
DEFAULT_BASH_COMMAND = "echo cloister > /work/fakeapi-was-here.txt"
FINAL_TEXT = "Done: the fake API's command ran."
SIDE_TEXT = "OK"  # what a request that is not the scripted turn gets
REQUESTS_PATH = "/__requests"
INTERNAL_PREFIX = "/__"
MAX_BODY = 64 * 1024 * 1024  # the agents send the whole conversation; theirs is small
DELTA_SIZE = 16  # characters a text or JSON delta carries: several deltas per block

JSONObject = dict[str, Any]


# --- the log ----------------------------------------------------------------------------


class RequestLog:
    """Every request, in memory (for ``/__requests``) and, when given, a JSON-lines file.

    The file is appended to and flushed a line at a time, so a test that reads it while
    the server runs never sees half a record.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._entries: list[JSONObject] = []
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, entry: JSONObject) -> None:
        line = json.dumps(entry, separators=(",", ":"), sort_keys=True) + "\n"
        with self._lock:
            self._entries.append(entry)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as stream:
                    stream.write(line)

    def entries(self) -> list[JSONObject]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# --- what a request is, and what a reply is --------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request as the APIs see it: the body parsed when it is JSON."""

    method: str
    path: str  # without the query
    query: str
    headers: dict[str, str]  # lower-case names; a repeated header's values joined by ", "
    body: Any  # the parsed JSON, else the text, else None (no body) or base64 (binary)
    body_format: str  # "json", "text", "base64", "empty"

    def log_entry(self) -> JSONObject:
        return {
            "time": time.time(),
            "method": self.method,
            "path": self.path + (f"?{self.query}" if self.query else ""),
            "headers": self.headers,
            "body": self.body,
            "body_format": self.body_format,
        }


@dataclass(frozen=True)
class Reply:
    """One complete answer. Even a stream is sent whole, with its length: the script
    knows every event up front, and a sized body keeps the connection reusable."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_reply(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(value).encode(), headers=headers or {})


def sse(events: Iterable[tuple[str | None, JSONObject]]) -> bytes:
    """Server-sent events: ``event: NAME`` (when named) and one ``data:`` line each."""
    parts: list[str] = []
    for name, data in events:
        if name is not None:
            parts.append(f"event: {name}\n")
        parts.append(f"data: {json.dumps(data, separators=(',', ':'))}\n\n")
    return "".join(parts).encode()


def sse_reply(body: bytes) -> Reply:
    return Reply(200, body, "text/event-stream; charset=utf-8", {"Cache-Control": "no-cache"})


def chunks(text: str, size: int = DELTA_SIZE) -> list[str]:
    """*text* in pieces, as a model streams it (at least one piece, maybe empty)."""
    return [text[index : index + size] for index in range(0, len(text), size)] or [""]


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def estimate_tokens(value: Any) -> int:
    """About four characters a token: the agents only show and sum the number."""
    return max(1, len(json.dumps(value)) // 4)


# --- Anthropic's Messages API -----------------------------------------------------------


def _anthropic_has_tool_result(body: JSONObject) -> bool:
    """Whether the last user message answers a tool call (the scripted turn's second half)."""
    messages = body.get("messages") or []
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        return False
    content = users[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") == "tool_result" for part in content
    )


def _tool_names(tools: Any) -> set[str]:
    if not isinstance(tools, list):
        return set()
    return {str(tool.get("name")) for tool in tools if isinstance(tool, dict) and "name" in tool}


def anthropic_content(body: JSONObject, command: str) -> tuple[list[JSONObject], str]:
    """The scripted content blocks and stop reason for one Messages request."""
    if _anthropic_has_tool_result(body):
        return [{"type": "text", "text": FINAL_TEXT}], "end_turn"
    if "Bash" in _tool_names(body.get("tools")):
        call = {
            "type": "tool_use",
            "id": new_id("toolu_"),
            "name": "Bash",
            "input": {"command": command, "description": "Run the fake API's command"},
        }
        return [call], "tool_use"
    return [{"type": "text", "text": SIDE_TEXT}], "end_turn"


def _anthropic_usage(body: JSONObject, output_tokens: int) -> JSONObject:
    return {
        "input_tokens": estimate_tokens(body.get("messages")),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def anthropic_message(body: JSONObject, command: str) -> JSONObject:
    """The whole assistant message (the non-streaming answer)."""
    content, stop_reason = anthropic_content(body, command)
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model") or "claude-fake"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": _anthropic_usage(body, estimate_tokens(content)),
    }


def anthropic_events(message: JSONObject) -> list[tuple[str | None, JSONObject]]:
    """*message* as the Messages API streams it: message_start (empty content), per
    block content_block_start / _delta… / _stop, message_delta (the stop reason and the
    output usage), message_stop; a ping after the first block starts, as the real API."""
    start = dict(message, content=[], stop_reason=None, stop_sequence=None)
    start["usage"] = dict(message["usage"], output_tokens=1)
    events: list[tuple[str | None, JSONObject]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening: JSONObject = dict(block, input={})
            payload = json.dumps(block["input"])
            # The real API opens a tool's input with an empty partial, then the JSON text.
            deltas = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in ["", *chunks(payload)]
            ]
        else:
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in chunks(block["text"])]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        if index == 0:
            events.append(("ping", {"type": "ping"}))
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


ANTHROPIC_MODELS = ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5")


def anthropic_models() -> JSONObject:
    data = [
        {
            "type": "model",
            "id": name,
            "display_name": name.replace("-", " ").title(),
            "created_at": "2025-01-01T00:00:00Z",
        }
        for name in ANTHROPIC_MODELS
    ]
    return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}


def anthropic_error(status: int, kind: str, message: str) -> Reply:
    return json_reply({"type": "error", "error": {"type": kind, "message": message}}, status)


# --- OpenAI's Responses API -------------------------------------------------------------

# Output items that answer a tool call, whichever kind of tool the client offered.
OPENAI_TOOL_OUTPUTS = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)


def _openai_has_tool_output(body: JSONObject) -> bool:
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(item, dict) and item.get("type") in OPENAI_TOOL_OUTPUTS for item in items
    )


def _openai_tools(body: JSONObject) -> dict[str, JSONObject]:
    """The offered tools by name (a ``local_shell`` tool has only a type: that is its name)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return {}
    named: dict[str, JSONObject] = {}
    for tool in tools:
        if isinstance(tool, dict):
            named[str(tool.get("name") or tool.get("type"))] = tool
    return named


def openai_shell_call(body: JSONObject, command: str) -> JSONObject | None:
    """One call of the shell tool the client offers, or None when it offers none.

    Codex has offered its shell under several names and shapes; the first one found in
    this order is called with *command*, run by bash.
    """
    tools = _openai_tools(body)
    call_id = new_id("call_")
    argv = ["bash", "-lc", command]
    if "exec_command" in tools:
        arguments: JSONObject = {"cmd": command}
        name = "exec_command"
    elif "shell_command" in tools:
        arguments = {"command": command}
        name = "shell_command"
    elif "shell" in tools:
        arguments = {"command": argv}
        name = "shell"
    elif "local_shell" in tools:
        return {
            "type": "local_shell_call",
            "id": new_id("lsh_"),
            "call_id": call_id,
            "status": "completed",
            "action": {"type": "exec", "command": argv, "env": {}},
        }
    else:
        return None
    return {
        "type": "function_call",
        "id": new_id("fc_"),
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def openai_output(body: JSONObject, command: str) -> list[JSONObject]:
    """The scripted output items for one Responses request."""
    if not _openai_has_tool_output(body):
        call = openai_shell_call(body, command)
        if call is not None:
            return [call]
        text = SIDE_TEXT
    else:
        text = FINAL_TEXT
    return [
        {
            "type": "message",
            "id": new_id("msg_"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    ]


def openai_response(body: JSONObject, command: str) -> JSONObject:
    """The whole response object (the non-streaming answer, and response.completed's)."""
    output = openai_output(body, command)
    input_tokens = estimate_tokens(body.get("input"))
    output_tokens = estimate_tokens(output)
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": str(body.get("model") or "gpt-fake"),
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def _message_events(item: JSONObject, output_index: int) -> list[JSONObject]:
    """A message item's text as content-part and output-text events (between its
    output_item.added and .done)."""
    text = item["content"][0]["text"]
    common = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
    empty_part = {"type": "output_text", "text": "", "annotations": []}
    return [
        {"type": "response.content_part.added", **common, "part": empty_part},
        *(
            {"type": "response.output_text.delta", **common, "delta": piece}
            for piece in chunks(text)
        ),
        {"type": "response.output_text.done", **common, "text": text},
        {"type": "response.content_part.done", **common, "part": item["content"][0]},
    ]


def _function_events(item: JSONObject, output_index: int) -> list[JSONObject]:
    common = {"item_id": item["id"], "output_index": output_index}
    return [
        *(
            {"type": "response.function_call_arguments.delta", **common, "delta": piece}
            for piece in chunks(item["arguments"])
        ),
        {"type": "response.function_call_arguments.done", **common, "arguments": item["arguments"]},
    ]


def openai_events(response: JSONObject) -> list[tuple[str | None, JSONObject]]:
    """*response* as the Responses API streams it: response.created and .in_progress,
    per output item output_item.added, its deltas, output_item.done, then
    response.completed with the whole response; every event numbered in sequence."""
    pending = dict(response, status="in_progress", output=[], usage=None)
    raw: list[JSONObject] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            opening: JSONObject = dict(item, status="in_progress", content=[])
            middle = _message_events(item, index)
        elif item["type"] == "function_call":
            opening = dict(item, status="in_progress", arguments="")
            middle = _function_events(item, index)
        else:
            opening, middle = item, []
        raw.append({"type": "response.output_item.added", "output_index": index, "item": opening})
        raw.extend(middle)
        raw.append({"type": "response.output_item.done", "output_index": index, "item": item})
    raw.append({"type": "response.completed", "response": response})
    return [(event["type"], dict(event, sequence_number=n)) for n, event in enumerate(raw)]


OPENAI_MODELS = ("gpt-5", "gpt-5-codex", "gpt-5.1-codex")


def openai_models() -> JSONObject:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 1735689600, "owned_by": "fakeapi"}
            for name in OPENAI_MODELS
        ],
    }


def openai_error(status: int, kind: str, message: str) -> Reply:
    return json_reply({"error": {"type": kind, "message": message, "code": kind}}, status)


# --- Gemini -----------------------------------------------------------------------------


def schema_example(schema: Any) -> Any:
    """A small value that *schema* (an OpenAPI-style or JSON schema, either case of type
    names) accepts: the first enum value, the minimum, every required property."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type") or "object").lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)
        return {name: schema_example(properties.get(name)) for name in required}
    if kind == "array":
        return []
    if kind in {"integer", "number"}:
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return SIDE_TEXT if kind == "string" else None


def _gemini_has_function_response(body: JSONObject) -> bool:
    contents = body.get("contents")
    return isinstance(contents, list) and any(
        isinstance(part, dict) and "functionResponse" in part
        for content in contents
        if isinstance(content, dict)
        for part in content.get("parts") or []
    )


def _gemini_functions(body: JSONObject) -> set[str]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return set()
    return {
        str(declaration.get("name"))
        for tool in tools
        if isinstance(tool, dict)
        for declaration in tool.get("functionDeclarations") or []
        if isinstance(declaration, dict)
    }


def gemini_parts(body: JSONObject, command: str) -> list[JSONObject]:
    """The scripted parts for one request: a JSON value when the request asks for JSON
    (Gemini CLI's routing and next-speaker checks), else the shell call or a text."""
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
        return [{"text": json.dumps(schema_example(schema))}]
    if _gemini_has_function_response(body):
        return [{"text": FINAL_TEXT}]
    if "run_shell_command" in _gemini_functions(body):
        arguments = {"command": command, "description": "Run the fake API's command"}
        return [{"functionCall": {"name": "run_shell_command", "args": arguments}}]
    return [{"text": SIDE_TEXT}]


def gemini_response(body: JSONObject, model: str, command: str) -> JSONObject:
    prompt_tokens = estimate_tokens(body.get("contents"))
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": gemini_parts(body, command)},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": 1,
            "totalTokenCount": prompt_tokens + 1,
        },
        "modelVersion": model,
        "responseId": new_id("resp_"),
    }


# --- routing ----------------------------------------------------------------------------


class FakeApi:
    """What the server answers: the routes of the three APIs, and the log."""

    def __init__(self, log: RequestLog, bash_command: str) -> None:
        self.log = log
        self.bash_command = bash_command

    def handle(self, request: Request) -> Reply:
        if request.path.startswith(INTERNAL_PREFIX):
            return self._internal(request)
        self.log.append(request.log_entry())
        body: JSONObject = request.body if isinstance(request.body, dict) else {}
        path = request.path.rstrip("/") or "/"
        for route in (self._probe, self._anthropic, self._openai, self._gemini):
            reply = route(request, path, body)
            if reply is not None:
                return reply
        return anthropic_error(
            404, "not_found_error", f"fakeapi: no route for {request.method} {request.path}"
        )

    def _probe(self, request: Request, path: str, body: JSONObject) -> Reply | None:
        """The root, Claude Code's ``/api/hello`` preconnect, the model lists."""
        if request.method not in {"GET", "HEAD"}:
            return None
        if path in {"/", "/api/hello"}:
            return json_reply({"ok": True, "server": "cloister fakeapi"})
        if path == "/v1/models":
            anthropic = "anthropic-version" in request.headers or "x-api-key" in request.headers
            return json_reply(anthropic_models() if anthropic else openai_models())
        if path.startswith("/v1/models/"):
            name = path.rpartition("/")[2]
            return json_reply(
                {"type": "model", "id": name, "display_name": name, "created_at": "2025-01-01"}
            )
        return None

    def _anthropic(self, request: Request, path: str, body: JSONObject) -> Reply | None:
        if request.method != "POST":
            return None
        if path == "/v1/messages/count_tokens":
            return json_reply({"input_tokens": estimate_tokens(body.get("messages"))})
        if path != "/v1/messages":
            return None
        if not body:
            return anthropic_error(400, "invalid_request_error", "the body is not a JSON object")
        message = anthropic_message(body, self.bash_command)
        if body.get("stream"):
            return sse_reply(sse(anthropic_events(message)))
        return json_reply(message)

    def _openai(self, request: Request, path: str, body: JSONObject) -> Reply | None:
        if request.method != "POST" or path != "/v1/responses":
            return None
        if not body:
            return openai_error(400, "invalid_request_error", "the body is not a JSON object")
        response = openai_response(body, self.bash_command)
        if body.get("stream"):
            return sse_reply(sse(openai_events(response)))
        return json_reply(response)

    def _gemini(self, request: Request, path: str, body: JSONObject) -> Reply | None:
        """``…/models/<model>:<method>`` of the Generative Language API, or None."""
        resource, colon, method = path.rpartition(":")
        model = resource.rpartition("/")[2]
        if request.method != "POST" or not colon or "/models/" not in resource:
            return None
        if method == "countTokens":
            return json_reply({"totalTokens": estimate_tokens(body.get("contents"))})
        if method == "generateContent":
            return json_reply(gemini_response(body, model, self.bash_command))
        if method == "streamGenerateContent":
            chunk = gemini_response(body, model, self.bash_command)
            if "alt=sse" in request.query:
                return sse_reply(sse([(None, chunk)]))
            return json_reply([chunk])
        return None

    def _internal(self, request: Request) -> Reply:
        if request.path == REQUESTS_PATH and request.method == "GET":
            return json_reply(self.log.entries())
        if request.path == REQUESTS_PATH and request.method == "DELETE":
            self.log.clear()
            return json_reply({"cleared": True})
        return json_reply({"error": f"no internal route {request.method} {request.path}"}, 404)


# --- HTTP -------------------------------------------------------------------------------


class BodyError(Exception):
    """The request's body could not be read (a bad length or chunk, or too big)."""


def decode_body(raw: bytes, encoding: str) -> tuple[Any, str]:
    """The body as JSON, text or base64, after undoing a gzip or deflate encoding."""
    if not raw:
        return None, "empty"
    try:
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
    except (OSError, zlib.error):
        pass  # logged as it came (base64 below)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"
    try:
        return json.loads(text), "json"
    except ValueError:
        return text, "text"


class Handler(BaseHTTPRequestHandler):
    """Reads a request whole, hands it to the server's :class:`FakeApi`, writes the reply."""

    protocol_version = "HTTP/1.1"  # keep-alive: the CLIs reuse their connections
    server: FakeApiServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write(f"fakeapi: {self.address_string()} {format % args}\n")

    def _read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_line = self.rfile.readline(1024)
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BodyError(f"bad chunk size line {size_line!r}") from None
            if size == 0:
                while self.rfile.readline(1024) not in {b"\r\n", b"\n", b""}:
                    pass  # trailers
                return bytes(body)
            if len(body) + size > MAX_BODY:
                raise BodyError("body too large")
            body += self.rfile.read(size)
            self.rfile.readline(1024)  # the CRLF after the chunk

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length_text = self.headers.get("Content-Length")
        if not length_text:
            return b""
        try:
            length = int(length_text)
        except ValueError:
            raise BodyError(f"bad Content-Length {length_text!r}") from None
        if not 0 <= length <= MAX_BODY:
            raise BodyError(f"Content-Length {length} out of range")
        return self.rfile.read(length)

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return headers

    def _serve(self) -> None:
        try:
            raw = self._read_body()
        except BodyError as error:
            self._send(json_reply({"error": str(error)}, 400), close=True)
            return
        body, body_format = decode_body(raw, self.headers.get("Content-Encoding", "").lower())
        parts = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=parts.path or "/",
            query=parts.query,
            headers=self._headers(),
            body=body,
            body_format=body_format,
        )
        self._send(self.server.app.handle(request))

    def _send(self, reply: Reply, *, close: bool = False) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.send_header("request-id", new_id("req_"))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)
        self.wfile.flush()


# BaseHTTPRequestHandler dispatches on do_<METHOD>: every method is served the same way.
for _method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
    setattr(Handler, f"do_{_method}", Handler._serve)


class FakeApiServer(ThreadingHTTPServer):
    """The HTTP server, a thread a connection; its :class:`FakeApi` answers."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: FakeApi, *, verbose: bool = False) -> None:
        super().__init__(address, Handler)
        self.app = app
        self.verbose = verbose

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


@contextmanager
def serving(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    log_path: Path | None = None,
    bash_command: str = DEFAULT_BASH_COMMAND,
) -> Iterator[FakeApiServer]:
    """The server in a thread of this process (port 0: a free one), shut down after."""
    server = FakeApiServer((host, port), FakeApi(RequestLog(log_path), bash_command))
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="fakeapi", daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fake Anthropic, OpenAI and Gemini APIs.")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--log", type=Path, default=None, help="JSON-lines request log")
    parser.add_argument("--quiet", action="store_true", help="no access log on stderr")
    options = parser.parse_args(argv)
    command = os.environ.get(BASH_COMMAND_VARIABLE) or DEFAULT_BASH_COMMAND
    app = FakeApi(RequestLog(options.log), command)
    server = FakeApiServer((options.host, options.port), app, verbose=not options.quiet)
    sys.stderr.write(f"fakeapi: listening on {options.host}:{server.port}\n")
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
