"""JSON with comments and trailing commas, as VS Code reads its ``tasks.json``.

Two small string-aware passes (comments out, then commas before ``}``/``]`` out) and
then :func:`json.loads`: enough to see what VS Code would see, no parser dependency.
"""

from __future__ import annotations

import json
from typing import Any


def _strip_comments(text: str) -> str:
    out: list[str] = []
    index, length = 0, len(text)
    in_string = False
    while index < length:
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\" and index + 1 < length:
                out.append(text[index + 1])
                index += 2
                continue
            if char == '"':
                in_string = False
            index += 1
            continue
        pair = text[index : index + 2]
        if pair == "//":
            end = text.find("\n", index)
            index = length if end < 0 else end
            continue
        if pair == "/*":
            end = text.find("*/", index + 2)
            index = length if end < 0 else end + 2
            out.append(" ")
            continue
        if char == '"':
            in_string = True
        out.append(char)
        index += 1
    return "".join(out)


def _strip_trailing_commas(text: str) -> str:
    out: list[str] = []
    in_string = False
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\" and index + 1 < length:
                out.append(text[index + 1])
                index += 2
                continue
            in_string = char != '"'
            index += 1
            continue
        if char == ",":
            after = index + 1
            while after < length and text[after] in " \t\r\n":
                after += 1
            if after < length and text[after] in "}]":
                index += 1
                continue
        in_string = char == '"'
        out.append(char)
        index += 1
    return "".join(out)


def loads(text: str) -> Any:
    """*text* parsed as JSONC; :class:`ValueError` when it still is not JSON.

    Nesting too deep for the parser is a :class:`ValueError` too: the text is hostile.
    """
    try:
        return json.loads(_strip_trailing_commas(_strip_comments(text)))
    except RecursionError:
        raise ValueError("nested too deeply") from None
