"""The calls table, sans I/O: a method, a target and header names in, a decision out."""

from __future__ import annotations

import pytest

from cloister_proxy.credentials.calls import CALLS, METHOD_OVERRIDES, Refused, check

# What the real CLIs sent to the fake model API (tests/agents: Claude Code 2.1.330, Codex
# 0.169.0, Gemini CLI 0.61.0, one scripted turn each), and the calls of their
# interactive use that the CLIs' code makes.
REAL_CALLS = [
    ("claude", "POST", "/v1/messages?beta=true"),
    ("claude", "POST", "/v1/messages"),
    ("claude", "POST", "/v1/messages/count_tokens?beta=true"),
    ("claude", "GET", "/v1/models?beta=true"),
    ("claude", "GET", "/v1/models?beta=true&limit=1000"),
    ("claude", "GET", "/v1/models?limit=20&after_id=claude-3-haiku-20240307"),
    ("claude", "GET", "/v1/models/claude-sonnet-4-5-20250929?beta=true"),
    ("claude", "GET", "/v1/models/claude-opus-4-1@20250805"),
    ("codex", "POST", "/v1/responses"),
    ("codex", "POST", "/v1/responses/compact"),
    ("codex", "GET", "/v1/models?client_version=0.169.0"),
    ("gemini", "POST", "/v1beta/models/gemini-3.5-flash-lite:generateContent"),
    ("gemini", "POST", "/v1beta/models/gemini-3.8-flash:streamGenerateContent?alt=sse"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:countTokens"),
]


@pytest.mark.parametrize(("agent", "method", "rest"), REAL_CALLS)
def test_what_the_clis_call_is_forwarded(agent: str, method: str, rest: str) -> None:
    assert check(agent, method, rest, ["host", "content-type", "x-api-key"]) is None


def test_every_agent_has_calls_and_only_get_and_post() -> None:
    assert set(CALLS) == {"claude", "codex", "gemini"}
    for calls in CALLS.values():
        assert calls
        assert {call.method for call in calls} <= {"GET", "POST"}


@pytest.mark.parametrize(
    ("agent", "method", "rest", "by"),
    [
        # the attacks that were found
        ("codex", "DELETE", "/v1/models/ft:gpt-4o-mini:acme::abc123", "method"),
        ("codex", "GET", "/v1/chat/completions?limit=100", "path"),
        ("codex", "GET", "/v1/chat/completions", "path"),
        ("codex", "POST", "/v1/chat/completions", "path"),
        ("claude", "DELETE", "/v1/models/x", "method"),
        # the rest of what the keys allow
        ("claude", "GET", "/v1/files", "path"),
        ("claude", "POST", "/v1/files", "path"),
        ("claude", "POST", "/v1/messages/batches", "path"),
        ("claude", "GET", "/v1/messages/batches?limit=20", "path"),
        ("claude", "GET", "/v1/organizations/api_keys", "path"),
        ("claude", "POST", "/v1/skills", "path"),
        ("claude", "HEAD", "/api/hello", "method"),
        ("claude", "POST", "/api/oauth/claude_cli/create_api_key", "path"),
        ("claude", "GET", "/v1/messages", "path"),
        ("codex", "GET", "/v1/files", "path"),
        ("codex", "GET", "/v1/fine_tuning/jobs", "path"),
        ("codex", "POST", "/v1/batches", "path"),
        ("codex", "GET", "/v1/responses/resp_123", "path"),
        ("codex", "GET", "/v1/responses", "path"),  # the WebSocket upgrade
        ("codex", "DELETE", "/v1/responses/resp_123", "method"),
        ("codex", "POST", "/v1/organization/admin_api_keys", "path"),
        ("codex", "POST", "/v1/realtime/client_secrets", "path"),
        ("codex", "GET", "/v1/models/gpt-5", "path"),
        ("codex", "PUT", "/v1/responses", "method"),
        ("gemini", "GET", "/v1beta/models", "method"),
        ("gemini", "GET", "/v1beta/files", "method"),
        ("gemini", "POST", "/v1beta/files", "path"),
        ("gemini", "POST", "/v1beta/tunedModels", "path"),
        ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:batchGenerateContent", "path"),
        ("gemini", "POST", "/v1beta/cachedContents", "path"),
        ("gemini", "POST", "/v1alpha/auth_tokens", "path"),
        ("gemini", "DELETE", "/v1beta/tunedModels/x", "method"),
        ("elsewhere", "POST", "/v1/messages", "method"),
    ],
)
def test_everything_else_is_refused(agent: str, method: str, rest: str, by: str) -> None:
    refused = check(agent, method, rest, [])
    assert isinstance(refused, Refused)
    assert refused.by == by
    assert method in refused.message


@pytest.mark.parametrize(
    ("agent", "method", "rest"),
    [
        # case
        ("claude", "post", "/v1/messages"),
        ("claude", "Post", "/v1/messages"),
        ("claude", "POST", "/V1/messages"),
        ("claude", "POST", "/v1/Messages"),
        ("gemini", "POST", "/v1beta/models/g:GenerateContent"),
        # percent-encoding of anything (slashes, dots, letters)
        ("claude", "POST", "/v1/messages%2fbatches"),
        ("claude", "POST", "/v1/messages%2Fbatches"),
        ("claude", "POST", "/v1/%6dessages"),
        ("claude", "GET", "/v1/models/%2e%2e/files"),
        ("claude", "GET", "/v1/models/%2E%2E%2Ffiles"),
        ("gemini", "POST", "/v1beta/models/g%3AgenerateContent"),
        ("gemini", "POST", "/v1beta/models/..%2f..%2ffiles:generateContent"),
        # dot segments, empty segments, backslashes
        ("claude", "GET", "/v1/models/.."),
        ("claude", "GET", "/v1/models/."),
        ("claude", "GET", "/v1/models/../../v1/files"),
        ("claude", "POST", "/v1/messages/../batches"),
        ("claude", "POST", "/v1/./messages"),
        ("claude", "POST", "//v1/messages"),
        ("claude", "POST", "/v1//messages"),
        ("claude", "GET", "/v1/models/\\..\\files"),
        ("gemini", "POST", "/v1beta/models/..:generateContent"),
        ("gemini", "POST", "/v1beta/models/../files:generateContent"),
        # trailing segments, slashes and suffixes
        ("claude", "POST", "/v1/messages/"),
        ("claude", "POST", "/v1/messages/batches"),
        ("claude", "POST", "/v1/messages/count_tokens/x"),
        ("claude", "GET", "/v1/models/x/y"),
        ("claude", "GET", "/v1/models/"),
        ("claude", "POST", "/v1/messages;x=1"),
        ("claude", "POST", "/v1/messages#frag"),
        ("codex", "POST", "/v1/responses/compact/x"),
        ("codex", "POST", "/v1/responsesx"),
        ("gemini", "POST", "/v1beta/models/g:generateContent/x"),
        ("gemini", "POST", "/v1beta/models/g:generateContentx"),
        ("gemini", "POST", "/v1beta/models/g:generateContent:batch"),
        # other spellings of the target
        ("claude", "POST", "http://api.anthropic.com/v1/messages"),
        ("claude", "POST", "*"),
        ("claude", "POST", ""),
        ("claude", "POST", "/"),
        ("claude", "POST", "/v1/messages\x00"),
        ("claude", "POST", "/v1/messages "),
    ],
)
def test_bypass_attempts_on_the_path_are_refused(agent: str, method: str, rest: str) -> None:
    assert check(agent, method, rest, []) is not None


@pytest.mark.parametrize(
    ("agent", "method", "rest"),
    [
        ("claude", "POST", "/v1/messages?"),
        ("claude", "POST", "/v1/messages?limit=100"),  # a parameter of another call
        ("claude", "POST", "/v1/messages?beta=true&beta=false"),  # twice
        ("claude", "POST", "/v1/messages?beta=true&"),
        ("claude", "POST", "/v1/messages?beta"),
        ("claude", "POST", "/v1/messages?BETA=true"),
        ("claude", "POST", "/v1/messages?beta=true&_method=DELETE"),
        ("claude", "POST", "/v1/messages?beta=%74rue"),
        ("claude", "POST", "/v1/messages?beta=true/../x"),
        ("claude", "GET", "/v1/models?limit=100&after_id=a&after_id=b"),
        ("codex", "POST", "/v1/responses?stream=true"),
        ("codex", "GET", "/v1/models?client_version=1&limit=100"),
        ("gemini", "POST", "/v1beta/models/g:generateContent?alt=sse"),  # not this call's
        ("gemini", "POST", "/v1beta/models/g:streamGenerateContent?alt=sse&key=AIza"),
        ("gemini", "POST", "/v1beta/models/g:streamGenerateContent?$alt=sse"),
    ],
)
def test_queries_are_allowed_only_as_the_calls_need_them(
    agent: str, method: str, rest: str
) -> None:
    refused = check(agent, method, rest, [])
    assert isinstance(refused, Refused)
    assert refused.by == "query"


@pytest.mark.parametrize("header", sorted(METHOD_OVERRIDES))
def test_a_method_override_header_is_refused(header: str) -> None:
    refused = check("codex", "POST", "/v1/responses", ["host", header])
    assert isinstance(refused, Refused)
    assert refused.by == "method-override"
    assert header in refused.message
