"""Which request headers the credential gateway forwards, per agent, sans I/O."""

from __future__ import annotations

import pytest

from cloister_proxy.credentials.headers import FORWARDED, forwarded
from cloister_proxy.http1 import Headers

TOKEN = "cloister-token-0123"

# What the CLIs really sent (tests/agents, the fake API logging every header): Claude
# Code 2.1, Codex 0.169 and Gemini CLI 0.61. Host, framing and key are the gateway's.
CLAUDE_CODE = [
    ("accept", "application/json"),
    ("accept-encoding", "gzip, deflate, br, zstd"),
    ("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14"),
    ("anthropic-dangerous-direct-browser-access", "true"),
    ("anthropic-version", "2023-06-01"),
    ("content-type", "application/json"),
    ("user-agent", "claude-cli/2.1.330 (external, sdk-cli)"),
    ("x-app", "cli"),
    ("x-claude-code-session-id", "556cf5f8-26d0-4c2c-b242-a9a89b20790c"),
    ("x-stainless-arch", "x64"),
    ("x-stainless-lang", "js"),
    ("x-stainless-os", "Linux"),
    ("x-stainless-package-version", "0.128.0"),
    ("x-stainless-retry-count", "0"),
    ("x-stainless-runtime", "node"),
    ("x-stainless-runtime-version", "v26.12.1"),
    ("x-stainless-timeout", "600"),
]
CODEX = [
    ("accept", "text/event-stream"),
    ("content-type", "application/json"),
    ("originator", "codex_exec"),
    ("session-id", "01a218f2-d030-73f0-97c9-9f17dcb6c0c0"),
    ("thread-id", "01a218f2-d030-73f0-97c9-9f17dcb6c0c0"),
    ("user-agent", "codex_exec/0.169.0 (Debian 12.0.0; x86_64) unknown"),
    ("x-client-request-id", "01a218f2-d030-73f0-97c9-9f17dcb6c0c0"),
    ("x-codex-beta-features", "remote_compaction_v2"),
    ("x-codex-turn-metadata", '{"installation_id":"48f1c77b"}'),
    ("x-codex-window-id", "01a218f2-d030-73f0-97c9-9f17dcb6c0c0:0"),
]
GEMINI_CLI = [
    ("accept", "*/*"),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", "*"),
    ("content-type", "application/json"),
    ("sec-fetch-mode", "cors"),
    ("user-agent", "GeminiCLI-tui/0.61.0/gemini-test (linux; x64; terminal)"),
    ("x-goog-api-client", "google-genai-sdk/1.30.0 gl-node/v24.21.0"),
]
SENT = {"claude": CLAUDE_CODE, "codex": CODEX, "gemini": GEMINI_CLI}
KEY = {
    "claude": ("x-api-key", TOKEN),
    "codex": ("authorization", f"Bearer {TOKEN}"),
    "gemini": ("x-goog-api-key", TOKEN),
}
GATEWAYS_OWN = [
    ("Host", "cloister-guardian-credentials:9997"),
    ("Content-Length", "2"),
    ("Connection", "keep-alive"),
]
# Who the key acts for, where the request came from, and other credentials: never the
# agent's to say.
HOSTILE = [
    ("anthropic-organization", "org-other"),
    ("anthropic-workspace-id", "wrkspc_other"),
    ("OpenAI-Organization", "org-other"),
    ("OpenAI-Project", "proj_other"),
    ("chatgpt-account-id", "acct-other"),
    ("x-goog-user-project", "other-project"),
    ("Cookie", "session=stolen"),
    ("Forwarded", "for=10.0.0.1"),
    ("X-Forwarded-For", "10.0.0.1"),
    ("X-Forwarded-Host", "api.example"),
    ("X-Real-IP", "10.0.0.1"),
    ("Proxy-Authorization", "Basic c3RvbGVu"),
    ("x-goog-iam-authorization-token", "ya29.other"),
    ("x-organization-uuid", "0000"),
]


def head(*fields: tuple[str, str]) -> Headers:
    return Headers(tuple(fields))


# The gateway asks for an uncompressed answer itself (it masks the key in answers).
ASKED_BY_THE_GATEWAY = ("accept-encoding",)


def kept_of(agent: str) -> list[tuple[str, str]]:
    return [(name, value) for name, value in SENT[agent] if name not in ASKED_BY_THE_GATEWAY]


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_what_each_cli_sends_is_forwarded_as_sent(agent: str) -> None:
    kept, dropped = forwarded(agent, head(*GATEWAYS_OWN, KEY[agent], *SENT[agent]))
    assert kept == kept_of(agent)
    assert dropped == ()  # nothing of what the CLI sends is news in the audit line


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_organisation_project_cookie_forwarded_for_and_other_auth_are_dropped(
    agent: str,
) -> None:
    kept, dropped = forwarded(agent, head(KEY[agent], *SENT[agent], *HOSTILE))
    assert kept == kept_of(agent)
    hostile = tuple(name.lower() for name, _ in HOSTILE if name != "Proxy-Authorization")
    assert dropped == hostile


def test_another_vendors_key_header_is_dropped_and_reported() -> None:
    fields = head(
        ("authorization", f"Bearer {TOKEN}"), ("x-api-key", "sk-other"), ("x-goog-api-key", "g")
    )
    kept, dropped = forwarded("codex", fields)
    assert kept == []
    assert dropped == ("x-api-key", "x-goog-api-key")  # codex's own key header is the gateway's


def test_no_agents_selector_is_on_any_list() -> None:
    for agent, names in FORWARDED.items():
        assert names == {name.lower() for name in names}, agent
        assert not names & {name.lower() for name, _ in HOSTILE}, agent
        assert not names & {"authorization", "x-api-key", "x-goog-api-key", "host"}, agent
        assert not names & {"content-length", "transfer-encoding", "connection", "te"}, agent


def test_names_match_in_any_case_and_keep_their_spelling_and_order() -> None:
    kept, _ = forwarded(
        "claude",
        head(("Anthropic-Version", "2023-06-01"), ("X-App", "cli"), ("ANTHROPIC-BETA", "a")),
    )
    assert kept == [("Anthropic-Version", "2023-06-01"), ("X-App", "cli"), ("ANTHROPIC-BETA", "a")]


def test_repeated_fields_are_kept_as_sent() -> None:
    kept, _ = forwarded("claude", head(("anthropic-beta", "a"), ("anthropic-beta", "b")))
    assert kept == [("anthropic-beta", "a"), ("anthropic-beta", "b")]


def test_a_field_named_in_connection_is_hop_by_hop_and_not_forwarded() -> None:
    kept, dropped = forwarded(
        "claude",
        head(("Connection", "anthropic-beta, x-org"), ("anthropic-beta", "a"), ("x-org", "o")),
    )
    assert kept == []
    assert dropped == ()


def test_an_unknown_agent_forwards_nothing() -> None:
    kept, dropped = forwarded("nobody", head(("accept", "*/*")))
    assert kept == []
    assert dropped == ("accept",)
