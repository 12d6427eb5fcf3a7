"""Benchmark: what the git project rules add to a ``hostexec git`` round trip.

The real host executor daemon (``cloister-executor serve``, a process of its own, as
``cloister guardian start`` runs it) serves a temporary data directory, with a
repository shaped like a real one: a work tree of --files files, refs and logs. The
same request (over the daemon's Unix socket, with the stack's secret and a cloister's
token) is timed two ways, interleaved:

* **unchecked**: the cloister has no session record: plain environment, nothing checked;
* **checked**: the session record ``cloister start`` writes is there: git runs with the
  hardened environment, and a command that may write the work tree (``git tag -f``
  here) first has its revisions and the index checked against the protected paths.

The difference of the medians is what the rules add (target: at most 5 ms for ``git
status``; before issue 18, with the git guard's settling and scans, the same bench
measured the checked ``git status`` round trip too: compare the absolute figures). The
rules alone (``GitProjects.before``, in this process) are timed too.

    uv run python benchmarks/bench_gitcheck.py
    uv run python benchmarks/bench_gitcheck.py --count 300 --files 20000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # a raw-socket helper lives with the tests

from tests.executor.conftest import exchange, parse_answer  # noqa: E402

from cloister_core.config.models import HostexecConfig  # noqa: E402
from cloister_core.paths import CloisterPaths  # noqa: E402
from cloister_core.sessions import SessionRecord, write_session  # noqa: E402
from cloister_core.tokens import TokenRecord, write_token_file  # noqa: E402
from cloister_executor.hostgit import GitProjects, Prepared  # noqa: E402
from cloister_executor.locations import secret_path, socket_path  # noqa: E402
from cloister_executor.protocol import ExecResult  # noqa: E402

TARGET_MS = 5.0
GIT = shutil.which("git") or "git"


def git(repo: Path, *args: str) -> None:
    subprocess.run([GIT, "-C", str(repo), *args], check=True, capture_output=True, timeout=600)


def build_repository(repo: Path, files: int) -> None:
    """A repository with *files* committed files, many loose objects, refs and logs."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    per_directory = 50
    for index in range(files):
        directory = repo / f"src/d{index // per_directory:04d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index:05d}.txt").write_text(f"file {index}\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "files")
    for index in range(50):  # refs and reflogs, as a long-lived repository has
        git(repo, "branch", f"feature/topic-{index}")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 3),
        "p95": round(percentile(values, 0.95), 3),
        "max": round(max(values), 3),
    }


class Daemon:
    """``cloister-executor serve`` in the foreground, as a child process."""

    def __init__(self, paths: CloisterPaths, home: Path) -> None:
        env = {**os.environ, "HOME": str(home)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cloister_executor.main", "serve",
             "--config-dir", str(paths.config_dir), "--data-dir", str(paths.data_dir)],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.socket = socket_path(paths)
        deadline = time.monotonic() + 30
        while not paths.executor_state.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("the executor daemon did not start")
            time.sleep(0.02)
        self.secret = secret_path(paths).read_text(encoding="ascii").strip()

    def request(self, token: str, argv: list[str]) -> float:
        line = json.dumps(
            {"secret": self.secret, "token": token, "argv": argv, "timeout_seconds": 60}
        )
        started = time.perf_counter()
        answer = parse_answer(exchange(self.socket, line.encode() + b"\n"))
        elapsed = (time.perf_counter() - started) * 1000
        if not isinstance(answer, ExecResult) or answer.exit_code != 0:
            raise RuntimeError(f"{argv} failed: {answer}")
        return elapsed

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def time_checks(paths: CloisterPaths, home: Path, record: TokenRecord, count: int) -> list[float]:
    """GitProjects.before alone, in this process, for ``git tag -f`` (checked against
    the protected paths) as the daemon runs it."""
    projects = GitProjects(paths, None, lambda message: None)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}

    async def measure() -> list[float]:
        timings = []
        for _ in range(count):
            started = time.perf_counter()
            prepared = await projects.before(
                record, ("git", "tag", "-f", "bench"), env, HostexecConfig()
            )
            if not isinstance(prepared, Prepared):
                raise RuntimeError(f"the rules refused: {prepared}")
            timings.append((time.perf_counter() - started) * 1000)
        return timings

    return asyncio.run(measure())


def compare(
    daemon: Daemon, tokens: tuple[str, str], argv: list[str], count: int, warmup: int
) -> tuple[list[float], list[float]]:
    unchecked, checked = tokens
    for _ in range(warmup):
        daemon.request(unchecked, argv)
        daemon.request(checked, argv)
    plain: list[float] = []
    guarded: list[float] = []
    for _ in range(count):  # interleaved: both see the same machine
        plain.append(daemon.request(unchecked, argv))
        guarded.append(daemon.request(checked, argv))
    return plain, guarded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="measured requests per kind")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--files", type=int, default=10_000, help="files in the work tree")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    os.environ.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")

    with tempfile.TemporaryDirectory(prefix="bench-gitcheck-") as scratch:
        root = Path(scratch)
        paths = CloisterPaths(config_dir=root / "config", data_dir=root / "data")
        repo = root / "project"
        build_repository(repo, args.files)
        common = repo / ".git"
        tokens = {}
        records = {}
        for name in ("unchecked", "checked"):
            record = TokenRecord.create(cloister=name, project=name, path=repo)
            write_token_file(paths.tokens_dir, record)
            tokens[name] = record.secret
            records[name] = record
        write_session(
            paths,
            SessionRecord(
                cloister="checked",
                project="checked",
                worktree=str(repo),
                checkout=str(repo),
                common_dir=str(common),
                started_at=datetime.now(UTC),
                protected=(".envrc", ".husky", ".vscode/tasks.json", ".devcontainer"),
            ),
        )
        directories = sum(1 for path in common.rglob("*") if path.is_dir())
        daemon = Daemon(paths, root)
        pair = (tokens["unchecked"], tokens["checked"])
        try:
            status = compare(daemon, pair, ["git", "status", "--short"], args.count, args.warmup)
            tag = compare(daemon, pair, ["git", "tag", "-f", "bench"], args.count, args.warmup)
        finally:
            daemon.stop()
        checks = time_checks(paths, root, records["checked"], args.count)

    result: dict[str, Any] = {
        "files": args.files,
        "git_directories": directories,
        "count": args.count,
        "cpus": os.cpu_count(),
        "status": {
            "unchecked_ms": summary(status[0]),
            "checked_ms": summary(status[1]),
            "added_p50_ms": round(statistics.median(status[1]) - statistics.median(status[0]), 3),
        },
        "tag": {
            "unchecked_ms": summary(tag[0]),
            "checked_ms": summary(tag[1]),
            "added_p50_ms": round(statistics.median(tag[1]) - statistics.median(tag[0]), 3),
        },
        "checks_alone_ms": summary(checks),
        "target_ms": TARGET_MS,
    }
    result["met"] = result["status"]["added_p50_ms"] <= TARGET_MS
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"hostexec through the real executor daemon; {args.files} files, {directories}"
        f" directories in .git, {args.count} requests each, {result['cpus']} CPUs"
    )
    for command, key in (("git status --short", "status"), ("git tag -f (writes)", "tag")):
        block = result[key]
        for label in ("unchecked", "checked"):
            row = block[f"{label}_ms"]
            print(
                f"  {command:<20} {label:<10} p50 {row['p50']:7.3f} ms  p95 {row['p95']:7.3f}"
                f"  max {row['max']:7.3f}"
            )
        print(f"  {command:<20} added (p50 difference): {block['added_p50_ms']:.3f} ms")
    row = result["checks_alone_ms"]
    print(
        f"  rules alone (git tag -f) p50 {row['p50']:.3f} ms  p95 {row['p95']:.3f}"
        f"  max {row['max']:.3f}"
    )
    verdict = "met" if result["met"] else "MISSED"
    print(f"  target: git status added <= {TARGET_MS:g} ms: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
