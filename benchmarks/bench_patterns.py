"""Benchmark: hostexec patterns (RE2) against pathological patterns and long commands.

A pattern is the human's; the command text is the agent's. With a backtracking
engine a pattern such as ``(a+)+$`` takes time exponential in the text's length, so
an agent could stall the gateway with a few dozen characters. Patterns are RE2
(:mod:`cloister_core.patterns`): linear in the text whatever the pattern.

Two figures per pattern:

1. **RE2** (the target, < 10 ms): ``CommandPolicy.decide`` of an argv whose canonical
   command is --size bytes (default 64 KiB) that the pattern does *not* match, the
   backtracker's worst case (canonicalisation and the match; median over --batches
   batches of --batch calls), and ``Pattern.fullmatch`` alone on the same text.
2. **Python re** on the same pattern and the same kind of text, but only --re-lengths
   characters long (default 16 to 30), in a child process killed after --re-timeout
   seconds: the time doubles with each character or two.

    uv run python benchmarks/bench_patterns.py
    uv run python benchmarks/bench_patterns.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from cloister_core.commands import CommandPolicy, canonical_command
from cloister_core.config.models import CommandPattern, CommandRules
from cloister_core.patterns import Pattern

TARGET_MS = 10.0
# Pattern (as written in config.yaml) -> the argument that makes it backtrack: a run of
# what it repeats, then one character it cannot take.
CASES: dict[str, tuple[str, str]] = {
    "^echo '(a+)+'$": ("a", "!"),
    "^echo '(a|aa)+'$": ("a", "!"),
    "^echo '([a-z]+\\s?)*'$": ("a", "!"),
    "^echo '(x+x+)+y'$": ("x", "!"),
    "^echo '(.*a){20}'$": ("a", "!"),
}
# Python's re in a child process, so that a runaway match can be killed.
RE_CHILD = """
import re, sys, time
pattern, unit, last, length = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
text = "echo '" + unit * length + last + "'"
start = time.perf_counter()
assert re.fullmatch(pattern, text) is None
print(time.perf_counter() - start)
"""


def argv_for(unit: str, last: str, size: int) -> list[str]:
    """An ``echo`` argv whose canonical command is *size* bytes: ``echo '<run><last>'``."""
    run = size - len("echo ''") - len(last)
    return ["echo", unit * run + last]


def median_ns(call: Callable[[], object], batch: int, batches: int) -> float:
    timer = time.perf_counter_ns
    means = []
    for _ in range(batches):
        start = timer()
        for _ in range(batch):
            call()
        means.append((timer() - start) / batch)
    return statistics.median(means)


def python_re_seconds(pattern: str, unit: str, last: str, length: int, timeout: float) -> float:
    """Seconds Python's re takes, or ``inf`` when the child was killed at *timeout*."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", RE_CHILD, pattern, unit, last, str(length)],
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return float("inf")
    return float(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64 * 1024, help="command text bytes")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--re-lengths", type=int, nargs="+", default=[16, 20, 24, 30])
    parser.add_argument("--re-timeout", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()

    results: list[dict[str, Any]] = []
    for pattern, (unit, last) in CASES.items():
        argv = argv_for(unit, last, options.size)
        command = canonical_command(argv)
        if len(command.encode()) != options.size:
            raise SystemExit(f"the command is {len(command.encode())} bytes, not {options.size}")
        rules = CommandRules(auto_approve=(CommandPattern(pattern=pattern),))
        policy = CommandPolicy.from_rules([(Path("config.yaml"), rules)])
        if policy.decide(argv).action != "deny":  # the no-match path is the slow one
            raise SystemExit(f"{pattern!r} matched its pathological command")
        decide = median_ns(partial(policy.decide, argv), options.batch, options.batches)
        compiled = Pattern(pattern)
        match = median_ns(partial(compiled.fullmatch, command), options.batch, options.batches)
        python_re = {
            length: python_re_seconds(pattern, unit, last, length, options.re_timeout)
            for length in options.re_lengths
        }
        results.append(
            {
                "pattern": pattern,
                "re2_decide_ms": decide / 1e6,
                "re2_fullmatch_ms": match / 1e6,
                "python_re_seconds": {str(length): s for length, s in python_re.items()},
            }
        )

    worst = max(row["re2_decide_ms"] for row in results)
    summary = {
        "command_bytes": options.size,
        "target_ms": TARGET_MS,
        "worst_re2_decide_ms": worst,
        "cases": results,
    }
    if options.json:
        print(json.dumps(_nulls(summary), indent=2))
        return
    lengths = options.re_lengths
    print(f"command text: {options.size} bytes; Python re on {lengths} characters")
    header = "".join(f"{f're {n} ch':>12}" for n in lengths)
    print(f"{'pattern':<26} {'RE2 decide':>11} {'RE2 match':>10}{header}")
    for row in results:
        timings = "".join(
            f"{_seconds(row['python_re_seconds'][str(n)], options.re_timeout):>12}" for n in lengths
        )
        print(
            f"{row['pattern']:<26} {row['re2_decide_ms']:>9.3f}ms"
            f" {row['re2_fullmatch_ms']:>8.3f}ms{timings}"
        )
    verdict = "ok" if worst < TARGET_MS else "OVER TARGET"
    print(f"worst RE2 decision on {options.size} bytes: {worst:.3f} ms (target < 10 ms): {verdict}")


def _seconds(value: float, timeout: float) -> str:
    if value == float("inf"):
        return f">{timeout:g} s"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _nulls(summary: dict[str, Any]) -> dict[str, Any]:
    """JSON has no infinity: a killed child's time is null."""
    for row in summary["cases"]:
        row["python_re_seconds"] = {
            length: (None if s == float("inf") else s)
            for length, s in row["python_re_seconds"].items()
        }
    return summary


if __name__ == "__main__":
    main()
