"""What the command-line benchmarks share: finding executables and summing up timings."""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now: the guardian's UI port, so that a
    benchmark's guardian stands beside the user's own (default 9999) and others."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def remove_networks(docker: str, label_filter: str) -> None:
    """The networks a benchmark's guardian instance left (`guardian stop` keeps its own
    three, so that a later start finds them): Docker's address pools are finite."""
    left = subprocess.run(
        [docker, "network", "ls", "-q", "--filter", f"label={label_filter}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if left:
        subprocess.run([docker, "network", "rm", *left], capture_output=True, check=False)
