"""Benchmark: how long ``review()`` takes on a sizeable project.

Builds, in a temporary directory, a repository with 10,000 committed files spread
over 500 directories and 20 nested repositories, 10 of them with a config that runs
code (``core.fsmonitor``, a ``!`` alias…), 5 of those gitlinked in the index; then
times :func:`cloister_cli.session.review.review` (one warm-up, not timed, then 20 runs).
Target: at most 1 s per review (it runs on every ``cloister stop``).

Git runs hermetically (no global or system config) and hardened, like every git call
Cloister makes.

    uv run python benchmarks/bench_review.py
    uv run python benchmarks/bench_review.py --files 50000 --runs 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchsupport import BenchError, summary
from cloister_cli.session.review import ReviewTarget, review
from cloister_core.gitsafety import git_environment

TARGET_SECONDS = 1.0
GIT_TIMEOUT_SECONDS = 300.0
HERMETIC = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Cloister Bench",
    "GIT_AUTHOR_EMAIL": "bench@cloister.invalid",
    "GIT_COMMITTER_NAME": "Cloister Bench",
    "GIT_COMMITTER_EMAIL": "bench@cloister.invalid",
}
CODE_RUNNING_CONFIGS: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "touch /tmp/cloister-bench-never-run"),
    ("alias.st", "!echo never run"),
    ("core.pager", "less -R"),
    ("filter.lfs.smudge", "git-lfs smudge %f"),
    ("credential.helper", "store"),
)


def git(directory: Path, *args: str) -> None:
    program = shutil.which("git")
    if program is None:
        raise BenchError("git is not installed")
    result = subprocess.run(
        [program, "-C", str(directory), *args],
        capture_output=True,
        text=True,
        check=False,
        env=git_environment(os.environ, hooks=False),
        timeout=GIT_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode != 0:
        raise BenchError(f"git {' '.join(args)} failed in {directory}: {result.stderr.strip()}")


def make_repo(path: Path, *, files: int = 1, directories: int = 1) -> None:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "gc.auto", "0")  # no background gc while the tree is timed
    for index in range(files):
        directory = path / f"pkg{index % directories:03d}" / f"mod{index % 7}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"file{index:05d}.py").write_text(f"VALUE = {index}\n", encoding="utf-8")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial commit")


def build_project(root: Path, files: int, directories: int, nested: int) -> Path:
    """The project: its files, a .gitattributes, and *nested* repositories inside it."""
    project = root / "project"
    make_repo(project, files=files, directories=directories // 8 or 1)
    (project / ".gitattributes").write_text("* text=auto\n*.psd filter=lfs\n", encoding="utf-8")
    for index in range(nested):
        repo = project / f"pkg{index:03d}" / f"vendored{index}"
        make_repo(repo)
        if index < nested // 2:
            key, value = CODE_RUNNING_CONFIGS[index % len(CODE_RUNNING_CONFIGS)]
            git(repo, "config", key, value)
        if index < nested // 4:
            git(project, "add", str(repo.relative_to(project)))
    return project


def count_directories(project: Path) -> int:
    count = 0
    for _root, names, _files in os.walk(project):
        names[:] = [name for name in names if name != ".git"]
        count += len(names)
    return count


def bench(project: Path, runs: int) -> dict[str, Any]:
    target = ReviewTarget(project, project / ".git", project / ".git")
    warm = review(target)  # warm-up: page cache, imports, first-run costs
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        found = review(target)
        times.append(time.perf_counter() - started)
    if [item.fingerprint for item in found] != [item.fingerprint for item in warm]:
        raise BenchError("two reviews of the same tree disagree")
    kinds: dict[str, int] = {}
    for item in found:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    return {
        "runs": runs,
        "seconds": times,
        "review": summary(times),
        "findings": kinds,
        "target_max": TARGET_SECONDS,
        "meets_target": max(times) <= TARGET_SECONDS,
    }


def report(results: dict[str, Any]) -> None:
    values = results["review"]
    verdict = {True: "meets", False: "MISSES"}
    print(
        f"review() of {results['files']} files in {results['directories']} directories with "
        f"{results['nested']} nested repositories ({results['runs']} runs, "
        f"{results['cpus']} CPUs, git {results['git']})"
    )
    print(
        f"  review                 median {values['median']:6.3f}s  p90 {values['p90']:6.3f}s"
        f"  max {values['max']:6.3f}s  min {values['min']:6.3f}s"
    )
    print("  findings: " + ", ".join(f"{k} {v}" for k, v in sorted(results["findings"].items())))
    print(f"  target max <= {TARGET_SECONDS:g}s: {verdict[results['meets_target']]}")
    print(f"  build (not timed): {results['build_seconds']:.1f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--directories", type=int, default=500)
    parser.add_argument("--nested", type=int, default=20)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()
    os.environ.update(HERMETIC)
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE"):
        os.environ.pop(name, None)

    with tempfile.TemporaryDirectory(prefix="cloister-bench-review-") as scratch:
        started = time.perf_counter()
        project = build_project(Path(scratch), options.files, options.directories, options.nested)
        build_seconds = time.perf_counter() - started
        directories = count_directories(project)
        results = bench(project, options.runs)
    version = subprocess.run(
        [shutil.which("git") or "git", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    ).stdout.split()[-1]
    results.update(
        files=options.files,
        directories=directories,
        nested=options.nested,
        cpus=os.cpu_count(),
        git=version,
        build_seconds=build_seconds,
        python=sys.version.split()[0],
    )
    if options.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)


if __name__ == "__main__":
    main()
