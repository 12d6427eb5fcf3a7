"""OpenAI Codex CLI.

Checked against ``@openai/codex`` 0.169.0 (its linux-x64-musl binary), run with a
scratch home, ``strace -f -e trace=file`` and a local HTTP server as the gateway:

* ``CODEX_HOME`` holds everything it writes (``config.toml``, ``auth.json``, sessions,
  its SQLite state); outside it, it only reads (``~/.gitconfig``, ``~/.agents``).
  It reads ``AGENTS.md`` there.
* It ignores ``OPENAI_BASE_URL`` (the name only appears in its secret redaction): a
  base URL comes from ``config.toml``. A provider of our own, ``model_provider =
  "cloister"`` with ``base_url = <gateway>/v1``, ``env_key = "OPENAI_API_KEY"`` and
  ``wire_api = "responses"``, makes it ``POST <gateway>/v1/responses`` with
  ``Authorization: Bearer <token>`` (over HTTP, no WebSocket): the gateway forwards
  ``/v1/responses`` to ``api_base``. ``OPENAI_BASE_URL`` is still set, for OpenAI SDKs
  the agent runs. No login screen: a provider with ``env_key`` needs no ``auth.json``.
* ``approval_policy = "never"`` and ``sandbox_mode = "danger-full-access"`` start the
  TUI in "permissions: YOLO mode" without a warning; ``[projects."/work"] trust_level
  = "trusted"`` skips the "Trust this folder?" screen.
* ``[features] daemon_auto_start = false`` (listed by ``codex features list``): by
  default the TUI copies its 400 MB binary into ``CODEX_HOME/packages`` and starts an
  app-server daemon that outlives it; off, the state directory stays small.
* ``check_for_update_on_startup = false``: the update check would wait at the proxy.
* ``[analytics] enabled = false`` and ``[otel] metrics_exporter = "none"``: by default
  it posts usage metrics to ``ab.chatgpt.com`` (its built-in OTLP exporter) and
  analytics events to the ChatGPT backend. Its curated plugin list comes from
  ``github.com`` at every start, with no switch; both hosts are refused by the proxy
  without asking (:mod:`cloister_core.background`).
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
    login_file,
    pick,
    read_toml,
    text_file,
    toml_file,
)
from cloister_core.credentials import GATEWAY_METHODS, Method

PROVIDER = "cloister"
KEY_VARIABLE = "OPENAI_API_KEY"

# config.toml keys worth keeping inside: the model and how it talks. Never
# model_provider(s), mcp_servers, notify (a command), shell_environment_policy,
# profiles, projects, approval/sandbox settings or history.
CONFIG: Allowed = {
    ("model",): str,
    ("model_reasoning_effort",): str,
    ("model_reasoning_summary",): str,
    ("model_verbosity",): str,
    ("personality",): str,
    ("hide_agent_reasoning",): bool,
    ("show_raw_agent_reasoning",): bool,
}


class Codex(Agent):
    name: ClassVar[str] = "codex"
    title: ClassVar[str] = "Codex"
    command: ClassVar[str] = "codex"
    version_argv: ClassVar[tuple[str, ...]] = ("codex", "--version")
    state_dir: ClassVar[str] = ".codex"
    rules_file: ClassVar[str] = "AGENTS.md"
    method_help: ClassVar[Mapping[Method, str]] = {
        "api-key": (
            "An OpenAI API key (platform.openai.com). It stays on this machine: the"
            " credential gateway adds it to each request, and Codex inside only holds the"
            " cloister's token."
        ),
        "oauth-token": (
            "A bearer token that the API at agents.codex.api_base accepts in place of an"
            " API key (a gateway of your organisation, for example). A ChatGPT login is"
            " not one: for that, use existing-login. The token stays on this machine."
        ),
        "existing-login": (
            "Your own login (~/.codex/auth.json, from `codex login` on this machine: a"
            " ChatGPT login, or the API key it stored) is copied into each cloister, and"
            " Codex talks to OpenAI through the proxy. Weaker: the agent holds your real"
            " tokens or key and could use or leak them, and a refresh inside can log out"
            " your copy on this machine. Needs the file store (not"
            ' cli_auth_credentials_store = "keyring").'
        ),
    }
    login_paths: ClassVar[tuple[str, ...]] = ("auth.json",)
    reserved_env: ClassVar[frozenset[str]] = frozenset(
        {"CODEX_HOME", "OPENAI_BASE_URL", KEY_VARIABLE, "CODEX_API_KEY", "CODEX_ACCESS_TOKEN"}
    )

    def own_environment(
        self, *, home: str, gateway_url: str, token: str, method: Method, skip_permissions: bool
    ) -> dict[str, str]:
        variables = {"CODEX_HOME": self.config_dir(home)}
        if method in GATEWAY_METHODS:
            variables |= {"OPENAI_BASE_URL": f"{gateway_url}/v1", KEY_VARIABLE: token}
        return variables

    def generated(
        self, *, method: Method, skip_permissions: bool, rules: str, gateway_url: str
    ) -> list[HomeFile]:
        config: dict[str, Any] = {"check_for_update_on_startup": False}
        if method in GATEWAY_METHODS:
            config["model_provider"] = PROVIDER
        if skip_permissions:
            config |= {"approval_policy": "never", "sandbox_mode": "danger-full-access"}
        if method in GATEWAY_METHODS:
            config["model_providers"] = {
                PROVIDER: {
                    "name": "Cloister credential gateway",
                    "base_url": f"{gateway_url}/v1",  # the gateway keeps the path: /v1/responses
                    "env_key": KEY_VARIABLE,
                    "wire_api": "responses",
                }
            }
        config["projects"] = {WORK: {"trust_level": "trusted"}}
        config["features"] = {"daemon_auto_start": False}
        config["analytics"] = {"enabled": False}
        config["otel"] = {"metrics_exporter": "none"}
        return [toml_file("config.toml", config), text_file(self.rules_file, rules)]

    def copied(self, host_home: Path) -> list[HomeFile]:
        config = read_toml(host_home / ".codex" / "config.toml")
        kept = pick(config, CONFIG) if config else {}
        return [toml_file("config.toml", kept)] if kept else []

    def login_files(self, host_home: Path) -> list[HomeFile]:
        return [
            login_file(
                host_home / ".codex" / "auth.json",
                "auth.json",
                how="log in with `codex login` on this machine first (or choose api-key)",
            )
        ]


AGENT = Codex()
