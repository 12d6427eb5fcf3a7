"""Hostexec patterns: RE2 regular expressions, the dialect Go and the reference tool use.

RE2 runs in time linear in the text whatever the pattern, so an agent cannot stall
the guardian with command text chosen against a human's pattern (``(a+)+$`` is no
slower than ``a+``). It refuses what it cannot do in linear time (backreferences,
look-around) and reads POSIX classes (``[[:alnum:]]``), ``\\z`` and Unicode classes
(``\\p{L}``) as Go does.

google-re2 has no type information: this module is the one typed door to it.
"""

from __future__ import annotations

from typing import Any, Final

import re2  # type: ignore[import-untyped]  # google-re2 ships no stubs

# What RE2 reads specially outside a character class (Perl syntax, no flags).
_METACHARACTERS: Final = frozenset("\\.+*?()|[]{}^$")


class PatternError(ValueError):
    """A pattern RE2 refuses; the message is RE2's reason."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the reason goes into the exception, not to stderr
    return options


_OPTIONS: Final = _options()


class Pattern:
    """A compiled RE2 pattern; :meth:`fullmatch` is whether it matches all of a text."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        try:
            self._compiled: Any = re2.compile(pattern, _OPTIONS)
        except re2.error as error:
            reason = error.args[0] if error.args else error
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            raise PatternError(
                f"not a valid RE2 regular expression: {pattern!r} ({reason})"
            ) from None
        except UnicodeEncodeError:
            raise PatternError(f"not valid Unicode text: {pattern!r}") from None
        self.pattern: Final = pattern

    def fullmatch(self, text: str) -> bool:
        return self._compiled.fullmatch(text) is not None

    def __repr__(self) -> str:
        return f"Pattern({self.pattern!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)


def literal(text: str) -> str:
    """The pattern that matches exactly *text*: ``^`` + *text* with RE2's
    metacharacters backslashed + ``$`` (``git push`` stays readable as ``^git push$``)."""
    escaped = "".join("\\" + char if char in _METACHARACTERS else char for char in text)
    return f"^{escaped}$"
