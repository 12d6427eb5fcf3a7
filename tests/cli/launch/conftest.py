"""A short temporary directory: a Unix socket's path has at most 108 bytes, and pytest's
``tmp_path`` (named after the test) is often longer than that leaves room for."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cl-", dir="/tmp") as name:
        yield Path(name)
