"""The credential gateway's decisions, sans I/O: a request head in, a Forward or a Refusal out."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from cloister_core.credentials import PROVIDERS, Method, StoredCredential
from cloister_core.tokens import TokenRecord
from cloister_proxy.credentials.plan import Forward, Refusal, Upstream, plan
from cloister_proxy.http1 import parse_request_head

RECORD = TokenRecord.create(
    cloister="api", project="api", path=Path("/tmp/api"), address="172.30.0.5"
)
PEER = "172.30.0.5"
TOKEN = RECORD.secret
REAL = "sk-ant-real-0123456789"


def credential(agent: str, method: Method = "api-key") -> StoredCredential:
    return StoredCredential(
        agent=agent, method=method, secret=SecretStr(REAL), created_at=datetime.now(UTC)
    )


def decide(
    raw: str,
    *,
    method: Method = "api-key",
    stored: bool = True,
    api_base: str | None = "http://fake-api:8080",
    peer: str = PEER,
) -> Forward | Refusal:
    lines = [line for line in raw.split("\n") if line]
    head = parse_request_head("\r\n".join(lines).encode() + b"\r\n\r\n")
    return plan(
        head,
        tokens=lambda value: RECORD if value == TOKEN else None,
        credentials=lambda agent: credential(agent, method) if stored else None,
        api_bases={"claude": api_base, "codex": api_base, "gemini": api_base},
        peer=peer,
    )


def sent_head(forward: Forward) -> tuple[str, list[tuple[str, str]]]:
    lines = forward.head.decode("latin-1").split("\r\n")
    fields = [tuple(line.split(": ", 1)) for line in lines[1:] if line]
    return lines[0], [(name, value) for name, value in fields]


def test_claude_api_key_is_swapped_for_the_real_one() -> None:
    forward = decide(
        "POST /claude/v1/messages?beta=true HTTP/1.1\n"
        "Host: cloister-guardian-credentials:9997\n"
        f"x-api-key: {TOKEN}\n"
        "anthropic-version: 2023-06-01\n"
        "Content-Length: 2\n"
    )
    assert isinstance(forward, Forward)
    first, fields = sent_head(forward)
    assert first == "POST /v1/messages?beta=true HTTP/1.1"
    assert fields == [
        ("Host", "fake-api:8080"),
        ("anthropic-version", "2023-06-01"),
        ("Content-Length", "2"),
        ("Accept-Encoding", "identity"),
        ("x-api-key", REAL),
    ]
    assert TOKEN.encode() not in forward.head
    assert forward.record == RECORD
    assert forward.path == "/v1/messages"  # audited without the query
    assert forward.upstream == Upstream("http", "fake-api", 8080, "")


def test_an_oauth_token_goes_as_a_bearer_and_the_client_authorization_is_dropped() -> None:
    forward = decide(
        f"POST /claude/v1/messages HTTP/1.1\nHost: x\nAuthorization: Bearer {TOKEN}\n"
        "anthropic-beta: oauth-2025-04-20\nContent-Length: 0\n",
        method="oauth-token",
    )
    assert isinstance(forward, Forward)
    _, fields = sent_head(forward)
    assert ("authorization", f"Bearer {REAL}") in fields
    assert ("anthropic-beta", "oauth-2025-04-20") in fields
    assert [name for name, _ in fields].count("authorization") == 1
    assert not any(name.lower() == "x-api-key" for name, _ in fields)


@pytest.mark.parametrize(
    ("agent", "path", "header", "expected"),
    [
        (
            "codex",
            "/v1/responses",
            f"Authorization: Bearer {TOKEN}",
            ("authorization", f"Bearer {REAL}"),
        ),
        (
            "gemini",
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            f"x-goog-api-key: {TOKEN}",
            ("x-goog-api-key", REAL),
        ),
    ],
)
def test_other_providers(agent: str, path: str, header: str, expected: tuple[str, str]) -> None:
    forward = decide(f"POST /{agent}{path} HTTP/1.1\nHost: x\n{header}\n\n")
    assert isinstance(forward, Forward)
    assert forward.provider.agent == agent
    assert expected in sent_head(forward)[1]
    assert TOKEN.encode() not in forward.head


def test_the_api_base_path_is_kept_and_the_default_is_the_vendor() -> None:
    forward = decide(
        f"GET /claude/v1/models HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n",
        api_base="https://gateway.example:8443/anthropic",
    )
    assert isinstance(forward, Forward)
    assert sent_head(forward)[0] == "GET /anthropic/v1/models HTTP/1.1"
    assert ("Host", "gateway.example:8443") in sent_head(forward)[1]
    vendor = decide(f"GET /claude/v1/models HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n", api_base=None)
    assert isinstance(vendor, Forward)
    assert vendor.upstream == Upstream("https", "api.anthropic.com", 443, "")
    assert ("Host", "api.anthropic.com") in sent_head(vendor)[1]


def test_hop_by_hop_fields_are_not_forwarded_but_the_framing_is() -> None:
    forward = decide(
        f"POST /claude/v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n"
        "Connection: keep-alive, x-secret-hop\nx-secret-hop: 1\nProxy-Authorization: no\n"
        "Transfer-Encoding: chunked\n"
    )
    assert isinstance(forward, Forward)
    names = [name.lower() for name, _ in sent_head(forward)[1]]
    assert "transfer-encoding" in names
    for dropped in ("connection", "x-secret-hop", "proxy-authorization"):
        assert dropped not in names


def test_an_unknown_prefix_is_404() -> None:
    refusal = decide(f"POST /v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n")
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (404, "no-agent")
    assert "/claude" in refusal.message
    # a prefix is a whole segment: /claudette is not claude
    assert isinstance(decide(f"GET /claudette HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n"), Refusal)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "x-api-key: sk-ant-a-real-looking-key",
        # the token with its last digit changed (never to itself)
        f"x-api-key: {TOKEN[:-1]}{'1' if TOKEN.endswith('0') else '0'}",
    ],
)
def test_a_key_that_is_no_cloister_token_is_401(header: str) -> None:
    refusal = decide(f"POST /claude/v1/messages HTTP/1.1\nHost: x\n{header}\n")
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (401, "token")
    # Shaped as the Anthropic API's own errors, so Claude Code shows the message.
    body = json.loads(refusal.body(PROVIDERS["claude"]))
    assert body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": refusal.message},
    }


def test_an_agent_not_set_up_is_503_naming_the_command() -> None:
    refusal = decide(
        f"POST /codex/v1/responses HTTP/1.1\nHost: x\nAuthorization: Bearer {TOKEN}\n",
        stored=False,
    )
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (503, "not-set-up")
    assert "cloister setup codex" in refusal.message
    assert refusal.record == RECORD
    assert json.loads(refusal.body(None))["error"]["code"] == 503


def test_an_existing_login_credential_has_no_secret_to_swap() -> None:
    head = parse_request_head(
        f"POST /claude/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {TOKEN}\r\n\r\n".encode()
    )
    refusal = plan(
        head,
        tokens=lambda value: RECORD,
        credentials=lambda agent: StoredCredential(
            agent=agent, method="existing-login", created_at=datetime.now(UTC)
        ),
        api_bases={},
        peer=PEER,
    )
    assert isinstance(refusal, Refusal)
    assert refusal.status == 503


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8080", Upstream("http", "127.0.0.1", 8080, "")),
        ("https://api.openai.com/", Upstream("https", "api.openai.com", 443, "")),
        ("http://[::1]/base/", Upstream("http", "::1", 80, "/base")),
    ],
)
def test_upstream_parse(url: str, expected: Upstream) -> None:
    assert Upstream.parse(url) == expected


def test_upstream_authority_brackets_ipv6_and_omits_default_ports() -> None:
    assert Upstream("http", "::1", 8080, "").authority == "[::1]:8080"
    assert Upstream("https", "a.example", 443, "").authority == "a.example"


@pytest.mark.parametrize("url", ["ftp://x", "http://", "not a url"])
def test_upstream_parse_refuses(url: str) -> None:
    with pytest.raises(ValueError, match="not an http"):
        Upstream.parse(url)


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "OPTIONS", "PUT", "PATCH", "TRACK"])
def test_only_the_methods_of_a_model_api_are_forwarded(method: str) -> None:
    refusal = decide(f"{method} /claude/v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n")
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (405, "method")


def test_a_get_with_a_body_is_refused() -> None:
    refusal = decide(
        f"GET /claude/v1/models HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\nContent-Length: 5\n"
    )
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (400, "body")


@pytest.mark.parametrize(
    "path",
    [
        "/claude/../../tenant-b/v1/messages",
        "/claude/v1/messages/..",
        "/claude/%2e%2e/v1/messages",
        "/claude/%2E./v1/messages",
        "/claude//v1/messages",
        "/claude/v1%2fmessages",
        "/claude/v1\\messages",
        "/claude/./v1/messages",
    ],
)
def test_paths_that_could_climb_out_of_the_api_base_are_refused(path: str) -> None:
    refusal = decide(f"POST {path} HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n")
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (403, "path")


@pytest.mark.parametrize(
    ("agent", "path"),
    [
        ("claude", "/v1/files"),
        ("claude", "/v1/messages/batches"),
        ("claude", "/api/oauth/claude_cli/create_api_key"),
        ("codex", "/v1/realtime/client_secrets"),
        ("codex", "/v1/organization/admin_api_keys"),
        ("codex", "/v1/files"),
        ("gemini", "/v1alpha/auth_tokens"),
        ("gemini", "/v1beta/files"),
        ("gemini", "/v1beta/tunedModels"),
    ],
)
def test_only_the_model_api_is_forwarded(agent: str, path: str) -> None:
    header = {"claude": "x-api-key", "codex": "Authorization", "gemini": "x-goog-api-key"}[agent]
    value = f"Bearer {TOKEN}" if header == "Authorization" else TOKEN
    refusal = decide(f"POST /{agent}{path} HTTP/1.1\nHost: x\n{header}: {value}\n")
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (403, "path")
    assert f"POST {path!r} is not a call {agent} makes" in refusal.message
    assert refusal.record == RECORD  # audited as the cloister that tried


@pytest.mark.parametrize(
    ("agent", "method", "path"),
    [
        ("claude", "POST", "/v1/messages?beta=true"),
        ("claude", "POST", "/v1/messages/count_tokens"),
        ("claude", "GET", "/v1/models?beta=true&limit=100"),
        ("claude", "GET", "/v1/models/claude-opus-4-1@20250805"),
        ("codex", "POST", "/v1/responses"),
        ("codex", "POST", "/v1/responses/compact"),
        ("codex", "GET", "/v1/models?client_version=0.169.0"),
        ("gemini", "POST", "/v1beta/models/gemini-2.5-flash-lite:generateContent"),
        ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:countTokens"),
    ],
)
def test_what_the_agents_call_is_forwarded(agent: str, method: str, path: str) -> None:
    header = {"claude": "x-api-key", "codex": "Authorization", "gemini": "x-goog-api-key"}[agent]
    value = f"Bearer {TOKEN}" if header == "Authorization" else TOKEN
    forward = decide(f"{method} /{agent}{path} HTTP/1.1\nHost: x\n{header}: {value}\n")
    assert isinstance(forward, Forward)
    assert sent_head(forward)[0] == f"{method} {path} HTTP/1.1"


@pytest.mark.parametrize(
    ("agent", "raw", "status", "reason"),
    [
        # the attacks that were found: a model deleted, stored completions listed
        ("codex", "DELETE /codex/v1/models/ft:gpt-4o:acme:x", 405, "method"),
        ("codex", "GET /codex/v1/chat/completions?limit=100", 403, "path"),
        ("claude", "DELETE /claude/v1/models/x", 405, "method"),
        ("gemini", "DELETE /gemini/v1beta/models/x", 405, "method"),
        ("gemini", "GET /gemini/v1beta/models", 405, "method"),
        ("claude", "POST /claude/v1/messages?beta=true&_method=DELETE", 403, "query"),
    ],
)
def test_the_found_attacks_are_refused_and_say_method_and_path(
    agent: str, raw: str, status: int, reason: str
) -> None:
    header = {"claude": "x-api-key", "codex": "Authorization", "gemini": "x-goog-api-key"}[agent]
    value = f"Bearer {TOKEN}" if header == "Authorization" else TOKEN
    refusal = decide(f"{raw} HTTP/1.1\nHost: x\n{header}: {value}\n")
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason, refusal.record) == (status, reason, RECORD)
    method = raw.split(maxsplit=1)[0]
    assert method in refusal.message


@pytest.mark.parametrize(
    ("agent", "path", "key", "selectors"),
    [
        ("claude", "/v1/messages", f"x-api-key: {TOKEN}", ["anthropic-organization: org-b"]),
        (
            "codex",
            "/v1/responses",
            f"Authorization: Bearer {TOKEN}",
            ["OpenAI-Organization: org-b", "OpenAI-Project: proj_b"],
        ),
        (
            "gemini",
            "/v1beta/models/g:generateContent",
            f"x-goog-api-key: {TOKEN}",
            ["x-goog-user-project: project-b"],
        ),
    ],
)
def test_the_agent_cannot_choose_the_organisation_or_project(
    agent: str, path: str, key: str, selectors: list[str]
) -> None:
    other_key = "x-goog-api-key" if agent == "claude" else "x-api-key"  # another vendor's
    extra = [*selectors, "Cookie: a=b", "X-Forwarded-For: 10.0.0.1", f"{other_key}: sk-other"]
    forward = decide(
        f"POST /{agent}{path} HTTP/1.1\nHost: x\n{key}\nuser-agent: cli/1\n"
        + "".join(f"{line}\n" for line in extra)
        + "Content-Length: 0\n"
    )
    assert isinstance(forward, Forward)
    names = [name.lower() for name, _ in sent_head(forward)[1]]
    expected = forward.provider.upstream_headers("api-key", REAL)[0][0]
    assert names == ["host", "user-agent", "content-length", "accept-encoding", expected]
    assert list(forward.dropped) == [line.split(":", 1)[0].lower() for line in extra]
    assert b"org-b" not in forward.head
    assert b"sk-other" not in forward.head


def test_a_method_override_header_is_refused() -> None:
    refusal = decide(
        f"POST /codex/v1/responses HTTP/1.1\nHost: x\nAuthorization: Bearer {TOKEN}\n"
        "X-HTTP-Method-Override: DELETE\n"
    )
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason) == (403, "method-override")


@pytest.mark.parametrize(
    ("agent", "shape"),
    [
        ("claude", {"type": "error", "error": {"type": "permission_error", "message": "m"}}),
        (
            "codex",
            {
                "error": {
                    "message": "m",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "path",
                }
            },
        ),
        ("gemini", {"error": {"code": 403, "message": "m", "status": "PERMISSION_DENIED"}}),
    ],
)
def test_a_refusal_is_shaped_as_the_vendors_errors(agent: str, shape: object) -> None:
    assert json.loads(Refusal(403, "m", "path").body(PROVIDERS[agent])) == shape


def test_the_framing_is_sent_as_parsed() -> None:
    forward = decide(
        f"POST /claude/v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n"
        "Transfer-Encoding: Chunked\n"
    )
    assert isinstance(forward, Forward)
    fields = sent_head(forward)[1]
    assert ("Transfer-Encoding", "chunked") in fields
    assert ("Transfer-Encoding", "Chunked") not in fields
    empty = decide(f"POST /claude/v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n")
    assert isinstance(empty, Forward)
    assert ("Content-Length", "0") in sent_head(empty)[1]


@pytest.mark.parametrize(
    ("sent", "body", "expected"),
    [
        ("Expect: 100-Continue", "Content-Length: 2", True),
        ("Expect: 100-continue", "Transfer-Encoding: chunked", True),
        ("Expect: 100-continue", "", False),  # no body to wait for
        ("Expect: something-else", "Content-Length: 2", False),
        ("Expect: 100-continue\nExpect: 100-continue", "Content-Length: 2", False),
    ],
)
def test_the_gateway_answers_expect_100_continue_itself(
    sent: str, body: str, expected: bool
) -> None:
    forward = decide(
        f"POST /claude/v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n{sent}\n{body}\n"
    )
    assert isinstance(forward, Forward)
    assert forward.expects_continue is expected
    assert b"expect" not in forward.head.lower()
    assert forward.dropped == ()


@pytest.mark.parametrize("peer", ["172.30.0.6", "::ffff:172.30.0.6", "garbage"])
def test_another_cloisters_token_is_refused(peer: str) -> None:
    refusal = decide(f"POST /claude/v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n", peer=peer)
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.reason, refusal.record) == (401, "token-address", None)


def test_a_dual_stack_view_of_the_own_address_is_accepted() -> None:
    forward = decide(
        f"POST /claude/v1/messages HTTP/1.1\nHost: x\nx-api-key: {TOKEN}\n",
        peer="::ffff:172.30.0.5",
    )
    assert isinstance(forward, Forward)
