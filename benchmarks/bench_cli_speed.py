"""Benchmark: how long the quick ``cloister`` commands make a person wait.

Drives the real CLI (the ``cloister`` console script of this environment) with
temporary config and data directories, never the user's. Measured, as wall time from
launching the command until it exits, after one untimed warm-up run each:

* commands that do not talk to Docker: ``--version``, ``--help``, ``setup --list``,
  ``config check``, ``config show``, ``config path``, ``project list``, ``worktree
  list``, ``restore NAME --list`` (a project and a snapshot record are written into the
  temporary directories first, so both tables are drawn), ``logs NAME -n 50`` (of a
  log of 200 lines written there as the services write it), and shell completion of
  the command names (``cloister st<TAB>``);
* commands that ask the Docker engine: ``list``, ``list --json``, ``images list``,
  ``guardian status``, ``port --list`` and the completion of a cloister's name
  (``cloister stop <TAB>``).

Target: median at most 0.3 s for the first kind; for the second, at most 0.5 s plus
the engine's own time, measured apart as the same requests made by a warm process
(the imports already done): the containers listing for ``list`` and completion, the
docker SDK's ping and image and container listings for ``images list``. For scale,
``python -c pass`` and ``python -c 'import click'`` (the floor of any click program) are
measured the same way. The CPU time (user and system) of each run is reported beside the
wall time: on a busy machine it is the steadier figure. Nothing is created on the
engine, so this may run next to a guardian or the acceptance tests, though their load
shows in the wall times.

    uv run python benchmarks/bench_cli_speed.py
    uv run python benchmarks/bench_cli_speed.py --runs 30 --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from benchsupport import BenchError, executable, summary

OFFLINE_TARGET_SECONDS = 0.3  # a command that does not talk to Docker
ENGINE_ALLOWANCE_SECONDS = 0.5  # one that does: this, plus the engine's own time
COMMAND_TIMEOUT_SECONDS = 60.0
CLOISTER = "bench-speed"  # the cloister and project of the snapshot record

Kind = Literal["offline", "engine", "scale"]


@dataclass(frozen=True)
class Case:
    label: str
    argv: tuple[str, ...]
    kind: Kind
    baseline: str | None = None  # the engine's own time (ENGINE_BASELINES), for "engine"
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
        Case("--version", (program, "--version"), "offline"),
        Case("--help", (program, "--help"), "offline"),
        Case("setup --list", (program, "setup", "--list"), "offline"),
        Case("config check", (program, "config", "check"), "offline"),
        Case("config show", (program, "config", "show"), "offline"),
        Case("config path", (program, "config", "path"), "offline"),
        Case("project list", (program, "project", "list"), "offline"),
        Case("worktree list", (program, "worktree", "list"), "offline"),
        Case("restore --list", (program, "restore", CLOISTER, "--list"), "offline"),
        Case("complete `cloister st`", (program,), "offline", env=completion("cloister st")),
        Case("logs NAME -n 50", (program, "logs", CLOISTER, "-n", "50"), "offline"),
        Case("list", (program, "list"), "engine", "containers"),
        Case("list --json", (program, "list", "--json"), "engine", "containers"),
        Case("images list", (program, "images", "list"), "engine", "images"),
        Case("guardian status", (program, "guardian", "status"), "engine", "containers"),
        Case("port --list", (program, "port", "--list"), "engine", "containers"),
        Case(
            "complete `cloister stop `",
            (program,),
            "engine",
            "containers",
            completion("cloister stop "),
        ),
        Case("python -c pass", (python, "-c", "pass"), "scale"),
        Case("python -c 'import click'", (python, "-c", "import click"), "scale"),
    ]


# -- the engine's own time ------------------------------------------------------------------


def containers_baseline(root: Path) -> Callable[[], object]:
    """What ``cloister list`` asks the engine, from a process that has imported it all."""
    from cloister_cli.container import listing  # noqa: PLC0415 - after the environment is set
    from cloister_core import stack  # noqa: PLC0415
    from cloister_core.paths import CloisterPaths  # noqa: PLC0415

    instance = stack.Instance.of(CloisterPaths(root / "config", root / "data"), os.getuid())
    return lambda: listing.list_cloisters(listing.connect(), instance)


def images_baseline(root: Path) -> Callable[[], object]:
    """What ``cloister images list`` asks the engine: the SDK's client, ping, listings."""
    import docker  # noqa: PLC0415

    from cloister_cli.images import projectimages  # noqa: PLC0415
    from cloister_core.paths import CloisterPaths  # noqa: PLC0415

    paths = CloisterPaths(root / "config", root / "data")

    def ask() -> object:
        client = docker.from_env()
        try:
            client.ping()
            return projectimages.list_project_images(client, paths)
        finally:
            client.close()

    return ask


ENGINE_BASELINES = {"containers": containers_baseline, "images": images_baseline}


def engine_times(root: Path, runs: int) -> dict[str, dict[str, Any]]:
    results = {}
    for name, make in ENGINE_BASELINES.items():
        ask = make(root)
        ask()  # warm-up: the connection's first use
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            ask()
            times.append(time.perf_counter() - started)
        results[name] = {"runs": runs, "seconds": times, **summary(times)}
    return results


# -- the commands ---------------------------------------------------------------------------


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(case: Case, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall time and CPU time (user and system) of one run of *case*."""
    cpu = children_cpu()
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
    return elapsed, children_cpu() - cpu


def bench(
    case: Case, env: dict[str, str], cwd: Path, runs: int, engine: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    run_once(case, env, cwd)  # warm-up: page cache, .pyc files
    measured = [run_once(case, env, cwd) for _ in range(runs)]
    times = [wall for wall, _ in measured]
    result: dict[str, Any] = {"kind": case.kind, "runs": runs, "seconds": times, **summary(times)}
    # CPU time is what the command itself costs; wall time also holds the machine's load.
    result["cpu_median"] = statistics.median(cpu for _, cpu in measured)
    if case.kind == "offline":
        result["target_median"] = OFFLINE_TARGET_SECONDS
    elif case.baseline is not None:
        own = engine[case.baseline]["median"]
        result["engine_median"] = own
        result["target_median"] = ENGINE_ALLOWANCE_SECONDS + own
    if "target_median" in result:
        result["meets_target"] = result["median"] <= result["target_median"]
    return result


def prepare(root: Path, env: dict[str, str]) -> None:
    """A project and one snapshot record of it, so that their tables are drawn."""
    from cloister_core import snapshots  # noqa: PLC0415 - after the environment is set
    from cloister_core.paths import CloisterPaths  # noqa: PLC0415

    paths = CloisterPaths(root / "config", root / "data")
    worktree = root / "work" / CLOISTER
    worktree.mkdir(parents=True)
    project_file = paths.project_config(CLOISTER)
    project_file.parent.mkdir(parents=True, exist_ok=True)
    project_file.write_text(f"root: {worktree}\n", encoding="utf-8")
    now = datetime.now(UTC)
    snapshots.write_record(
        paths,
        snapshots.SnapshotRecord(
            id=snapshots.new_snapshot_id(now),
            cloister=CLOISTER,
            project=CLOISTER,
            created_at=now,
            worktree=str(worktree),
            git_dir=str(root / "data" / "git" / CLOISTER),
            common_dir=str(worktree / ".git"),
            head_ref="refs/heads/main",
            head_commit="0" * 40,
        ),
    )
    # A log of that cloister, written as the services write it, for `cloister logs`.
    from cloister_core.audit import AuditLog  # noqa: PLC0415

    with AuditLog(cloister_dir=paths.logs_dir) as log:
        for index in range(200):
            log.write(
                "proxy.request",
                cloister=CLOISTER,
                host=f"host{index}.example.org",
                port=443,
                verdict="allowed",
            )
    # config show and check read the default config: written once, not on every run.
    subprocess.run(
        [executable("cloister"), "config", "check"],
        env=env,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=True,
    )


def report(results: dict[str, Any]) -> None:
    verdict = {True: "meets", False: "MISSES"}
    print(
        f"cloister commands ({results['runs']} runs each; target median <="
        f" {OFFLINE_TARGET_SECONDS}s without Docker, <= {ENGINE_ALLOWANCE_SECONDS}s"
        " + the engine's own time with it)"
    )
    print(
        f"  {'command':<28} {'median':>8} {'p90':>8} {'max':>8} {'cpu':>8}"
        f" {'engine':>8} {'target':>8}"
    )
    for label, values in results["commands"].items():
        engine = f"{values['engine_median']:7.4f}s" if "engine_median" in values else ""
        target = f"{values['target_median']:7.3f}s" if "target_median" in values else ""
        line = (
            f"  {label:<28} {values['median']:7.3f}s {values['p90']:7.3f}s"
            f" {values['max']:7.3f}s {values['cpu_median']:7.3f}s {engine:>8} {target:>8}"
        )
        if "meets_target" in values:
            line += f"  {verdict[values['meets_target']]}"
        print(line)
    for name, values in results["engine"].items():
        print(f"  engine's own time, {name}: median {values['median']:.3f}s")
    print(f"  cloisters listed: {results['cloisters']}; load average {results['load']}")


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
        prepare(root, env)
        engine = engine_times(root, options.runs)
        results = {
            "runs": options.runs,
            "cloisters": len(json.loads(listed.stdout)),
            "load": " ".join(f"{value:.2f}" for value in os.getloadavg()),
            "engine": engine,
            "commands": {
                case.label: bench(case, env, root, options.runs, engine) for case in cases(program)
            },
        }
    if options.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)


if __name__ == "__main__":
    main()
