"""Gemini CLI.

Checked against ``@google/gemini-cli`` 0.61.0 (its bundle and bundled docs,
``docs/reference/configuration.md``), run with a scratch home, ``strace -f -e
trace=file`` and a local HTTP server as the gateway:

* ``GEMINI_CLI_HOME`` replaces the *home* (``homedir()`` in the bundle): everything
  lives in ``$GEMINI_CLI_HOME/.gemini`` (``settings.json``, ``oauth_creds.json``,
  ``tmp/<project>/chats``, ``history``), and it reads ``GEMINI.md`` there. So it is
  set to the cloister's home, whose ``.gemini`` is the state directory.
* ``GOOGLE_GEMINI_BASE_URL`` moves the API: ``POST <base>/v1beta/models/<model>:
  streamGenerateContent`` with ``x-goog-api-key: <GEMINI_API_KEY>``; the gateway keeps
  the path. 0.61 only checks that it parses as a URL (the docs ask for HTTPS except to
  localhost: a later version that enforces it would refuse the plain-HTTP gateway).
  With the variable set the CLI guesses the auth type "gateway", which its own check
  then refuses ("Invalid auth method selected"); ``security.auth.selectedType =
  "gemini-api-key"`` in ``settings.json`` avoids that and still uses the base URL.
* YOLO cannot be a setting (``general.defaultApprovalMode = "yolo"`` is ignored on
  purpose): only ``--approval-mode=yolo`` on the command line, hence :meth:`argv`. It
  also needs a trusted folder: ``GEMINI_CLI_TRUST_WORKSPACE=true`` (documented).
* ``general.enableAutoUpdate``/``enableAutoUpdateNotification`` and
  ``privacy.usageStatisticsEnabled`` off: update checks and usage statistics would
  wait at the proxy; ``telemetry.enabled`` off (its default) so that no OpenTelemetry
  export starts either. The usage statistics' host, ``play.googleapis.com``
  (Clearcut), is refused by the proxy without asking (:mod:`cloister_core.background`).
* The Google login (``existing-login``) is ``oauth_creds.json`` (refreshed tokens are
  written back there) and ``google_accounts.json`` (the account's e-mail, optional),
  with ``security.auth.selectedType = "oauth-personal"``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from cloister_cli.agents.base import (
    Agent,
    AgentSetupError,
    Allowed,
    HomeFile,
    json_file,
    login_file,
    pick,
    read_json_object,
    text_file,
)
from cloister_core.credentials import GATEWAY_METHODS, Method

# settings.json keys worth keeping inside (the nested schema of 0.61): how it looks and
# which model. Never tools, mcpServers, hooks, security, advanced, context or telemetry.
SETTINGS: Allowed = {
    ("ui", "theme"): str,
    ("ui", "hideBanner"): bool,
    ("ui", "hideTips"): bool,
    ("ui", "showLineNumbers"): bool,
    ("ui", "showCitations"): bool,
    ("general", "vimMode"): bool,
    ("model", "name"): str,
}


class Gemini(Agent):
    name: ClassVar[str] = "gemini"
    title: ClassVar[str] = "Gemini CLI"
    command: ClassVar[str] = "gemini"
    version_argv: ClassVar[tuple[str, ...]] = ("gemini", "--version")
    state_dir: ClassVar[str] = ".gemini"
    rules_file: ClassVar[str] = "GEMINI.md"
    method_help: ClassVar[Mapping[Method, str]] = {
        "api-key": (
            "A Gemini API key (aistudio.google.com). It stays on this machine: the"
            " credential gateway adds it to each request, and Gemini CLI inside only holds"
            " the cloister's token."
        ),
        "oauth-token": (
            "A Google OAuth access token for the Gemini API (generative-language scope),"
            " sent upstream as a bearer token. Such tokens expire within the hour, so this"
            " suits a token something on this machine keeps fresh; for your Google login,"
            " use existing-login."
        ),
        "existing-login": (
            "Your own Google login (~/.gemini/oauth_creds.json, from `gemini` → Login with"
            " Google on this machine) is copied into each cloister, and Gemini CLI talks to"
            " Google through the proxy. Weaker: the agent holds your real tokens and could"
            " use or leak them."
        ),
    }
    login_paths: ClassVar[tuple[str, ...]] = ("oauth_creds.json", "google_accounts.json")
    reserved_env: ClassVar[frozenset[str]] = frozenset(
        {"GEMINI_CLI_HOME", "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"}
    )

    def argv(self, *, skip_permissions: bool) -> list[str]:
        return [self.command, "--approval-mode=yolo"] if skip_permissions else [self.command]

    def own_environment(
        self, *, home: str, gateway_url: str, token: str, method: Method, skip_permissions: bool
    ) -> dict[str, str]:
        variables = {
            "GEMINI_CLI_HOME": home,  # the directory holding .gemini, not .gemini itself
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
        if method in GATEWAY_METHODS:
            variables |= {"GOOGLE_GEMINI_BASE_URL": gateway_url, "GEMINI_API_KEY": token}
        return variables

    def generated(
        self, *, method: Method, skip_permissions: bool, rules: str, gateway_url: str
    ) -> list[HomeFile]:
        del skip_permissions, gateway_url  # YOLO is a flag (argv), the gateway a variable
        auth = "gemini-api-key" if method in GATEWAY_METHODS else "oauth-personal"
        settings: dict[str, Any] = {
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "security": {"auth": {"selectedType": auth}},
        }
        return [json_file("settings.json", settings), text_file(self.rules_file, rules)]

    def copied(self, host_home: Path) -> list[HomeFile]:
        settings = read_json_object(host_home / ".gemini" / "settings.json")
        kept = pick(settings, SETTINGS) if settings else {}
        return [json_file("settings.json", kept)] if kept else []

    def login_files(self, host_home: Path) -> list[HomeFile]:
        how = "log in with Google in `gemini` on this machine first (or choose api-key)"
        files = [
            login_file(host_home / ".gemini" / "oauth_creds.json", "oauth_creds.json", how=how)
        ]
        with contextlib.suppress(AgentSetupError):  # only the account's e-mail: optional
            files.append(
                login_file(
                    host_home / ".gemini" / "google_accounts.json", "google_accounts.json", how=how
                )
            )
        return files


AGENT = Gemini()
