"""Keys of the Go implementation's ``config.yaml`` that Cloister reads or sets aside.

Its first-run file and the samples of its reference carry keys Cloister has no use for
(listen addresses of services that live inside the guardian here, log settings, a
request rate) or keeps elsewhere (agent secrets, stored by ``cloister setup``). Such a
file loads: :func:`translate` turns what has a meaning here into Cloister's key
(``devcontainer.features.allow`` → ``devcontainer.trusted_features``) and sets the
rest aside, each with what Cloister does instead, which ``cloister config check`` shows
as a warning (``--strict`` fails on it). A secret under ``agents.<name>.token`` or
``api_key`` is dropped before validation, so it never reaches a model or a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

NoticeKind = Literal["ignored-key", "translated-key"]

AGENTS = ("claude", "codex", "gemini")

_SETUP = (
    "Cloister never reads a secret from config.yaml; run `cloister setup {agent}` (the"
    " credential gateway hands it to the agent), then delete this line: the secret is in"
    " clear here"
)

# (section, key) → what Cloister does instead; ("agents", key) is that key of any agent.
_IGNORED: dict[tuple[str, str], str] = {
    ("proxy", "listen"): "the proxy listens inside the guardian stack, on each"
    " cloister's own network: there is no address to set",
    ("proxy", "rate_limit"): "Cloister has no per-minute request limit; what one cloister"
    " may have waiting for you at once is proxy.max_held_per_cloister",
    ("proxy", "max_request_bytes"): "the proxy passes request bodies through as they come"
    " (HTTPS inside its tunnel), so it limits no request size",
    ("hostexec", "listen"): "the approval UI listens on 127.0.0.1 only, at"
    " guardian.ui_port (9999 unless set)",
    ("request", "listen"): "the hostexec gateway listens inside the guardian stack, on each"
    " cloister's own network: there is no address to set",
    ("request", "timeout"): "a hostexec command waits 5 minutes for your approval",
    ("log", "stdout"): "the services write their own messages to their containers' output"
    " (`cloister guardian logs`)",
    ("log", "level"): "the services write their own messages to their containers' output"
    " (`cloister guardian logs`)",
    ("log", "per_cloister"): "each cloister's lines always go to logs/<cloister>.log in"
    " Cloister's data directory as well (`cloister logs NAME`)",
    ("log", "per_cloister_dir"): "each cloister's lines always go to logs/<cloister>.log in"
    " Cloister's data directory as well (`cloister logs NAME`)",
    ("defaults", "user"): "a cloister runs as your own uid:gid",
    ("devcontainer", "enabled"): "a project's devcontainer.json is always read (`cloister"
    " start --no-devcontainer` ignores it); what could weaken the cloister is dropped",
    ("devcontainer", "blocked_mounts"): "a devcontainer.json's mount of ~/.ssh, ~/.aws, the"
    " Docker socket or Cloister's own directories is always refused, and other bind mounts"
    " are read-only",
    ("agents", "command"): "`cloister start --agent NAME` (or defaults.agent) runs that"
    " agent's own command",
    ("agents", "auth_method"): "choose the method with `cloister setup {agent} --method ...`",
    ("agents", "token"): _SETUP,
    ("agents", "api_key"): _SETUP,
}
# Sections Cloister has none of: every key under them is set aside.
_SECTIONS = {
    "request": "hostexec requests are served by the gateway inside the guardian stack",
    "log": "the audit log is audit.log in Cloister's data directory (`cloister logs`)",
}
# Keys under those sections that Cloister reads after all.
_KEPT = {("log", "file")}  # a link to the audit log, made there
_AGENT_ENV_LIST = (
    "no host variable is passed to an agent: its credential comes from `cloister setup"
    " {agent}`; a fixed value is written as a mapping (`env: {{NAME: value}}`)"
)


@dataclass(frozen=True, slots=True)
class Notice:
    """A key Cloister set aside or read as another key, and where it is in the file."""

    loc: tuple[str, ...]
    kind: NoticeKind
    message: str


def _dotted(loc: tuple[str, ...]) -> str:
    return ".".join(loc)


def _ignored(loc: tuple[str, ...], why: str, shown: str | None = None) -> Notice:
    shown = shown if shown is not None else _dotted(loc)
    return Notice(loc, "ignored-key", f"{shown} is not used by Cloister: {why}")


def _without(section: Mapping[str, Any], keys: set[str]) -> dict[str, Any]:
    return {key: value for key, value in section.items() if key not in keys}


def _agents(agents: Mapping[str, Any], notices: list[Notice]) -> dict[str, Any]:
    """The agents' keys Cloister reads; one notice per key set aside (naming each agent)."""
    kept: dict[str, Any] = {}
    found: dict[str, list[str]] = {}  # key → the agents that have it, in file order
    for name, agent in agents.items():
        if name not in AGENTS:
            notices.append(
                _ignored(("agents", str(name)), f"Cloister runs only {', '.join(AGENTS)}")
            )
            continue
        if not isinstance(agent, Mapping):
            kept[name] = agent  # validation says what is wrong
            continue
        dropped: set[str] = set()
        for key in agent:
            if ("agents", str(key)) in _IGNORED or (key == "env" and isinstance(agent[key], list)):
                dropped.add(str(key))
                found.setdefault(str(key), []).append(str(name))
        kept[name] = _without(agent, dropped)
    for key, names in found.items():
        why = _AGENT_ENV_LIST if key == "env" else _IGNORED[("agents", key)]
        where = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
        agent = names[0] if len(names) == 1 else "NAME"
        notices.append(
            _ignored(("agents", names[0], key), why.format(agent=agent), f"agents.{where}.{key}")
        )
    return kept


def _features(devcontainer: Mapping[str, Any], notices: list[Notice]) -> dict[str, Any]:
    kept = _without(devcontainer, {"features"})
    features = devcontainer["features"]
    allow = features.get("allow") if isinstance(features, Mapping) else None
    others = [key for key in features if key != "allow"] if isinstance(features, Mapping) else []
    if not isinstance(features, Mapping) or others or not isinstance(allow, list | None):
        return dict(devcontainer)  # not that file's shape: validation says what is wrong
    # "ghcr.io/org/features/*" there is the prefix "ghcr.io/org/features/" here.
    translated = [
        entry[:-1] if isinstance(entry, str) and entry.endswith("/*") else entry
        for entry in allow or ()
    ]
    trusted = list(devcontainer.get("trusted_features") or ())
    kept["trusted_features"] = list(dict.fromkeys([*trusted, *translated]))
    notices.append(
        Notice(
            ("devcontainer", "features", "allow"),
            "translated-key",
            "devcontainer.features.allow is read as devcontainer.trusted_features (an entry"
            " ending in '/' is a prefix: 'ghcr.io/org/features/'); write it so",
        )
    )
    return kept


def translate(document: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[Notice, ...]]:
    """*document* (a parsed ``config.yaml``) as Cloister reads it, and what was changed.

    The input is left as it is (positions of its keys are needed for the notices);
    sections that change are copied.
    """
    notices: list[Notice] = []
    result = dict(document)
    for section, why in _SECTIONS.items():
        value = document.get(section)
        if section not in document:
            continue
        del result[section]
        mapping: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
        keys = list(mapping)
        if not keys:
            notices.append(_ignored((section,), why))
        kept = {str(key): mapping[key] for key in keys if (section, str(key)) in _KEPT}
        if kept:
            result[section] = kept
        for key in keys:
            if (section, str(key)) not in _KEPT:
                reason = _IGNORED.get((section, str(key)), why)
                notices.append(_ignored((section, str(key)), reason))
    for section in ("proxy", "hostexec", "defaults", "devcontainer"):
        value = document.get(section)
        if not isinstance(value, Mapping):
            continue
        dropped = [str(key) for key in value if (section, str(key)) in _IGNORED]
        notices.extend(_ignored((section, key), _IGNORED[(section, key)]) for key in dropped)
        kept = _without(value, set(dropped))
        if section == "devcontainer" and "features" in kept:
            kept = _features(kept, notices)
        result[section] = kept
    agents = document.get("agents")
    if isinstance(agents, Mapping):
        result["agents"] = _agents(agents, notices)
    order = {key: index for index, key in enumerate(document)}
    notices.sort(key=lambda notice: order.get(notice.loc[0], len(order)))  # file order
    return result, tuple(notices)


def legacy_notices(document: object) -> tuple[Notice, ...]:
    """The keys of a parsed ``config.yaml`` that Cloister sets aside or reads as others."""
    return translate(document)[1] if isinstance(document, Mapping) else ()
