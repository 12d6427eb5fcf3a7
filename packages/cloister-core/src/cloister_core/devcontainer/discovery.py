"""Where a project's devcontainer.json is: :func:`find_devcontainer`.

Apart from the loader, and light: a start in a project without one imports neither the
loader nor the model (what it reads is parsed only when there is a file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cloister_core.devcontainer.model import DevcontainerError

CANDIDATES: tuple[str, ...] = (
    ".devcontainer/cloister/devcontainer.json",
    ".devcontainer/devcontainer.json",
    ".devcontainer.json",
)


def _error(path: Path, message: str) -> DevcontainerError:
    from cloister_core.devcontainer.model import DevcontainerError  # noqa: PLC0415 - only to fail

    return DevcontainerError(path, message)


def find_devcontainer(project_root: Path, explicit: Path | None = None) -> Path | None:
    """The devcontainer.json to use: *explicit* (``--devcontainer``), else the first of
    :data:`CANDIDATES` in *project_root* that exists; None if there is none.

    An explicit directory means its ``devcontainer.json``; an explicit path that does not
    exist is an error (a typo must not silently start without the file). A file found
    in the project whose real path (links resolved) is outside the project is an error:
    the agent could point ``.devcontainer`` at a directory it changes unseen.
    """
    if explicit is not None:
        chosen = explicit / "devcontainer.json" if explicit.is_dir() else explicit
        if not chosen.is_file():
            raise _error(chosen, "no such file (given with --devcontainer)")
        return chosen
    root = project_root.resolve()
    for candidate in CANDIDATES:
        path = project_root / candidate
        if path.is_file():
            real = path.resolve()
            if not real.is_relative_to(root):
                raise _error(
                    path,
                    f"it is a link to {real}, outside the project ({root}): Cloister reads"
                    " only a devcontainer.json inside the project (or one given with"
                    " --devcontainer)",
                )
            return path
    return None
