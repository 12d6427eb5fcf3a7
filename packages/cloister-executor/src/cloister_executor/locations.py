"""Where the host executor keeps its socket and secret (``<data>/run``).

A module of its own, free of the daemon's imports, because the CLI asks these paths on
every ``cloister start`` and should not pay for loading the daemon to do so.
"""

from __future__ import annotations

from pathlib import Path

from cloister_core.paths import CloisterPaths


def run_dir(paths: CloisterPaths) -> Path:
    """``<data>/run``: the directory mounted into the gateway (socket and secret)."""
    return paths.data_dir / "run"


def socket_path(paths: CloisterPaths) -> Path:
    return run_dir(paths) / "executor.sock"


def secret_path(paths: CloisterPaths) -> Path:
    return run_dir(paths) / "executor.secret"
