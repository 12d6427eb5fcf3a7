"""Benchmark: a network per cloister, at scale.

Starts N cloisters (default 100) one after another on one guardian, with temporary
config and data directories and the small ``cloister-slim`` image, and reports how
long the 1st and the N-th ``cloister start -d`` took (each makes the cloister's own
network: the first free subnet of ``guardian.network_pool``, found among every network
on the engine, so the N-th start searches past N-1 taken ones) and how many networks
the engine has before, with the N cloisters running, and after the clean-up (every
cloister stopped, the guardian stopped, its networks removed).

    uv run python benchmarks/bench_networks.py
    uv run python benchmarks/bench_networks.py --count 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_cli import BUILD_TIMEOUT_SECONDS, Cli, make_repo
from benchsupport import BenchError, executable, free_port, remove_networks, summary
from cloister_core.paths import CloisterPaths
from cloister_core.stack import Instance


def network_count(docker: str, *label: str) -> int:
    filters = [arg for each in label for arg in ("--filter", f"label={each}")]
    listed = subprocess.run(
        [docker, "network", "ls", "-q", *filters],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return len(listed.stdout.split())


def run(count: int, image: str) -> dict[str, Any]:
    docker = executable("docker")
    with tempfile.TemporaryDirectory(prefix="cloister-bench-networks-") as scratch:
        root = Path(scratch)
        (root / "config").mkdir()
        (root / "config" / "config.yaml").write_text(
            f"defaults:\n  image: {image}\nguardian:\n  ui_port: {free_port()}\n",
            encoding="utf-8",
        )
        cli = Cli(root, executable("cloister"), docker)
        instance = Instance.of(CloisterPaths(root / "config", root / "data"), os.getuid())
        names = [f"net-{secrets.token_hex(3)}-{number}" for number in range(count)]
        before = network_count(docker)
        seconds: list[float] = []
        started: list[str] = []
        try:
            cli.run("guardian", "start", timeout=BUILD_TIMEOUT_SECONDS)
            for name in names:
                repo = root / name
                make_repo(repo)
                started.append(name)
                seconds.append(cli.run("start", "-d", cwd=repo, timeout=BUILD_TIMEOUT_SECONDS))
            running = network_count(docker)
            mine = network_count(docker, instance.label_filter)
        finally:
            stops = [cli.run("stop", name, check=False) for name in started]
            cli.run("guardian", "stop", check=False)
            remove_networks(docker, instance.label_filter)
        after = network_count(docker)
    return {
        "count": count,
        "first_start_seconds": seconds[0],
        "last_start_seconds": seconds[-1],
        "start": summary(seconds),
        "stop": summary(stops),
        "networks_before": before,
        "networks_running": running,
        "networks_of_the_instance": mine,
        "networks_after": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--image", default="cloister-slim:latest")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()
    if options.count < 1:
        raise BenchError("--count must be at least 1")
    began = time.perf_counter()
    results = run(options.count, options.image)
    results["total_seconds"] = time.perf_counter() - began
    if options.json:
        print(json.dumps(results, indent=2))
        return
    count = results["count"]
    print(f"{count} cloister starts on one guardian, one after another")
    print(f"  start 1:        {results['first_start_seconds']:.3f}s")
    print(f"  start {count}:{'':<{8 - len(str(count))}}{results['last_start_seconds']:.3f}s")
    print(
        f"  all starts:     median {results['start']['median']:.3f}s"
        f"  max {results['start']['max']:.3f}s"
    )
    print(f"  stop:           median {results['stop']['median']:.3f}s")
    print(
        f"  networks on the engine: {results['networks_before']} before,"
        f" {results['networks_running']} with the {count} running"
        f" ({results['networks_of_the_instance']} of this guardian),"
        f" {results['networks_after']} after the clean-up"
    )
    print(f"  total {results['total_seconds']:.1f}s")


if __name__ == "__main__":
    main()
