"""Directory trees an agent could build: deeper than Python's recursion limit."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from cloister_core import beneath

DEPTH = 1100  # past Python's recursion limit: os.walk and shutil.rmtree stop there


@contextlib.contextmanager
def deep_tree(root: Path, depth: int = DEPTH, name: str = "d") -> Iterator[Path]:
    """*root* (made if missing) with *depth* nested directories *name*, a file ``f`` in
    each; yields the deepest, and removes what is left of them on the way out: pytest's
    own clean-up of old ``tmp_path`` directories recurses, and would stop on one."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        # Each made relative to its parent: Path.mkdir(parents=True) recurses too.
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for _ in range(depth):
                os.mkdir(name, dir_fd=fd)
                below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = below
                os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        finally:
            os.close(fd)
        yield root.joinpath(*[name] * depth)
    finally:
        beneath.remove_tree(root / name)
