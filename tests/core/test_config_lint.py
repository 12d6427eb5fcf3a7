"""The warning rules on their own: probes, provider hosts, and what is not flagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.config import GlobalConfig, default_config_text, parse_yaml, validate_document
from cloister_core.config.lint import (
    PROBES,
    command_findings,
    domain_findings,
    network_findings,
    provider_hosts,
)
from cloister_core.config.models import CommandPattern, CommandRules, ProxyConfig, RuleEntry
from cloister_core.suffixes import PublicSuffixes


def test_the_default_config_allows_every_provider_host() -> None:
    config = validate_document(
        parse_yaml(default_config_text(), Path("x")), GlobalConfig, Path("x")
    )
    allowed = {entry.domain for entry in config.proxy.allow}
    assert set(provider_hosts()) == {
        "api.anthropic.com",
        "api.openai.com",
        "generativelanguage.googleapis.com",
    }
    assert set(provider_hosts()) <= allowed


def test_every_probe_is_a_distinct_dangerous_command() -> None:
    assert len({argv[0] for argv in PROBES}) == len(PROBES)


@pytest.mark.parametrize(
    ("pattern", "flagged"),
    [
        (".*", "any command"),
        ("(?s).*", "any command"),
        ("[^\\x00]*", "any command"),
        ("\\S+( \\S+)*", "'rm -rf /'"),  # no quoted argument, but any program
        ("^rm .*$", "'rm -rf /'"),
        ("^python3? .*$", "python3 -c 'import os"),
        ("^git .*$", None),
        ("^gh pr (list|view)( .*)?$", None),
    ],
)
def test_command_probes(pattern: str, flagged: str | None) -> None:
    rules = CommandRules(auto_approve=(CommandPattern(pattern=pattern),))
    found = command_findings(rules, ("hostexec",))
    if flagged is None:
        assert found == []
        return
    [finding] = found
    assert finding.loc == ("hostexec", "auto_approve", 0, "pattern")
    assert flagged in finding.message


def test_deny_rules_and_ordinary_sites_are_not_flagged() -> None:
    rules = ProxyConfig(
        allow=(RuleEntry(pattern="*.example.com"), RuleEntry(domain="github.com")),
        deny=(RuleEntry(pattern="**.com"), RuleEntry(domain="com")),
    )
    assert domain_findings(rules, ("proxy",), PublicSuffixes()) == []
    assert network_findings(rules) == []
