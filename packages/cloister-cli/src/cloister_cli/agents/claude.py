"""Claude Code.

Checked against the native binary of ``@anthropic-ai/claude-code`` 2.1.330 (linux-x64),
run with a scratch home, ``strace -f -e trace=file`` and a local HTTP server as its
base URL:

* ``CLAUDE_CONFIG_DIR`` moves everything it keeps into that directory, ``.claude.json``
  (onboarding, project trust) and ``.credentials.json`` (the Linux login) included;
  outside it only caches (``~/.cache/claude*``, ``~/.local/state/claude``), which may
  be lost. It reads ``CLAUDE.md`` there too.
* ``ANTHROPIC_BASE_URL`` + ``ANTHROPIC_AUTH_TOKEN`` sends ``Authorization: Bearer
  <token>`` to ``<base>/v1/messages`` without the OAuth beta: the gateway's api-key
  route. ``ANTHROPIC_API_KEY`` is not used: the interactive CLI then asks "Detected a
  custom API key … use this API key?" (default No) at every start of a new key.
* ``CLAUDE_CODE_OAUTH_TOKEN`` sends ``Authorization: Bearer <token>`` and adds
  ``oauth-2025-04-20`` to ``anthropic-beta`` itself: the gateway's oauth-token route.
* Bypass mode at start without a dialog: ``permissions.defaultMode: bypassPermissions``
  and ``skipDangerousModePermissionPrompt: true`` in the user ``settings.json`` (the
  older ``bypassPermissionsModeAccepted`` of ``.claude.json`` is migrated to the latter
  by the binary); as root it also needs ``IS_SANDBOX=1``. ``hasCompletedOnboarding``
  skips the theme and login screens, ``projects["/work"].hasTrustDialogAccepted`` the
  folder trust dialog and ``hasSeenAutoDefaultNudge`` the "make auto mode your
  default?" question: with all of them the TUI starts straight in "bypass permissions
  on".
* ``DISABLE_AUTOUPDATER`` and ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` exist in the
  binary (no update check, no telemetry: both would wait at the proxy). The latter
  implies ``DISABLE_TELEMETRY`` and ``DISABLE_ERROR_REPORTING`` (its documentation
  says so); they are set too, so that a human who turns non-essential traffic back on
  in ``agents.claude.env`` (for updates, say) still sends no telemetry or error reports.
  What remains, ``downloads.claude.ai`` (updates, plugin executables), is refused by
  the proxy without asking (:mod:`cloister_core.background`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from cloister_cli.agents.base import (
    WORK,
    Agent,
    Allowed,
    HomeFile,
    json_file,
    login_file,
    pick,
    read_json_object,
    text_file,
)
from cloister_core.credentials import Method

# User settings worth keeping inside: how it looks and which model it uses. Never
# permissions, hooks, env, apiKeyHelper/awsAuthRefresh/otelHeadersHelper, statusLine
# (commands), MCP servers, enabledPlugins or marketplaces. Names and types as in the
# settings schema of the 2.1.330 binary.
SETTINGS: Allowed = {
    ("model",): str,
    ("theme",): str,
    ("editorMode",): str,
    ("verbose",): bool,
    ("outputStyle",): str,
    ("language",): str,
    ("effortLevel",): str,
    ("alwaysThinkingEnabled",): bool,
    ("showThinkingSummaries",): bool,
    ("spinnerTipsEnabled",): bool,
    ("autoCompactEnabled",): bool,
    ("showTurnDuration",): bool,
    ("prefersReducedMotion",): bool,
    ("includeCoAuthoredBy",): bool,
    ("attribution",): dict,
    ("respectGitignore",): bool,
    ("cleanupPeriodDays",): int,
}


class Claude(Agent):
    name: ClassVar[str] = "claude"
    title: ClassVar[str] = "Claude Code"
    command: ClassVar[str] = "claude"
    version_argv: ClassVar[tuple[str, ...]] = ("claude", "--version")
    state_dir: ClassVar[str] = ".claude"
    rules_file: ClassVar[str] = "CLAUDE.md"
    method_help: ClassVar[Mapping[Method, str]] = {
        "api-key": (
            "An Anthropic API key (console.anthropic.com). It stays on this machine: the"
            " credential gateway adds it to each request, and Claude Code inside only holds"
            " the cloister's token."
        ),
        "oauth-token": (
            "A long-lived token of your Claude subscription: run `claude setup-token` on"
            " this machine and paste what it prints. It stays on this machine: the"
            " credential gateway adds it to each request, and Claude Code inside only holds"
            " the cloister's token."
        ),
        "existing-login": (
            "Your own login (~/.claude/.credentials.json, from `claude` → /login on this"
            " machine) is copied into each cloister, and Claude Code talks to Anthropic"
            " through the proxy. Weaker: the agent holds your real tokens and could use or"
            " leak them, and a refresh inside can log out your copy on this machine. Not"
            " possible on macOS, where the login is in the Keychain: use oauth-token."
        ),
    }
    login_paths: ClassVar[tuple[str, ...]] = (".credentials.json",)
    reserved_env: ClassVar[frozenset[str]] = frozenset(
        {
            "CLAUDE_CONFIG_DIR",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
        }
    )

    def own_environment(
        self, *, home: str, gateway_url: str, token: str, method: Method, skip_permissions: bool
    ) -> dict[str, str]:
        variables = {
            "CLAUDE_CONFIG_DIR": self.config_dir(home),
            "IS_SANDBOX": "1",  # bypass mode is refused as root without it
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        if method == "api-key":
            variables |= {"ANTHROPIC_BASE_URL": gateway_url, "ANTHROPIC_AUTH_TOKEN": token}
        elif method == "oauth-token":
            variables |= {"ANTHROPIC_BASE_URL": gateway_url, "CLAUDE_CODE_OAUTH_TOKEN": token}
        return variables

    def generated(
        self, *, method: Method, skip_permissions: bool, rules: str, gateway_url: str
    ) -> list[HomeFile]:
        del method, gateway_url  # the gateway is in the environment
        state: dict[str, Any] = {
            "hasCompletedOnboarding": True,
            "hasSeenAutoDefaultNudge": True,
            "projects": {WORK: {"hasTrustDialogAccepted": True}},
        }
        settings: dict[str, Any] = {"permissions": {"defaultMode": "default"}}
        if skip_permissions:
            state["bypassPermissionsModeAccepted"] = True  # older versions read this one
            settings = {
                "permissions": {"defaultMode": "bypassPermissions"},
                "skipDangerousModePermissionPrompt": True,
            }
        return [
            json_file(".claude.json", state),
            json_file("settings.json", settings),
            text_file(self.rules_file, rules),
        ]

    def copied(self, host_home: Path) -> list[HomeFile]:
        settings = read_json_object(host_home / ".claude" / "settings.json")
        kept = pick(settings, SETTINGS) if settings else {}
        return [json_file("settings.json", kept)] if kept else []

    def login_files(self, host_home: Path) -> list[HomeFile]:
        return [
            login_file(
                host_home / ".claude" / ".credentials.json",
                ".credentials.json",
                how="log in with `claude` on this machine first (or choose oauth-token)",
            )
        ]


AGENT = Claude()
