"""``ending``: what ``cloister start`` (which imports it) does not pay for, and what a
stop's cleanup on threads that fails leaves in its outcome (its network it leaves)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker.errors
import pytest

from cloister_cli.context import Context
from cloister_cli.session import ending
from cloister_core import stack
from cloister_core.paths import CloisterPaths
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine

PROBE = """
import json, sys
import cloister_cli.session.ending
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_it_loads_neither_the_syncer_nor_the_snapshots() -> None:
    """The syncer is imported when a stop has commits to bring back (on a thread while
    the engine removes the container), the snapshots when a git directory is lost: a
    start does not wait for the first, a stop that brings its commits back for neither."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    modules = set(json.loads(result.stdout))
    assert "cloister_cli.session.ending" in modules
    assert "cloister_executor.gitsync" not in modules
    assert "httpx" not in modules
    assert "cloister_cli.session.snapshots" not in modules


class _RefusingGuardian:
    def reload_proxy(self) -> None:
        raise docker.errors.APIError("the proxy is gone")


def test_what_fails_on_its_threads_is_in_the_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raised at the end, it would lose the outcome (the review's report): it is in it."""
    engine = FakeEngine()
    box = engine.add_container(
        INSTANCE.cloister("api"), {**INSTANCE.labels, stack.LABEL_CLOISTER: "api"}
    )
    network = engine.add_network(INSTANCE.cloister("api"), labels=INSTANCE.labels)

    def refused(force: bool = False) -> None:
        raise docker.errors.APIError("500", explanation="no")

    monkeypatch.setattr(box, "remove", refused)
    monkeypatch.setattr(Context, "docker", property(lambda self: engine))
    monkeypatch.setattr(Context, "guardian", property(lambda self: _RefusingGuardian()))
    monkeypatch.setattr(Context, "instance", property(lambda self: INSTANCE))
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    outcome = ending.stop(Context(paths=paths, home=tmp_path / "home"), "api")
    assert outcome.stopped
    assert box.status == "exited"  # killed: nothing of it runs
    assert engine.networks.by_name[INSTANCE.cloister("api")] is network  # kept
    assert outcome.cleanup_errors == (
        f"its container {INSTANCE.cloister('api')} could not be removed (APIError: 500"
        f' ("no")); `docker rm -f {INSTANCE.cloister("api")}` removes it',
        "the proxy could not be told at once (APIError: the proxy is gone); it forgets the"
        " cloister's token at its next reload",
    )
