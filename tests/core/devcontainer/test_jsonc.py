"""devcontainer.json's JSONC: comments and trailing commas, and errors at file:line:column."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.devcontainer import DevcontainerError
from cloister_core.devcontainer.jsonc import parse_jsonc
from cloister_core.jsonc import MAX_DEPTH

PATH = Path("/p/.devcontainer/devcontainer.json")


def test_comments_and_trailing_commas() -> None:
    text = '// top\n{\n  /* block */ "image": "debian", // end\n  "runArgs": ["--init",],\n}\n'
    assert parse_jsonc(text, PATH) == {"image": "debian", "runArgs": ["--init"]}


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
