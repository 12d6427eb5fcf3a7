"""Benchmark: what the session snapshot adds to ``cloister start``, in time and disk.

Builds a repository of 10,000 commits and about 200 MB of objects (random, so nothing
compresses; with ``git fast-import``, one pack, as a clone has) with a 1,000-file work
tree, 20 modified tracked files and 20 untracked ones, then measures
:func:`cloister_cli.session.snapshots.take` as ``cloister start`` calls it:

* ``first``: into an empty data directory (the project's first start);
* ``again``: the next starts (the pool has the packs; new loose objects only);
* ``after gc``: the start after the human repacked (``git gc``: a new pack to take);
* the disk each adds (``du`` of the repository and the data directory together, minus
  the repository alone: hard-linked blocks count once).

Compared with copying the objects (``git clone --mirror --no-hardlinks``), which is
what an independent copy costs without links. Targets: at most 0.5 s added to a start,
at most 5 MB of new disk.

``--cli N`` also times the real ``cloister start -d`` in that repository (until ``docker
exec`` works; the small ``cloister-slim`` image, a guardian started first and stopped at
the end), N times with snapshots on and N times with ``snapshots.enabled: false``, and
reports the difference. It needs the Docker engine and the guardian; do not run it while
a guardian or the acceptance tests run.

    uv run python benchmarks/bench_snapshot.py
    uv run python benchmarks/bench_snapshot.py --commits 2000 --megabytes 40 --runs 3 --json
    uv run python benchmarks/bench_snapshot.py --cli 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_cli import Cli, bench_cloister_start, cleanup
from benchsupport import executable, free_port
from cloister_cli.session.snapshots import Target, take
from cloister_core.config.models import SnapshotsConfig
from cloister_core.paths import CloisterPaths

TIME_TARGET_SECONDS = 0.5
DISK_TARGET_BYTES = 5 * 1024 * 1024
FILES = 1000


def git(repository: Path, *args: str, data: bytes | None = None) -> str:
    result = subprocess.run(
        [executable("git"), "-C", str(repository), *args],
        input=data,
        capture_output=True,
        check=True,
    )
    return result.stdout.decode()


def build(repository: Path, commits: int, megabytes: int) -> None:
    """*commits* commits, each rewriting one of FILES files with random bytes."""
    repository.mkdir()
    git(repository, "init", "-q", "-b", "main")
    git(repository, "config", "user.name", "Bench")
    git(repository, "config", "user.email", "bench@cloister.invalid")
    size = megabytes * 1024 * 1024 // commits
    stream = bytearray()
    for number in range(commits):
        blob = os.urandom(size)
        stamp = 1_700_000_000 + number
        stream += b"commit refs/heads/main\n"
        stream += f"committer Bench <b@c> {stamp} +0000\n".encode()
        stream += f"data {len(str(number))}\n{number}\n".encode()
        stream += f"M 100644 inline file{number % FILES:04d}\n".encode()
        stream += f"data {len(blob)}\n".encode() + blob + b"\n"
    git(repository, "fast-import", "--quiet", data=bytes(stream))
    git(repository, "reset", "-q", "--hard", "main")
    for number in range(20):
        (repository / f"file{number:04d}").write_bytes(os.urandom(2048))
        (repository / f"untracked{number}.txt").write_text(f"new {number}\n", encoding="utf-8")
    # A repository in use has an index newer than its files (git rehashes "racily
    # clean" entries otherwise): as after the human's last `git status`.
    time.sleep(1.1)
    git(repository, "status", "--porcelain")


def disk(*directories: Path) -> int:
    output = subprocess.run(
        [executable("du"), "-s", "-B1", *map(str, directories)],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return sum(int(line.split()[0]) for line in output.splitlines())


def timed_take(repository: Path, data: Path) -> float:
    paths = CloisterPaths(data / "config", data / "data")
    target = Target.of("bench", "bench", repository)
    started = time.perf_counter()
    take(paths, target, SnapshotsConfig(keep=1000))
    return time.perf_counter() - started


def measure(root: Path, repository: Path, runs: int) -> dict[str, Any]:
    repo_disk = disk(repository)
    first, again, added_first, added_again = [], [], [], []
    for run in range(runs):
        data = root / f"data-{run}"
        first.append(timed_take(repository, data))
        added_first.append(disk(repository, data) - repo_disk)
        before = disk(repository, data)
        again.append(timed_take(repository, data))
        added_again.append(disk(repository, data) - before)
    git(repository, "gc", "-q")
    data = root / "data-0"
    before = disk(repository, data)
    after_gc = timed_take(repository, data)
    added_after_gc = disk(repository, data) - before
    copy = root / "copy.git"
    started = time.perf_counter()
    git(root, "clone", "-q", "--mirror", "--no-hardlinks", str(repository), str(copy))
    copy_seconds = time.perf_counter() - started
    return {
        "repository_bytes": repo_disk,
        "first_seconds": statistics.median(first),
        "again_seconds": statistics.median(again),
        "after_gc_seconds": after_gc,
        "first_added_bytes": max(added_first),
        "again_added_bytes": max(added_again),
        "after_gc_added_bytes": added_after_gc,
        "copy_seconds": copy_seconds,
        "copy_bytes": disk(copy),
        "runs": runs,
    }


CLI_CONFIG = """\
defaults:
  image: cloister-slim:latest
  memory: 1g
snapshots:
  enabled: {enabled}
guardian:
  ui_port: {ui_port}
"""


def measure_cli(root: Path, repository: Path, runs: int) -> dict[str, Any]:
    """``cloister start -d`` with snapshots on and off, in *repository* (project "repo")."""
    cli = Cli(root / "cli", executable("cloister"), executable("docker"))
    config = cli.root / "config" / "config.yaml"
    config.parent.mkdir(parents=True)
    ui_port = free_port()
    config.write_text(CLI_CONFIG.format(enabled="true", ui_port=ui_port), encoding="utf-8")
    try:
        cli.run("guardian", "start", timeout=1800)
        cli.run("start", "-d", cwd=repository)  # warm-up: images, the pool's first fill
        cli.run("stop", "repo")
        timings: dict[str, list[float]] = {"true": [], "false": []}
        for _ in range(runs):  # alternated, so that a busy moment costs both alike
            for enabled, found in timings.items():
                config.write_text(
                    CLI_CONFIG.format(enabled=enabled, ui_port=ui_port), encoding="utf-8"
                )
                found.extend(bench_cloister_start(cli, repository, "repo", 1)["seconds"])
    finally:
        cleanup(cli, "repo")
    on, off = statistics.median(timings["true"]), statistics.median(timings["false"])
    return {
        "start_with_snapshots_seconds": on,
        "start_without_snapshots_seconds": off,
        "start_added_seconds": on - off,
        "start_runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cli", type=int, default=0, metavar="N", help="also time start -d")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cloister-bench-snapshot-") as scratch:
        root = Path(scratch)
        repository = root / "repo"
        started = time.perf_counter()
        build(repository, options.commits, options.megabytes)
        built = time.perf_counter() - started
        result = measure(root, repository, options.runs)
        result |= {"commits": options.commits, "build_seconds": built}
        if options.cli:
            result |= measure_cli(root, repository, options.cli)
        shutil.rmtree(repository)
    worst = max(result["first_seconds"], result["again_seconds"], result["after_gc_seconds"])
    worst_disk = max(
        result["first_added_bytes"], result["again_added_bytes"], result["after_gc_added_bytes"]
    )
    result["within_targets"] = worst <= TIME_TARGET_SECONDS and worst_disk <= DISK_TARGET_BYTES
    if options.json:
        print(json.dumps(result, indent=2))
    else:
        mb = 1024 * 1024
        print(
            f"repository: {options.commits} commits, {result['repository_bytes'] / mb:.0f} MB"
            f" on disk (built in {built:.1f} s)"
        )
        for label, key in (("first", "first"), ("again", "again"), ("after gc", "after_gc")):
            print(
                f"snapshot {label:<9} {result[f'{key}_seconds'] * 1000:7.1f} ms"
                f"  {result[f'{key}_added_bytes'] / 1024:8.0f} KiB new disk"
            )
        print(
            f"a full copy (clone --mirror --no-hardlinks): {result['copy_seconds'] * 1000:.0f} ms,"
            f" {result['copy_bytes'] / mb:.0f} MB"
        )
        if options.cli:
            print(
                f"cloister start -d (median of {options.cli}):"
                f" {result['start_with_snapshots_seconds']:.3f} s with snapshots,"
                f" {result['start_without_snapshots_seconds']:.3f} s without:"
                f" {result['start_added_seconds'] * 1000:+.0f} ms"
            )
        print(
            f"targets: <= {TIME_TARGET_SECONDS} s and <= {DISK_TARGET_BYTES // mb} MB:"
            f" {'met' if result['within_targets'] else 'MISSED'}"
        )
    return 0 if result["within_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
