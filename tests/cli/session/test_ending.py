"""``ending``'s imports: what ``cloister start`` (which imports it) does not pay for."""

from __future__ import annotations

import json
import subprocess
import sys

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
