"""RE2 hostexec patterns: the dialect, the refusals, and literal patterns."""

from __future__ import annotations

import pytest

from cloister_core.commands import canonical_command
from cloister_core.patterns import Pattern, PatternError, literal


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^ls [[:alnum:]]+$", "ls src2", True),
        ("^ls [[:alnum:]]+$", "ls 'a b'", False),
        (r"^make test\z", "make test", True),
        (r"\p{L}+", "café", True),
        (r"\p{L}+", "cafe1", False),
        (r"\pN+", "١٢٣", True),
        ("(?i)^MAKE$", "make", True),
        (r"^make \Qa.b\E$", "make a.b", True),
        (r"^make \Qa.b\E$", "make axb", False),
        ("^git push$", "git push --force", False),  # the whole text, not a prefix
        (".*", "a\nb", False),  # . does not match a newline
        ("(?s).*", "a\nb", True),
        ("a$", "a\n", False),  # $ is the end of the text (Go's, not Python's)
    ],
)
def test_re2_syntax(pattern: str, text: str, matches: bool) -> None:
    assert Pattern(pattern).fullmatch(text) is matches


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a", "missing ): (a"),
        ("(?=x)x", "invalid perl operator: (?="),
        (r"(a)\1", r"invalid escape sequence: \1"),
        (r"a\Z", r"invalid escape sequence: \Z"),
        ("[[:nope:]]", "invalid character class range: [:nope:]"),
        ("a{2000}", "invalid repetition size: {2000}"),
    ],
)
def test_refused_patterns_say_what_re2_refused(pattern: str, reason: str) -> None:
    with pytest.raises(PatternError) as caught:
        Pattern(pattern)
    assert str(caught.value) == f"not a valid RE2 regular expression: {pattern!r} ({reason})"


def test_pattern_errors_are_value_errors() -> None:
    # The config validator relies on it to report the file and line.
    assert issubclass(PatternError, ValueError)


def test_pattern_equality_and_text() -> None:
    assert Pattern("^a$") == Pattern("^a$")
    assert Pattern("^a$") != Pattern("^b$")
    assert len({Pattern("^a$"), Pattern("^a$")}) == 1
    assert Pattern("^a$").pattern == "^a$"
    assert repr(Pattern("^a$")) == "Pattern('^a$')"


def test_pathological_pattern_is_linear() -> None:
    # (a+)+$ backtracks exponentially in Python's re; RE2 has no backtracking.
    text = "a" * 65536 + "!"
    assert Pattern("(a+)+$").fullmatch(text) is False
    assert Pattern("(a+)+!").fullmatch(text) is True


@pytest.mark.parametrize(
    "argv",
    [
        ["git", "push", "origin", "main"],
        ["echo", "it's (fine) [really]?"],
        ["printf", "a.b*c+d^e$f|g{1}\\h"],
        ["echo", "line1\nline2\ttab"],
        ["echo", "café ünïcode \u2028"],
        ["echo", ""],
    ],
)
def test_literal_matches_exactly_the_command(argv: list[str]) -> None:
    command = canonical_command(argv)
    pattern = Pattern(literal(command))
    assert pattern.fullmatch(command)
    assert not pattern.fullmatch(command + " --force")
    assert not pattern.fullmatch(command[:-1])
    assert not pattern.fullmatch("x" + command[1:])


def test_literal_stays_readable() -> None:
    assert literal("git push origin main") == "^git push origin main$"
    assert literal(r"echo 'it'\''s (fine)'") == r"^echo 'it'\\''s \(fine\)'$"
