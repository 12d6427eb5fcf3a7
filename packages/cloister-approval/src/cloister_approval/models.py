"""What the hub's JSON API accepts and returns (validated once, here)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cloister_core.hub import DomainScope

DecisionKind = Literal["domain", "command"]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DomainDecisionIn(_In):
    """``POST /api/v1/domains/{id}/decision``."""

    action: Literal["allow", "deny"]
    scope: DomainScope
    wildcard: bool = False


CommandScope = Literal["once", "session", "project"]


class CommandDecisionIn(_In):
    """``POST /api/v1/commands/{id}/decision``.

    ``scope`` beyond ``once`` approves the exact command again without asking: for the
    cloister's session, or for every cloister of the project. A denial is always once
    (the next request asks again).
    """

    action: Literal["approve", "deny"]
    scope: CommandScope = "once"
    reason: str | None = Field(default=None, max_length=500)

    @model_validator(mode="after")
    def _deny_is_once(self) -> CommandDecisionIn:
        if self.action == "deny" and self.scope != "once":
            raise ValueError(f"a denial is for this request only, not scope {self.scope!r}")
        return self


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class PendingDomainOut(_Out):
    id: str
    cloister: str
    project: str
    host: str
    port: int
    created_at: datetime
    expires_at: datetime
    wildcard: str | None = Field(description="the *.parent pattern the wildcard box would write")
    waiting: int = Field(description="requests held on this item")


class PendingCommandOut(_Out):
    id: str
    cloister: str
    project: str
    argv: tuple[str, ...]
    command: str
    cwd: str
    created_at: datetime
    expires_at: datetime


class PendingOut(_Out):
    domains: list[PendingDomainOut]
    commands: list[PendingCommandOut]


class DecisionOut(_Out):
    """One decision a human made, what it changed, and whether it can be undone."""

    id: str
    kind: DecisionKind
    decided_at: datetime
    cloister: str
    project: str
    subject: str = Field(description="host:port or the command")
    action: str
    scope: str | None
    rule: str | None = Field(description="the rule or the command pattern written")
    file: str | None = Field(description="the decision file written, if any")
    summary: str
    effective: str | None = Field(
        default=None, description="what the merged policy now says about the subject"
    )
    warning: str | None = Field(description="e.g. why a project/global write fell back")
    undoable: bool
    undone: bool
    decided_by: str = Field(
        description="the credential that decided: cli (the hub secret) or browser:<session id>"
    )
    undone_by: str | None = Field(default=None, description="the credential that undid it")


class RuleOut(_Out):
    action: Literal["allow", "deny"]
    rule: str
    ports: list[int] | None
    scope: str
    file: str | None


class EffectiveRulesOut(_Out):
    project: str
    rules: list[RuleOut]
    allowed_ports: list[int]
    unlisted_domain_behavior: str


class ErrorOut(_Out):
    error: str
    detail: object | None = None


class LoginIn(_In):
    """``POST /api/v1/login``: the ticket of a one-time login link."""

    ticket: str = Field(max_length=200)


class SessionOut(_Out):
    """A browser session: send ``Authorization: Bearer <token>`` with every request."""

    token: str
    session: str = Field(description="the credential's name in decisions: browser:<id>")
    expires_at: datetime
