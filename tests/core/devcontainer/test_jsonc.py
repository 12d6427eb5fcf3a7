"""JSONC parsing: comments and trailing commas, and errors at file:line:column."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.devcontainer import DevcontainerError, jsonc
from cloister_core.devcontainer.jsonc import MAX_DEPTH, line_column, parse_jsonc, parse_located

PATH = Path("/p/.devcontainer/devcontainer.json")


def test_comments_and_trailing_commas() -> None:
    text = '// top\n{\n  /* block */ "image": "debian", // end\n  "runArgs": ["--init",],\n}\n'
    assert parse_jsonc(text, PATH) == {"image": "debian", "runArgs": ["--init"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A comma before a commented-out entry holding a closing bracket is no trailing
        # comma (the official templates comment out `"features": {}` this way).
        ('{"a": 1,\n  // "b": {},\n  "c": 2}', {"a": 1, "c": 2}),
        ('{"a": 1,\n  // "b": [1]\n  "c": [2]}', {"a": 1, "c": [2]}),
        ('{"a": 1, // x }\n /* } */ }', {"a": 1}),
        ('{"a": [1, /* ] */ ], }', {"a": [1]}),
    ],
)
def test_a_closing_bracket_in_a_comment_does_not_make_a_comma_trailing(
    text: str, expected: object
) -> None:
    assert parse_jsonc(text, PATH) == expected


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ('{\n  "image": "debian"\n  "name": "x"\n}\n', ":3:3:", "unexpected '\"'"),
        ('{\n  "image": "debian",\n', ":3:1:", "ends before every '{' and '[' is closed"),
        ('{\n  "name": "x\n}\n', ":2:13:", "a string is not closed on its line"),
        ('{\n  "image": "a",\n  "image": "b"\n}\n', ":3:3:", "key 'image' is given twice"),
        ("  \n", ":1:1:", "the file is empty"),
        ('{\n  /* "image": "x"\n}\n', ":2:3:", "a /* comment is not closed"),
        ('{"a": "\\x41"}', ":1:8:", "an escape JSON does not know"),
        ("{image: 1}", ":1:2:", "unexpected 'i'"),
        ('{"a": 1} {"b": 2}', ":1:10:", "unexpected '{' after the end"),
        ('{"a": [1 2]}', ":1:10:", "unexpected '2'"),
        ('{"a" 1}', ":1:6:", "unexpected '1'"),
        ('{"a": 0x10}', ":1:8:", "unexpected 'x'"),
        ('{"a": NaN}', ":", "NaN is not a JSON value"),
        ('{"a": "x"\n  /* "b": 1,\n}\n', ":2:3:", "a /* comment is not closed"),
    ],
    ids=[
        "missing-comma",
        "unclosed",
        "unclosed-string",
        "duplicate-key",
        "empty",
        "unclosed-comment",
        "escape",
        "unquoted-key",
        "two-documents",
        "missing-comma-in-list",
        "missing-colon",
        "hex",
        "nan",
        "unclosed-comment-later",
    ],
)
def test_syntax_errors_name_file_line_and_column(text: str, where: str, message: str) -> None:
    with pytest.raises(DevcontainerError) as caught:
        parse_jsonc(text, PATH)
    assert str(caught.value).startswith(f"{PATH}{where} ")
    assert message in str(caught.value)
    if where != ":":
        assert caught.value.line == int(where.split(":")[1])


def test_locate_finds_the_real_key_not_one_in_a_comment() -> None:
    text = (
        '{\n  // "runArgs": ["--privileged"] was here\n  "build": {"args": {"A": "1"}},\n'
        '  "runArgs": [\n    "--init", /* c */ "--rm",\n    "--gpus"\n  ]\n}\n'
    )
    _, positions = parse_located(text, PATH)
    assert positions.locate(["runArgs"]) == (4, 3)
    assert positions.locate(["runArgs", 1]) == (5, 23)
    assert positions.locate(["runArgs", 2]) == (6, 5)
    assert positions.locate(["build", "args", "A"]) == (3, 22)
    assert positions.locate(["nothing"]) is None
    # The deepest part that exists: the list, for an item past its end.
    assert positions.locate(["runArgs", 9]) == (4, 3)


def test_values_are_what_json_reads() -> None:
    text = (
        '{"a": [1, -2.5e3, true, false, null, "\\u00e9\\n\\ud83d\\ude00", {}, []], "b": {"c": ""}}'
    )
    assert parse_jsonc(text, PATH) == {
        "a": [1, -2500.0, True, False, None, "\u00e9\n\U0001f600", {}, []],
        "b": {"c": ""},
    }


def test_nesting_is_bounded_without_recursion() -> None:
    assert parse_jsonc("[" * MAX_DEPTH + "]" * MAX_DEPTH, PATH) == _nested(MAX_DEPTH)
    deep = "[" * 1_000_000 + "]" * 1_000_000  # far beyond Python's recursion limit
    with pytest.raises(DevcontainerError, match="nested too deeply") as caught:
        parse_jsonc(deep, PATH)
    assert caught.value.column == MAX_DEPTH + 1


def _nested(depth: int) -> object:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_each_member_is_indexed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear work, counted rather than timed: looking up every item of a list indexes
    each item once, whatever the order and the number of lookups."""
    calls = 0
    index_next = jsonc.Positions._next

    def counted(self: jsonc.Positions, members: jsonc._Members) -> None:
        nonlocal calls
        calls += 1
        index_next(self, members)

    monkeypatch.setattr(jsonc.Positions, "_next", counted)
    items = ", ".join(f'"--label=x{index}"' for index in range(1000))
    text = '{"runArgs": [' + items + "]}"
    _, positions = parse_located(text, PATH)
    for index in (*range(1000), *reversed(range(1000))):
        assert positions.locate(["runArgs", index]) == (1, text.index(f'"--label=x{index}"') + 1)
    assert calls == 1 + 1000  # the top object's first key, then each item (the last ends it)
    assert positions.locate(["runArgs", 1000]) == (1, 2)  # past the end: the list's key
    assert calls == 1 + 1000


def test_a_string_may_hold_what_looks_like_a_comment_or_a_trailing_comma() -> None:
    text = '{"a": "// no, /* not */ a comment", "b": ",]", "c": [1, /* , */ 2, ], }'
    assert parse_jsonc(text, PATH) == {"a": "// no, /* not */ a comment", "b": ",]", "c": [1, 2]}


def test_comments_keep_the_lines() -> None:
    text = '/* one\ntwo */ {\n // x\n "a": [\n 1, // y\n 2,\n ],\n}'
    _, positions = parse_located(text, PATH)
    assert positions.locate(["a", 1]) == (6, 2)


def test_line_column_is_one_based() -> None:
    assert line_column("ab\ncd", 0) == (1, 1)
    assert line_column("ab\ncd", 4) == (2, 2)
    _, positions = parse_located("[\n1,\n\n 2]", PATH)
    for offset in range(10):
        assert positions.line_column(offset) == line_column("[\n1,\n\n 2]", offset)
