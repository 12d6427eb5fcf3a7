"""What every command receives: the resolved paths (built once, in the group)."""

from __future__ import annotations

from dataclasses import dataclass

from cloister_core import CloisterPaths


@dataclass(frozen=True, slots=True)
class CliContext:
    paths: CloisterPaths
