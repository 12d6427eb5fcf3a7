"""What a start needs up or built first: the guardian stack, the image of ``cloister
sync``'s throwaway containers, and Cloister's agent image (used by ``cloister start``,
``cloister guardian start`` and ``cloister images build``)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from cloister_cli.container.cloisters import CloisterStartError
from cloister_cli.context import Context
from cloister_cli.images.builds import (
    AGENT_IMAGES,
    assemble_context,
    build_image,
    is_current,
    source_fingerprint,
)

Progress = Callable[[str, str], None]  # (what, line)


def ensure_guardian(context: Context, progress: Progress, *, rebuild: bool = False) -> bool:
    """Bring the stack up, building images that are missing or stale; True if it started.

    A running stack is left alone (``rebuild`` restarts it with fresh images): this runs
    on every ``cloister start``, and asking the engine about images costs time.
    """
    guardian = context.guardian
    if not rebuild and guardian.is_running():
        return False
    stale = guardian.tags.specs() if rebuild else guardian.stale_images()
    if stale:
        context.require_source()
        with tempfile.TemporaryDirectory(prefix="cloister-build-") as scratch:
            guardian.build_images(stale, progress, Path(scratch))
    guardian.start()
    return True


def ensure_git_image(context: Context, progress: Progress) -> None:
    """Build the image of ``cloister sync``'s throwaway containers when missing or stale
    (a stack started by an older Cloister is left running without it)."""
    guardian = context.guardian
    stale = guardian.stale_images(git_only=True)
    if stale:
        context.require_source()
        with tempfile.TemporaryDirectory(prefix="cloister-build-") as scratch:
            guardian.build_images(stale, progress, Path(scratch))


def ensure_agent_image(context: Context, image: str, progress: Progress) -> None:
    """Build one of Cloister's agent images when missing or stale; others must exist."""
    spec = AGENT_IMAGES.get(image)
    source = context.source
    fingerprint = source_fingerprint(source, spec) if spec and source else None
    if is_current(context.docker, image, fingerprint):
        return
    if spec is None:
        raise CloisterStartError(
            f"image {image!r} is not on this machine; `docker pull {image}` or build it first"
        )
    if source is None:
        source = context.require_source()  # raises: says where it looked for the tree
    architecture = context.docker.info()["Architecture"]
    with tempfile.TemporaryDirectory(prefix="cloister-build-") as scratch:
        progress(image, "assembling the build context")
        build_context = assemble_context(source, spec, Path(scratch) / "agent", architecture)
        build_image(
            context.docker,
            build_context,
            image,
            on_line=lambda line: progress(image, line),
            fingerprint=fingerprint,
        )
