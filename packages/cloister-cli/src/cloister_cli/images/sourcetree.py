"""Finding the Cloister source tree: the Dockerfiles, compose templates and packages.

Images are built from the tree the CLI came from (no registry needs to hold them):
``$CLOISTER_SOURCE_DIR`` if set, else the tree this package is installed from (an
editable install, as the README's set-up command makes). Never the working directory:
that is often a project, which its agent writes, and the tree's templates, Dockerfiles
and build backend run on the host.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cloister_core.errors import CloisterError


class SourceTreeError(CloisterError):
    """No Cloister source tree could be found."""


def is_source_tree(directory: Path) -> bool:
    return (
        (directory / "uv.lock").is_file()
        and (directory / "images").is_dir()
        and (directory / "compose").is_dir()
    )


def find_workspace(start: Path) -> Path:
    """The source tree at or above *start*."""
    for directory in (start, *start.parents):
        if is_source_tree(directory):
            return directory
    raise SourceTreeError(
        f"no Cloister source tree (uv.lock, images/, compose/) at or above {start}"
    )


def source_tree(environ: Mapping[str, str] | None = None) -> Path:
    """Where to build images from; :class:`SourceTreeError` explains what to do if none."""
    env = os.environ if environ is None else environ
    explicit = env.get("CLOISTER_SOURCE_DIR")
    if explicit:
        path = Path(explicit).expanduser()
        if not is_source_tree(path):
            raise SourceTreeError(f"CLOISTER_SOURCE_DIR={explicit!r} is not a Cloister source tree")
        return path
    try:
        return find_workspace(Path(__file__).resolve().parent)
    except SourceTreeError:
        pass
    raise SourceTreeError(
        "cannot find the Cloister source tree to build images from: install with"
        " `uv tool install --editable ./packages/cloister-cli` from a checkout, or set"
        " CLOISTER_SOURCE_DIR to the checkout"
    )
