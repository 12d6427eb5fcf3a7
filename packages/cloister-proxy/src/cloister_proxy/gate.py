"""The proxy's decisions, sans I/O: who is asking, may they go there, and what to say.

Order matters and is fixed here: authentication first (no policy, DNS or approval
work for an unknown caller), then the destination's policy verdict, then — only for
a host no rule mentions — the cloister's agent's own background hosts (refused
without asking, :mod:`cloister_core.background`), then the approval hub. Each
refusal is a :class:`Refusal`: the status, the ``X-Cloister-Reason`` code, and one
plain-text line that says what happened and what the human can do about it.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from cloister_core.background import background_hosts
from cloister_core.errors import InvalidHostError
from cloister_core.hosts import Host, normalize_host
from cloister_core.hub import DomainDecision
from cloister_core.policy import ProjectPolicy
from cloister_core.rules import DomainRule, Policy, Verdict
from cloister_core.tokens import TokenRecord
from cloister_proxy.addresses import AddressCheck
from cloister_proxy.http1 import HttpError, ProxyTarget, RequestHead, render_response

ReasonCode = Literal[
    "denied",
    "agent-default",
    "not-approved",
    "approval-timeout",
    "private-address",
    "guardian-network",
    "port-not-allowed",
    "token-address",
    "connection-limit",
    "too-many-held",
    "client-gone",
]
REASON_HEADER = "X-Cloister-Reason"
PROXY_AUTHENTICATE = ("Proxy-Authenticate", 'Basic realm="cloister"')


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer the proxy gives instead of connecting."""

    status: int
    message: str
    reason: ReasonCode | None = None
    headers: tuple[tuple[str, str], ...] = ()
    rule: DomainRule | None = None  # the rule that decided, for the audit line

    def render(self) -> bytes:
        headers = list(self.headers)
        if self.reason is not None:
            headers.append((REASON_HEADER, self.reason))
        return render_response(self.status, self.message + "\n", headers=headers)


AUTH_REQUIRED = Refusal(
    407,
    "cloister: proxy authentication required: use the proxy URL from $HTTPS_PROXY"
    " (it carries this cloister's token)",
    headers=(PROXY_AUTHENTICATE,),
)


@dataclass(frozen=True, slots=True)
class Destination:
    host: Host
    port: int

    @property
    def authority(self) -> str:
        return self.host.authority(self.port)


@dataclass(frozen=True, slots=True)
class Allowed:
    destination: Destination
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    destination: Destination


Decision = Allowed | NeedsApproval | Refusal


def token_from_proxy_authorization(value: str | None) -> str | None:
    """The password of ``Proxy-Authorization: Basic``; the user name is ignored."""
    if value is None:
        return None
    scheme, _, encoded = value.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _user, sep, password = decoded.partition(":")
    return password if sep else None


class TokenLookup(Protocol):
    def lookup(self, token: str) -> TokenRecord | None: ...


def authenticate(head: RequestHead, registry: TokenLookup) -> TokenRecord | None:
    """The cloister behind this request, or None (answer :data:`AUTH_REQUIRED`)."""
    try:
        header = head.headers.get("proxy-authorization")
    except HttpError:
        return None
    token = token_from_proxy_authorization(header)
    return registry.lookup(token) if token is not None else None


def destination_of(target: ProxyTarget) -> Destination:
    try:
        return Destination(normalize_host(target.host), target.port)
    except InvalidHostError as error:
        raise HttpError(400, str(error)) from None


def decide(
    destination: Destination,
    policy: ProjectPolicy,
    session: Policy | None,
    *,
    hub_configured: bool,
    agent: str | None = None,
    host_config_dir: Path | None = None,
) -> Decision:
    """The policy's answer for one destination of one cloister (started with *agent*).

    *host_config_dir*: the config directory as the human sees it on the host, named in
    refusals (the proxy's container mounts it elsewhere).
    """
    verdict = policy.domains.decide(destination.host, destination.port, session)
    if verdict.action == "allow":
        return Allowed(destination, verdict)
    if verdict.action == "deny":
        return _refusal_for(destination, verdict, policy, host_config_dir)
    if agent is not None and destination.host.name in background_hosts(agent, policy.config.agents):
        return agent_default(destination, agent, policy, host_config_dir)
    return _unlisted(
        destination, policy, hub_configured=hub_configured, host_config_dir=host_config_dir
    )


def agent_default(
    destination: Destination,
    agent: str,
    policy: ProjectPolicy,
    host_config_dir: Path | None = None,
) -> Refusal:
    """A host the cloister's agent calls on its own, which no rule decides: refused at
    once rather than held (it would fill the approval queue at every start)."""
    host = destination.host.name
    return Refusal(
        403,
        f"cloister: {host} is one of {agent}'s own background hosts (updates, telemetry),"
        f" refused without asking (agents.{agent}.background_hosts); add `- domain: {host}`"
        f" under {policy.where_to_write('proxy.allow', host_config_dir)} to allow it",
        "agent-default",
    )


def _refusal_for(
    destination: Destination,
    verdict: Verdict,
    policy: ProjectPolicy,
    host_config_dir: Path | None,
) -> Refusal:
    allowed_ports = sorted(policy.domains.allowed_ports)
    where = "a rule"
    if verdict.rule is not None:
        file = verdict.rule.source.file
        shown = policy.as_seen_from(file, host_config_dir) if file else verdict.rule.source
        where = f"{verdict.rule.text} in {shown}"
    if verdict.reason == "denied":
        return Refusal(
            403,
            f"cloister: {destination.authority} is denied by {where}; remove that rule to allow it",
            "denied",
            rule=verdict.rule,
        )
    opened = sorted(verdict.rule.ports) if verdict.rule and verdict.rule.ports else allowed_ports
    return Refusal(
        403,
        f"cloister: port {destination.port} is not open for {destination.host}: {where} opens"
        f" {opened}; add `ports: [{destination.port}]` to a rule for {destination.host} to open it",
        "port-not-allowed",
        rule=verdict.rule,
    )


def _unlisted(
    destination: Destination,
    policy: ProjectPolicy,
    *,
    hub_configured: bool,
    host_config_dir: Path | None = None,
) -> Decision:
    """A destination no rule mentions: refuse at once, or ask a human."""
    host, port = destination.host, destination.port
    if port not in policy.domains.allowed_ports:
        # Approving the host would not open this port, so do not ask.
        return Refusal(
            403,
            f"cloister: {destination.authority} is not on the allowlist and port {port} is not"
            f" in proxy.allowed_ports {sorted(policy.domains.allowed_ports)}; add a rule with"
            f" `ports: [{port}]` to {policy.where_to_write('proxy.allow', host_config_dir)}"
            " to allow it",
            "port-not-allowed",
        )
    if host.is_ip:
        return Refusal(
            403,
            f"cloister: {destination.authority} is an IP address; IP destinations need an"
            f" explicit rule: `- domain: {host.name}` under"
            f" {policy.where_to_write('proxy.allow', host_config_dir)}",
            "not-approved",
        )
    behavior = policy.config.proxy.unlisted_domain_behavior
    if behavior == "request_approval" and hub_configured:
        return NeedsApproval(destination)
    why = (
        "unlisted domains are refused (unlisted_domain_behavior: reject)"
        if behavior == "reject"
        else "no approval hub is configured"
    )
    return Refusal(
        403,
        f"cloister: {host} is not on the allowlist and {why}; add it to"
        f" {policy.where_to_write('proxy.allow', host_config_dir)} to allow it",
        "not-approved",
    )


def after_approval(
    destination: Destination, decision: DomainDecision | None, timeout_seconds: float
) -> Allowed | Refusal:
    """Turn the hub's answer (None: nobody answered in time) into the final decision."""
    if decision is None or decision.action == "timeout":
        return Refusal(
            403,
            f"cloister: nobody approved {destination.host} within {timeout_seconds:g}s;"
            " approve it in the Cloister approval UI, then retry",
            "approval-timeout",
        )
    if decision.action == "deny":
        scope = f" ({decision.scope})" if decision.scope else ""
        return Refusal(
            403,
            f"cloister: {destination.host} was denied in the approval UI{scope}",
            "denied",
        )
    verdict = Verdict("allow", "allowed", destination.host, destination.port, None)
    return Allowed(destination, verdict)


def hub_unavailable(destination: Destination, problem: str) -> Refusal:
    return Refusal(
        403,
        f"cloister: {destination.host} is not on the allowlist and the approval hub could not"
        f" be asked ({problem}); check `cloister guardian status`",
        "not-approved",
    )


def too_many_held(
    destination: Destination, held: int | None, limit: int | None, problem: str
) -> Refusal:
    """This cloister has its fair share of the approval UI already (held: the proxy's count)."""
    if held is not None and limit is not None:
        what = (
            f"{held} requests of this cloister already wait for a human in the approval UI"
            f" (proxy.max_held_per_cloister: {limit})"
        )
    else:  # the hub refused it: its count includes hostexec commands
        what = f"the approval hub refused to hold another request ({problem})"
    return Refusal(
        429,
        f"cloister: {destination.host} is not on the allowlist and {what}; decide those"
        " first or retry later",
        "too-many-held",
    )


# Never sent (the client has gone): the status and reason of the audit line.
CLIENT_GONE = Refusal(
    499, "cloister: the client closed the connection while waiting for approval", "client-gone"
)


def private_address(destination: Destination, check: AddressCheck) -> Refusal:
    if check.guardian:
        return Refusal(
            403,
            f"cloister: {destination.host} resolves to {check.address} ({check.address_class}),"
            " one of the guardian's own networks, which no cloister may reach"
            " (proxy.allow_private_networks cannot open it)",
            "guardian-network",
        )
    return Refusal(
        403,
        f"cloister: {destination.host} resolves to {check.address} ({check.address_class}),"
        " which cloisters may not reach; add its network to proxy.allow_private_networks"
        " if this is intended",
        "private-address",
    )


def upstream_unreachable(destination: Destination, problem: str) -> Refusal:
    return Refusal(502, f"cloister: cannot reach {destination.authority}: {problem}")


def upstream_timeout(destination: Destination, seconds: float) -> Refusal:
    return Refusal(504, f"cloister: {destination.authority} did not answer within {seconds:g}s")


def bad_request(error: HttpError) -> Refusal:
    return Refusal(error.status, f"cloister: {error.message}")


TOO_MANY_FOR_TOKEN = Refusal(
    429, "cloister: this cloister has too many connections open through the proxy; close some"
)
TOO_MANY = Refusal(503, "cloister: the proxy is at its connection limit; retry shortly")
TOO_MANY_UNAUTHENTICATED = Refusal(
    429,
    "cloister: too many connections from this address that have not authenticated",
    "connection-limit",
)
TOKEN_ELSEWHERE = Refusal(
    407,
    "cloister: this token belongs to another cloister; use your own ($CLOISTER_TOKEN)",
    "token-address",
    headers=(PROXY_AUTHENTICATE,),
)
HEAD_TIMEOUT = Refusal(408, "cloister: the request head did not arrive in time")
