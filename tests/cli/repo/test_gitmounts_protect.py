"""Protected paths (``protect.paths``): read-only mounts over the work tree, stand-ins for
missing ones, links refused, and all of it gone again at stop.

Pure: :func:`gitmounts.plan` against real temporary repositories; what the mounts do
inside a container is proven by tests/cli/test_acceptance_session.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloister_cli.repo import gitmounts
from cloister_cli.repo.gitmounts import GitPlan, ProtectedPathError
from cloister_cli.start.worktree import make_worktree
from cloister_core.config.models import DEFAULT_PROTECTED_PATHS
from cloister_core.repository import HumanRepository
from tests.git_support import hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def repo(home: Path) -> Path:
    return make_repo(home / "src" / "api")


def plan(
    worktree: Path,
    home: Path,
    protect: tuple[str, ...] = DEFAULT_PROTECTED_PATHS,
    *,
    is_git: bool = True,
    repository: Path | None = None,
    create: bool = True,
) -> GitPlan:
    """*repository*: the human's checkout (*worktree* itself unless given)."""
    return gitmounts.plan(
        worktree,
        repository=HumanRepository.of(repository or worktree) if is_git else None,
        home=home,
        protect=protect,
        create=create,
    )


def mounts(git_plan: GitPlan) -> dict[str, tuple[str, bool]]:
    """container path -> (host path, read-only)"""
    return {m["Target"]: (m["Source"], m["ReadOnly"]) for m in git_plan.mounts}


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def configured(git_plan: GitPlan, root: Path) -> dict[str, bool]:
    """protected path -> whether a stand-in was made for it"""
    return {
        str(item.path.relative_to(root)): item.stand_in
        for item in git_plan.protections
        if item.kind == "configured"
    }


def test_existing_files_and_directories_are_mounted_read_only(repo: Path, home: Path) -> None:
    (repo / ".envrc").write_text("export A=1\n", encoding="utf-8")
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "devcontainer.json").write_text("{}", encoding="utf-8")
    git_plan = plan(repo, home, (".envrc", ".devcontainer"))
    assert mounts(git_plan)["/work/.envrc"] == (str(repo / ".envrc"), True)
    assert mounts(git_plan)["/work/.devcontainer"] == (str(repo / ".devcontainer"), True)
    assert configured(git_plan, repo) == {".envrc": False, ".devcontainer": False}
    assert all(item.reason == "protect.paths" for item in git_plan.protections)
    # Nothing was made for them.
    assert git_plan.placeholders == []
    assert (repo / ".envrc").read_text(encoding="utf-8") == "export A=1\n"


def test_a_missing_path_is_an_empty_directory_invisible_to_git(repo: Path, home: Path) -> None:
    git_plan = plan(repo, home, (".envrc",))
    stand_in = repo / ".envrc"
    assert stand_in.is_dir()
    assert list(stand_in.iterdir()) == []
    assert stand_in in git_plan.placeholders
    assert mounts(git_plan)["/work/.envrc"] == (str(stand_in), True)
    assert configured(git_plan, repo) == {".envrc": True}
    # Neither the human's git on the host nor `git add -A` inside would see it.
    assert run_git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert not stand_in.exists()


def test_a_missing_nested_path_gets_its_parents_made_and_pinned(repo: Path, home: Path) -> None:
    git_plan = plan(repo, home, (".vscode/tasks.json",))
    vscode = repo / ".vscode"
    assert (vscode / "tasks.json").is_dir()
    assert {vscode, vscode / "tasks.json"} <= set(git_plan.placeholders)
    found = mounts(git_plan)
    assert found["/work/.vscode/tasks.json"] == (str(vscode / "tasks.json"), True)
    # .vscode is a mount point of its own (writable): it cannot be renamed away with
    # the read-only stand-in in it, and a new .vscode made in its place.
    assert found["/work/.vscode"] == (str(vscode), False)
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert not vscode.exists()


def test_the_stand_ins_are_the_protected_paths_not_their_parents(repo: Path, home: Path) -> None:
    git_plan = plan(repo, home, (".vscode/tasks.json", ".envrc", "docs/a/b"))
    assert gitmounts.stand_ins(git_plan.placeholders) == [
        repo / ".envrc",
        repo / ".vscode" / "tasks.json",
        repo / "docs" / "a" / "b",
    ]
    removed = gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert sorted(removed) == sorted(git_plan.placeholders)
    assert names(repo) == [".git", "README"]


def test_a_parent_the_agent_wrote_into_stays_at_stop(repo: Path, home: Path) -> None:
    git_plan = plan(repo, home, (".vscode/tasks.json",))
    (repo / ".vscode" / "settings.json").write_text("{}", encoding="utf-8")
    removed = gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert removed == [repo / ".vscode" / "tasks.json"]
    assert not (repo / ".vscode" / "tasks.json").exists()
    assert (repo / ".vscode" / "settings.json").is_file()


def test_an_existing_file_in_an_existing_directory(repo: Path, home: Path) -> None:
    (repo / ".vscode").mkdir()
    (repo / ".vscode" / "tasks.json").write_text("{}", encoding="utf-8")
    git_plan = plan(repo, home, (".vscode/tasks.json",))
    assert not any(repo / ".vscode" in path.parents for path in git_plan.placeholders)
    assert repo / ".vscode" not in git_plan.placeholders
    assert mounts(git_plan)["/work/.vscode"] == (str(repo / ".vscode"), False)
    assert mounts(git_plan)["/work/.vscode/tasks.json"][1] is True


def test_a_protected_directory_above_another_is_read_only_whole(repo: Path, home: Path) -> None:
    git_plan = plan(repo, home, ("tools/run.sh", "tools"))
    found = mounts(git_plan)
    assert found["/work/tools"] == (str(repo / "tools"), True)  # not also a writable pin
    assert [m["Target"] for m in git_plan.mounts].count("/work/tools") == 1
    # The other way round, the inner one is covered and not mounted again.
    again = plan(repo, home, ("tools", "tools/run.sh"))
    assert "/work/tools/run.sh" not in mounts(again)


def test_a_path_git_protects_already_is_told_once(repo: Path, home: Path) -> None:
    (repo / ".husky" / "_").mkdir(parents=True)
    run_git(repo, "config", "core.hooksPath", ".husky/_")
    git_plan = plan(repo, home, (".husky",))
    assert [m["Target"] for m in git_plan.mounts].count("/work/.husky") == 1
    kinds = {str(item.path.relative_to(repo)): item.kind for item in git_plan.protections}
    assert kinds == {".husky": "git"}


@pytest.mark.parametrize(
    "layout",
    [
        "the path itself",
        "a directory on the way",
    ],
)
def test_a_symlink_is_refused_before_anything_is_made(
    repo: Path, home: Path, tmp_path: Path, layout: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tasks.json").write_text("{}", encoding="utf-8")
    if layout == "the path itself":
        (repo / ".vscode").mkdir()
        (repo / ".vscode" / "tasks.json").symlink_to(outside / "tasks.json")
    else:
        (repo / ".vscode").symlink_to(outside)
    before = names(repo)
    with pytest.raises(ProtectedPathError, match=r"'\.vscode/tasks\.json' is, or is reached"):
        plan(repo, home, (".envrc", ".vscode/tasks.json"))
    assert names(repo) == before  # no stand-in for .envrc either


def test_the_symlink_message_says_what_to_do(repo: Path, home: Path) -> None:
    (repo / "real.envrc").write_text("", encoding="utf-8")
    (repo / ".envrc").symlink_to("real.envrc")
    with pytest.raises(ProtectedPathError) as caught:
        plan(repo, home, (".envrc",))
    message = str(caught.value)
    assert "symbolic link" in message
    assert "protect.except" in message


def test_a_fifo_is_refused(repo: Path, home: Path) -> None:
    os.mkfifo(repo / ".envrc")
    with pytest.raises(ProtectedPathError, match="neither a file nor a directory"):
        plan(repo, home, (".envrc",))


def test_a_project_without_git_is_protected_too(home: Path) -> None:
    notes = home / "notes"
    notes.mkdir()
    (notes / ".devcontainer").mkdir()
    git_plan = plan(notes, home, (".devcontainer", ".envrc"), is_git=False)
    assert mounts(git_plan) == {
        "/work/.devcontainer": (str(notes / ".devcontainer"), True),
        "/work/.envrc": (str(notes / ".envrc"), True),
    }
    assert git_plan.placeholders == [notes / ".envrc"]
    assert git_plan.common_dir is None
    assert git_plan.protected == (".devcontainer", ".envrc")
    gitmounts.remove_placeholders(git_plan.placeholders, notes)
    assert names(notes) == [".devcontainer"]


def test_a_worktree_is_protected_in_its_own_tree(repo: Path, home: Path) -> None:
    worktree = home / "worktrees" / "feature"
    make_worktree(repo, worktree, "feature")
    git_plan = plan(worktree, home, (".envrc",), repository=repo)
    assert mounts(git_plan)["/work/.envrc"] == (str(worktree / ".envrc"), True)
    assert worktree / ".envrc" in git_plan.placeholders
    assert not (repo / ".envrc").exists()  # the main checkout is not the cloister's


def test_a_dry_run_makes_nothing_but_names_the_stand_ins(repo: Path, home: Path) -> None:
    before = sorted(str(path) for path in repo.rglob("*"))
    git_plan = plan(repo, home, (".envrc", ".vscode/tasks.json"), create=False)
    assert sorted(str(path) for path in repo.rglob("*")) == before
    assert configured(git_plan, repo) == {".envrc": True, ".vscode/tasks.json": True}
    assert "/work/.vscode/tasks.json" in mounts(git_plan)


def test_the_defaults(repo: Path, home: Path) -> None:
    git_plan = plan(repo, home)
    assert set(configured(git_plan, repo)) == set(DEFAULT_PROTECTED_PATHS)
    assert run_git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert names(repo) == [".git", "README"]


def test_a_stand_in_that_cannot_be_made_is_a_clear_error(repo: Path, home: Path) -> None:
    # README is a file: nothing can be made below it (as for a directory this user may
    # not write, which root would write anyway).
    with pytest.raises(ProtectedPathError, match="cannot make the stand-in for protected path"):
        plan(repo, home, ("README/notes",))


def test_nothing_inside_a_protected_directory_stays_writable(repo: Path, home: Path) -> None:
    """A directory pinned read-write on the way to a read-only path inside a protected
    one would be mounted over it (Docker mounts deeper targets last): no pin stays."""
    (repo / "tools" / "ci").mkdir(parents=True)
    (repo / "tools" / "ci" / "run.sh").write_text("echo ci\n", encoding="utf-8")
    found = mounts(plan(repo, home, ("tools/ci/run.sh", "tools")))
    inside = {target: ro for target, (_, ro) in found.items() if target.startswith("/work/tools")}
    assert inside == {"/work/tools/ci/run.sh": True, "/work/tools": True}


def test_a_repository_nested_in_a_protected_directory_is_read_only_whole(
    repo: Path, home: Path
) -> None:
    feature = make_repo(repo / ".devcontainer" / "features" / "feat")
    nested = [feature / ".git"]
    git_plan = gitmounts.plan(
        repo,
        repository=HumanRepository.of(repo),
        home=home,
        nested=nested,
        protect=DEFAULT_PROTECTED_PATHS,
    )
    writable = [
        target
        for target, (_, ro) in mounts(git_plan).items()
        if target.startswith("/work/.devcontainer") and not ro
    ]
    assert writable == []
