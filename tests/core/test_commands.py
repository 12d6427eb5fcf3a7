"""Hostexec canonical commands and pattern verdicts."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cloister_core.commands import CommandPolicy, CommandRule, canonical_command, quote_argument
from cloister_core.config.models import CommandPattern, CommandRules
from cloister_core.errors import InvalidCommandError
from cloister_core.patterns import Pattern

# The reference tool's canonical-command table (the tests of its request package),
# case by case; its empty argv and empty program are refused here (see below).
REFERENCE_CASES = [
    (["ls"], "ls"),
    (["docker", "ps"], "docker ps"),
    (["ls", "-la", "/tmp"], "ls -la /tmp"),
    (["docker", "compose", "up", "-d"], "docker compose up -d"),
    (["echo", "hello world"], "echo 'hello world'"),
    (["echo", "it's"], r"echo 'it'\''s'"),
    (["echo", 'say "hello"'], """echo 'say "hello"'"""),
    (["echo", "foo;bar"], "echo 'foo;bar'"),
    (["echo", "$HOME"], "echo '$HOME'"),
    (["echo", "`whoami`"], "echo '`whoami`'"),
    (["echo", "line1\nline2"], "echo 'line1\nline2'"),
    (["cmd", ""], "cmd ''"),
    (["echo", "it's a 'test'"], r"echo 'it'\''s a '\''test'\'''"),
    (["echo", "PATH=/usr/bin:/bin"], "echo PATH=/usr/bin:/bin"),
    (["git", "clone", "git@example.org:user/repo.git"], "git clone git@example.org:user/repo.git"),
    (
        ["go", "get", "example.com/pkg@v1.0.0+incompatible"],
        "go get example.com/pkg@v1.0.0+incompatible",
    ),
    (["ls", "*.go"], "ls '*.go'"),
    (["echo", "foo|bar"], "echo 'foo|bar'"),
    (["echo", "foo&bar"], "echo 'foo&bar'"),
    (["echo", "(test)"], "echo '(test)'"),
    (["echo", "[test]"], "echo '[test]'"),
    (["echo", "{a,b}"], "echo '{a,b}'"),
    (["echo", "a<b"], "echo 'a<b'"),
    (["echo", "a>b"], "echo 'a>b'"),
    (["echo", "", "world"], "echo '' world"),
    # From its configuration reference.
    (["echo", "it's fine"], r"echo 'it'\''s fine'"),
    (["git", "commit", "-m", "fix: bug"], "git commit -m 'fix: bug'"),
    # Ours: what shlex.join left bare is quoted, and so are non-ASCII letters.
    (["printf", "%s,%d"], "printf '%s,%d'"),
    (["echo", "café"], "echo 'café'"),
    (["echo", "a; touch /tmp/pwned"], "echo 'a; touch /tmp/pwned'"),
]


@pytest.mark.parametrize(("argv", "command"), REFERENCE_CASES)
def test_canonical_command(argv: list[str], command: str) -> None:
    assert canonical_command(argv) == command


@pytest.mark.parametrize(("argv", "command"), REFERENCE_CASES)
def test_a_shell_reads_exactly_argv_back(argv: list[str], command: str) -> None:
    # One unambiguous text per argv: an argument cannot pose as several.
    assert shlex.split(command) == argv


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("", "''"),
        ("hello", "hello"),
        ("-la", "-la"),
        ("foo_bar", "foo_bar"),
        ("file.txt", "file.txt"),
        ("/usr/bin", "/usr/bin"),
        ("host:port", "host:port"),
        ("user@host", "user@host"),
        ("v1.0+beta", "v1.0+beta"),
        ("KEY=value", "KEY=value"),
        ("hello world", "'hello world'"),
        ("it's", r"'it'\''s'"),
        ("a\tb", "'a\tb'"),
    ],
)
def test_quote_argument(arg: str, quoted: str) -> None:
    assert quote_argument(arg) == quoted


def test_only_the_reference_set_stays_bare() -> None:
    bare = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@+="
    assert [char for char in bare if quote_argument(char) != char] == []
    quoted = " \t\n'\"`;$()[]{}|&<>*?!#~\\^%,é"
    assert [char for char in quoted if not quote_argument(char).startswith("'")] == []


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ([], "must not be empty"),
        ([""], "argv\\[0\\]"),
        (["echo", "a\x00b"], "NUL"),
        (["echo", "a\ud800"], "not valid Unicode"),
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


@pytest.mark.parametrize(
    ("pattern", "argv"),
    [
        # Written for the reference tool's quoting: they match here too.
        (r"^echo 'it'\\''s fine'$", ["echo", "it's fine"]),
        ("^docker compose logs.*$", ["docker", "compose", "logs", "-f", "web"]),
        ("^git commit -m '.*'$", ["git", "commit", "-m", "fix: bug"]),
        ("^printf '%s,%d' [0-9]+$", ["printf", "%s,%d", "42"]),
        # RE2 syntax Python's re does not read (or reads otherwise).
        ("^ls [[:alnum:]]+$", ["ls", "src2"]),
        (r"^echo [[:alpha:]]+\z", ["echo", "hello"]),
        (r"^echo '\p{L}+'$", ["echo", "café"]),
    ],
)
def test_reference_patterns_match(pattern: str, argv: list[str]) -> None:
    assert policy(auto=[pattern], manual=[]).decide(argv).action == "auto_approve"


def test_rule_matches() -> None:
    rule = CommandRule(Pattern("^make test$"))
    assert rule.matches("make test")
    assert not rule.matches("make test2")
