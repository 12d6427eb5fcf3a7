"""A Feature's metadata asks for things too: the same overrides as devcontainer.json.

``privileged``, ``capAdd``, ``securityOpt``, ``init``, ``entrypoint``, ``mounts`` and
``containerEnv`` of a ``devcontainer-feature.json`` are requests like the same
properties of devcontainer.json (a Feature may come from anywhere the file names, and a
local one is the agent's): each is decided by the same function and becomes an
:class:`~cloister_core.devcontainer.model.Override` whose field names the Feature,
``features["ghcr.io/x/y:1"].capAdd[0]``, at the line of the Feature in devcontainer.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from cloister_core.cloisterenv import set_by_cloister
from cloister_core.devcontainer.blocked import BlockedPaths
from cloister_core.devcontainer.featuremeta import ResolvedFeature
from cloister_core.devcontainer.model import MountSpec, Outcome, Override, value_text
from cloister_core.devcontainer.mounts import (
    MountParseError,
    decide_mount,
    parse_mount_object,
    parse_mount_string,
)
from cloister_core.devcontainer.runargs import cap_add, security_opt
from cloister_core.devcontainer.variables import Variables, secret_reason
from cloister_core.printable import printable

_ENTRYPOINT = (
    "a script the Feature installed to run before the container's command (to start a"
    " daemon, say): the cloister runs its own init and command, so it is not run"
)


@dataclass(frozen=True, slots=True)
class FeatureRequests:
    """What is kept of one Feature's requests, and every decision as an :class:`Override`.

    ``container_env`` values are as the Feature wrote them after the spec's variables
    (``${PATH}`` stays: it is the image's, set with the Feature's layer as ``ENV``).
    Capabilities, security options, ``privileged``, ``init`` and ``entrypoint`` are
    never kept: only their overrides say so.
    """

    mounts: tuple[MountSpec, ...]
    container_env: Mapping[str, str]
    overrides: tuple[Override, ...]


class _Notes:
    def __init__(self, resolved: ResolvedFeature) -> None:
        self.prefix = f"features[{json.dumps(resolved.feature.id, ensure_ascii=False)}]"
        self.line = resolved.feature.line
        self.overrides: list[Override] = []

    def note(self, field: str, value: object, outcome: Outcome, why: str) -> None:
        self.overrides.append(
            Override(
                printable(f"{self.prefix}.{field}"),
                value_text(value),
                outcome,
                printable(why),
                self.line,
            )
        )


def feature_overrides(
    resolved: ResolvedFeature, *, variables: Variables, blocked: BlockedPaths
) -> FeatureRequests:
    """Apply the overrides to *resolved*'s metadata requests (see the module's text).

    *variables* and *blocked* are the ones the devcontainer.json was loaded with.
    """
    metadata = resolved.metadata
    notes = _Notes(resolved)
    if metadata.privileged is True:
        why = "gives the container every capability and the host's devices: root on the host"
        notes.note("privileged", True, "dropped", why)
    elif metadata.privileged is False:
        notes.note("privileged", False, "ignored", "the cloister is never privileged")
    if metadata.init is not None:
        notes.note("init", metadata.init, "ignored", "the cloister always runs an init")
    for index, capability in enumerate(metadata.cap_add):
        outcome, why = cap_add(capability)
        notes.note(f"capAdd[{index}]", capability, outcome, why)
    for index, option in enumerate(metadata.security_opt):
        outcome, why = security_opt(option)
        notes.note(f"securityOpt[{index}]", option, outcome, why)
    if metadata.entrypoint is not None:
        notes.note("entrypoint", metadata.entrypoint, "dropped", _ENTRYPOINT)
    mounts = _mounts(resolved, notes, variables, blocked)
    environment = _environment(resolved, notes, variables)
    return FeatureRequests(tuple(mounts), environment, tuple(notes.overrides))


def _mounts(
    resolved: ResolvedFeature, notes: _Notes, variables: Variables, blocked: BlockedPaths
) -> list[MountSpec]:
    """The same rules as devcontainer.json's ``mounts``."""
    mounts: list[MountSpec] = []
    for index, item in enumerate(resolved.metadata.mounts):
        field = f"mounts[{index}]"
        try:
            fields = (
                parse_mount_string(item)
                if isinstance(item, str)
                else parse_mount_object(cast("dict[str, object]", item))
            )
            decision = decide_mount(fields, variables=variables, blocked=blocked)
        except MountParseError as error:
            notes.note(field, item, "dropped", f"not understood: {error}")
            continue
        if decision.mount is not None:
            mounts.append(decision.mount)
        notes.note(field, item, decision.outcome, decision.why)
    return mounts


def _environment(resolved: ResolvedFeature, notes: _Notes, variables: Variables) -> dict[str, str]:
    """The same rules as devcontainer.json's ``containerEnv``."""
    environment: dict[str, str] = {}
    for name, text in resolved.metadata.container_env.items():
        field = f"containerEnv.{name}"
        if not name or "=" in name:
            notes.note(field, text, "ignored", "not an environment variable name")
            continue
        if (reason := set_by_cloister(name)) is not None:
            notes.note(field, text, "ignored", reason)
            continue
        result = variables.substitute(text)
        if result.secrets:
            notes.note(field, text, "refused", secret_reason(result.secrets[0]))
            continue
        environment[name] = result.text
        notes.note(field, text, "kept", "set in the image, with the Feature's layer")
    return environment
