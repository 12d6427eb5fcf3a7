"""Hostexec command patterns: canonical command strings and the approval verdict.

A request carries argv, never a shell string. To match it against the human's
patterns it is rendered once, canonically: an
argument made only of letters, digits and ``-_./:@+=`` stays bare; any other is
single-quoted, an embedded quote written ``'\\''`` (POSIX), and the empty argument is
``''``. So ``["echo", "it's fine"]`` becomes ``echo 'it'\\''s fine'``. The rendering is
unambiguous (a POSIX shell splits it back into exactly argv), so an argument cannot
pose as several (``"a; rm -rf ~"`` stays one quoted word).

Patterns are RE2 (:mod:`cloister_core.patterns`) and must match the *whole* string,
so ``git push`` cannot approve ``git push --force`` unless the pattern itself allows
more (``git push( .*)?``).

Order: ``auto_approve`` (global, then project), then ``manual_approve``; anything
else is denied, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cloister_core.config.models import CommandRules
from cloister_core.errors import InvalidCommandError
from cloister_core.patterns import Pattern

CommandAction = Literal["auto_approve", "manual_approve", "deny"]
MAX_ARGS = 4096
# Characters an argument may have and stay unquoted (ASCII only: é is quoted).
_BARE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@+=")


def quote_argument(arg: str) -> str:
    """*arg* as one POSIX shell word: bare if every character is in the safe set."""
    if arg and _BARE.issuperset(arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


def canonical_command(argv: Sequence[str]) -> str:
    """The canonical command string for *argv*; refuses empty argv, NUL bytes and text
    that is not Unicode (a lone surrogate: RE2 matches UTF-8)."""
    if isinstance(argv, str):
        raise InvalidCommandError(f"argv must be a list of strings, not a string: {argv!r}")
    if not argv:
        raise InvalidCommandError("argv must not be empty")
    if len(argv) > MAX_ARGS:
        raise InvalidCommandError(f"argv has {len(argv)} elements; at most {MAX_ARGS} are allowed")
    for index, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise InvalidCommandError(f"argv[{index}] is not a string: {arg!r}")
        if "\x00" in arg:
            raise InvalidCommandError(f"argv[{index}] contains a NUL byte: {arg!r}")
        if not arg.isascii():
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidCommandError(
                    f"argv[{index}] is not valid Unicode text: {arg!r}"
                ) from None
    if not argv[0]:
        raise InvalidCommandError("argv[0] (the program) must not be empty")
    return " ".join(map(quote_argument, argv))


@dataclass(frozen=True, slots=True)
class CommandRule:
    """A compiled pattern and the file it came from."""

    pattern: Pattern
    source: Path | None = None

    def matches(self, command: str) -> bool:
        return self.pattern.fullmatch(command)


@dataclass(frozen=True, slots=True)
class CommandVerdict:
    """What to do with one command, and why."""

    action: CommandAction
    command: str
    rule: CommandRule | None
    reason: str


class CommandPolicy:
    """The auto and manual pattern lists of one project (global + project files)."""

    __slots__ = ("_auto", "_manual")

    def __init__(
        self, auto: Iterable[CommandRule] = (), manual: Iterable[CommandRule] = ()
    ) -> None:
        self._auto = tuple(auto)
        self._manual = tuple(manual)

    @classmethod
    def from_rules(cls, layers: Iterable[tuple[Path | None, CommandRules]]) -> CommandPolicy:
        """Compile the ``auto_approve``/``manual_approve`` lists of several files."""
        auto: list[CommandRule] = []
        manual: list[CommandRule] = []
        for source, rules in layers:
            auto += [CommandRule(Pattern(item.pattern), source) for item in rules.auto_approve]
            manual += [CommandRule(Pattern(item.pattern), source) for item in rules.manual_approve]
        return cls(auto, manual)

    @property
    def auto_approve(self) -> tuple[CommandRule, ...]:
        return self._auto

    @property
    def manual_approve(self) -> tuple[CommandRule, ...]:
        return self._manual

    def decide(self, argv: Sequence[str]) -> CommandVerdict:
        """Verdict for *argv*; raises :class:`InvalidCommandError` for malformed argv."""
        command = canonical_command(argv)
        for rule in self._auto:
            if rule.matches(command):
                return CommandVerdict(
                    "auto_approve", command, rule, f"matches auto_approve {rule.pattern.pattern!r}"
                )
        for rule in self._manual:
            if rule.matches(command):
                return CommandVerdict(
                    "manual_approve",
                    command,
                    rule,
                    f"matches manual_approve {rule.pattern.pattern!r}; waiting for a human",
                )
        return CommandVerdict(
            "deny", command, None, "matches no auto_approve or manual_approve pattern"
        )
