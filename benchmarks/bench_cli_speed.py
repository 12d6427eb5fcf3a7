"""Benchmark: how long the quick ``cloister`` commands make a person wait.

Drives the real CLI (the ``cloister`` console script of this environment) with
temporary config and data directories. Measured, as wall time from launching the
command until it exits, after one untimed warm-up run each:

* ``--version`` and ``--help``: Python start-up and the command table;
* ``list`` and ``list --json``: the same, and asking the Docker engine which
  cloisters exist (the local engine, as ``$DOCKER_HOST`` says; nothing is started);
* shell completion of the command names (``cloister st<TAB>``) and of a cloister's
  name (``cloister stop <TAB>``, which asks the engine too).

Target: median at most 0.3 s for ``--version``, ``--help`` and ``list``. For scale,
``python -c pass`` and ``python -c 'import click'`` (the floor of any click program) are
measured the same way. Nothing is created, so this may run next to a guardian or the
acceptance tests, though their load shows in the figures.

    uv run python benchmarks/bench_cli_speed.py
    uv run python benchmarks/bench_cli_speed.py --runs 30 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchsupport import BenchError, executable, summary

TARGET_SECONDS = 0.3
TARGETED = ("--version", "--help", "list")
COMMAND_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Case:
    label: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


def completion(words: str) -> tuple[tuple[str, str], ...]:
    """The environment bash's completion function gives ``cloister`` for *words*."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    return (
        ("_CLOISTER_COMPLETE", "bash_complete"),
        ("COMP_WORDS", words),
        ("COMP_CWORD", str(cword)),
    )


def cases(program: str) -> list[Case]:
    python = sys.executable
    return [
        Case("--version", (program, "--version")),
        Case("--help", (program, "--help")),
        Case("list", (program, "list")),
        Case("list --json", (program, "list", "--json")),
        Case("complete `cloister st`", (program,), completion("cloister st")),
        Case("complete `cloister stop `", (program,), completion("cloister stop ")),
        Case("python -c pass", (python, "-c", "pass")),
        Case("python -c 'import click'", (python, "-c", "import click")),
    ]


def run_once(case: Case, env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        case.argv,
        cwd=cwd,
        env={**env, **dict(case.env)},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise BenchError(
            f"{case.label} exited {result.returncode}:\n{result.stdout}{result.stderr}"
        )
    return elapsed


def bench(case: Case, env: dict[str, str], cwd: Path, runs: int) -> dict[str, Any]:
    run_once(case, env, cwd)  # warm-up: page cache, .pyc files
    times = [run_once(case, env, cwd) for _ in range(runs)]
    result: dict[str, Any] = {"runs": runs, "seconds": times, **summary(times)}
    if case.label in TARGETED:
        result["target_median"] = TARGET_SECONDS
        result["meets_target"] = result["median"] <= TARGET_SECONDS
    return result


def report(results: dict[str, Any]) -> None:
    verdict = {True: "meets", False: "MISSES"}
    print(f"cloister start-up ({results['runs']} runs each; target median <= {TARGET_SECONDS}s)")
    for label, values in results["commands"].items():
        line = (
            f"  {label:<28} median {values['median']:6.3f}s  p90 {values['p90']:6.3f}s"
            f"  max {values['max']:6.3f}s"
        )
        if "meets_target" in values:
            line += f"  {verdict[values['meets_target']]}"
        print(line)
    print(f"  cloisters listed: {results['cloisters']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()

    program = executable("cloister")
    with tempfile.TemporaryDirectory(prefix="cloister-bench-speed-") as scratch:
        root = Path(scratch)
        env = {
            **os.environ,
            "CLOISTER_CONFIG_DIR": str(root / "config"),
            "CLOISTER_DATA_DIR": str(root / "data"),
        }
        listed = subprocess.run(
            [program, "list", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        if listed.returncode != 0:
            raise BenchError(f"cloister list needs an engine:\n{listed.stderr}")
        results = {
            "runs": options.runs,
            "cloisters": len(json.loads(listed.stdout)),
            "commands": {
                case.label: bench(case, env, root, options.runs) for case in cases(program)
            },
        }
    if options.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)


if __name__ == "__main__":
    main()
