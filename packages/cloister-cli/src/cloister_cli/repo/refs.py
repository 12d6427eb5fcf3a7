"""A project's refs (read-only at ``/refs`` in its cloisters), checked before any use.

``cloister start`` checks them before it builds an image (which can take minutes) and
``cloister config check -p`` checks them with the rest of the project's file: each must
exist, be a directory or a file, and not be a path a cloister must never see
(:class:`~cloister_cli.container.cloisters.Forbidden`). A relative ref is relative to the
project's root.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cloister_cli.container.cloisters import CloisterStartError, Forbidden
from cloister_cli.repo.projects import Project
from cloister_core.config import load_project_config
from cloister_core.paths import CloisterPaths


def ref_problem(root: Path | None, given: str, forbidden: Forbidden) -> str | None:
    """What is wrong with ref *given* of a project at *root*; None if it can be mounted."""
    ref = Path(given).expanduser()
    if not ref.is_absolute():
        if root is None:
            return f"ref {given!r} is relative, and the project has no `root:` to resolve it"
        ref = root / ref
    if not ref.exists():
        return f"ref {str(ref)!r} does not exist"
    if not (ref.is_dir() or ref.is_file()):
        return f"ref {str(ref)!r} is neither a directory nor a file"
    try:
        forbidden.check(ref, "the ref")
    except CloisterStartError as error:
        return str(error)
    return None


def ref_problems(
    root: Path | None, refs: Iterable[str], forbidden: Forbidden
) -> list[tuple[int, str]]:
    """(index, problem) for each ref that cannot be mounted."""
    found = []
    for index, given in enumerate(refs):
        problem = ref_problem(root, given, forbidden)
        if problem is not None:
            found.append((index, problem))
    return found


def check_refs(paths: CloisterPaths, project: Project, home: Path) -> None:
    """Refuse (:class:`CloisterStartError`) a project whose refs cannot all be mounted."""
    refs = load_project_config(paths, project.name).refs
    problems = ref_problems(project.root, refs, Forbidden.for_host(paths, home))
    if problems:
        listed = "; ".join(problem for _, problem in problems)
        raise CloisterStartError(
            f"project {project.name} cannot start: {listed}"
            f" (refs in {paths.project_config(project.name)})"
        )
