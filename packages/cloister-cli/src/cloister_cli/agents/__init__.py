"""The coding agents a cloister can run, one module each.

Each module (:mod:`.claude`, :mod:`.codex`, :mod:`.gemini`) defines one
:class:`~cloister_cli.agents.base.Agent`: its command, the variables that point it at
its state directory and the credential gateway, and the files Cloister writes into that
directory at every start (:meth:`~cloister_cli.agents.base.Agent.home_files`). Adding
an agent is one module, listed here, plus its provider in
:data:`cloister_core.credentials.PROVIDERS` and the hosts it still calls on its own
(updates, telemetry, with every switch it has off) in
:data:`cloister_core.background.BACKGROUND_HOSTS`.
"""

from __future__ import annotations

import difflib

from cloister_cli.agents import claude, codex, gemini
from cloister_cli.agents.base import Agent, AgentSetupError, HomeFile
from cloister_cli.agents.rules import rules_text
from cloister_core.errors import CloisterError

AGENTS: dict[str, Agent] = {
    agent.name: agent for agent in (claude.AGENT, codex.AGENT, gemini.AGENT)
}


def get(name: str) -> Agent:
    """The agent called *name*; :class:`CloisterError` naming the closest one otherwise."""
    try:
        return AGENTS[name]
    except KeyError:
        pass
    close = difflib.get_close_matches(name, AGENTS, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"one of {', '.join(AGENTS)}"
    raise CloisterError(f"no such agent {name!r} ({hint})")


__all__ = ["AGENTS", "Agent", "AgentSetupError", "HomeFile", "agentstate", "get", "rules_text"]
