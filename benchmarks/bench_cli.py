"""Benchmark: how long the ``cloister`` command makes a person wait.

Drives the real CLI (the ``cloister`` console script of this environment) with
temporary config and data directories and the small ``cloister-slim`` image, against
the local Docker engine. Measured, as wall time from launching the command:

* ``guardian start``: the service images present, the stack and the executor down
  (``cloister guardian stop`` between runs, not timed). Target: at most 15 s.
* ``start -d``: the guardian up, the image present, until a command can be executed
  in the cloister: ``cloister start -d`` returns, then ``docker exec
  cloister-<instance>-<name> true`` is retried until it succeeds; ``cloister stop``
  after each (timed on its own). Interleaved with it, run for run, a bare ``docker run
  -d --init`` of the same image on an internal network made once beforehand (its own
  network, as a cloister's), with a command that keeps it up, measured the same way
  (until ``docker exec true`` works; ``docker rm -f`` after each, not timed). Targets:
  the start's median at most the bare run's median + 0.3 s, the stop's median at most
  0.5 s. Reported with the start's parts: the CLI until it returned, and the first
  successful exec. The bare run's network is made once, as a cloister's is kept from
  one of its sessions to the next.
* a *first* ``start -d`` (no target): a repository new to Cloister each run, so its
  network, git directory and registration are made then; ``stop`` after each.
* ``--version``: the CLI's Python start-up (imports included), i.e. the part of every
  command that is not its work.

Commands run as a person's do: handed to the command server (``cloister_cli.launch``),
which the warm-up starts and waits for; ``--no-server`` runs each in its own process
(``CLOISTER_NO_SERVER=1``), as before there was one, for the comparison.

The guardian is the temporary data directory's own (an instance: ``cloister-<id>-...``),
but its UI is on 127.0.0.1:9999: stop a guardian of yours that publishes it first. Images
missing at the start are built by the warm-up (not timed). Everything the benchmark
started is stopped at the end; the images stay.

    uv run python benchmarks/bench_cli.py
    uv run python benchmarks/bench_cli.py --guardian-runs 5 --start-runs 7 --json
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
START_OVER_BARE_TARGET_SECONDS = 0.3  # start -d's median over a bare docker run's
STOP_TARGET_SECONDS = 0.5
EXEC_DEADLINE_SECONDS = 30.0
BUILD_TIMEOUT_SECONDS = 1800.0
COMMAND_TIMEOUT_SECONDS = 300.0


@dataclass
class Cli:
    """``cloister`` with its own config and data directories."""

    root: Path
    program: str
    docker: str
    served: bool = True  # handed to the command server, or each in its own process

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "CLOISTER_CONFIG_DIR": str(self.root / "config"),
            "CLOISTER_DATA_DIR": str(self.root / "data"),
        }
        if not self.served:
            env["CLOISTER_NO_SERVER"] = "1"
        return env

    def wait_for_server(self) -> None:
        """Until the command server the first commands started listens (its socket is
        where the console script, run with this environment, looks for it)."""
        where = (
            "import os; from cloister_cli.launch import wire; print(wire.socket_path(os.environ))"
        )
        found = subprocess.run(
            [sys.executable, "-c", where],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        ).stdout.strip()
        deadline = time.monotonic() + COMMAND_TIMEOUT_SECONDS
        while not Path(found).exists():
            if time.monotonic() > deadline:
                raise BenchError(f"no command server listens at {found}")
            time.sleep(0.1)

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


@dataclass
class Bare:
    """A bare ``docker run -d`` of the cloister's image, on an internal network of its
    own made once (:meth:`make_network`), for comparison with ``cloister start -d``."""

    docker: str
    image: str
    name: str

    @property
    def network(self) -> str:
        return f"{self.name}-net"

    def make_network(self) -> None:
        subprocess.run(
            [self.docker, "network", "create", "--internal", self.network],
            capture_output=True,
            check=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )

    def run(self) -> None:
        result = subprocess.run(
            [
                self.docker, "run", "-d", "--init", "--name", self.name,
                "--network", self.network, self.image, "sleep", "infinity",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )  # fmt: skip
        if result.returncode != 0:
            raise BenchError(f"docker run {self.image}: {result.stderr.strip()!r}")

    def remove(self) -> None:
        subprocess.run(
            [self.docker, "rm", "-f", self.name],
            capture_output=True,
            check=False,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )

    def remove_network(self) -> None:
        self.remove()
        subprocess.run(
            [self.docker, "network", "rm", self.network],
            capture_output=True,
            check=False,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )


def until_exec(cli: Cli, container: str, started: float) -> tuple[float, int]:
    """Retry ``docker exec CONTAINER true`` until it succeeds: when it did, and the tries."""
    tries = 1
    while not cli.exec_true(container):
        if time.perf_counter() - started > EXEC_DEADLINE_SECONDS:
            raise BenchError(f"docker exec {container} true never succeeded")
        tries += 1
        time.sleep(0.01)
    return time.perf_counter(), tries


def bench_cloister_start(
    cli: Cli, repo: Path, name: str, runs: int, bare: Bare | None = None
) -> dict[str, Any]:
    """*runs* starts until an exec works, each followed by a timed stop; with *bare*, a
    bare ``docker run -d`` before each, measured the same way."""
    container = cli.container(name)
    totals: list[float] = []
    commands: list[float] = []
    execs: list[float] = []
    attempts: list[int] = []
    stops: list[float] = []
    bares: list[float] = []
    for _ in range(runs):
        if bare is not None:
            started = time.perf_counter()
            bare.run()
            done, _ = until_exec(cli, bare.name, started)
            bares.append(done - started)
            bare.remove()
        started = time.perf_counter()
        cli.run("start", "-d", cwd=repo)
        returned = time.perf_counter()
        done, tries = until_exec(cli, container, started)
        totals.append(done - started)
        commands.append(returned - started)
        execs.append(done - returned)
        attempts.append(tries)
        stops.append(cli.run("stop", name))
    results: dict[str, Any] = {
        "runs": runs,
        "seconds": totals,
        "until_exec": summary(totals),
        "cli_returned": summary(commands),
        "first_exec": summary(execs),
        "exec_attempts_max": max(attempts),
        "stop_seconds": stops,
        "stop": summary(stops),
        "stop_target_median": STOP_TARGET_SECONDS,
        "stop_meets_target": statistics.median(stops) <= STOP_TARGET_SECONDS,
    }
    if bare is not None:
        over = statistics.median(totals) - statistics.median(bares)
        results |= {
            "bare_seconds": bares,
            "bare_until_exec": summary(bares),
            "over_bare_median": over,
            "over_bare_target": START_OVER_BARE_TARGET_SECONDS,
            "meets_target": over <= START_OVER_BARE_TARGET_SECONDS,
        }
    return results


def bench_first_start(cli: Cli, runs: int) -> dict[str, Any]:
    """*runs* starts of cloisters new to Cloister (their network made), until an exec
    works; each stopped after (not timed)."""
    totals: list[float] = []
    names: list[str] = []
    for _ in range(runs):
        name = f"first-{secrets.token_hex(3)}"
        repo = cli.root / name
        make_repo(repo)
        names.append(name)
        started = time.perf_counter()
        cli.run("start", "-d", cwd=repo)
        done, _ = until_exec(cli, cli.container(name), started)
        totals.append(done - started)
        cli.run("stop", name)
    return {"runs": runs, "seconds": totals, "until_exec": summary(totals), "names": names}


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
    guardian = results.get("guardian_start")
    start = results["cloister_start"]
    version = results["cli_startup"]

    def line(label: str, values: dict[str, float]) -> str:
        return (
            f"  {label:<34} median {values['median']:6.3f}s  p90 {values['p90']:6.3f}s"
            f"  max {values['max']:6.3f}s"
        )

    verdict = {True: "meets", False: "MISSES"}
    how = "by the command server" if results["served"] else "each in its own process"
    print(f"commands run {how}")
    if guardian is not None:
        print(f"cloister guardian start ({guardian['runs']} runs, images present, stack down)")
        print(line("guardian start", guardian["start"]))
        print(line("guardian stop (between runs)", guardian["stop"]))
        print(f"  target max <= {GUARDIAN_TARGET_SECONDS:g}s: {verdict[guardian['meets_target']]}")
    print(
        f"cloister start -d until `docker exec true` works ({start['runs']} runs, interleaved"
        " with a bare `docker run -d --init` of the same image)"
    )
    print(line("bare docker run -d + first exec", start["bare_until_exec"]))
    print(line("start -d + first exec", start["until_exec"]))
    print(line("  of which `cloister start -d`", start["cli_returned"]))
    print(line("  of which the first exec", start["first_exec"]))
    print(
        f"  start -d over the bare run (medians): {start['over_bare_median']:+.3f}s;"
        f" target <= +{START_OVER_BARE_TARGET_SECONDS:g}s: {verdict[start['meets_target']]}"
    )
    print(line("cloister stop", start["stop"]))
    print(f"  target median <= {STOP_TARGET_SECONDS:g}s: {verdict[start['stop_meets_target']]}")
    first = results.get("first_start")
    if first is not None:
        print(f"first start -d of a new cloister ({first['runs']} runs; its network made)")
        print(line("start -d + first exec", first["until_exec"]))
    print(f"CLI start-up ({version['runs']} runs)")
    print(line("cloister --version", version["version"]))
    print(line("python -c pass", version["bare_python"]))
    share = version["version"]["median"] / start["until_exec"]["median"]
    print(f"  Python start-up is {share:.0%} of the median start -d")


def scratch_cli(root: Path, image: str, prefix: str) -> tuple[Cli, Path, str]:
    """``cloister`` with its own config in *root* (*image* the default, the UI on a free
    port), and a repository to start a cloister in: the CLI, the repository, its name."""
    (root / "config").mkdir()
    (root / "config" / "config.yaml").write_text(
        f"defaults:\n  image: {image}\nguardian:\n  ui_port: {free_port()}\n",
        encoding="utf-8",
    )
    name = f"{prefix}-{secrets.token_hex(3)}"
    repo = root / name
    make_repo(repo)
    return Cli(root, executable("cloister"), executable("docker")), repo, name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guardian-runs", type=int, default=5, help="0: not measured")
    parser.add_argument("--start-runs", type=int, default=7)
    parser.add_argument("--first-runs", type=int, default=3, help="0: not measured")
    parser.add_argument("--version-runs", type=int, default=10)
    parser.add_argument("--image", default="cloister-slim:latest")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-server", action="store_true", help="each command in its own process")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cloister-bench-") as scratch:
        cli, repo, name = scratch_cli(Path(scratch), options.image, "bench")
        cli.served = not options.no_server
        bare = Bare(cli.docker, options.image, f"cloister-bench-bare-{secrets.token_hex(3)}")
        problems: list[str] = []
        try:
            # Warm-up, not timed: builds what is missing, first-run files, page cache.
            cli.run("guardian", "start", timeout=BUILD_TIMEOUT_SECONDS)
            cli.run("start", "-d", cwd=repo, timeout=BUILD_TIMEOUT_SECONDS)
            cli.run("stop", name)
            if cli.served:
                cli.wait_for_server()
            bare.make_network()
            bare.run()
            bare.remove()
            results: dict[str, Any] = {"image": options.image, "served": cli.served}
            if options.guardian_runs > 0:
                results["guardian_start"] = bench_guardian_start(cli, options.guardian_runs)
            results["cloister_start"] = bench_cloister_start(
                cli, repo, name, options.start_runs, bare
            )
            if options.first_runs > 0:
                results["first_start"] = bench_first_start(cli, options.first_runs)
            results["cli_startup"] = bench_version(cli, options.version_runs)
        finally:
            bare.remove_network()
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
