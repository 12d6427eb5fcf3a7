"""The approval hub's service API: the contract between the hub and its callers.

The proxy (for unknown domains) and the hostexec gateway (for commands) submit a
request and wait for the human's decision in the same HTTP exchange (a long poll).
They authenticate with the stack's service credential as
``Authorization: Bearer <credential>``. The hub, the proxy and the gateway all use
these models, so the wire format is defined once.

``POST /api/v1/service/domains``  body :class:`DomainRequest`  → :class:`DomainDecision`
``POST /api/v1/service/commands`` body :class:`CommandRequest` → :class:`CommandDecision`

The hub answers when a human decides or when its own timeout passes (``timeout``);
callers also bound the wait on their side.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cloister_core.config.models import RuleEntry

SERVICE_DOMAINS_PATH = "/api/v1/service/domains"
SERVICE_COMMANDS_PATH = "/api/v1/service/commands"
SERVICE_AUTH_SCHEME = "Bearer"

DomainScope = Literal["once", "session", "project", "global"]
DomainAction = Literal["allow", "deny", "timeout"]
CommandAction = Literal["approve", "deny", "timeout"]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DomainRequest(_Message):
    """A cloister asked for a host no rule mentions."""

    cloister: str
    project: str
    host: str
    port: int = Field(ge=1, le=65535)
    wait_seconds: float | None = Field(
        default=None, gt=0, description="how long the caller will wait; the hub waits no longer"
    )


class DomainDecision(_Message):
    """The human's answer for a :class:`DomainRequest`.

    ``entry`` is the rule the decision stands for (the domain, or ``*.parent`` when the
    wildcard box was ticked); for ``session``, ``project`` and ``global`` the hub has
    already written it to the decision file (the cloister's session file for ``session``).
    """

    action: DomainAction
    scope: DomainScope | None = None
    entry: RuleEntry | None = None
    reason: str | None = None


class CommandRequest(_Message):
    """A cloister asked to run a command on the host (manual approval)."""

    cloister: str
    project: str
    argv: tuple[str, ...] = Field(min_length=1)
    command: str
    cwd: str
    wait_seconds: float | None = Field(default=None, gt=0)


class CommandDecision(_Message):
    action: CommandAction
    reason: str | None = None
