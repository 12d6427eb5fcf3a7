"""The calls the credential gateway forwards: per agent, each (method, path, query) pair
its CLI really makes, and nothing else of what the vendor's key allows.

Read from the CLIs themselves (Claude Code, Codex and Gemini CLI, run against a fake
model API that logs every request) and the vendors' API references:

* Claude Code: ``POST /v1/messages?beta=true`` (every turn),
  ``POST /v1/messages/count_tokens?beta=true`` (its context meter), and the model list
  and one model (``GET /v1/models``, ``GET /v1/models/<id>``: the model picker). Its
  ``HEAD /api/hello`` preconnect is not forwarded; it carries on without an answer.
* Codex: ``POST /v1/responses`` (every turn), ``POST /v1/responses/compact`` (remote
  compaction of a long session), ``GET /v1/models?client_version=…`` (its model
  catalogue). Not Chat Completions: this Codex refuses ``wire_api = "chat"``. Its
  WebSocket (``GET /v1/responses``, an upgrade) is refused; it falls back to HTTP.
* Gemini CLI: ``POST /v1beta/models/<model>:generateContent``,
  ``:streamGenerateContent?alt=sse`` and ``:countTokens``.

So a key cannot delete a fine-tuned model, read stored chat completions, files,
batches, fine-tuning jobs or the organisation's admin endpoints, whatever the agent
is told to do. :func:`check` is sans I/O: a method, the request target and the header
names in, None (forward it) or the reason it is refused out.

A target is matched as it is written, never decoded: a path is ``/``-separated
segments of ``[A-Za-z0-9._~:@-]`` (no percent escapes, so no encoded slash or dot; no
empty segment, so no ``//``), each pattern names its segments exactly (a model id
starts with a letter or digit, so no ``.`` or ``..``), case counts, and nothing may
trail. A query is allowed only on the calls that need one, with their parameter
names, each at most once, values of ``[A-Za-z0-9._~:-]``.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

HttpMethod = Literal["GET", "POST"]
RefusedBy = Literal["method", "path", "query", "method-override"]

_ANTHROPIC_MODEL = r"[A-Za-z0-9][A-Za-z0-9._@:-]*"
_GEMINI_MODEL = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_SAFE_PATH = re.compile(r"(/[A-Za-z0-9._~:@-]+)+")
_QUERY_PAIR = re.compile(r"([a-z_]+)=([A-Za-z0-9._~:-]*)")
# Headers some servers and frameworks take as the "real" method: a POST the table
# allows must never become a DELETE on the far side.
METHOD_OVERRIDES = frozenset(
    {"x-http-method-override", "x-http-method", "x-method-override", "x-original-method"}
)


@dataclass(frozen=True, slots=True)
class Call:
    """One call an agent's CLI makes: its method, path (a regex, after the agent's
    prefix) and the query parameters it may carry."""

    method: HttpMethod
    path: re.Pattern[str]
    query: frozenset[str] = frozenset()


def _call(method: HttpMethod, path: str, *query: str) -> Call:
    return Call(method, re.compile(path), frozenset(query))


CALLS: dict[str, tuple[Call, ...]] = {
    "claude": (
        _call("POST", r"/v1/messages", "beta"),
        _call("POST", r"/v1/messages/count_tokens", "beta"),
        _call("GET", r"/v1/models", "beta", "limit", "after_id", "before_id"),
        _call("GET", rf"/v1/models/{_ANTHROPIC_MODEL}", "beta"),
    ),
    "codex": (
        _call("POST", r"/v1/responses"),
        _call("POST", r"/v1/responses/compact"),
        _call("GET", r"/v1/models", "client_version"),
    ),
    "gemini": (
        _call("POST", rf"/v1beta/models/{_GEMINI_MODEL}:generateContent"),
        _call("POST", rf"/v1beta/models/{_GEMINI_MODEL}:streamGenerateContent", "alt"),
        _call("POST", rf"/v1beta/models/{_GEMINI_MODEL}:countTokens"),
    ),
}


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a call is not forwarded: the audit reason and the message the agent shows."""

    by: RefusedBy
    message: str


def check(agent: str, method: str, rest: str, header_names: Collection[str]) -> Refused | None:
    """Whether *agent*'s CLI makes this call: *rest* is the target after the agent's
    prefix (path and query as sent), *header_names* the request's (lower case)."""
    calls = CALLS.get(agent, ())
    path, mark, query = rest.partition("?")
    overrides = sorted(METHOD_OVERRIDES.intersection(header_names))
    if overrides:
        return Refused("method-override", f"a method override header ({overrides[0]})")
    if method not in {call.method for call in calls}:
        return Refused("method", f"{method} is not a call {agent} makes")
    matched = [
        call
        for call in calls
        if call.method == method and _SAFE_PATH.fullmatch(path) and call.path.fullmatch(path)
    ]
    if not matched:
        return Refused("path", f"{method} {path!r} is not a call {agent} makes")
    call = matched[0]
    if not mark:
        return None
    seen: set[str] = set()
    for pair in query.split("&"):
        found = _QUERY_PAIR.fullmatch(pair)
        name = found.group(1) if found else pair.partition("=")[0]
        if found is None or name not in call.query or name in seen:
            return Refused("query", f"the query {query!r} of {method} {path!r}")
        seen.add(name)
    return None
