"""The e2e suite's mutation check: disable one defence at a time, and the suite must fail.

Run by hand (it edits the source tree, then puts it back), never by pytest:

    uv run python -m tests.e2e.mutations            # every mutation
    uv run python -m tests.e2e.mutations token-binding

For each mutation: the one source file is changed (a guard made to let everything
through), the named e2e tests run for the root host user (the guardian's images are
rebuilt by ``guardian start`` since their source changed), the file is restored, and a
line says whether at least one of those tests failed (the defence is proven) or all
passed (the suite would not notice the defence missing). The exit status is non-zero
if any mutation survived. The files it changes must have no uncommitted changes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository
    old: str  # replaced once; must occur exactly once
    new: str
    tests: tuple[str, ...]  # pytest node ids (without the [root] parameter)


MUTATIONS = (
    Mutation(
        "address-guard",
        "packages/cloister-proxy/src/cloister_proxy/addresses.py",
        "            table, own, allow = _TABLE_V4, self._own_v4, self._allow_v4\n",
        "            return AddressCheck(address, 'public', allowed=True)  # MUTATION\n",
        (
            "tests/e2e/test_through_proxy.py::test_names_resolving_to_private_addresses",
            "tests/e2e/test_through_proxy.py::test_the_guardians_own_services",
            "tests/e2e/test_through_proxy.py::test_an_api_base_resolving_to_a_private_address",
        ),
    ),
    Mutation(
        "token-binding",
        "packages/cloister-core/src/cloister_core/tokens.py",
        '        """Whether a request from *peer* may use this token: its cloister\'s address'
        ' only."""\n',
        '        """Whether a request from *peer* may use this token: its cloister\'s address'
        ' only."""\n        return True  # MUTATION\n',
        ("tests/e2e/test_identity.py::test_foreign_tokens_are_refused_everywhere",),
    ),
    Mutation(
        "internal-network",
        "packages/cloister-cli/src/cloister_cli/container/networks.py",
        "                internal=True,\n",
        "                internal=False,  # MUTATION\n",
        (
            "tests/e2e/test_egress.py",
            "tests/e2e/test_unreachable.py",
        ),
    ),
    Mutation(
        "credential-path-table",
        "packages/cloister-proxy/src/cloister_proxy/credentials/calls.py",
        "    calls = CALLS.get(agent, ())\n",
        "    return None  # MUTATION\n    calls = CALLS.get(agent, ())\n",
        ("tests/e2e/test_through_proxy.py::test_calls_outside_each_vendors_table",),
    ),
    Mutation(
        "protected-paths",
        "packages/cloister-cli/src/cloister_cli/repo/gitmounts.py",
        "        self.plan.mounts.append(bind(path, self.container_path(path), read_only=True))\n",
        "        self.plan.mounts.append(bind(path, self.container_path(path), read_only=False))"
        "  # MUTATION\n",
        (
            "tests/e2e/test_host_boundary.py::test_protected_paths_are_read_only",
            "tests/e2e/test_host_boundary.py::test_hostexec_git_never_writes_a_protected_path",
        ),
    ),
)


def clean(path: Path) -> bool:
    """Whether *path* has no uncommitted change."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", str(path)],  # noqa: S607 - the developer's git
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return status.stdout.strip() == ""


def run(mutation: Mutation, basetemp: Path) -> bool:
    """Whether the mutation was caught: at least one of its tests failed."""
    path = ROOT / mutation.file
    original = path.read_text(encoding="utf-8")
    if original.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.name}: the text to change is not once in {mutation.file}")
    path.write_text(original.replace(mutation.old, mutation.new), encoding="utf-8")
    try:
        argv = [
            sys.executable, "-m", "pytest", *mutation.tests, "-k", "not nonroot",
            "-p", "no:cacheprovider", f"--basetemp={basetemp / mutation.name}", "-q", "-x",
        ]  # fmt: skip
        started = time.monotonic()
        completed = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - started
    finally:
        path.write_text(original, encoding="utf-8")
    summary = (completed.stdout.strip().splitlines() or ["(no output)"])[-1]
    # Caught: a test failed, and none erred (an error in a fixture proves nothing).
    caught = completed.returncode == 1 and " failed" in summary and " error" not in summary
    verdict = "caught" if caught else "SURVIVED" if completed.returncode == 0 else "ERROR"
    print(f"{mutation.name:24} {verdict:9} {seconds:6.0f} s  {summary}", flush=True)
    if caught:  # which test noticed, and what it saw
        lines = completed.stdout.splitlines()
        failed = [line for line in lines if line.startswith("FAILED")]
        seen = [line for line in lines if line.startswith("E   ")][:3]
        print(*(f"    {line[:160]}" for line in failed + seen), sep="\n", flush=True)
    else:
        print(completed.stdout[-4000:], completed.stderr[-2000:], sep="\n", flush=True)
    return caught


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--basetemp", type=Path, default=Path("/tmp/cloister-mutations"))
    options = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not options.names or m.name in options.names]
    dirty = [m.file for m in chosen if not clean(ROOT / m.file)]
    if dirty:
        print(f"uncommitted changes in {', '.join(dirty)}: commit or stash them first")
        return 2
    options.basetemp.mkdir(parents=True, exist_ok=True)
    results = [run(mutation, options.basetemp) for mutation in chosen]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
