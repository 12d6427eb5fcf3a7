"""Text from a cloister made safe to show a human, in a terminal or a web page.

A file name, a host or a command the agent chose may carry control characters (an
escape sequence that hides the rest of a line, or rewrites the terminal's title) or
invisible format characters (a bidirectional override that shows ``txt.exe`` as
``exe.txt``). Shown through :func:`printable` they become visible escapes instead.
"""

from __future__ import annotations


def _escape(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """*text* safe to print: what Unicode does not call printable becomes an escape.

    That is :meth:`str.isprintable`'s set, kept current by the interpreter's Unicode
    database: controls, format characters (bidirectional marks and overrides, the
    Arabic letter mark, zero-width ones, tag characters), separators other than the
    space (a line separator would start a new line), surrogates (undecodable file
    names), private-use and unassigned code points.
    """
    if text.isprintable():
        return text
    return "".join(each if each.isprintable() else _escape(each) for each in text)
