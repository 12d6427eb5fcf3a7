"""A human's home with everything an agent keeps, secrets and code-running config included.

:func:`make_host_home` builds it; the ``host_home`` fixture of ``conftest.py`` gives it.

Every secret and every command in it contains ``LEAK``, so a test can assert that none
of it reaches a cloister, whatever file it would end up in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from cloister_cli.agents.base import HomeFile

SECRET = "LEAK"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _json(path: Path, document: object) -> None:
    _write(path, json.dumps(document))


def make_host_home(home: Path) -> Path:
    # Claude Code
    _json(
        home / ".claude" / "settings.json",
        {
            "model": "claude-opus-test",
            "theme": "light",
            "verbose": True,
            "attribution": {"commit": "Co-authored-by: me"},
            "cleanupPeriodDays": True,  # a bool where an int belongs: dropped
            "permissions": {"allow": ["Bash(curl LEAK)"], "defaultMode": "plan"},
            "skipDangerousModePermissionPrompt": False,
            "hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "LEAK-hook"}]}]},
            "env": {"ANTHROPIC_API_KEY": "sk-ant-LEAK"},
            "apiKeyHelper": "/bin/LEAK-helper",
            "statusLine": {"type": "command", "command": "LEAK-status"},
            "mcpServers": {"x": {"command": "LEAK-mcp"}},
            "enabledPlugins": {"LEAK@market": True},
        },
    )
    _json(
        home / ".claude.json",
        {
            "primaryApiKey": "sk-ant-LEAK",
            "projects": {"/home/me/secret": {"history": [{"display": "LEAK prompt"}]}},
            "mcpServers": {"y": {"command": "LEAK-global-mcp"}},
            "oauthAccount": {"emailAddress": "LEAK@example.com"},
        },
    )
    _json(
        home / ".claude" / ".credentials.json",
        {"claudeAiOauth": {"accessToken": "sk-ant-oat-LEAK", "refreshToken": "sk-ant-ort-LEAK"}},
    )
    _write(home / ".claude" / "history.jsonl", '{"display": "LEAK history"}\n')
    _write(home / ".claude" / "projects" / "-home-me-secret" / "a.jsonl", '{"LEAK": 1}\n')
    _write(home / ".claude" / "todos" / "t.json", '["LEAK todo"]')
    _write(home / ".claude" / "CLAUDE.md", "LEAK: my own instructions\n")
    _write(home / ".claude" / "commands" / "c.md", "LEAK command\n")
    # Codex
    _write(
        home / ".codex" / "config.toml",
        'model = "gpt-test"\n'
        'model_reasoning_effort = "high"\n'
        'hide_agent_reasoning = "yes"\n'  # a string where a bool belongs: dropped
        'approval_policy = "untrusted"\n'
        'model_provider = "LEAK-provider"\n'
        'notify = ["LEAK-notify"]\n'
        "[model_providers.LEAK-provider]\n"
        'base_url = "https://LEAK.example"\n'
        'env_key = "LEAK_KEY"\n'
        "[mcp_servers.x]\n"
        'command = "LEAK-mcp"\n'
        "[shell_environment_policy]\n"
        'set = { TOKEN = "LEAK" }\n'
        '[projects."/home/me/LEAK"]\n'
        'trust_level = "trusted"\n',
    )
    _json(home / ".codex" / "auth.json", {"OPENAI_API_KEY": "sk-LEAK", "tokens": None})
    _write(home / ".codex" / "history.jsonl", '{"text": "LEAK history"}\n')
    _write(home / ".codex" / "sessions" / "2026" / "s.jsonl", '{"LEAK": 1}\n')
    _write(home / ".codex" / "AGENTS.md", "LEAK: my own instructions\n")
    # Gemini CLI (its settings.json may hold comments)
    _write(
        home / ".gemini" / "settings.json",
        "{\n"
        "  // the look\n"
        '  "ui": {"theme": "GitHub", "hideBanner": true, "customThemes": {"LEAK": {}}},\n'
        '  "model": {"name": "gemini-test", "LEAK": "x"},\n'
        '  "general": {"vimMode": true, "preferredEditor": "LEAK-editor"},\n'
        '  "security": {"auth": {"selectedType": "LEAK-auth"}, "folderTrust": {"enabled": true}},\n'
        '  "mcpServers": {"x": {"command": "LEAK-mcp"}},\n'
        '  "hooks": {"BeforeTool": [{"command": "LEAK-hook"}]},\n'
        '  "tools": {"sandbox": "LEAK", "discoveryCommand": "LEAK-discover"},\n'
        "}\n",
    )
    _json(
        home / ".gemini" / "oauth_creds.json",
        {"access_token": "ya29.LEAK", "refresh_token": "LEAK"},
    )
    _json(home / ".gemini" / "google_accounts.json", {"active": "LEAK@example.com", "old": []})
    _json(home / ".gemini" / "trustedFolders.json", {"/home/me/LEAK": "TRUST_FOLDER"})
    _write(home / ".gemini" / "tmp" / "proj" / "chats" / "c.json", '{"LEAK": 1}')
    _write(home / ".gemini" / "GEMINI.md", "LEAK: my own instructions\n")
    return home


def leaked(files: Iterable[HomeFile]) -> list[str]:
    """The paths of *files* whose content holds something of the human's that must stay out."""
    return [item.path for item in files if SECRET.encode() in item.content]
