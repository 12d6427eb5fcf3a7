"""Benchmark: loading a hostile devcontainer.json of the largest size read (1 MiB).

The file is the agent's and is read before the human is asked anything, so loading
must take time linear in its size. Three shapes of file, each just under
``loader.MAX_SIZE``:

1. **runArgs**: about 40,000 ``runArgs`` items, each an override with its line;
2. **mounts**: about 40,000 ``mounts`` (tmpfs, named volumes and binds outside the
   project, in turn), each decided and noted;
3. **nesting**: ``customizations`` holding objects nested as deep as the parser takes,
   repeated to fill the file.

Each figure is the median of --runs loads (``load_devcontainer``: reading, parsing,
every override). The target for 40,000 runArgs at 1 MiB is < 1 s.

    uv run python benchmarks/bench_devcontainer_load.py
    uv run python benchmarks/bench_devcontainer_load.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cloister_core.devcontainer import load_devcontainer
from cloister_core.devcontainer.loader import MAX_SIZE
from cloister_core.jsonc import MAX_DEPTH

TARGET_S = 1.0
HEAD = '{\n  "image": "debian:bookworm-slim",\n'


def _fill(key: str, item: Callable[[int], str]) -> tuple[str, int]:
    """A file of ``"key": [items]`` as close under MAX_SIZE as whole items allow."""
    parts: list[str] = []
    size = len(HEAD) + len(key) + 12
    index = 0
    while True:
        text = item(index)
        if size + len(text) + 6 > MAX_SIZE:
            break
        parts.append(text)
        size += len(text) + 6
        index += 1
    return HEAD + f'  "{key}": [\n    ' + ",\n    ".join(parts) + "\n  ]\n}\n", index


def run_args_file() -> tuple[str, int]:
    # 40,000 items of about 20 bytes (with the separators, 26) fill 1 MiB.
    flags = ('"--privileged={0:05}"', '"--cap-add=SYS{0:05}"', '"--network=net{0:05}"')
    return _fill("runArgs", lambda index: flags[index % len(flags)].format(index))


def mounts_file() -> tuple[str, int]:
    kinds = (
        '"type=tmpfs,target=/t{0}"',
        '"source=v{0},target=/v{0}"',
        '"type=bind,source=/opt/{0},target=/b"',
    )
    return _fill("mounts", lambda index: kinds[index % len(kinds)].format(index))


def nesting_file() -> tuple[str, int]:
    deep = '{"a":' * (MAX_DEPTH - 3) + "1" + "}" * (MAX_DEPTH - 3)
    text, count = _fill("customizations", lambda index: deep)
    return text, count


CASES: dict[str, Callable[[], tuple[str, int]]] = {
    "runArgs": run_args_file,
    "mounts": mounts_file,
    "nesting": nesting_file,
}


def measure(text: str, runs: int) -> tuple[float, int]:
    """Median seconds of *runs* loads of *text*, and the number of overrides."""
    with tempfile.TemporaryDirectory() as directory:
        project = Path(directory) / "project"
        path = project / ".devcontainer" / "devcontainer.json"
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
        times: list[float] = []
        overrides = 0
        for _ in range(runs):
            start = time.perf_counter()
            loaded = load_devcontainer(
                path, project_root=project, home=Path(directory) / "home", environ={}
            )
            times.append(time.perf_counter() - start)
            overrides = len(loaded.overrides)
    return statistics.median(times), overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="loads per case (median)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()
    results: dict[str, dict[str, float | int]] = {}
    for name, make in CASES.items():
        text, items = make()
        seconds, overrides = measure(text, options.runs)
        results[name] = {
            "bytes": len(text.encode()),
            "items": items,
            "overrides": overrides,
            "seconds": round(seconds, 4),
        }
    if options.json:
        print(json.dumps({"target_s": TARGET_S, "cases": results}, indent=2))
        return
    print(f"{'case':<10} {'bytes':>9} {'items':>7} {'overrides':>10} {'load (s)':>9}")
    for name, result in results.items():
        print(
            f"{name:<10} {result['bytes']:>9} {result['items']:>7} {result['overrides']:>10}"
            f" {result['seconds']:>9.3f}"
        )
    worst = results["runArgs"]["seconds"]
    verdict = "ok" if worst < TARGET_S else "OVER"
    print(f"runArgs at 1 MiB: {worst:.3f} s (target < {TARGET_S:.0f} s): {verdict}")


if __name__ == "__main__":
    main()
