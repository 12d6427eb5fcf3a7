"""A directory on another filesystem than the test's own, for what crosses filesystems."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# tmpfs mounts that exist on a Linux machine (and on CI, running as root).
CANDIDATES = ("/dev/shm", "/run/shm", "/run/user", "/run")


@contextlib.contextmanager
def other_filesystem(than: Path) -> Iterator[Path]:
    """A new directory on a filesystem other than *than*'s, removed afterwards; the test
    is skipped only when the machine has no second filesystem to write on."""
    device = than.stat().st_dev
    for candidate in CANDIDATES:
        try:
            if Path(candidate).stat().st_dev == device:
                continue
            made = Path(tempfile.mkdtemp(prefix="cloister-test-", dir=candidate))
        except OSError:
            continue
        try:
            yield made
        finally:
            shutil.rmtree(made, ignore_errors=True)
        return
    pytest.skip(f"no filesystem other than {than}'s to write on")
