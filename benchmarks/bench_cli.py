"""Benchmark: how long the ``cloister`` command makes a person wait.

Drives the real CLI (the ``cloister`` console script of this environment) with
temporary config and data directories and the small ``cloister-slim`` image, against
the local Docker engine. Measured, as wall time from launching the command:

* ``guardian start``: the service images present, the stack and the executor down
  (``cloister guardian stop`` between runs, not timed). Target: at most 15 s.
* ``start -d``: the guardian up, the image present, until a command can be executed
  in the cloister: ``cloister start -d`` returns, then ``docker exec
  cloister-<instance>-<name> true`` is retried until it succeeds. ``cloister stop``
  between runs (timed on its own). Target: median at most 1.5 s. Reported with its
  parts: the CLI until it returned, and the first successful exec.
* ``--version``: the CLI's Python start-up (imports included), i.e. the part of every
  command that is not its work.

The guardian is the temporary data directory's own (an instance: ``cloister-<id>-...``),
but its UI is on 127.0.0.1:9999: stop a guardian of yours that publishes it first. Images
missing at the start are built by the warm-up (not timed). Everything the benchmark
started is stopped at the end; the images stay.

    uv run python benchmarks/bench_cli.py
    uv run python benchmarks/bench_cli.py --guardian-runs 5 --start-runs 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchsupport import BenchError, executable, free_port, remove_networks, summary
from cloister_core.paths import CloisterPaths
from cloister_core.stack import Instance

GUARDIAN_TARGET_SECONDS = 15.0
START_TARGET_SECONDS = 1.5
EXEC_DEADLINE_SECONDS = 30.0
BUILD_TIMEOUT_SECONDS = 1800.0
COMMAND_TIMEOUT_SECONDS = 300.0


@dataclass
class Cli:
    """``cloister`` with its own config and data directories."""

    root: Path
    program: str
    docker: str

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CLOISTER_CONFIG_DIR": str(self.root / "config"),
            "CLOISTER_DATA_DIR": str(self.root / "data"),
        }

    @property
    def instance(self) -> Instance:
        paths = CloisterPaths(self.root / "config", self.root / "data")
        return Instance.of(paths, os.getuid())

    def container(self, name: str) -> str:
        return self.instance.cloister(name)

    def run(
        self,
        *args: str,
        cwd: Path | None = None,
        check: bool = True,
        timeout: float = COMMAND_TIMEOUT_SECONDS,
    ) -> float:
        """Run ``cloister ARGS``; its wall time in seconds."""
        started = time.perf_counter()
        result = subprocess.run(
            [self.program, *args],
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        elapsed = time.perf_counter() - started
        if check and result.returncode != 0:
            raise BenchError(
                f"cloister {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}{result.stderr}"
            )
        return elapsed

    def exec_true(self, container: str) -> bool:
        result = subprocess.run(
            [self.docker, "exec", container, "true"],
            capture_output=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        return result.returncode == 0


def make_repo(path: Path) -> None:
    git = executable("git")
    path.mkdir(parents=True)
    for args in (
        ["init", "--quiet"],
        ["config", "user.name", "Cloister Bench"],
        ["config", "user.email", "bench@cloister.invalid"],
        ["commit", "--quiet", "--allow-empty", "-m", "initial commit"],
    ):
        subprocess.run([git, "-C", str(path), *args], check=True, capture_output=True)


def bench_guardian_start(cli: Cli, runs: int) -> dict[str, Any]:
    starts: list[float] = []
    stops: list[float] = []
    for _ in range(runs):
        stops.append(cli.run("guardian", "stop"))
        starts.append(cli.run("guardian", "start"))
    return {
        "runs": runs,
        "seconds": starts,
        "start": summary(starts),
        "stop": summary(stops),
        "target_max": GUARDIAN_TARGET_SECONDS,
        "meets_target": max(starts) <= GUARDIAN_TARGET_SECONDS,
    }


def bench_cloister_start(cli: Cli, repo: Path, name: str, runs: int) -> dict[str, Any]:
    container = cli.container(name)
    totals: list[float] = []
    commands: list[float] = []
    execs: list[float] = []
    attempts: list[int] = []
    stops: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        cli.run("start", "-d", cwd=repo)
        returned = time.perf_counter()
        tries = 1
        while not cli.exec_true(container):
            if time.perf_counter() - started > EXEC_DEADLINE_SECONDS:
                raise BenchError(f"docker exec {container} true never succeeded")
            tries += 1
            time.sleep(0.01)
        done = time.perf_counter()
        totals.append(done - started)
        commands.append(returned - started)
        execs.append(done - returned)
        attempts.append(tries)
        stops.append(cli.run("stop", name))
    return {
        "runs": runs,
        "seconds": totals,
        "until_exec": summary(totals),
        "cli_returned": summary(commands),
        "first_exec": summary(execs),
        "exec_attempts_max": max(attempts),
        "stop": summary(stops),
        "target_median": START_TARGET_SECONDS,
        "meets_target": statistics.median(totals) <= START_TARGET_SECONDS,
    }


def bench_version(cli: Cli, runs: int) -> dict[str, Any]:
    times = [cli.run("--version") for _ in range(runs)]
    bare = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - started)
    return {"runs": runs, "version": summary(times), "bare_python": summary(bare)}


def cleanup(cli: Cli, name: str) -> list[str]:
    problems = []
    for args in (("stop", name), ("guardian", "stop")):
        try:
            cli.run(*args, check=False)
        except (OSError, subprocess.SubprocessError) as error:
            problems.append(f"cloister {' '.join(args)}: {error}")
    subprocess.run([cli.docker, "rm", "-f", cli.container(name)], capture_output=True, check=False)
    remove_networks(cli.docker, cli.instance.label_filter)
    return problems


def report(results: dict[str, Any]) -> None:
    guardian = results["guardian_start"]
    start = results["cloister_start"]
    version = results["cli_startup"]

    def line(label: str, values: dict[str, float]) -> str:
        return (
            f"  {label:<34} median {values['median']:6.3f}s  p90 {values['p90']:6.3f}s"
            f"  max {values['max']:6.3f}s"
        )

    verdict = {True: "meets", False: "MISSES"}
    print(f"cloister guardian start ({guardian['runs']} runs, images present, stack down)")
    print(line("guardian start", guardian["start"]))
    print(line("guardian stop (between runs)", guardian["stop"]))
    print(f"  target max <= {GUARDIAN_TARGET_SECONDS:g}s: {verdict[guardian['meets_target']]}")
    print(f"cloister start -d until `docker exec true` works ({start['runs']} runs)")
    print(line("start -d + first exec", start["until_exec"]))
    print(line("  of which `cloister start -d`", start["cli_returned"]))
    print(line("  of which the first exec", start["first_exec"]))
    print(line("cloister stop (between runs)", start["stop"]))
    print(f"  target median <= {START_TARGET_SECONDS:g}s: {verdict[start['meets_target']]}")
    print(f"CLI start-up ({version['runs']} runs)")
    print(line("cloister --version", version["version"]))
    print(line("python -c pass", version["bare_python"]))
    share = version["version"]["median"] / start["until_exec"]["median"]
    print(f"  Python start-up is {share:.0%} of the median start -d")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guardian-runs", type=int, default=5)
    parser.add_argument("--start-runs", type=int, default=10)
    parser.add_argument("--version-runs", type=int, default=10)
    parser.add_argument("--image", default="cloister-slim:latest")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cloister-bench-") as scratch:
        root = Path(scratch)
        (root / "config").mkdir()
        (root / "config" / "config.yaml").write_text(
            f"defaults:\n  image: {options.image}\nguardian:\n  ui_port: {free_port()}\n",
            encoding="utf-8",
        )
        name = f"bench-{secrets.token_hex(3)}"
        repo = root / name
        make_repo(repo)
        cli = Cli(root, executable("cloister"), executable("docker"))
        problems: list[str] = []
        try:
            # Warm-up, not timed: builds what is missing, first-run files, page cache.
            cli.run("guardian", "start", timeout=BUILD_TIMEOUT_SECONDS)
            cli.run("start", "-d", cwd=repo, timeout=BUILD_TIMEOUT_SECONDS)
            cli.run("stop", name)
            results = {
                "guardian_start": bench_guardian_start(cli, options.guardian_runs),
                "cloister_start": bench_cloister_start(cli, repo, name, options.start_runs),
                "cli_startup": bench_version(cli, options.version_runs),
                "image": options.image,
            }
        finally:
            problems = cleanup(cli, name)
        start_median = results["cloister_start"]["until_exec"]["median"]
        results["cli_startup"]["share_of_start_median"] = (
            results["cli_startup"]["version"]["median"] / start_median
        )
        if problems:
            results["cleanup_problems"] = problems
    if options.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)
        for problem in problems:
            print(f"cleanup: {problem}", file=sys.stderr)


if __name__ == "__main__":
    main()
