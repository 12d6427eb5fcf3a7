"""The variables Cloister sets in every cloister, whatever a devcontainer.json asks.

One list for both sides: the devcontainer loader says "ignored: Cloister sets it" for
these, and the CLI's container plan never lets a devcontainer's value replace them.
(An agent's own variables, which depend on its setup, are the plan's to drop.)
"""

from __future__ import annotations

# Whatever their case: a tool reads either spelling, and the proxy is the only way out.
PROXY_NAMES = frozenset({"http_proxy", "https_proxy", "no_proxy", "all_proxy"})


def set_by_cloister(name: str) -> str | None:
    """Why Cloister sets the variable *name* itself (so nothing else does), or None."""
    if name.upper() == "CLOISTER" or name.upper().startswith("CLOISTER_"):
        return "Cloister sets it: the cloister's name, token and guardian"
    if name.lower() in PROXY_NAMES:
        return "Cloister sets it: the proxy is the only way out"
    if name == "HOME":
        return "Cloister sets it: the home is /home/cloister, private to the cloister"
    return None
