"""Text from a cloister made safe to show a human, in a terminal or a web page.

A file name, a host or a command the agent chose may carry control characters (an
escape sequence that hides the rest of a line, or rewrites the terminal's title) or
invisible format characters (a bidirectional override that shows ``txt.exe`` as
``exe.txt``). Shown through :func:`printable` they become visible escapes instead.
"""

from __future__ import annotations

import re


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# C0/C1 controls, DEL, the invisible format characters (bidirectional overrides and
# isolates, zero-width ones, the BOM) and lone surrogates (undecodable file names).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)


def printable(text: str) -> str:
    """*text* safe to print: control and invisible characters become escapes."""
    return _UNSAFE.sub(_escape, text)
