"""Benchmark: how long ``cloister doctor`` takes on a sealed cloister.

Drives the real CLI (the ``cloister`` console script of this environment) with temporary
config and data directories, the ``cloister-slim`` image and a guardian of their own (its
UI on a free port), against the local Docker engine. Measured, as wall time from
launching the command until it exits: ``cloister doctor NAME --json`` on one running
cloister, and the part the command reports as its checks (``seconds``: the probe's sidecar
and the engine's checks, without Python's start-up). Every run must pass every check.
Target: at most 10 s. Also: what the once-per-engine check adds to the first start
(the first ``start -d`` of a data directory against the second, after a stop).

Everything the benchmark started is stopped at the end; the images stay.

    uv run python benchmarks/bench_doctor.py
    uv run python benchmarks/bench_doctor.py --runs 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchsupport import BenchError, executable, free_port, remove_networks, summary
from cloister_core.paths import CloisterPaths
from cloister_core.stack import Instance

TARGET_SECONDS = 10.0
COMMAND_TIMEOUT_SECONDS = 900.0  # the first guardian start may build its images


def run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """*argv* to its end: its wall time and output; fails unless it exits 0."""
    started = time.perf_counter()
    result = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise BenchError(
            f"{' '.join(argv[:3])} exited {result.returncode}:\n{result.stdout}{result.stderr}"
        )
    return elapsed, result.stdout


def bench(root: Path, runs: int) -> dict[str, Any]:
    program, git = executable("cloister"), executable("git")
    config, data = root / "config", root / "data"
    config.mkdir()
    (config / "config.yaml").write_text(
        f"defaults:\n  image: cloister-slim:latest\nguardian:\n  ui_port: {free_port()}\n",
        encoding="utf-8",
    )
    env = {**os.environ, "CLOISTER_CONFIG_DIR": str(config), "CLOISTER_DATA_DIR": str(data)}
    name = f"bench-doctor-{secrets.token_hex(3)}"
    repo = root / name
    repo.mkdir()
    for args in (
        ["init", "--quiet"],
        ["-c", "user.name=Bench", "-c", "user.email=b@cloister.invalid", "commit", "--quiet",
         "--allow-empty", "-m", "initial commit"],
    ):  # fmt: skip
        subprocess.run([git, "-C", str(repo), *args], check=True, capture_output=True)
    instance = Instance.of(CloisterPaths(config, data), os.getuid())
    try:
        run([program, "guardian", "start"], env, root)
        first_start, _ = run([program, "start", "-d"], env, repo)
        run([program, "stop", name], env, root)
        second_start, _ = run([program, "start", "-d"], env, repo)
        walls, checks = [], []
        for _ in range(runs):
            wall, output = run([program, "doctor", name, "--json"], env, root)
            document = json.loads(output)
            if not document["passed"]:
                raise BenchError(f"doctor failed on a sealed cloister:\n{output}")
            walls.append(wall)
            checks.append(float(document["seconds"]))
        return {
            "runs": runs,
            "checks": len(document["checks"]),
            "doctor_wall": summary(walls),
            "doctor_checks": summary(checks),
            "first_start": first_start,
            "second_start": second_start,
            "target_max": TARGET_SECONDS,
            "meets_target": max(walls) <= TARGET_SECONDS,
        }
    finally:
        for args in (["stop", name], ["guardian", "stop"]):
            subprocess.run([program, *args], env=env, capture_output=True, check=False)
        remove_networks(executable("docker"), instance.label_filter)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as scratch:
        try:
            results = bench(Path(scratch), options.runs)
        except BenchError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    if options.json:
        print(json.dumps(results, indent=2))
        return 0
    wall, checks = results["doctor_wall"], results["doctor_checks"]
    print(f"cloister doctor ({results['checks']} checks, {results['runs']} runs):")
    print(f"  wall time  median {wall['median']:.2f}s  max {wall['max']:.2f}s")
    print(f"  its checks median {checks['median']:.2f}s  max {checks['max']:.2f}s")
    verdict = "meets" if results["meets_target"] else "MISSES"
    print(f"  {verdict} the target of at most {TARGET_SECONDS:g}s")
    print(
        f"first start -d (with the once-per-engine check) {results['first_start']:.2f}s,"
        f" a later one {results['second_start']:.2f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
