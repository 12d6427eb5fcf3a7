"""JSON with comments and trailing commas, read in linear time, with where each value is.

VS Code's JSON (``//`` and ``/* */`` comments, trailing commas): devcontainer.json, a
Feature's metadata, ``tasks.json``, an agent's settings. The file may be the agent's and
is read before the human is asked, so reading it must be linear and bounded whatever it
holds:

1. one regular-expression pass blanks the comments and the trailing commas out with
   spaces (line breaks kept), so every offset stays what it was in the file, and
   finds a string not closed on its line or a comment not closed;
2. nesting deeper than the mode's bound is refused, counted on the brackets alone;
3. :func:`json.loads` (C) reads the values; duplicate keys are refused (with two
   ``"runArgs"`` a reader sees one and the tools use the other);
4. :class:`Positions` finds where a value is when it is asked, indexing each object or
   list once, only as far as asked (C's scanner skips each member's value), so an
   override's line is looked up, never searched for.

Two modes (:data:`Mode`): ``"strict"`` for what Cloister itself acts on (devcontainer.json
and what it names), ``"lenient"`` for a reader that must see what another tool would:
the review of a ``tasks.json`` VS Code runs, an agent's settings. There a key given twice
is the last one (as VS Code's and JavaScript's parsers take it) and the nesting bound is
:data:`LENIENT_MAX_DEPTH`; whatever the lenient mode still refuses, such a reader treats
as the worst the file could hold.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Location = Sequence[str | int]
Mode = Literal["strict", "lenient"]

MAX_DEPTH = 64
"""Objects and lists nested deeper than this are refused (real files nest a few levels)."""
LENIENT_MAX_DEPTH = 512
"""The lenient mode's bound: deeper than any real file, and well within the C parser's
recursion limit (past it, the parser would raise RecursionError)."""

_CLEAN = re.compile(
    r'"(?:[^"\\\n\r]|\\[^\n\r])*"'  # a string: kept
    r'|(?P<quote>")'  # a string not closed on its line
    r"|(?P<comment>//[^\n]*|/\*.*?\*/)"
    r"|(?P<open>/\*)"  # a block comment not closed
    # A trailing comma; possessive, so a `}` inside a line comment never ends the look.
    r"|(?P<comma>,)(?=(?:[ \t\r\n]++|//[^\n]*+|/\*.*?\*/)*+[}\]])"
    r"|(?P<bom>^\ufeff)",
    re.DOTALL,
)
# Without a '/' or a ',' before a closing there is nothing to blank: the strings are
# then only checked to close on their lines (possessive: no backtracking).
_TRAILING = re.compile(r",[ \t\r\n]*[}\]]")
_STRINGS = re.compile(r'(?:[^"]++|"(?:[^"\\\n\r]++|\\[^\n\r])*+")*+')
_NOT_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[^"\[\]{}]+', re.DOTALL)
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_DEPTH = {"[": 1, "{": 1, "]": -1, "}": -1}
_WHITESPACE = re.compile(r"[ \t\r\n]*")
_LINE_END = re.compile(r"[^\n\r]*")
# C's scanner: the value at an offset and the offset after it (keys are strings too).
# (typeshed does not list the attribute; CPython's decoder has had it since 2.6.)
_SCAN: Callable[[str, int], tuple[object, int]] = json.JSONDecoder(strict=False).scan_once  # type: ignore[attr-defined]


def line_column(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of *offset* in *text*."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


class JsoncError(ValueError):
    """The text is no JSONC Cloister reads; *line* and *column* (1-based) say where, when
    that is known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message)


def loads(text: str, mode: Mode = "strict") -> object:
    """*text* parsed; :class:`JsoncError` (a :class:`ValueError`) saying where it is not
    JSONC, or nests deeper than the *mode*'s bound, or (``"strict"``) gives a key twice
    in one object; ``"lenient"`` takes the last of a key given twice."""
    return _parsed(text, mode)[0]


def parse_located(text: str) -> tuple[object, Positions]:
    """Parse *text* as :func:`loads` does (strictly); also where each of its values is.
    (Strict only: with a key given twice, a lookup could find the one not read.)"""
    value, clean = _parsed(text, "strict")
    return value, Positions(clean, _space(clean, 0))


def _parsed(text: str, mode: Mode) -> tuple[object, str]:
    """The value of *text* and its cleaned text (the same offsets)."""
    if not text.strip():
        raise JsoncError("the file is empty: expected a JSON object", 1, 1)
    clean = _cleaned(text)
    _check_depth(clean, MAX_DEPTH if mode == "strict" else LENIENT_MAX_DEPTH)
    pairs = _object if mode == "strict" else None
    try:
        value = json.loads(clean, strict=False, object_pairs_hook=pairs, parse_constant=_constant)
    except _DuplicateKeyError as error:
        raise _duplicate(clean, error.key) from None
    except json.JSONDecodeError as error:
        raise _syntax_error(clean, error) from None
    except ValueError as error:
        raise JsoncError(f"invalid JSON: {error}") from None
    except RecursionError:
        # Only when called deep in a stack already: the bound keeps the parser's own
        # recursion well below the limit.
        raise JsoncError("its values are nested too deeply for this reader") from None
    return value, clean


def _fail(text: str, offset: int, message: str) -> JsoncError:
    line, column = line_column(text, offset)
    return JsoncError(message, line, column)


def _cleaned(text: str) -> str:
    """*text* with its comments and trailing commas blanked out: the same offsets."""
    if "/" not in text and not _TRAILING.search(text) and _STRINGS.fullmatch(text):
        return text.replace("\ufeff", " ", 1) if text.startswith("\ufeff") else text

    def blank(match: re.Match[str]) -> str:
        kind = match.lastgroup
        if kind is None:
            return match.group()  # a string, as it is
        if kind == "quote":
            end = _LINE_END.match(text, match.start())
            stop = end.end() if end is not None else match.start()
            raise _fail(text, stop, "invalid JSON: a string is not closed on its line")
        if kind == "open":
            raise _fail(text, match.start(), "invalid JSON: a /* comment is not closed")
        return re.sub(r"[^\n]", " ", match.group())

    return _CLEAN.sub(blank, text)


def _check_depth(clean: str, bound: int) -> None:
    brackets = _NOT_BRACKETS.sub("", clean)
    depths = itertools.accumulate(map(_DEPTH.__getitem__, brackets))
    if max(depths, default=0) <= bound:
        return
    depth = 0
    for match in _BRACKETS.finditer(clean):
        depth += _DEPTH.get(match.group(), 0)
        if depth > bound:
            message = f"its values are nested too deeply (over {bound} levels)"
            raise _fail(clean, match.start(), message)


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return result


def _constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def _duplicate(clean: str, key: str) -> JsoncError:
    # The error path only: the last place the key is written as a key.
    pattern = re.escape(json.dumps(key)) + r"[ \t\r\n]*:"
    offsets = [match.start() for match in re.finditer(pattern, clean)]
    line, column = line_column(clean, offsets[-1]) if offsets else (None, None)
    message = f"key {key!r} is given twice in the same object; keep one"
    return JsoncError(message, line, column)


def _syntax_error(clean: str, error: json.JSONDecodeError) -> JsoncError:
    offset = error.pos
    if offset >= len(clean) or not clean[offset:].strip():
        message = "invalid JSON: the file ends before every '{' and '[' is closed"
        return _fail(clean, len(clean), message)
    char = clean[offset]
    if error.msg.startswith("Invalid \\escape"):
        message = "invalid JSON: a string has an escape JSON does not know"
    elif error.msg == "Extra data":
        message = f"invalid JSON: unexpected {char!r} after the end"
    elif char in '"{[]}:,-0123456789tfn':
        message = f"invalid JSON: unexpected {char!r} (a ',' missing before it, or a ':'?)"
    else:
        message = f"invalid JSON: unexpected {char!r}"
    return _fail(clean, offset, message)


@dataclass(slots=True)
class _Members:
    """What is known of one object's or list's members: indexed as far as asked."""

    resume: int  # where the next member starts (after '{', '[' or ',')
    is_object: bool
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)  # key → (key, value)
    items: list[int] = field(default_factory=list)  # offsets of the items
    done: bool = False


@dataclass(slots=True)
class Positions:
    """Where the values of a parsed document are; each object or list is indexed once,
    as far as a lookup needs, so lookups cost in total what one pass over the file does."""

    text: str  # the cleaned text: the file's offsets and line breaks
    root: int  # the offset of the top value
    _members: dict[int, _Members] = field(default_factory=dict)
    _lines: list[int] = field(default_factory=list)  # offsets of the line breaks, made once

    def offset(self, location: Location) -> int | None:
        """The offset of the deepest part of *location* that exists: a member's key, an
        item itself; None when not even the first part exists."""
        value, best = self.root, None
        for step in location:
            members = self._members.get(value)
            if members is None:
                opening = self.text[value]
                if opening not in "[{":
                    break
                members = self._members[value] = _Members(value + 1, opening == "{")
            if isinstance(step, str):
                found = members.keys.get(step) if members.is_object else None
                while found is None and members.is_object and not members.done:
                    self._next(members)
                    found = members.keys.get(step)
                if found is None:
                    break
                best, value = found
            else:
                items = members.items
                while len(items) <= step and not members.is_object and not members.done:
                    self._next(members)
                if members.is_object or not 0 <= step < len(items):
                    break
                best = value = items[step]
        return best

    def locate(self, location: Location) -> tuple[int, int] | None:
        """The 1-based (line, column) of the deepest part of *location* that exists."""
        offset = self.offset(location)
        return None if offset is None else self.line_column(offset)

    def line_column(self, offset: int) -> tuple[int, int]:
        if not self._lines:
            self._lines = [-1, *(match.start() for match in re.finditer("\n", self.text))]
        index = bisect.bisect_left(self._lines, offset)  # line breaks before *offset*, +1
        return index, offset - self._lines[index - 1]

    def _next(self, members: _Members) -> None:
        """Index one more member (the text is valid JSON: it was parsed already)."""
        text = self.text
        position = _space(text, members.resume)
        if text[position] in "]}":
            members.done = True
            return
        if members.is_object:
            key, after = _SCAN(text, position)
            after = _space(text, after) + 1
            value = _space(text, after)
            members.keys.setdefault(str(key), (position, value))
        else:
            value = position
            members.items.append(value)
        after = _space(text, _SCAN(text, value)[1])
        members.resume = after + 1
        members.done = text[after] != ","


def _space(text: str, offset: int) -> int:
    """The offset of the next character after *offset* that is not JSON's whitespace."""
    found = _WHITESPACE.match(text, offset)
    return found.end() if found is not None else offset
