"""YAML syntax errors in plain words, at the line a human has to fix.

ruamel.yaml reports a syntax error as a parser's trace ("while parsing a block
mapping … expected <block end>, but found '-'"), over several lines, sometimes with a
link. :func:`yaml_problem` turns the common cases (a tab for indentation, a duplicate
key, an unquoted ``*.example.com``, an unclosed bracket or quote, misaligned
indentation) into one sentence that says what to write, and points at the line that
needs the change, which is not always the one where the parser gave up.
"""

from __future__ import annotations

import json
import re

from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError

from cloister_core.errors import ConfigProblem

_DUPLICATE = re.compile(r'found duplicate key "(.*?)" with value')
_BAD_START = re.compile(r"found character '(.+?)' that cannot start any token")
_BAD_ESCAPE = re.compile(r"found unknown escape character '(.+?)'")
_CLOSERS = {"flow sequence": ("[", "]"), "flow mapping": ("{", "}")}


def _tab_indented(lines: list[str], last: int) -> int | None:
    """The first line up to *last* (0-based) whose indentation holds a tab."""
    for number, text in enumerate(lines[: last + 1]):
        indentation = text[: len(text) - len(text.lstrip(" \t"))]
        if "\t" in indentation:
            return number
    return None


def _value_at(lines: list[str], line: int, column: int) -> str:
    """The plain value written at (line, column): up to a comment or the line's end."""
    if not 0 <= line < len(lines):
        return ""
    text = lines[line][column:]
    return text.split(" #", 1)[0].strip()


Plain = tuple[str, int | None, int | None]  # message, 0-based line and column


def _by_problem(error: MarkedYAMLError, lines: list[str]) -> Plain | None:
    """The mistakes the parser's own problem text identifies."""
    problem = (error.problem or "").strip()
    mark = error.problem_mark
    line, column = (mark.line, mark.column) if mark is not None else (None, None)
    if isinstance(error, DuplicateKeyError):
        match = _DUPLICATE.match(problem)
        key = match.group(1) if match else "?"
        return f"key {key!r} is given twice in the same mapping; keep one", line, column
    if problem.startswith("found undefined alias") and line is not None and column is not None:
        # `*` starts an alias in YAML: the most common way a pattern breaks a file.
        value = json.dumps(_value_at(lines, line, column))
        return f"a value that starts with '*' must be quoted: write {value}", line, column
    if match := _BAD_START.match(problem):
        return f"a value cannot start with {match.group(1)!r}: put it in quotes", line, column
    if match := _BAD_ESCAPE.match(problem):
        return (
            f"'\\{match.group(1)}' is not an escape in double quotes: write the value in single"
            " quotes (regular expressions too: '^make \\S+$')",
            line,
            column,
        )
    if problem == "mapping values are not allowed here":
        return (
            "unexpected ':' here: quote a value that contains ': ', and check that the key"
            " on the line above ends with ':'",
            line,
            column,
        )
    return None


def _by_context(error: MarkedYAMLError) -> Plain | None:
    """The mistakes the parser names by what it was reading when it failed."""
    context = (error.context or "").strip()
    opened = error.context_mark
    mark = error.problem_mark
    if opened is None or mark is None:
        return None
    if context == "while scanning a simple key":
        missing = "this line is neither 'key: value' nor '- item' (a ':' is missing?)"
        return missing, opened.line, opened.column
    if "quoted scalar" in context:
        return "this quoted value is never closed", opened.line, opened.column
    for kind, (opener, closer) in _CLOSERS.items():
        if context == f"while parsing a {kind}":
            return (
                f"the {opener!r} on line {opened.line + 1} is not closed by {closer!r}"
                " (or an item before here misses its ',')",
                mark.line,
                mark.column,
            )
    if context == "while parsing a flow node":
        return (
            "expected a value here, inside '[...]' or '{...}' ('- item' lines cannot go"
            " inside brackets)",
            mark.line,
            mark.column,
        )
    if (error.problem or "").startswith("expected <block end>"):
        return (
            f"this line does not line up with the block that starts on line {opened.line + 1}:"
            " check its indentation (the keys of one mapping, and the '-' of one list, line up)",
            mark.line,
            mark.column,
        )
    return None


def _plain(error: MarkedYAMLError, lines: list[str]) -> Plain:
    mark = error.problem_mark or error.context_mark
    line, column = (mark.line, mark.column) if mark is not None else (None, None)
    if line is not None:
        tab = _tab_indented(lines, line)
        if tab is not None:
            return "this line is indented with a tab; YAML indents with spaces only", tab, 0
    found = _by_problem(error, lines) or _by_context(error)
    if found is not None:
        return found
    words = " ".join(part for part in (error.context, error.problem) if part)
    return " ".join(words.split()), line, column


def yaml_problem(error: MarkedYAMLError, text: str) -> ConfigProblem:
    """One ``invalid YAML: …`` problem for *error*, raised while parsing *text*."""
    message, line, column = _plain(error, text.splitlines())
    if line is None:
        return ConfigProblem(f"invalid YAML: {message}")
    return ConfigProblem(
        f"invalid YAML: {message}", line + 1, column + 1 if column is not None else None
    )
