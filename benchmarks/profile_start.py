"""Profile: where ``cloister start -d`` and ``cloister stop`` spend their time, step by step.

Each command runs in a fresh Python process (its imports counted, as a person's are),
the real CLI's entry point under :mod:`cProfile` (wall-clock timer), with temporary config
and data directories, the small ``cloister-slim`` image and the local Docker engine, as
``bench_cli.py`` does. Reported per command, as medians over the runs:

* ``imports``: every module loaded, before the command and in it (cProfile's time in
  the import machinery); and, from as many runs without the profiler under ``-X
  importtime``, the wall time and the imports' time as Python reports them;
* the steps: the functions that the library's ``apply``, ``plan_start`` and ``stop``
  call directly, each with the time spent in it (its callees included), and one level
  further for the steps over 20 ms;
* the engine's API calls (method and path; the executor's marked) and the child
  processes (git, docker), each with its wall time, in the order they were made.

The command runs in its own process, as with ``CLOISTER_NO_SERVER=1``: served by the
command server (``cloister_cli.launch``), a command pays none of the imports, and the
rest is the same code in a fork of the server.

cProfile's own cost makes the Python-heavy steps look slower than they are (the engine's
and the children's times are as measured); the wall time of the same command without the
profiler is in ``bench_cli.py``. Benchmark-only: nothing in the CLI knows of it.

    uv run python benchmarks/profile_start.py
    uv run python benchmarks/profile_start.py --runs 5 --json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_cli import BUILD_TIMEOUT_SECONDS, Cli, cleanup, scratch_cli
from benchsupport import BenchError

# The library calls whose direct callees are the steps: (module path suffix, function).
TARGETS = (
    ("cloister_cli/start/apply.py", "apply"),
    ("cloister_cli/start/plan.py", "plan_start"),
    ("cloister_cli/session/ending.py", "stop"),
)
COMMANDS = (
    ("cloister_cli/commands/cloister.py", "start"),
    ("cloister_cli/commands/cloister.py", "stop"),
)
NESTED_MS = 20.0  # a step this slow is broken down one level further
SHOWN_MS = 2.0  # faster steps are summed into "(other)"


# -- in the child: run the CLI, record its engine calls and children ----------------------


def _record_executor_calls(
    timed: Callable[[str, str, float], None], api_path: Callable[[str], str]
) -> None:
    """The executor's engine client (:mod:`cloister_executor.engine`) makes one standard
    library connection a request and reads each answer whole: timed from its request
    to its close."""
    import http.client  # noqa: PLC0415 - the child's only

    request = http.client.HTTPConnection.request
    close = http.client.HTTPConnection.close

    def connection_request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if type(self).__module__ == "cloister_executor.engine":
            self._profile_call = (f"{method} {api_path(url)} (executor)", time.perf_counter())
        return request(self, method, url, *args, **kwargs)

    def connection_close(self: Any) -> None:
        close(self)
        call = getattr(self, "_profile_call", None)
        if call is not None:
            self._profile_call = None
            timed("engine", call[0], call[1])

    http.client.HTTPConnection.request = connection_request  # type: ignore[method-assign]
    http.client.HTTPConnection.close = connection_close  # type: ignore[method-assign]


def _record_calls(calls: list[dict[str, Any]], started: float) -> None:
    """Wrap the HTTP clients (the docker SDK's requests session, and the standard
    library's connection for the executor's engine client) and subprocess.Popen to
    record each call's start and wall time. Only what the CLI loads anyway is imported
    here (requests, http.client), so the imports measured are the CLI's own."""
    import requests  # noqa: PLC0415 - the child's only

    def timed(kind: str, what: str, began: float) -> None:
        calls.append(
            {
                "kind": kind,
                "what": what,
                "at_ms": (began - started) * 1000,
                "ms": (time.perf_counter() - began) * 1000,
            }
        )

    def api_path(url: str) -> str:
        path = re.sub(r"^[a-z+]+://[^/]*", "", url).split("?")[0]
        return re.sub(r"^/v[0-9.]+", "", path)

    send = requests.Session.send

    def requests_send(self: Any, request: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return send(self, request, **kwargs)
        finally:
            timed("engine", f"{request.method} {api_path(request.url)}", began)

    requests.Session.send = requests_send  # type: ignore[method-assign]

    _record_executor_calls(timed, api_path)

    popen_init = subprocess.Popen.__init__
    popen_wait = subprocess.Popen.wait

    def init(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        self._profile_began = time.perf_counter()
        argv = [args] if isinstance(args, str | bytes) else list(args)
        words = [Path(str(argv[0])).name, *(str(word) for word in argv[1:])]
        shown = [word for word in words[:6] if not word.startswith("-")][:3]
        self._profile_what = " ".join(shown)
        popen_init(self, args, *rest, **kwargs)

    def wait(self: Any, timeout: float | None = None) -> int:
        code = popen_wait(self, timeout)
        if getattr(self, "_profile_what", None) is not None:
            timed("process", self._profile_what, self._profile_began)
            self._profile_what = None
        return code

    def communicate(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = communicate_before(self, *args, **kwargs)
        if getattr(self, "_profile_what", None) is not None and self.returncode is not None:
            timed("process", self._profile_what, self._profile_began)
            self._profile_what = None
        return result

    communicate_before = subprocess.Popen.communicate
    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
    subprocess.Popen.wait = wait  # type: ignore[method-assign]
    subprocess.Popen.communicate = communicate  # type: ignore[method-assign]


def _steps(stats: pstats.Stats) -> dict[str, Any]:
    """The direct callees of the first target found (and of the click command), each
    with its cumulative wall time from that caller, in ms; one level deeper for slow
    steps."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]

    def find(targets: tuple[tuple[str, str], ...]) -> list[Any]:
        return [
            key
            for key in table
            for suffix, name in targets
            if key[0].endswith(suffix) and key[2] == name
        ]

    def label(key: Any) -> str:
        filename, _line, name = key
        if filename == "~":
            return str(name)
        parts = Path(filename).parts
        where = "/".join(
            parts[parts.index("site-packages") + 1 :] if "site-packages" in parts else parts[-2:]
        )
        return f"{where.removesuffix('.py')}:{name}"

    def callees(caller: Any) -> list[tuple[str, float, Any]]:
        found = []
        for key, (_cc, _nc, _tt, _ct, callers) in table.items():
            edge = callers.get(caller)
            if edge is not None:
                found.append((label(key), edge[3] * 1000, key))
        return sorted(found, key=lambda item: -item[1])

    def tree(caller: Any, depth: int) -> list[dict[str, Any]]:
        rows = []
        for name, ms, key in callees(caller):
            row: dict[str, Any] = {"step": name, "ms": ms}
            if depth > 0 and ms >= NESTED_MS:
                row["parts"] = tree(key, depth - 1)
            rows.append(row)
        return rows

    result: dict[str, Any] = {}
    for key in find(TARGETS):
        result[label(key)] = {"ms": table[key][3] * 1000, "steps": tree(key, 1)}
    for key in find(COMMANDS):
        result[f"command {label(key)}"] = {"ms": table[key][3] * 1000, "steps": tree(key, 0)}
    return result


def child(out: Path, args: list[str], *, profile: bool) -> None:
    started = time.perf_counter()
    calls: list[dict[str, Any]] = []
    _record_calls(calls, started)
    from cloister_cli.commands.main import cli  # noqa: PLC0415 - timed as the imports

    before = (time.perf_counter() - started) * 1000
    profiler = cProfile.Profile()
    if profile:
        profiler.enable()
    code = 0
    try:
        cli.main(args, prog_name="cloister", standalone_mode=False)
    except SystemExit as error:
        code = int(error.code or 0)
    finally:
        profiler.disable()
    total = (time.perf_counter() - started) * 1000
    record: dict[str, Any] = {"args": args, "code": code, "total_ms": total, "calls": calls}
    if profile:
        stats = pstats.Stats(profiler)
        table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
        # cProfile counts a recursive function's time once, at its outermost call.
        loading = sum(value[3] for key, value in table.items() if key[2] == "_find_and_load")
        record |= {"imports_ms": before + loading * 1000, "steps": _steps(stats)}
    out.write_text(json.dumps(record), encoding="utf-8")


# -- in the parent ---------------------------------------------------------------------------


def profiled(
    cli: Cli, args: list[str], cwd: Path, scratch: Path, *, profile: bool = True
) -> dict[str, Any]:
    """Run ``cloister ARGS`` in a child: under cProfile, or else plain under ``-X
    importtime`` (its top-level imports summed: ``imports_ms``)."""
    out = scratch / f"profile-{secrets.token_hex(4)}.json"
    python = [sys.executable] if profile else [sys.executable, "-X", "importtime"]
    mode = "--child" if profile else "--plain"
    result = subprocess.run(
        [*python, __file__, mode, str(out), "--", *args],
        cwd=cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    if result.returncode != 0 or not out.exists():
        raise BenchError(f"cloister {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    record: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    if record["code"] != 0:
        raise BenchError(f"cloister {' '.join(args)} exited {record['code']}")
    if not profile:
        top = re.findall(r"^import time:\s+\d+ \|\s+(\d+) \| \S", result.stderr, re.MULTILINE)
        record["imports_ms"] = sum(int(value) for value in top) / 1000
    return record


def merged(records: list[dict[str, Any]], plain: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians over *records* (profiled) of every figure, keyed as in the first, and
    of the *plain* runs' wall and import times."""

    def medians(rows_per_run: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rows in rows_per_run:
            for row in rows:
                by_name[row["step"]].append(row)
        order = [row["step"] for row in rows_per_run[0]]
        order += [name for name in by_name if name not in order]
        result = []
        for name in order:
            rows = by_name[name]
            values = [row["ms"] for row in rows] + [0.0] * (len(rows_per_run) - len(rows))
            entry: dict[str, Any] = {"step": name, "ms": statistics.median(values)}
            nested = [row["parts"] for row in rows if "parts" in row]
            if nested:
                entry["parts"] = medians(nested)
            result.append(entry)
        return sorted(result, key=lambda row: -row["ms"])

    first = records[0]
    steps = {
        name: {
            "ms": statistics.median(record["steps"][name]["ms"] for record in records),
            "steps": medians([record["steps"][name]["steps"] for record in records]),
        }
        for name in first["steps"]
    }
    calls: dict[str, list[float]] = defaultdict(list)
    for record in records:
        for call in record["calls"]:
            calls[f"{call['kind']}: {call['what']}"].append(call["ms"])
    return {
        "args": first["args"],
        "runs": len(records),
        "total_ms": statistics.median(record["total_ms"] for record in records),
        "imports_ms": statistics.median(record["imports_ms"] for record in records),
        "plain_total_ms": statistics.median(record["total_ms"] for record in plain),
        "plain_imports_ms": statistics.median(record["imports_ms"] for record in plain),
        "steps": steps,
        "calls": {
            name: {
                "count_per_run": len(values) / len(records),
                "ms_median": statistics.median(values),
            }
            for name, values in calls.items()
        },
        "calls_in_order": first["calls"],
    }


def show(result: dict[str, Any]) -> None:
    print(f"cloister {' '.join(result['args'])} (median of {result['runs']}, under cProfile)")
    print(f"  {'total (process start to exit)':<62} {result['total_ms']:8.1f} ms")
    print(f"  {'imports (all, before and in the command)':<62} {result['imports_ms']:8.1f} ms")
    print(f"  {'without the profiler: total':<62} {result['plain_total_ms']:8.1f} ms")
    label = "without the profiler: imports (-X importtime)"
    print(f"  {label:<62} {result['plain_imports_ms']:8.1f} ms")
    for name, value in result["steps"].items():
        print(f"  {name:<62} {value['ms']:8.1f} ms")
        other = 0.0
        for row in value["steps"]:
            if row["ms"] < SHOWN_MS:
                other += row["ms"]
                continue
            print(f"    {row['step']:<60} {row['ms']:8.1f}")
            for part in row.get("parts", []):
                if part["ms"] >= SHOWN_MS:
                    print(f"      {part['step']:<58} {part['ms']:8.1f}")
        if other:
            print(f"    {'(other, each < 2 ms)':<60} {other:8.1f}")
    print("  engine API calls and child processes of the first run, in order (start ms, ms)")
    for call in result["calls_in_order"]:
        print(f"    {call['at_ms']:8.1f} {call['ms']:8.1f}  {call['kind']}: {call['what']}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] in ("--child", "--plain"):
        child(Path(sys.argv[2]), sys.argv[4:], profile=sys.argv[1] == "--child")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--image", default="cloister-slim:latest")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cloister-profile-") as directory:
        root = Path(directory)
        cli, repo, name = scratch_cli(root, options.image, "profile")
        starts: list[dict[str, Any]] = []
        stops: list[dict[str, Any]] = []
        plain_starts: list[dict[str, Any]] = []
        plain_stops: list[dict[str, Any]] = []
        try:
            cli.run("guardian", "start", timeout=BUILD_TIMEOUT_SECONDS)
            cli.run("start", "-d", cwd=repo, timeout=BUILD_TIMEOUT_SECONDS)
            cli.run("stop", name)
            for _ in range(options.runs):
                starts.append(profiled(cli, ["start", "-d"], repo, root))
                stops.append(profiled(cli, ["stop", name], repo, root))
                plain_starts.append(profiled(cli, ["start", "-d"], repo, root, profile=False))
                plain_stops.append(profiled(cli, ["stop", name], repo, root, profile=False))
        finally:
            problems = cleanup(cli, name)
    results: dict[str, Any] = {
        "start": merged(starts, plain_starts),
        "stop": merged(stops, plain_stops),
        "cleanup_problems": problems,
    }
    if options.json:
        print(json.dumps(results, indent=2))
        return
    show(results["start"])
    show(results["stop"])
    for problem in problems:
        print(f"cleanup: {problem}", file=sys.stderr)


if __name__ == "__main__":
    main()
