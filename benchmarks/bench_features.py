"""Benchmark: what dev container Features add to a start, against a real Docker engine.

Three OCI Features from the fake registry of the tests (on loopback; the fetch is on the
host), installed on ``debian:bookworm-slim`` with the cloister layer on top:

1. **cached**: the image-planning part of a start (resolving the Features with their
   lock file and cache: ``features.resolve.plan_features``, then
   ``projectimages.plan_project_image``), with the 3-Feature image already built,
   against the same project without Features. A whole start is not timed: its guardian,
   snapshot and container creation vary by far more than the difference measured. The
   target is <= 0.2 s added (median of --runs).
2. **first build**: ``ensure_project_image`` of the project with Features whose
   install.sh each sleeps --sleep seconds (nothing cached: a fresh registry and data
   directory, a new key), against the same build without Features; the overhead is
   what the Features' build adds beyond their own install time. Target <= 1 s.

    uv run python benchmarks/bench_features.py
    uv run python benchmarks/bench_features.py --json --runs 20
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the fake registry lives with the tests that use it

from tests.cli.images.features.conftest import make_feature  # noqa: E402
from tests.registry import FakeRegistry  # noqa: E402

from cloister_cli.images import projectimages  # noqa: E402
from cloister_cli.images.features.resolve import Context, plan_features, write_lock  # noqa: E402
from cloister_cli.images.projectimages import PROJECT_LABEL  # noqa: E402
from cloister_core.devcontainer import Devcontainer, load_devcontainer  # noqa: E402
from cloister_core.paths import CloisterPaths  # noqa: E402

BASE = "debian:bookworm-slim"
CACHED_TARGET_S = 0.2
BUILD_TARGET_S = 1.0
COUNT = 3


def _project(root: Path, registry: FakeRegistry, sleep: float, salt: str) -> Path:
    features = {}
    for index in range(COUNT):
        name = f"bench{index}"
        folder = make_feature(
            root / "sources" / name,
            name,
            script=f"#!/bin/sh\n# {salt}\nsleep {sleep}\necho {name} > /opt/{name}\n",
            options={"level": {"type": "string", "default": "1"}},
            containerEnv={f"BENCH{index}": "yes"},
        )
        registry.publish(f"bench/{name}", folder, "1")
        features[f"{registry.host}/bench/{name}:1"] = {"level": str(index)}
    project = root / "project"
    (project / ".devcontainer").mkdir(parents=True)
    document = {"image": BASE, "features": features}
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps(document))
    return project


def _load(project: Path, home: Path, registry: FakeRegistry) -> Devcontainer:
    return load_devcontainer(
        project / ".devcontainer" / "devcontainer.json",
        project_root=project,
        home=home,
        environ={},
        trusted_features=(f"{registry.host}/",),
    )


class Bench:
    def __init__(self, client: docker.DockerClient, root: Path, registry: FakeRegistry):
        self.client = client
        self.root = root
        self.registry = registry
        self.paths = CloisterPaths(config_dir=root / "config", data_dir=root / "data")
        self.name = f"bench-features-{secrets.token_hex(3)}"

    def context(self, project: Path) -> Context:
        return Context(
            paths=self.paths,
            project_root=project,
            home=self.root / "home",
            environ={},
            trusted=(f"{self.registry.host}/",),
        )

    def ensure(self, project: Path, devcontainer: Devcontainer, *, features: bool) -> float:
        started = time.perf_counter()
        plan = plan_features(self.context(project), devcontainer) if features else None
        if plan is not None:
            write_lock(plan, project)
        projectimages.ensure_project_image(
            self.client,
            self.paths,
            project=self.name,
            root=project,
            devcontainer=devcontainer if features else replace(devcontainer, features=()),
            base_image=BASE,
            source=ROOT,
            features=plan,
        )
        return time.perf_counter() - started

    def planning(self, project: Path, devcontainer: Devcontainer, *, features: bool) -> float:
        started = time.perf_counter()
        plan = plan_features(self.context(project), devcontainer) if features else None
        found = projectimages.plan_project_image(
            self.client,
            self.paths,
            project=self.name,
            root=project,
            devcontainer=devcontainer if features else replace(devcontainer, features=()),
            base_image=BASE,
            source=ROOT,
            features=plan,
        )
        elapsed = time.perf_counter() - started
        assert found.cached, "the image should be cached"  # noqa: S101 - a benchmark's check
        return elapsed

    def remove_images(self) -> None:
        for image in self.client.images.list(filters={"label": f"{PROJECT_LABEL}={self.name}"}):
            self.client.images.remove(str(image.id), force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    client = docker.from_env()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as directory, FakeRegistry() as registry:
        root = Path(directory)
        bench = Bench(client, root, registry)
        try:
            project = _project(root, registry, options.sleep, secrets.token_hex(4))
            devcontainer = _load(project, root / "home", registry)
            plain = bench.ensure(project, devcontainer, features=False)
            first = bench.ensure(project, devcontainer, features=True)
            # The Features' own install time is COUNT sleeps; the rest is overhead.
            overhead = first - plain - COUNT * options.sleep
            with_features = [
                bench.planning(project, devcontainer, features=True) for _ in range(options.runs)
            ]
            without = [
                bench.planning(project, devcontainer, features=False) for _ in range(options.runs)
            ]
        finally:
            bench.remove_images()
    added = statistics.median(with_features) - statistics.median(without)
    results = {
        "features": COUNT,
        "cached_plan_with_features_s": round(statistics.median(with_features), 4),
        "cached_plan_without_features_s": round(statistics.median(without), 4),
        "cached_added_s": round(added, 4),
        "cached_target_s": CACHED_TARGET_S,
        "first_build_without_features_s": round(plain, 3),
        "first_build_with_features_s": round(first, 3),
        "features_install_time_s": COUNT * options.sleep,
        "first_build_overhead_s": round(overhead, 3),
        "build_target_s": BUILD_TARGET_S,
    }
    if options.json:
        print(json.dumps(results, indent=2))
        return
    print(f"cached image, {COUNT} Features: planning adds {added * 1000:.1f} ms (target <= 200 ms)")
    print(
        f"first build: {first:.2f} s with Features, {plain:.2f} s without, install time"
        f" {COUNT * options.sleep:.1f} s: overhead {overhead:.2f} s (target <= 1 s)"
    )


if __name__ == "__main__":
    main()
