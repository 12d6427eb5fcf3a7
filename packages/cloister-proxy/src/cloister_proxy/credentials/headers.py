"""The request headers the credential gateway forwards: per agent, those its CLI sends.

Read from the CLIs themselves (Claude Code 2.1, Codex 0.169 and Gemini CLI 0.61, run
against a fake model API that logs every header, and the header names in their
binaries) and the vendors' API references. Every other header is dropped, not refused:
a CLI that adds one still works, the vendor just never sees it. Dropped in particular,
because the key acts for whoever is named there: the organisation, project and
workspace selectors (``anthropic-organization``, ``anthropic-workspace-id``,
``OpenAI-Organization``, ``OpenAI-Project``, ``chatgpt-account-id``,
``x-goog-user-project``), cookies, ``Forwarded`` and ``X-Forwarded-*``, and every
credential header but the one the gateway writes. Host, the framing headers,
``Accept-Encoding: identity`` and the credential are the gateway's own
(:func:`~cloister_proxy.credentials.plan.plan`), and it answers ``Expect: 100-continue`` itself.
:func:`forwarded` is sans I/O: the head's fields in, those to send and the names
dropped out.
"""

from __future__ import annotations

from cloister_core.credentials import PROVIDERS
from cloister_proxy.http1 import FRAMING_FIELDS, HOP_BY_HOP, Headers

# Sent by all three (representation and content negotiation); names are lower case. Not
# Accept-Encoding: the gateway asks for an uncompressed answer itself, because it masks
# the key in what the vendor says, and could not inside gzip.
_COMMON = frozenset({"accept", "content-encoding", "content-type", "user-agent"})
_STAINLESS = frozenset(  # the Anthropic SDK's description of itself
    {
        "x-stainless-arch",
        "x-stainless-helper",
        "x-stainless-helper-method",
        "x-stainless-lang",
        "x-stainless-os",
        "x-stainless-package-version",
        "x-stainless-retry-count",
        "x-stainless-runtime",
        "x-stainless-runtime-version",
        "x-stainless-timeout",
    }
)

FORWARDED: dict[str, frozenset[str]] = {
    "claude": _COMMON
    | _STAINLESS
    | {
        "anthropic-beta",
        "anthropic-dangerous-direct-browser-access",
        "anthropic-version",
        "x-anthropic-additional-protection",
        "x-app",
        "x-claude-code-agent-id",
        "x-claude-code-parent-agent-id",
        "x-claude-code-session-id",
        "x-client-request-id",
    },
    "codex": _COMMON
    | {
        "conversation_id",
        "openai-beta",
        "originator",
        "session-id",
        "session_id",
        "thread-id",
        "version",
        "x-client-request-id",
        "x-codex-beta-features",
        "x-codex-installation-id",
        "x-codex-parent-thread-id",
        "x-codex-turn-metadata",
        "x-codex-turn-state",
        "x-codex-window-id",
        "x-openai-memgen-request",
        "x-openai-subagent",
    },
    "gemini": _COMMON
    | {
        "accept-language",
        "sec-fetch-mode",
        "x-goog-api-client",
        "x-server-timeout",
    },
}

# What the gateway writes in their place, or what never crosses a hop: dropped, and
# not worth a word in the audit line.
_REPLACED = frozenset({"host", "expect", "accept-encoding"}) | FRAMING_FIELDS | HOP_BY_HOP


def forwarded(agent: str, headers: Headers) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """*agent*'s request fields to send upstream (in order, as spelt), and the names of
    the others it sent, lower case, each once, in order: what the audit line reports
    (the client's key headers and the hop-by-hop ones left out)."""
    allowed = FORWARDED.get(agent, frozenset())
    provider = PROVIDERS.get(agent)
    replaced = _REPLACED | set(provider.token_headers if provider else ())
    # A field the client names in Connection is hop-by-hop, whatever its name.
    hop = headers.connection_tokens() - FRAMING_FIELDS
    kept: list[tuple[str, str]] = []
    dropped: dict[str, None] = {}
    for name, value in headers.fields:
        lowered = name.lower()
        if lowered in allowed and lowered not in hop:
            kept.append((name, value))
        elif lowered not in replaced and lowered not in hop:
            dropped[lowered] = None
    return kept, tuple(dropped)
