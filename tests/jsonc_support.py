"""Counting the JSONC reader's work: linear, counted rather than timed."""

from __future__ import annotations

import pytest

from cloister_core import jsonc


class IndexCount:
    """How many members :class:`cloister_core.jsonc.Positions` indexed (*calls*, which a
    test may set back to 0) since it was made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        index_next = jsonc.Positions._next

        def counted(positions: jsonc.Positions, members: jsonc._Members) -> None:
            self.calls += 1
            index_next(positions, members)

        monkeypatch.setattr(jsonc.Positions, "_next", counted)
