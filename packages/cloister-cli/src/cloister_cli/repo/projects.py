"""Projects: a git repository (or, by choice, any directory) and its name.

A project is named after its directory (``~/src/my-api`` → ``my-api``) unless
``-p NAME`` says otherwise, and the name is bound to that directory in
``<config>/projects/<name>.yaml`` (``root:``) the first time it is used, so two
directories can never share a name by accident: the second gets an error that
suggests ``-p``. The file is the human's, so it is edited round-trip (comments kept).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from cloister_cli.images import shape
from cloister_cli.repo import git
from cloister_cli.repo.git import Layout
from cloister_core.config import load_project_config
from cloister_core.config.loader import load_text, parse_yaml, round_trip_yaml
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write, locked
from cloister_core.names import project_name_from_path, validate_name
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository


class ProjectError(CloisterError):
    """A project that cannot be used as asked."""


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    root: Path
    git: bool
    remote: str | None = None
    # Where git keeps it, as :func:`identify` asked (None: not asked, or no git): the
    # rest of a start reads it here rather than ask git again.
    layout: Layout | None = field(default=None, compare=False, repr=False)

    def repository(self) -> HumanRepository:
        """Its repository (:class:`HumanRepository` of its root), as :func:`identify`
        read it; asked of git when it was not."""
        if self.layout is None:
            return HumanRepository.of(self.root)
        return HumanRepository(self.layout.toplevel, self.layout.git_dir, self.layout.common_dir)


def identify(directory: Path, name: str | None, *, allow_no_git: bool) -> Project:
    """The project of *directory* (its git working tree), named *name* or after it."""
    layout = git.find_layout(directory)  # one git call: the work tree and its git dir
    if layout is None:
        if not allow_no_git:
            raise ProjectError(
                f"{directory} is not inside a git repository; Cloister relies on git to undo"
                " what an agent does. Run `git init`, or pass --allow-no-git"
            )
        root, remote = directory.resolve(), None
    else:
        top = layout.toplevel
        root, remote = top.resolve(), git.remote_url(top)
        here = directory.resolve()
        own = root / ".git"
        foreign = here != root and root not in here.parents
        if foreign or (own.is_dir() and own.resolve() != layout.git_dir.resolve()):
            raise ProjectError(
                f"git says the work tree of {directory} is {top} (core.worktree is set):"
                " Cloister works in the directory that holds .git; unset core.worktree"
            )
    project_name = (
        validate_name(name, what="project name") if name else project_name_from_path(root)
    )
    return Project(project_name, root, layout is not None, remote, layout)


def register(paths: CloisterPaths, project: Project) -> None:
    """Bind the name to the directory in ``projects/<name>.yaml``, or refuse a collision."""
    path = paths.project_config(project.name)
    with locked(path):
        text = load_text(path)
        document = parse_yaml(text, path) if text else None
        load_project_config(paths, project.name)  # refuse to touch a broken file
        existing = document.get("root") if document is not None else None
        if existing is not None:
            if Path(str(existing)).expanduser().resolve() != project.root:
                raise ProjectError(
                    f"project {project.name!r} already belongs to {existing}; name this one"
                    f" differently with -p NAME (e.g. -p {project.name}-2)"
                )
            return
        # A file of nothing but comments parses to None: keep its text, add the keys below.
        prefix = "" if document is not None else text or _header(project.name)
        if document is None:
            document = CommentedMap()
        document["root"] = str(project.root)
        if project.remote:
            document["remote"] = project.remote
        buffer = io.StringIO()
        round_trip_yaml().dump(document, buffer)
        if prefix and not prefix.endswith("\n"):
            prefix += "\n"
        atomic_write(path, prefix + buffer.getvalue(), mode=0o644)


def _header(name: str) -> str:
    return (
        f"# Cloister project {name}: rules and refs for this project only.\n"
        "# See config.yaml for the keys (proxy.allow/deny, hostexec patterns);"
        " refs: read-only at /refs.\n"
    )


@dataclass(frozen=True, slots=True)
class ProjectSummary:
    name: str
    root: str | None
    remote: str | None
    refs: tuple[str, ...]


def list_projects(paths: CloisterPaths) -> list[ProjectSummary]:
    found = []
    for file in sorted(paths.projects_dir.glob("*.yaml")):
        config = load_project_config(paths, file.stem)
        found.append(ProjectSummary(file.stem, config.root, config.remote, config.refs))
    return found


def exists(paths: CloisterPaths, name: str) -> bool:
    """Whether project *name* has a config file or decisions."""
    return any(p.exists() for p in (paths.project_config(name), paths.project_decisions(name)))


def require(paths: CloisterPaths, name: str) -> None:
    """Refuse a name no project has (no config file, no decisions)."""
    if not exists(paths, name):
        raise ProjectError(f"no project {name!r} (`cloister project list`)")


def remove(paths: CloisterPaths, name: str) -> list[Path]:
    """Delete the project's config, decision and shape-approval files; returns what was deleted."""
    require(paths, name)
    removed = []
    # The shape approval too: a later project of this name must not inherit it.
    for path in (
        paths.project_config(name),
        paths.project_decisions(name),
        shape.approved_file(paths, name),
    ):
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed
