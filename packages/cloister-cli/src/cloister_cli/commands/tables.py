"""A rich console whose tables never cut a value short.

rich fits a table to the terminal by cutting cells with an ellipsis: a snapshot id
shown as ``20261126T121…`` cannot be copied. Here every table keeps each value's
longest word whole, and a path (it starts with ``/`` or ``~``) whole even with spaces
in it; other cells wrap at spaces, and the line is longer than the terminal when even
that does not fit. Piped output is not folded at all: a script or ``grep`` sees each
row on one line, whatever ``$COLUMNS`` says.

Imported by :func:`cloister_cli.commands.output.console` when something is drawn.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# The width of a console whose output is not a terminal: no line is ever folded.
UNFOLDED = 1_000_000


def _plain(console: Console, cell: object) -> str:
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return console.render_str(cell).plain
    return ""  # another renderable measures itself


def _unbroken(text: str) -> int:
    """The width *text* needs on one line of a cell: its longest word, or all of a path."""
    lines = text.splitlines() or [""]
    if any(line.startswith(("/", "~")) for line in lines):
        return max(len(line) for line in lines)
    return max((len(word) for word in text.split()), default=0)


def keep_whole(console: Console, table: Table) -> int:
    """Make no column of *table* narrower than its longest word (or path), and fold
    rather than cut what is longer; the width the table needs for that."""
    needed = table._extra_width  # the borders, as rich counts them (private, but its own)
    for index, column in enumerate(table.columns):
        texts = [_plain(console, cell) for cell in (column.header, *column.cells)]
        widest = max(map(_unbroken, texts))
        column.min_width = max(column.min_width or 0, widest)
        column.overflow = "fold"
        # rich narrows wrappable columns first, blind to min_width: not this one.
        longest = max(len(line) for text in texts for line in text.splitlines() or [""])
        column.no_wrap = column.no_wrap or longest <= column.min_width
        needed += column.min_width + table._get_padding_width(index)
    return needed


class WholeConsole(Console):
    """A console that widens itself for a table rather than cut one of its values."""

    def print(self, *objects: Any, **options: Any) -> None:
        tables = [each for each in objects if isinstance(each, Table)]
        if not tables:  # text, or a live display's refresh: as rich prints it
            super().print(*objects, **options)
            return
        needed = max(keep_whole(self, table) for table in tables)
        # A line longer than the terminal wraps in it, whole; rich would crop it.
        options.setdefault("crop", False)
        if needed <= self.width:
            super().print(*objects, **options)
            return
        width = self.width
        self.width = needed
        try:
            super().print(*objects, **options)
        finally:
            self.width = width
