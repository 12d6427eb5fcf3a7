"""A project's refs are checked before a cloister starts: exist, kind, not sensitive."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloister_cli.container.cloisters import CloisterStartError, Forbidden
from cloister_cli.repo.projects import Project
from cloister_cli.repo.refs import check_refs, ref_problem
from cloister_core.paths import CloisterPaths


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    return home


def test_problems(tmp_path: Path, paths: CloisterPaths, home: Path) -> None:
    forbidden = Forbidden.for_host(paths, home)
    root = tmp_path / "repo"
    (root / "lib").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo")
    assert ref_problem(root, "lib", forbidden) is None
    assert ref_problem(root, str(tmp_path / "repo"), forbidden) is None
    assert ref_problem(None, "lib", forbidden) == (
        "ref 'lib' is relative, and the project has no `root:` to resolve it"
    )
    assert ref_problem(root, "nope", forbidden) == f"ref {str(root / 'nope')!r} does not exist"
    assert ref_problem(root, str(tmp_path / "fifo"), forbidden) == (
        f"ref {str(tmp_path / 'fifo')!r} is neither a directory nor a file"
    )
    problem = ref_problem(root, str(home / ".ssh"), forbidden)
    assert problem is not None
    assert problem.startswith(f"refusing to mount the ref {str(home / '.ssh')!r}")
    assert ref_problem(root, str(home), forbidden) is not None  # holds ~/.ssh


def test_check_refs_names_every_bad_ref(tmp_path: Path, paths: CloisterPaths, home: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    project_file = paths.project_config("my-api")
    project_file.parent.mkdir(parents=True)
    project_file.write_text(f"refs: [missing, {home / '.ssh'}, {root}]\n", encoding="utf-8")
    with pytest.raises(CloisterStartError) as caught:
        check_refs(paths, Project("my-api", root, git=True), home)
    message = str(caught.value)
    assert message.startswith(
        f"project my-api cannot start: ref {str(root / 'missing')!r} does not exist;"
        f" refusing to mount the ref {str(home / '.ssh')!r}"
    )
    assert message.endswith(f"(refs in {project_file})")
    project_file.write_text(f"refs: [{root}]\n", encoding="utf-8")
    check_refs(paths, Project("my-api", root, git=True), home)
