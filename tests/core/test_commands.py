"""Hostexec canonical commands and pattern verdicts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cloister_core.commands import CommandPolicy, CommandRule, canonical_command
from cloister_core.config.models import CommandPattern, CommandRules
from cloister_core.errors import InvalidCommandError


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["git", "push"], "git push"),
        (["git", "commit", "-m", "two words"], "git commit -m 'two words'"),
        (["echo", "a; touch /tmp/pwned"], "echo 'a; touch /tmp/pwned'"),
        (["echo", "it's"], "echo 'it'\"'\"'s'"),
        (["echo", ""], "echo ''"),
        (["printf", "a\nb"], "printf 'a\nb'"),
    ],
)
def test_canonical_command(argv: list[str], command: str) -> None:
    assert canonical_command(argv) == command


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ([], "must not be empty"),
        ([""], "argv\\[0\\]"),
        (["echo", "a\x00b"], "NUL"),
        ("git push", "not a string"),
        (["echo", 3], "not a string"),
    ],
)
def test_canonical_command_refuses(argv: object, problem: str) -> None:
    with pytest.raises(InvalidCommandError, match=problem):
        canonical_command(argv)  # type: ignore[arg-type]


def policy(auto: list[str], manual: list[str]) -> CommandPolicy:
    rules = CommandRules(
        auto_approve=tuple(CommandPattern(pattern=p) for p in auto),
        manual_approve=tuple(CommandPattern(pattern=p) for p in manual),
    )
    return CommandPolicy.from_rules([(Path("/c/config.yaml"), rules)])


def test_auto_then_manual_then_deny() -> None:
    commands = policy(
        auto=["^docker ps( .*)?$", "echo .*"], manual=["^git push( .*)?$", "^echo .*"]
    )
    auto = commands.decide(["docker", "ps", "-a"])
    assert auto.action == "auto_approve"
    assert auto.rule is not None
    assert auto.rule.source == Path("/c/config.yaml")
    assert commands.decide(["echo", "hi"]).action == "auto_approve"  # auto wins over manual
    manual = commands.decide(["git", "push", "origin", "main"])
    assert manual.action == "manual_approve"
    assert "waiting for a human" in manual.reason
    denied = commands.decide(["rm", "-rf", "/"])
    assert (denied.action, denied.rule, denied.command) == ("deny", None, "rm -rf /")
    assert "matches no" in denied.reason


def test_patterns_must_match_the_whole_command() -> None:
    commands = policy(auto=["docker ps"], manual=[])
    assert commands.decide(["docker", "ps"]).action == "auto_approve"
    assert commands.decide(["docker", "ps", "-a"]).action == "deny"
    assert commands.decide(["sh", "-c", "docker ps; rm -rf ~"]).action == "deny"


def test_quoting_keeps_one_argument_one_word() -> None:
    commands = policy(auto=["^echo [a-z]+$"], manual=[])
    assert commands.decide(["echo", "hi"]).action == "auto_approve"
    # "hi; touch x" is one argument: rendered quoted, it cannot match a single word.
    assert commands.decide(["echo", "hi; touch x"]).action == "deny"
    # A newline inside an argument cannot split the command either.
    assert policy(auto=["^echo .*$"], manual=[]).decide(["echo", "a\nb"]).action == "deny"


def test_rule_matches() -> None:
    rule = CommandRule(re.compile("^make test$"))
    assert rule.matches("make test")
    assert not rule.matches("make test2")
