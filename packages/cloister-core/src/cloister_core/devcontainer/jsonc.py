"""JSON with comments and trailing commas, read with the ``json5`` library.

devcontainer.json is JSONC (VS Code's JSON: ``//`` and ``/* */`` comments, trailing
commas). JSON5 is a superset of that, and ``json5`` (the Chromium project's pure-Python
implementation) reports where a syntax error is as an offset, which we turn into a line
and a column. Duplicate keys are refused: with two ``"runArgs"`` a reader sees one and
the tools use the other.

For errors found after parsing (a wrong type, say) :func:`locate` finds the line of a
key: it looks for ``"key":`` and accepts an occurrence only if the value ``json5`` reads
from there is the value in the document, so a key quoted in a comment or a string is
not taken for the real one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import json5

from cloister_core.devcontainer.model import DevcontainerError

Location = Sequence[str | int]

_UNEXPECTED = re.compile(r"^<string>:\d+ Unexpected (.+) at column \d+$", re.DOTALL)
_DUPLICATE = re.compile(r'^Duplicate key "(.*)" found in object$')
# Whitespace and comments between tokens: all :func:`locate` skips by itself.
_SKIP = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.DOTALL)


def line_column(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of *offset* in *text*."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _syntax_message(error: str) -> str:
    match = _UNEXPECTED.match(error)
    if match is None:
        return f"invalid JSON: {error}"
    thing = match.group(1)
    if thing == "end of input":
        return "invalid JSON: the file ends before every '{' and '[' is closed"
    if thing == '"\n"':
        return "invalid JSON: a string is not closed on its line"
    return f"invalid JSON: unexpected {thing[1:-1]!r} (a ',' missing before it, or a ':'?)"


def parse_jsonc(text: str, path: Path) -> object:
    """Parse *text* (the content of *path*); errors name the file, line and column."""
    if not text.strip():
        raise DevcontainerError(path, "the file is empty: expected a JSON object", 1, 1)
    value, error, offset = json5.parse(text, allow_duplicate_keys=False)
    if error is None:
        return value
    duplicate = _DUPLICATE.match(error)
    if duplicate is not None:
        key = duplicate.group(1)
        offsets = [match.start() for match in re.finditer(_key_pattern(key), text)]
        line, column = line_column(text, offsets[-1]) if offsets else (None, None)
        raise DevcontainerError(
            path, f"key {key!r} is given twice in the same object; keep one", line, column
        )
    line, column = line_column(text, offset)
    raise DevcontainerError(path, _syntax_message(error), line, column)


def _key_pattern(key: str) -> str:
    return re.escape(json.dumps(key)) + r"\s*:"


def _skip(text: str, offset: int) -> int:
    """The offset of the next token after *offset*, past whitespace and comments."""
    skipped = _SKIP.match(text, offset)
    return skipped.end() if skipped is not None else offset


def _value_after(text: str, offset: int) -> tuple[object, int] | None:
    """The value ``json5`` reads at *offset* and the offset after it; None if none."""
    value, error, end = json5.parse(text, start=offset, consume_trailing=False)
    return None if error is not None else (value, end)


def _find_key(text: str, key: str, value: object, start: int) -> tuple[int, int] | None:
    """(offset of the key, offset of its value) of the first ``"key": value`` from *start*."""
    for match in re.compile(_key_pattern(key)).finditer(text, start):
        found = _value_after(text, match.end())
        if found is not None and found[0] == value:
            return match.start(), _skip(text, match.end())
    return None


def _find_item(text: str, start: int, index: int) -> int | None:
    """The offset of item *index* of the list whose ``[`` is at *start*."""
    if not text.startswith("[", start):
        return None
    position = start + 1
    for number in range(index + 1):
        position = _skip(text, position)
        if number == index:
            return position
        found = _value_after(text, position)
        if found is None:
            return None
        position = _skip(text, found[1])
        if not text.startswith(",", position):
            return None
        position += 1
    return None


def locate(text: str, document: object, location: Location) -> tuple[int, int] | None:
    """The 1-based (line, column) of the deepest part of *location* that can be found."""
    node, search_from, best = document, 0, None
    for step in location:
        if isinstance(step, str) and isinstance(node, dict) and step in node:
            found = _find_key(text, step, node[step], search_from)
            if found is None:
                break
            best, search_from = found
            node = node[step]
        elif isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            item = _find_item(text, search_from, step)
            if item is None:
                break
            best = search_from = item
            node = node[step]
        else:
            break
    return None if best is None else line_column(text, best)
