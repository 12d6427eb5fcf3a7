"""JSONC parsing: comments and trailing commas, and errors at file:line:column."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.devcontainer import DevcontainerError
from cloister_core.devcontainer.jsonc import line_column, locate, parse_jsonc

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
    ],
    ids=["missing-comma", "unclosed", "unclosed-string", "duplicate-key", "empty"],
)
def test_syntax_errors_name_file_line_and_column(text: str, where: str, message: str) -> None:
    with pytest.raises(DevcontainerError) as caught:
        parse_jsonc(text, PATH)
    assert str(caught.value).startswith(f"{PATH}{where} ")
    assert message in str(caught.value)
    assert caught.value.line == int(where.split(":")[1])


def test_locate_finds_the_real_key_not_one_in_a_comment() -> None:
    text = (
        '{\n  // "runArgs": ["--privileged"] was here\n  "build": {"args": {"A": "1"}},\n'
        '  "runArgs": [\n    "--init", /* c */ "--rm",\n    "--gpus"\n  ]\n}\n'
    )
    document = parse_jsonc(text, PATH)
    assert locate(text, document, ["runArgs"]) == (4, 3)
    assert locate(text, document, ["runArgs", 1]) == (5, 23)
    assert locate(text, document, ["runArgs", 2]) == (6, 5)
    assert locate(text, document, ["build", "args", "A"]) == (3, 22)
    assert locate(text, document, ["nothing"]) is None


def test_line_column_is_one_based() -> None:
    assert line_column("ab\ncd", 0) == (1, 1)
    assert line_column("ab\ncd", 4) == (2, 2)
