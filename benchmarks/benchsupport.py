"""What the command-line benchmarks share: finding executables and summing up timings."""

from __future__ import annotations

import shutil
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path


class BenchError(RuntimeError):
    """A command the benchmark relies on failed."""


def executable(name: str) -> str:
    """*name* from the running environment's bin directory, else from PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise BenchError(f"no {name!r} on PATH (run through `uv run`)")
    return found


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, 90th percentile, min and max of *values*."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, max(0, round(0.9 * len(ordered)) - 1))]
    return {
        "median": statistics.median(ordered),
        "p90": p90,
        "min": ordered[0],
        "max": ordered[-1],
    }
