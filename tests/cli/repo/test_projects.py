"""Projects: naming a repository, binding the name to it, listing and forgetting it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_cli.images import shape
from cloister_cli.repo import projects
from cloister_cli.repo.projects import Project, ProjectError, ProjectSummary
from cloister_core.config import load_project_config
from cloister_core.errors import CloisterNameError, ConfigError
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from tests.git_support import hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "src" / "My Repo")


# -- identify ----------------------------------------------------------------------------


def test_identify_names_the_project_after_its_directory(repo: Path) -> None:
    assert projects.identify(repo, None, allow_no_git=False) == Project(
        name="my-repo", root=repo, git=True, remote=None
    )


def test_identify_from_a_subdirectory_uses_the_toplevel(repo: Path) -> None:
    run_git(repo, "remote", "add", "origin", "https://example.invalid/me/repo.git")
    (repo / "src" / "pkg").mkdir(parents=True)
    project = projects.identify(repo / "src" / "pkg", None, allow_no_git=False)
    assert (project.name, project.root, project.git) == ("my-repo", repo, True)
    assert project.remote == "https://example.invalid/me/repo.git"


def test_identify_keeps_the_repository_git_told_it(repo: Path) -> None:
    # One git call: the rest of a start takes the repository from the project.
    (repo / "src").mkdir()
    project = projects.identify(repo / "src", None, allow_no_git=False)
    assert project.layout is not None
    assert project.repository() == HumanRepository.of(repo)
    assert Project("my-repo", repo, git=True).repository() == HumanRepository.of(repo)
    assert project == Project("my-repo", repo, git=True)  # the layout is not compared


def test_identify_with_an_explicit_name(repo: Path) -> None:
    assert projects.identify(repo, "work-api", allow_no_git=False).name == "work-api"


@pytest.mark.parametrize("name", ["Work API", "../x", "-x", "a/b", "x" * 64])
def test_identify_refuses_an_invalid_name(repo: Path, name: str) -> None:
    with pytest.raises(CloisterNameError):
        projects.identify(repo, name, allow_no_git=False)


def test_identify_outside_git_needs_allow_no_git(tmp_path: Path) -> None:
    plain = tmp_path / "notes"
    plain.mkdir()
    with pytest.raises(ProjectError) as caught:
        projects.identify(plain, None, allow_no_git=False)
    assert str(caught.value).startswith(f"{plain} is not inside a git repository")
    assert "--allow-no-git" in str(caught.value)
    assert projects.identify(plain, None, allow_no_git=True) == Project(
        name="notes", root=plain, git=False, remote=None
    )


def test_identify_refuses_a_directory_without_a_usable_name(tmp_path: Path) -> None:
    odd = make_repo(tmp_path / "___")
    with pytest.raises(CloisterNameError, match="-p NAME"):
        projects.identify(odd, None, allow_no_git=False)
    assert projects.identify(odd, "odd", allow_no_git=False).root == odd


# -- register ----------------------------------------------------------------------------


def test_register_writes_root_and_remote_under_a_header(paths: CloisterPaths, repo: Path) -> None:
    project = Project("my-repo", repo, git=True, remote="git@example.invalid:me/repo.git")
    projects.register(paths, project)
    file = paths.project_config("my-repo")
    text = file.read_text(encoding="utf-8")
    assert text.startswith("# Cloister project my-repo: rules and refs for this project only.\n")
    assert file.stat().st_mode & 0o777 == 0o644
    config = load_project_config(paths, "my-repo")
    assert (config.root, config.remote) == (str(repo), "git@example.invalid:me/repo.git")


def test_register_without_a_remote_writes_no_remote_key(paths: CloisterPaths, repo: Path) -> None:
    projects.register(paths, Project("my-repo", repo, git=True))
    text = paths.project_config("my-repo").read_text(encoding="utf-8")
    assert not any(line.startswith("remote:") for line in text.splitlines())


def test_register_again_for_the_same_directory_changes_nothing(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    projects.register(paths, Project("my-repo", repo, git=True))
    before = paths.project_config("my-repo").read_text(encoding="utf-8")
    projects.register(paths, Project("my-repo", repo, git=True))
    link = tmp_path / "link"
    link.symlink_to(repo)
    projects.register(paths, Project("my-repo", link.resolve(), git=True))
    assert paths.project_config("my-repo").read_text(encoding="utf-8") == before


def test_register_refuses_a_second_directory_with_the_same_name(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    projects.register(paths, Project("my-repo", repo, git=True))
    before = paths.project_config("my-repo").read_text(encoding="utf-8")
    other = make_repo(tmp_path / "elsewhere" / "My Repo")
    with pytest.raises(ProjectError) as caught:
        projects.register(paths, projects.identify(other, None, allow_no_git=False))
    assert str(caught.value) == (
        f"project 'my-repo' already belongs to {repo}; name this one differently"
        " with -p NAME (e.g. -p my-repo-2)"
    )
    assert paths.project_config("my-repo").read_text(encoding="utf-8") == before
    projects.register(paths, projects.identify(other, "my-repo-2", allow_no_git=False))
    assert load_project_config(paths, "my-repo-2").root == str(other)


def test_register_keeps_a_humans_comments_and_keys(paths: CloisterPaths, repo: Path) -> None:
    file = paths.project_config("my-repo")
    file.parent.mkdir(parents=True)
    file.write_text(
        "# my notes about this project\n"
        "refs:\n"
        "  - /srv/docs  # the manual\n"
        "proxy:\n"
        "  allow: [{domain: api.example.com}]\n",
        encoding="utf-8",
    )
    projects.register(paths, Project("my-repo", repo, git=True, remote="https://x.invalid/r"))
    text = file.read_text(encoding="utf-8")
    assert text.startswith("# my notes about this project\n")
    assert "  - /srv/docs  # the manual\n" in text
    assert "Cloister project my-repo" not in text  # no second header on a human's file
    config = load_project_config(paths, "my-repo")
    assert config.refs == ("/srv/docs",)
    assert [entry.target for entry in config.proxy.allow] == ["api.example.com"]
    assert (config.root, config.remote) == (str(repo), "https://x.invalid/r")


def test_register_keeps_a_comment_only_file(paths: CloisterPaths, repo: Path) -> None:
    """A file with nothing but the human's comments is still the human's file."""
    file = paths.project_config("my-repo")
    file.parent.mkdir(parents=True)
    file.write_text("# to do: add refs for the API docs\n", encoding="utf-8")
    projects.register(paths, Project("my-repo", repo, git=True))
    assert "# to do: add refs for the API docs" in file.read_text(encoding="utf-8")
    assert load_project_config(paths, "my-repo").root == str(repo)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("proxy: [\n", ":2:1: invalid YAML"),
        ("proxy:\n  alow: []\n", ":2:3: unknown key 'alow'"),
        ("- just\n- a list\n", ":1:1: expected a mapping"),
        ("root: 12\n", ":1:7: root: Input should be a valid string"),
    ],
)
def test_register_refuses_a_broken_file_and_leaves_it(
    paths: CloisterPaths, repo: Path, text: str, where: str
) -> None:
    file = paths.project_config("my-repo")
    file.parent.mkdir(parents=True)
    file.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        projects.register(paths, Project("my-repo", repo, git=True))
    assert f"{file}{where}" in str(caught.value)
    assert file.read_text(encoding="utf-8") == text


# -- list and remove -----------------------------------------------------------------------


def test_list_projects(paths: CloisterPaths, repo: Path, tmp_path: Path) -> None:
    assert projects.list_projects(paths) == []
    other = make_repo(tmp_path / "api")
    projects.register(paths, Project("my-repo", repo, git=True))
    projects.register(paths, Project("api", other, git=True, remote="https://x.invalid/api"))
    paths.project_config("docs-only").write_text("refs: [/srv/a, /srv/b]\n", encoding="utf-8")
    assert projects.list_projects(paths) == [
        ProjectSummary("api", str(other), "https://x.invalid/api", ()),
        ProjectSummary("docs-only", None, None, ("/srv/a", "/srv/b")),
        ProjectSummary("my-repo", str(repo), None, ()),
    ]


def test_list_projects_reports_a_broken_file(paths: CloisterPaths) -> None:
    paths.projects_dir.mkdir(parents=True)
    paths.project_config("bad").write_text("refs: {\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=str(paths.project_config("bad"))):
        projects.list_projects(paths)


def test_remove_deletes_config_and_decisions(paths: CloisterPaths, repo: Path) -> None:
    projects.register(paths, Project("my-repo", repo, git=True))
    decisions = paths.project_decisions("my-repo")
    decisions.parent.mkdir(parents=True)
    decisions.write_text("allow: [{domain: a.test}]\n", encoding="utf-8")
    assert projects.remove(paths, "my-repo") == [paths.project_config("my-repo"), decisions]
    assert not paths.project_config("my-repo").exists()
    assert not decisions.exists()
    assert projects.list_projects(paths) == []


def test_remove_of_decisions_only(paths: CloisterPaths) -> None:
    decisions = paths.project_decisions("gone")
    decisions.parent.mkdir(parents=True)
    decisions.write_text("deny: [{domain: a.test}]\n", encoding="utf-8")
    assert projects.remove(paths, "gone") == [decisions]


def test_remove_refuses_an_unknown_project(paths: CloisterPaths) -> None:
    with pytest.raises(ProjectError, match=r"^no project 'nope' \(`cloister project list`\)$"):
        projects.remove(paths, "nope")
    with pytest.raises(CloisterNameError):
        projects.remove(paths, "../config")


def test_a_work_tree_elsewhere_is_refused(tmp_path: Path) -> None:
    """core.worktree would make `cloister start` here mount another directory."""
    other = make_repo(tmp_path / "other")
    here = make_repo(tmp_path / "here")
    run_git(here, "config", "core.worktree", str(other))
    with pytest.raises(projects.ProjectError, match=r"core\.worktree is set"):
        projects.identify(here, None, allow_no_git=False)


def test_a_work_tree_that_is_an_ancestor_repository_is_refused(tmp_path: Path) -> None:
    outer = make_repo(tmp_path / "outer")
    here = make_repo(outer / "inner")
    run_git(here, "config", "core.worktree", str(outer))
    with pytest.raises(projects.ProjectError, match=r"core\.worktree is set"):
        projects.identify(here, None, allow_no_git=False)


def test_remove_deletes_the_shape_approval(paths: CloisterPaths, repo: Path) -> None:
    projects.register(paths, Project("my-repo", repo, git=True))
    approved = shape.approved_file(paths, "my-repo")
    shape.save_approved(paths, "my-repo", shape.Shape(files={"a": "b"}))
    assert approved.exists()
    assert approved in projects.remove(paths, "my-repo")
    assert not approved.exists()
    assert shape.load_approved(paths, "my-repo") is None
