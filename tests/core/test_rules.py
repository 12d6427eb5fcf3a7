"""The domain policy: a table of cases, scope merging, and a naive reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cloister_core.config.models import ProxyRules, RuleEntry
from cloister_core.errors import InvalidHostError
from cloister_core.hosts import normalize_host, normalize_pattern
from cloister_core.rules import (
    SCOPES,
    DomainRule,
    Policy,
    RuleSource,
    Scope,
    build_policy,
)

GLOBAL = RuleSource("global", Path("/c/config.yaml"))


def entry(target: str, ports: tuple[int, ...] | None = None) -> RuleEntry:
    return RuleEntry.for_target(target, ports)


def policy_of(
    allow: list[RuleEntry], deny: list[RuleEntry] | None = None, ports: tuple[int, ...] = (80, 443)
) -> Policy:
    return build_policy([(GLOBAL, ProxyRules(allow=tuple(allow), deny=tuple(deny or ())))], ports)


TABLE_POLICY = policy_of(
    allow=[
        entry("example.com"),
        entry("*.one.test"),
        entry("**.deep.test"),
        entry("bücher.example"),
        entry("alt.test", (8443,)),
        entry("192.0.2.10"),
        entry("[2001:db8::1]"),
        entry("*.mixed.test", (8080,)),
        entry("mixed.test"),
    ],
    deny=[
        entry("bad.one.test"),
        entry("*.ads.deep.test"),
        entry("alt.test", (9000,)),
    ],
)


@pytest.mark.parametrize(
    ("host", "port", "action", "reason", "rule"),
    [
        # apex, one label, two labels
        ("example.com", 443, "allow", "allowed", "example.com"),
        ("www.example.com", 443, "unlisted", "unlisted", None),
        ("one.test", 443, "allow", "allowed", "*.one.test"),
        ("api.one.test", 443, "allow", "allowed", "*.one.test"),
        ("a.b.one.test", 443, "unlisted", "unlisted", None),
        # any depth
        ("deep.test", 443, "allow", "allowed", "**.deep.test"),
        ("a.b.c.deep.test", 80, "allow", "allowed", "**.deep.test"),
        # suffix confusion
        ("notexample.com", 443, "unlisted", "unlisted", None),
        ("example.com.evil.test", 443, "unlisted", "unlisted", None),
        ("xone.test", 443, "unlisted", "unlisted", None),
        # case, trailing dot, IDNA
        ("EXAMPLE.Com", 443, "allow", "allowed", "example.com"),
        ("example.com.", 443, "allow", "allowed", "example.com"),
        ("API.One.Test.", 443, "allow", "allowed", "*.one.test"),
        ("BÜCHER.example", 443, "allow", "allowed", "xn--bcher-kva.example"),
        ("xn--bcher-kva.example", 443, "allow", "allowed", "xn--bcher-kva.example"),
        # ports
        ("example.com", 80, "allow", "allowed", "example.com"),
        ("example.com", 8080, "deny", "port-not-allowed", "example.com"),
        ("alt.test", 8443, "allow", "allowed", "alt.test"),
        ("alt.test", 443, "deny", "port-not-allowed", "alt.test"),
        ("alt.test", 9000, "deny", "denied", "alt.test"),
        ("x.mixed.test", 8080, "allow", "allowed", "*.mixed.test"),
        ("x.mixed.test", 443, "deny", "port-not-allowed", "*.mixed.test"),
        ("mixed.test", 443, "allow", "allowed", "mixed.test"),
        ("mixed.test", 8080, "allow", "allowed", "*.mixed.test"),
        # IP literals need an exact rule; patterns never match them
        ("192.0.2.10", 443, "allow", "allowed", "192.0.2.10"),
        ("3221225994", 443, "allow", "allowed", "192.0.2.10"),
        ("192.0.2.11", 443, "unlisted", "unlisted", None),
        ("[2001:DB8:0::1]", 443, "allow", "allowed", "2001:db8::1"),
        ("2001:db8::2", 443, "unlisted", "unlisted", None),
        # deny beats allow
        ("bad.one.test", 443, "deny", "denied", "bad.one.test"),
        ("BAD.one.test.", 443, "deny", "denied", "bad.one.test"),
        ("ads.deep.test", 443, "deny", "denied", "*.ads.deep.test"),
        ("x.ads.deep.test", 443, "deny", "denied", "*.ads.deep.test"),
        ("x.y.ads.deep.test", 443, "allow", "allowed", "**.deep.test"),
    ],
)
def test_decision_table(host: str, port: int, action: str, reason: str, rule: str | None) -> None:
    verdict = TABLE_POLICY.decide(host, port)
    assert (verdict.action, verdict.reason) == (action, reason)
    assert (verdict.rule.text if verdict.rule else None) == rule
    assert verdict.port == port
    assert verdict.host == normalize_host(host)


def test_deny_without_ports_denies_every_port() -> None:
    policy = policy_of(allow=[entry("x.test", (8443,))], deny=[entry("*.x.test")])
    for port in (1, 80, 443, 8443, 65535):
        assert policy.decide("x.test", port).reason == "denied"


def test_invalid_host_is_an_error() -> None:
    with pytest.raises(InvalidHostError):
        TABLE_POLICY.decide("bad host", 443)


def file_for(scope: Scope) -> Path | None:
    return None if scope == "session" else Path(f"/c/{scope}.yaml")


@pytest.mark.parametrize("allow_scope", SCOPES)
@pytest.mark.parametrize("deny_scope", SCOPES)
@pytest.mark.parametrize(
    ("allow_target", "deny_target"),
    [
        ("api.x.test", "api.x.test"),  # exact vs exact
        ("api.x.test", "*.x.test"),  # exact allow vs pattern deny
        ("*.x.test", "api.x.test"),  # pattern allow vs exact deny
        ("**.x.test", "**.x.test"),  # pattern vs pattern
    ],
)
def test_deny_beats_allow_across_every_scope(
    allow_scope: Scope, deny_scope: Scope, allow_target: str, deny_target: str
) -> None:
    """Every (allow scope, deny scope) pair: the deny wins and names its file."""
    layers: dict[Scope, tuple[list[RuleEntry], list[RuleEntry]]] = {s: ([], []) for s in SCOPES}
    layers[allow_scope][0].append(entry(allow_target))
    layers[deny_scope][1].append(entry(deny_target))

    def rules_for(scope: Scope) -> ProxyRules:
        allow, deny = layers[scope]
        return ProxyRules(allow=tuple(allow), deny=tuple(deny))

    shared = build_policy(
        [(RuleSource(s, file_for(s)), rules_for(s)) for s in SCOPES if s != "session"]
    )
    session = build_policy([(RuleSource("session"), rules_for("session"))])
    verdict = shared.decide("api.x.test", 443, session=session)
    assert verdict.action == "deny"
    assert verdict.rule is not None
    assert verdict.rule.source == RuleSource(deny_scope, file_for(deny_scope))


def test_session_allow_applies_on_top() -> None:
    shared = policy_of(allow=[])
    session = build_policy([(RuleSource("session"), ProxyRules(allow=(entry("new.test"),)))])
    assert shared.decide("new.test", 443).action == "unlisted"
    verdict = shared.decide("new.test", 443, session=session)
    assert verdict.action == "allow"
    assert verdict.source == RuleSource("session")
    # The shared policy's allowed_ports govern session rules too.
    assert shared.decide("new.test", 22, session=session).reason == "port-not-allowed"


def test_exact_rule_reported_before_pattern() -> None:
    policy = policy_of(allow=[entry("*.x.test"), entry("a.x.test")])
    rule = policy.decide("a.x.test", 443).rule
    assert rule is not None
    assert rule.text == "a.x.test"


def test_rules_listing_and_describe() -> None:
    policy = policy_of(allow=[entry("a.test", (8443,))], deny=[entry("**.b.test")])
    texts = [rule.text for rule in policy.rules()]
    assert texts == ["**.b.test", "a.test"]  # denies first
    assert len(policy) == 2
    assert policy.rules()[1].describe() == "allow a.test ports [8443] (/c/config.yaml)"
    assert str(RuleSource("session")) == "session (in memory)"


# --- a naive reference implementation, and hypothesis comparing the two ------------


def naive_decide(
    rules: list[DomainRule], host_text: str, port: int, allowed_ports: frozenset[int]
) -> tuple[str, str]:
    host = normalize_host(host_text)

    def names(rule: DomainRule) -> bool:
        if rule.kind == "exact":
            return host.name == rule.anchor
        if host.kind != "domain":
            return False
        labels, anchor = host.name.split("."), rule.anchor.split(".")
        if labels[len(labels) - len(anchor) :] != anchor or len(labels) < len(anchor):
            return False
        extra = len(labels) - len(anchor)
        return extra <= 1 if rule.kind == "one-level" else True

    def opens(rule: DomainRule) -> bool:
        if rule.ports is not None:
            return port in rule.ports
        return rule.action == "deny" or port in allowed_ports

    for action, kinds in (
        ("deny", {"exact"}),
        ("deny", {"one-level", "any-depth"}),
        ("allow", {"exact"}),
        ("allow", {"one-level", "any-depth"}),
    ):
        for rule in rules:
            if rule.action == action and rule.kind in kinds and names(rule) and opens(rule):
                return ("allow", "allowed") if action == "allow" else ("deny", "denied")
    if any(rule.action == "allow" and names(rule) for rule in rules):
        return ("deny", "port-not-allowed")
    return ("unlisted", "unlisted")


LABELS = ["a", "b", "c", "x"]
names_st = st.lists(st.sampled_from(LABELS), min_size=1, max_size=4).map(".".join)
host_st = st.builds(
    lambda name, upper, dot: (name.upper() if upper else name) + ("." if dot else ""),
    names_st,
    st.booleans(),
    st.booleans(),
)
rule_st = st.builds(
    lambda action, kind, anchor, ports, scope: DomainRule(
        action,
        kind,
        anchor,
        ports,
        RuleSource(scope, file_for(scope)),
    ),
    st.sampled_from(["allow", "deny"]),
    st.sampled_from(["exact", "one-level", "any-depth"]),
    names_st,
    st.one_of(st.none(), st.frozensets(st.sampled_from([80, 443, 8443]), min_size=1)),
    st.sampled_from(SCOPES),
)


@settings(max_examples=400)
@given(st.lists(rule_st, max_size=12), host_st, st.sampled_from([80, 443, 8443, 22]))
def test_matching_agrees_with_naive_reference(
    rules: list[DomainRule], host: str, port: int
) -> None:
    allowed = frozenset({80, 443})
    shared = Policy([rule for rule in rules if rule.source.scope != "session"], allowed)
    session = Policy([rule for rule in rules if rule.source.scope == "session"], allowed)
    verdict = shared.decide(host, port, session=session)
    assert (verdict.action, verdict.reason) == naive_decide(rules, host, port, allowed)
    if verdict.rule is not None:
        assert verdict.rule in rules
        expected = "allow" if verdict.action == "allow" else verdict.rule.action
        assert verdict.rule.action == expected


@given(st.lists(rule_st, max_size=12), host_st)
def test_pattern_semantics_agree_with_domain_pattern(rules: list[DomainRule], host: str) -> None:
    normalized = normalize_host(host)
    for rule in rules:
        if rule.kind == "exact":
            continue
        pattern = normalize_pattern(rule.text)
        single = Policy([DomainRule("allow", rule.kind, rule.anchor, None, GLOBAL)])
        assert (single.decide(normalized, 443).action == "allow") is pattern.matches(normalized)
