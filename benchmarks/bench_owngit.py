"""Benchmark: what a cloister's own git directory costs, and how fast its commits come back.

Builds the repository of ``bench_snapshot.py`` (10,000 commits and about 200 MB of
objects, one pack, a 1,000-file work tree with uncommitted changes), then measures:

* **start**: :func:`cloister_cli.repo.gitdirs.create` as ``cloister start`` calls it (the
  cloister's ``HEAD``, refs, index, config and alternates, made from the human's files),
  over --runs runs; and the disk it takes (``du``: the blocks, nothing shared). Targets:
  at most 100 ms and 1 MB. Compared with what a copy of the repository would cost
  (``git clone --mirror --no-hardlinks``), which is what an own git directory without
  alternates would be.
* **sync**: ``cloister sync`` of 10 new commits of the agent's
  (:meth:`cloister_executor.gitsync.Syncer.sync`, the throwaway export container
  included: no network, fetch with fsck, ``index-pack --strict``, refs, the
  fast-forward of the checked-out branch and its index), over --runs rounds of 10 new
  commits each. Target: at most 1 s. Compared with starting and removing an empty
  container of the same image (what the container alone costs).

It needs the Docker engine (the image ``cloister-git:latest`` is built from this tree
when missing or stale). It starts no guardian and touches no cloister.

    uv run python benchmarks/bench_owngit.py
    uv run python benchmarks/bench_owngit.py --commits 2000 --megabytes 40 --runs 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker

from bench_snapshot import build
from benchsupport import executable
from cloister_cli.images.builds import (
    GIT_IMAGE,
    assemble_context,
    build_image,
    is_current,
    source_fingerprint,
)
from cloister_cli.repo import gitdirs
from cloister_core import stack
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from cloister_core.sessions import SessionRecord, write_session
from cloister_executor.engine import Engine
from cloister_executor.gitsync import Syncer

ROOT = Path(__file__).resolve().parents[1]
START_TARGET_SECONDS = 0.1
START_TARGET_BYTES = 1024 * 1024
SYNC_TARGET_SECONDS = 1.0
NAME = "bench"


def ensure_image() -> None:
    client = docker.from_env()
    try:
        fingerprint = source_fingerprint(ROOT, GIT_IMAGE)
        if is_current(client, GIT_IMAGE.tag, fingerprint):
            return
        architecture = client.info()["Architecture"]
        with tempfile.TemporaryDirectory(prefix="bench-owngit-image-") as scratch:
            context = assemble_context(ROOT, GIT_IMAGE, Path(scratch) / "git", architecture)
            build_image(client, context, GIT_IMAGE.tag, fingerprint=fingerprint)
    finally:
        client.close()


def disk_bytes(path: Path) -> int:
    output = subprocess.run(
        [executable("du"), "-s", "-B1", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return int(output.split()[0])


def agent_commits(repo: Path, git_dir: Path, count: int, round_number: int) -> None:
    """*count* commits on the checked-out branch, made in the cloister's git directory
    (as the agent makes them; its alternates name the container's path, so the human's
    objects are given here by variable)."""
    env = {
        **os.environ,
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(repo),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / ".git" / "objects"),
        "GIT_AUTHOR_NAME": "Agent",
        "GIT_AUTHOR_EMAIL": "agent@cloister.invalid",
        "GIT_COMMITTER_NAME": "Agent",
        "GIT_COMMITTER_EMAIL": "agent@cloister.invalid",
    }
    for number in range(count):
        path = repo / f"agent-{round_number:03d}-{number:02d}.txt"
        path.write_text(f"agent round {round_number} commit {number}\n", encoding="utf-8")
        for args in (["add", path.name], ["commit", "-q", "-m", f"agent {number}"]):
            subprocess.run(
                [executable("git"), *args], cwd=repo, env=env, check=True, capture_output=True
            )


def session(paths: CloisterPaths, repo: Path, own: gitdirs.OwnGitDir) -> None:
    write_session(
        paths,
        SessionRecord(
            cloister=NAME,
            project=NAME,
            worktree=str(repo),
            checkout=str(repo),
            common_dir=str(repo / ".git"),
            started_at=datetime.now(UTC),
            bases=own.bases,
            host_heads=own.host_heads,
        ),
    )


def measure_start(paths: CloisterPaths, repo: Path, runs: int) -> tuple[list[float], int]:
    repository = HumanRepository.of(repo)
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        gitdirs.create(paths, NAME, repository, worktree=repo, branch=None)
        timings.append(time.perf_counter() - started)
    return timings, disk_bytes(paths.cloister_git_dir(NAME))


def measure_sync(paths: CloisterPaths, repo: Path, runs: int) -> list[float]:
    own = gitdirs.create(paths, NAME, HumanRepository.of(repo), worktree=repo, branch=None)
    session(paths, repo, own)
    syncer = Syncer(paths, Engine(os.environ.get("DOCKER_HOST")))
    timings = []
    for round_number in range(runs):
        agent_commits(repo, own.path, 10, round_number)
        started = time.perf_counter()
        outcome = syncer.sync(NAME, running=False)
        timings.append(time.perf_counter() - started)
        if outcome.fast_forwarded is None:
            raise RuntimeError(f"round {round_number}: no fast-forward: {outcome.lines()}")
    return timings


def measure_container(runs: int) -> list[float]:
    """An empty container of the image, run and removed as the sync runs its own."""
    timings = []
    client = docker.from_env()
    try:
        for _ in range(runs):
            started = time.perf_counter()
            container = client.containers.run(
                stack.GIT_IMAGE,
                entrypoint=["true"],
                network_mode="none",
                cap_drop=["ALL"],
                read_only=True,
                user=f"{os.getuid()}:{os.getgid()}",
                detach=True,
                labels={stack.LABEL_SYNC: NAME},
            )
            container.wait()
            container.remove(force=True)
            timings.append(time.perf_counter() - started)
    finally:
        client.close()
    return timings


def mirror_copy(repo: Path, scratch: Path) -> tuple[float, int]:
    target = scratch / "mirror.git"
    started = time.perf_counter()
    subprocess.run(
        [executable("git"), "clone", "-q", "--mirror", "--no-hardlinks", str(repo), str(target)],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started, disk_bytes(target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    os.environ.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    ensure_image()
    with tempfile.TemporaryDirectory(prefix="bench-owngit-") as scratch:
        root = Path(scratch)
        repo = root / "project"
        build(repo, args.commits, args.megabytes)
        objects = disk_bytes(repo / ".git")
        paths = CloisterPaths(config_dir=root / "config", data_dir=root / "data")
        start, start_disk = measure_start(paths, repo, args.runs)
        sync = measure_sync(paths, repo, args.runs)
        container = measure_container(args.runs)
        copy_seconds, copy_bytes = mirror_copy(repo, root)
    result: dict[str, Any] = {
        "commits": args.commits,
        "repository_bytes": objects,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "start_seconds": {"median": statistics.median(start), "max": max(start)},
        "start_disk_bytes": start_disk,
        "copy_seconds": copy_seconds,
        "copy_disk_bytes": copy_bytes,
        "sync_10_commits_seconds": {"median": statistics.median(sync), "max": max(sync)},
        "empty_container_seconds": {"median": statistics.median(container)},
    }
    result["met"] = (
        result["start_seconds"]["median"] <= START_TARGET_SECONDS
        and start_disk <= START_TARGET_BYTES
        and result["sync_10_commits_seconds"]["median"] <= SYNC_TARGET_SECONDS
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    mib = 1024 * 1024
    print(
        f"repository: {args.commits} commits, {objects / mib:.0f} MiB in .git;"
        f" {args.runs} runs each, {result['cpus']} CPUs"
    )
    print(
        f"  start: the cloister's git directory  median {statistics.median(start) * 1000:6.1f} ms"
        f"  max {max(start) * 1000:6.1f} ms   disk {start_disk / 1024:.0f} KiB"
        f"   (targets {START_TARGET_SECONDS * 1000:g} ms, {START_TARGET_BYTES // 1024} KiB)"
    )
    print(
        f"         a copy instead (clone --mirror)       {copy_seconds * 1000:6.1f} ms"
        f"                    disk {copy_bytes / mib:.0f} MiB"
    )
    print(
        f"  sync of 10 new commits (container incl.)  median {statistics.median(sync):.3f} s"
        f"  max {max(sync):.3f} s   (target {SYNC_TARGET_SECONDS:g} s)"
    )
    print(
        f"         an empty container of the image     median {statistics.median(container):.3f} s"
    )
    print(f"  targets {'met' if result['met'] else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
