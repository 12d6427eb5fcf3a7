"""The proxy's pure decision layer: parsed requests and policies in, decisions out."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from cloister_core.config.models import ProxyRules, RuleEntry
from cloister_core.hosts import normalize_host
from cloister_core.hub import DomainDecision
from cloister_core.paths import CloisterPaths
from cloister_core.policy import ProjectPolicy, load_project_policy
from cloister_core.rules import RuleSource, build_policy
from cloister_core.tokens import TokenRecord, TokenRegistry
from cloister_proxy import gate
from cloister_proxy.addresses import AddressCheck, parse_address
from cloister_proxy.http1 import HttpError, ProxyTarget, parse_request_head


def policy_from(tmp_path: Path, config: str, project: str | None = None) -> ProjectPolicy:
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(config, encoding="utf-8")
    return load_project_policy(paths, project)


def dest(host: str, port: int = 443) -> gate.Destination:
    return gate.Destination(normalize_host(host), port)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Basic " + base64.b64encode(b"cloister:abc").decode(), "abc"),
        ("basic " + base64.b64encode(b":abc").decode(), "abc"),
        ("Basic " + base64.b64encode(b"user:a:b").decode(), "a:b"),
        ("Basic " + base64.b64encode(b"nocolon").decode(), None),
        ("Basic !!!", None),
        ("Bearer abc", None),
        ("Basic " + base64.b64encode(b"\xff:x").decode(), None),
        (None, None),
    ],
)
def test_token_from_proxy_authorization(header: str | None, token: str | None) -> None:
    assert gate.token_from_proxy_authorization(header) == token


def test_authenticate() -> None:
    record = TokenRecord.create(cloister="c", project="p", path=Path("/w"))
    registry = TokenRegistry([record])
    auth = base64.b64encode(f"x:{record.secret}".encode()).decode()
    good = parse_request_head(
        f"CONNECT a.test:443 HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode()
    )
    assert gate.authenticate(good, registry) == record
    twice = parse_request_head(
        f"CONNECT a.test:443 HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n"
        f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode()
    )
    assert gate.authenticate(twice, registry) is None
    missing = parse_request_head(b"CONNECT a.test:443 HTTP/1.1\r\n\r\n")
    assert gate.authenticate(missing, registry) is None


def test_destination_of() -> None:
    assert gate.destination_of(ProxyTarget("connect", "API.Test.", 443)) == dest("api.test")
    with pytest.raises(HttpError) as caught:
        gate.destination_of(ProxyTarget("connect", "bad host", 443))
    assert caught.value.status == 400


def test_decide_allow_and_deny(tmp_path: Path) -> None:
    policy = policy_from(
        tmp_path,
        "proxy:\n  allow: [{pattern: '*.ok.test'}, {domain: alt.test, ports: [8443]}]\n"
        "  deny: [{domain: bad.ok.test}]\n",
    )
    allowed = gate.decide(dest("api.ok.test"), policy, None, hub_configured=True)
    assert isinstance(allowed, gate.Allowed)
    assert allowed.verdict.rule is not None
    assert allowed.verdict.rule.text == "*.ok.test"

    denied = gate.decide(dest("bad.ok.test"), policy, None, hub_configured=True)
    assert isinstance(denied, gate.Refusal)
    assert (denied.status, denied.reason) == (403, "denied")
    assert denied.message.startswith("cloister: bad.ok.test:443 is denied by bad.ok.test in ")
    assert denied.rule is not None

    port = gate.decide(dest("alt.test", 443), policy, None, hub_configured=True)
    assert isinstance(port, gate.Refusal)
    assert port.reason == "port-not-allowed"
    assert "opens [8443]" in port.message


def test_decide_unlisted(tmp_path: Path) -> None:
    ask = policy_from(tmp_path / "a", "proxy:\n  allow: []\n")
    assert isinstance(
        gate.decide(dest("new.test"), ask, None, hub_configured=True), gate.NeedsApproval
    )
    no_hub = gate.decide(dest("new.test"), ask, None, hub_configured=False)
    assert isinstance(no_hub, gate.Refusal)
    assert (no_hub.reason, "no approval hub is configured" in no_hub.message) == (
        "not-approved",
        True,
    )
    ip = gate.decide(dest("203.0.113.9"), ask, None, hub_configured=True)
    assert isinstance(ip, gate.Refusal)
    assert ip.reason == "not-approved"
    odd_port = gate.decide(dest("new.test", 8443), ask, None, hub_configured=True)
    assert isinstance(odd_port, gate.Refusal)
    assert odd_port.reason == "port-not-allowed"
    reject = policy_from(tmp_path / "r", "proxy:\n  unlisted_domain_behavior: reject\n")
    refused = gate.decide(dest("new.test"), reject, None, hub_configured=True)
    assert isinstance(refused, gate.Refusal)
    assert "unlisted_domain_behavior: reject" in refused.message


def test_after_approval() -> None:
    destination = dest("new.test")
    assert gate.after_approval(destination, None, 60).reason == "approval-timeout"  # type: ignore[union-attr]
    timeout = gate.after_approval(destination, DomainDecision(action="timeout"), 2.5)
    assert isinstance(timeout, gate.Refusal)
    assert "within 2.5s" in timeout.message
    deny = gate.after_approval(destination, DomainDecision(action="deny", scope="project"), 60)
    assert isinstance(deny, gate.Refusal)
    assert (deny.reason, deny.message) == (
        "denied",
        "cloister: new.test was denied in the approval UI (project)",
    )
    allow = gate.after_approval(
        destination,
        DomainDecision(action="allow", scope="session", entry=RuleEntry(domain="new.test")),
        60,
    )
    assert isinstance(allow, gate.Allowed)


def test_refusal_renders_reason_header() -> None:
    check = AddressCheck(parse_address("10.0.0.1"), "private", allowed=False)
    rendered = gate.private_address(dest("intranet.test"), check).render()
    head, _, body = rendered.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"\r\nX-Cloister-Reason: private-address\r\n" in head + b"\r\n"
    assert b"\r\nConnection: close" in head
    assert body == (
        b"cloister: intranet.test resolves to 10.0.0.1 (private), which cloisters may not"
        b" reach; add its network to proxy.allow_private_networks if this is intended\n"
    )
    auth = gate.AUTH_REQUIRED.render()
    assert b'Proxy-Authenticate: Basic realm="cloister"' in auth
    assert b"X-Cloister-Reason" not in auth


def test_a_guardian_network_refusal_says_that_no_setting_opens_it() -> None:
    check = AddressCheck(
        parse_address("10.213.0.3"), "guardian-network", allowed=False, guardian=True
    )
    refusal = gate.private_address(dest("cloister-guardian-approval"), check)
    assert (refusal.status, refusal.reason) == (403, "guardian-network")
    assert refusal.message == (
        "cloister: cloister-guardian-approval resolves to 10.213.0.3 (guardian-network), one of"
        " the guardian's own networks, which no cloister may reach"
        " (proxy.allow_private_networks cannot open it)"
    )


def test_too_many_held_names_the_share_or_the_hubs_reason() -> None:
    own = gate.too_many_held(dest("h17.test"), 16, 16, "ignored")
    assert (own.status, own.reason) == (429, "too-many-held")
    assert own.message == (
        "cloister: h17.test is not on the allowlist and 16 requests of this cloister already"
        " wait for a human in the approval UI (proxy.max_held_per_cloister: 16); decide those"
        " first or retry later"
    )
    rendered = own.render()
    assert rendered.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
    assert b"\r\nX-Cloister-Reason: too-many-held\r\n" in rendered
    hub = gate.too_many_held(dest("h17.test"), None, None, "cloister 'api' already has 16")
    assert "the approval hub refused to hold another request (cloister 'api' already has 16)" in (
        hub.message
    )
    assert (gate.CLIENT_GONE.status, gate.CLIENT_GONE.reason) == (499, "client-gone")


# --- the agents' own background hosts ---------------------------------------------------


def test_an_agents_background_host_is_refused_at_once(tmp_path: Path) -> None:
    policy = policy_from(tmp_path, "proxy: {}\n")
    refusal = gate.decide(dest("ab.chatgpt.com"), policy, None, hub_configured=True, agent="codex")
    assert isinstance(refusal, gate.Refusal), refusal
    assert (refusal.status, refusal.reason) == (403, "agent-default")
    assert refusal.message == (
        "cloister: ab.chatgpt.com is one of codex's own background hosts (updates, telemetry),"
        " refused without asking (agents.codex.background_hosts); add `- domain:"
        f" ab.chatgpt.com` under proxy.allow in {policy.files[0]} (every project) to allow it"
    )
    assert b"\r\nX-Cloister-Reason: agent-default\r\n" in refusal.render()
    # Whatever the port: approving it would not be asked for either.
    other_port = gate.decide(
        dest("github.com", 22), policy, None, hub_configured=True, agent="codex"
    )
    assert isinstance(other_port, gate.Refusal)
    assert other_port.reason == "agent-default"


@pytest.mark.parametrize(
    ("agent", "host"),
    [
        (None, "ab.chatgpt.com"),  # a shell cloister: every agent's host is asked for
        ("claude", "ab.chatgpt.com"),  # another agent's host
        ("codex", "api.chatgpt.com"),  # a name below one is not it
        ("gemini", "googleapis.com"),
    ],
)
def test_other_unlisted_hosts_are_still_held(tmp_path: Path, agent: str | None, host: str) -> None:
    policy = policy_from(tmp_path, "proxy: {}\n")
    decision = gate.decide(dest(host), policy, None, hub_configured=True, agent=agent)
    assert decision == gate.NeedsApproval(dest(host))


def test_a_rule_of_the_human_wins_over_the_agent_default(tmp_path: Path) -> None:
    policy = policy_from(
        tmp_path,
        "proxy:\n  allow: [{domain: github.com}]\n  deny: [{pattern: '*.claude.ai'}]\n",
    )
    allowed = gate.decide(dest("github.com"), policy, None, hub_configured=True, agent="codex")
    assert isinstance(allowed, gate.Allowed)
    denied = gate.decide(
        dest("downloads.claude.ai"), policy, None, hub_configured=True, agent="claude"
    )
    assert isinstance(denied, gate.Refusal)
    assert denied.reason == "denied"
    # A decision of this session (the approval UI's) is a rule too.
    session = build_policy(
        [(RuleSource("session"), ProxyRules(allow=(RuleEntry(domain="ab.chatgpt.com"),)))]
    )
    released = gate.decide(
        dest("ab.chatgpt.com"), policy, session, hub_configured=True, agent="codex"
    )
    assert isinstance(released, gate.Allowed)


def test_the_config_replaces_an_agents_list(tmp_path: Path) -> None:
    policy = policy_from(
        tmp_path,
        "agents:\n  codex: {background_hosts: [Telemetry.Example.]}\n"
        "  gemini: {background_hosts: []}\n",
    )
    replaced = gate.decide(
        dest("telemetry.example"), policy, None, hub_configured=True, agent="codex"
    )
    assert isinstance(replaced, gate.Refusal)
    assert replaced.reason == "agent-default"
    for agent, host in (("codex", "ab.chatgpt.com"), ("gemini", "play.googleapis.com")):
        decision = gate.decide(dest(host), policy, None, hub_configured=True, agent=agent)
        assert decision == gate.NeedsApproval(dest(host)), agent


def test_a_refusal_names_the_files_to_edit_on_the_host(tmp_path: Path) -> None:
    reject = "proxy:\n  unlisted_domain_behavior: reject\n"
    policy = policy_from(tmp_path, reject, project="my-api")
    host = Path("/home/me/.config/cloister")
    refused = gate.decide(dest("new.test"), policy, None, hub_configured=True, host_config_dir=host)
    assert isinstance(refused, gate.Refusal)
    assert refused.message.endswith(
        "add it to proxy.allow in /home/me/.config/cloister/config.yaml (every project) or in"
        " /home/me/.config/cloister/projects/my-api.yaml (project my-api) to allow it"
    )
    assert str(tmp_path) not in refused.message
    ip = gate.decide(dest("203.0.113.9"), policy, None, hub_configured=True, host_config_dir=host)
    assert isinstance(ip, gate.Refusal)
    assert "under proxy.allow in /home/me/.config/cloister/config.yaml" in ip.message
    # A rule that denies, and a port not opened, are named in their file on the host too.
    rules = "proxy:\n  allow: [{domain: alt.test, ports: [8443]}]\n  deny: [{domain: bad.test}]\n"
    named = policy_from(tmp_path / "named", rules)
    named_host = Path("/home/me/.config/cloister")
    for destination, shown in (
        (dest("bad.test"), "is denied by bad.test in /home/me/.config/cloister/config.yaml;"),
        (dest("alt.test"), "alt.test in /home/me/.config/cloister/config.yaml opens [8443]"),
    ):
        refusal = gate.decide(
            destination, named, None, hub_configured=True, host_config_dir=named_host
        )
        assert isinstance(refusal, gate.Refusal)
        assert shown in refusal.message
        assert str(tmp_path) not in refusal.message
    # Run on the host itself, the files are where the proxy reads them.
    alone = policy_from(tmp_path / "alone", reject)
    local = gate.decide(dest("new.test"), alone, None, hub_configured=True)
    assert isinstance(local, gate.Refusal)
    assert f"proxy.allow in {alone.files[0]} (every project) to allow it" in local.message
