"""JSONC: comments and trailing commas, where each value is, and errors at line:column."""

from __future__ import annotations

import pytest

from cloister_core import jsonc
from tests.jsonc_support import IndexCount


def test_an_error_is_a_value_error_saying_where() -> None:
    with pytest.raises(ValueError, match=r"^line 3, column 3: key 'a' is given twice") as caught:
        jsonc.loads('{\n  "a": 1,\n  "a": 2\n}')
    assert isinstance(caught.value, jsonc.JsoncError)
    assert (caught.value.line, caught.value.column) == (3, 3)
    assert caught.value.message.startswith("key 'a' is given twice")


def test_nesting_too_deep_is_an_error_not_a_recursion() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(jsonc.JsoncError, match="nested too deeply"):
        jsonc.loads(deep)


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
    assert jsonc.loads(text) == expected


def test_locate_finds_the_real_key_not_one_in_a_comment() -> None:
    text = (
        '{\n  // "runArgs": ["--privileged"] was here\n  "build": {"args": {"A": "1"}},\n'
        '  "runArgs": [\n    "--init", /* c */ "--rm",\n    "--gpus"\n  ]\n}\n'
    )
    _, positions = jsonc.parse_located(text)
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
    assert jsonc.loads(text) == {
        "a": [1, -2500.0, True, False, None, "\u00e9\n\U0001f600", {}, []],
        "b": {"c": ""},
    }


def test_each_member_is_indexed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear work, counted rather than timed: looking up every item of a list indexes
    each item once, whatever the order and the number of lookups."""
    count = IndexCount(monkeypatch)
    items = ", ".join(f'"--label=x{index}"' for index in range(1000))
    text = '{"runArgs": [' + items + "]}"
    _, positions = jsonc.parse_located(text)
    for index in (*range(1000), *reversed(range(1000))):
        assert positions.locate(["runArgs", index]) == (1, text.index(f'"--label=x{index}"') + 1)
    assert count.calls == 1 + 1000  # the top object's first key, then each item (the last ends it)
    assert positions.locate(["runArgs", 1000]) == (1, 2)  # past the end: the list's key
    assert count.calls == 1 + 1000


def test_a_string_may_hold_what_looks_like_a_comment_or_a_trailing_comma() -> None:
    text = '{"a": "// no, /* not */ a comment", "b": ",]", "c": [1, /* , */ 2, ], }'
    assert jsonc.loads(text) == {"a": "// no, /* not */ a comment", "b": ",]", "c": [1, 2]}


def test_comments_keep_the_lines() -> None:
    text = '/* one\ntwo */ {\n // x\n "a": [\n 1, // y\n 2,\n ],\n}'
    _, positions = jsonc.parse_located(text)
    assert positions.locate(["a", 1]) == (6, 2)


def test_line_column_is_one_based() -> None:
    assert jsonc.line_column("ab\ncd", 0) == (1, 1)
    assert jsonc.line_column("ab\ncd", 4) == (2, 2)
    _, positions = jsonc.parse_located("[\n1,\n\n 2]")
    for offset in range(10):
        assert positions.line_column(offset) == jsonc.line_column("[\n1,\n\n 2]", offset)


def test_lenient_takes_the_last_of_a_key_given_twice() -> None:
    """As VS Code's and JavaScript's parsers do; strict refuses it."""
    text = '{"a": 1, "b": {"c": 1, "c": [2]}, "a": 3}'
    assert jsonc.loads(text, "lenient") == {"a": 3, "b": {"c": [2]}}
    with pytest.raises(jsonc.JsoncError, match="key 'c' is given twice"):
        jsonc.loads(text)
    with pytest.raises(jsonc.JsoncError, match="key 'c' is given twice"):
        jsonc.loads(text, "strict")


def test_lenient_nests_deeper_and_is_still_bounded() -> None:
    deeper = "[" * (jsonc.MAX_DEPTH + 1) + "]" * (jsonc.MAX_DEPTH + 1)
    with pytest.raises(jsonc.JsoncError, match=f"over {jsonc.MAX_DEPTH} levels"):
        jsonc.loads(deeper)
    expected: list[object] = []
    for _ in range(jsonc.MAX_DEPTH):
        expected = [expected]
    assert jsonc.loads(deeper, "lenient") == expected
    deepest = '{"a": ' * jsonc.LENIENT_MAX_DEPTH + "1" + "}" * jsonc.LENIENT_MAX_DEPTH
    value = jsonc.loads(deepest, "lenient")
    for _ in range(jsonc.LENIENT_MAX_DEPTH):
        assert isinstance(value, dict)
        value = value["a"]
    assert value == 1
    too_deep = "[" * (jsonc.LENIENT_MAX_DEPTH + 1) + "]" * (jsonc.LENIENT_MAX_DEPTH + 1)
    with pytest.raises(jsonc.JsoncError, match=f"over {jsonc.LENIENT_MAX_DEPTH} levels") as caught:
        jsonc.loads(too_deep, "lenient")
    assert (caught.value.line, caught.value.column) == (1, jsonc.LENIENT_MAX_DEPTH + 1)
    with pytest.raises(jsonc.JsoncError, match="nested too deeply"):  # never a RecursionError
        jsonc.loads("[" * 100_000 + "]" * 100_000, "lenient")


def test_lenient_refuses_what_is_not_jsonc_as_strict_does() -> None:
    """Only a key given twice and the depth differ: the rest is the same reader."""
    text = '{"a": [1, /* c */ 2,], // d\n}'
    assert jsonc.loads(text, "lenient") == jsonc.loads(text) == {"a": [1, 2]}
    for bad in ('{"a": NaN}', '{"a" 1}', '{"a": "b\n"}', "", '{"a": 1} /*'):
        with pytest.raises(jsonc.JsoncError) as strict:
            jsonc.loads(bad)
        with pytest.raises(jsonc.JsoncError) as lenient:
            jsonc.loads(bad, "lenient")
        assert str(lenient.value) == str(strict.value)
