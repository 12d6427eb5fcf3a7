"""The coding agents a cloister can run, one module each.

Each module (:mod:`.claude`, :mod:`.codex`, :mod:`.gemini`) defines one
:class:`~cloister_cli.agents.base.Agent`: its command, the variables that point it at
its state directory and the credential gateway, and the files Cloister writes into that
directory at every start (:meth:`~cloister_cli.agents.base.Agent.home_files`). Adding
an agent is one module, named in :data:`NAMES`, plus its provider in
:data:`cloister_core.credentials.PROVIDERS` and the hosts it still calls on its own
(updates, telemetry, with every switch it has off) in
:data:`cloister_core.background.BACKGROUND_HOSTS`.

The agents' modules (and the credentials' models under them) are imported when a name
below is first used: ``cloister stop`` needs only :data:`NAMES` (measured: about 10 ms
of imports it would pay for nothing).
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

from cloister_core.errors import CloisterError
from cloister_core.lazyexports import lazy_exports

if TYPE_CHECKING:
    from cloister_cli.agents import agentstate
    from cloister_cli.agents.base import Agent, AgentSetupError, HomeFile
    from cloister_cli.agents.rules import rules_text

    AGENTS: dict[str, Agent]

# Each agent's name, which is its module's too.
NAMES = ("claude", "codex", "gemini")

# Each name's module (what ``__getattr__`` imports when the name is first used).
_MODULES = {
    "Agent": "base",
    "AgentSetupError": "base",
    "HomeFile": "base",
    "rules_text": "rules",
}


@functools.cache
def _agents() -> dict[str, Agent]:
    return {each: importlib.import_module(f"{__name__}.{each}").AGENT for each in NAMES}


_exported = lazy_exports(__name__, _MODULES)


def __getattr__(name: str) -> object:
    if name == "AGENTS":
        return _agents()
    return _exported(name)


def get(name: str) -> Agent:
    """The agent called *name*; :class:`CloisterError` naming the closest one otherwise."""
    agents = _agents()
    try:
        return agents[name]
    except KeyError:
        pass
    import difflib  # noqa: PLC0415 - only for a wrong name

    close = difflib.get_close_matches(name, agents, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"one of {', '.join(agents)}"
    raise CloisterError(f"no such agent {name!r} ({hint})")


__all__ = [
    "AGENTS",
    "NAMES",
    "Agent",
    "AgentSetupError",
    "HomeFile",
    "agentstate",
    "get",
    "rules_text",
]
