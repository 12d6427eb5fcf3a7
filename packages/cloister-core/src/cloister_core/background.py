"""The hosts each agent still calls on its own, which the proxy refuses without asking.

Cloister turns off every update check, telemetry and "non-essential" call an agent has
a switch for (:mod:`cloister_cli.agents`). What remains is listed here, per agent:
calls the agent makes in the background, that nobody asked for and that would
otherwise wait in the approval queue, one more item for the human at every start.

The proxy refuses such a host at once, for a cloister started with that agent, when
no rule of any file decides it (``agent-default``). Any rule the human wrote still
wins: ``- domain: github.com`` under ``proxy.allow`` opens it, and
``agents.<name>.background_hosts`` replaces the list (``[]``: none).

The lists come from each vendor's own documentation and source:

* Claude Code: ``downloads.claude.ai``, where the native build downloads its updates
  and plugin executables (its network requirements list it as "native installer and
  auto-updater"); its telemetry and error reports are off by
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``.
* Codex: ``ab.chatgpt.com``, where its built-in metrics exporter posts
  (``/otlp/v1/metrics``; off by ``[otel] metrics_exporter = "none"`` and ``[analytics]
  enabled = false``), and ``github.com``, which it fetches its curated plugin list
  from at every start (``git fetch https://github.com/openai/plugins.git``), with no
  switch to turn that off.
* Gemini CLI: ``play.googleapis.com``, its Clearcut usage-statistics endpoint (off by
  ``privacy.usageStatisticsEnabled = false``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from cloister_core.config.models import AgentsConfig

BACKGROUND_HOSTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "claude": ("downloads.claude.ai",),
        "codex": ("ab.chatgpt.com", "github.com"),
        "gemini": ("play.googleapis.com",),
    }
)


def background_hosts(agent: str | None, agents: AgentsConfig) -> tuple[str, ...]:
    """The hosts refused without asking for a cloister of *agent*: ``agents.<name>.
    background_hosts`` when set, else the agent's own list; none without an agent."""
    if agent is None or agent not in BACKGROUND_HOSTS:
        return ()
    configured = agents.of(agent).background_hosts
    return BACKGROUND_HOSTS[agent] if configured is None else configured


def overridden(agent: str, agents: AgentsConfig) -> bool:
    """Whether ``agents.<agent>.background_hosts`` replaces the agent's own list."""
    return agent in BACKGROUND_HOSTS and agents.of(agent).background_hosts is not None
