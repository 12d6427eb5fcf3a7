"""What a cloister mounts for git: its own git directory, the human's objects read-only,
and the code-running paths of the work tree read-only, told to the user.

Pure: :func:`gitmounts.plan` and :func:`gitmounts.own_git_mounts` against real
temporary repositories; nothing here talks to Docker. What a mount does inside a
container is proven by the acceptance tests.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from docker.types import Mount

from cloister_cli.repo import gitmounts
from cloister_cli.repo.gitmounts import GitPlan, UnusualRepositoryError
from cloister_cli.start.worktree import make_worktree
from cloister_core.owngit import GIT_DIR_ELSEWHERE, ORIGIN_ALTERNATES, ORIGIN_OBJECTS
from cloister_core.repository import HumanRepository
from tests.git_support import GIT, hermetic_git, make_repo, run_git


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
    repo: Path, home: Path, nested: tuple[Path, ...] = (), *, worktree: Path | None = None
) -> GitPlan:
    return gitmounts.plan(
        worktree or repo, repository=HumanRepository.of(repo), home=home, nested=nested
    )


def read_only(mounts: list[Mount]) -> dict[str, str]:
    """container path -> host path of every read-only mount."""
    return {mount["Target"]: mount["Source"] for mount in mounts if mount["ReadOnly"]}


def read_write(mounts: list[Mount]) -> dict[str, str]:
    return {mount["Target"]: mount["Source"] for mount in mounts if not mount["ReadOnly"]}


def protected(git_plan: GitPlan, root: Path) -> dict[str, str]:
    return {str(item.path.relative_to(root)): item.reason for item in git_plan.protections}


def write_hook(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)


# -- the human's git directory is not the cloister's -----------------------------------------


def test_nothing_of_the_humans_git_directory_is_in_the_work_tree_mounts(
    repo: Path, home: Path
) -> None:
    (repo / ".git" / "modules" / "lib").mkdir(parents=True)
    git_plan = plan(repo, home)
    assert git_plan.mounts == []
    assert git_plan.placeholders == []
    assert git_plan.protections == []
    assert git_plan.own_mounts == []  # own_git_mounts' part
    assert git_plan.common_dir == repo / ".git"
    # No stand-in of old (.gitmodules, .git/remotes, a commondir pin) is made any more.
    assert sorted(path.name for path in repo.iterdir()) == [".git", "README"]
    assert not (repo / ".git" / "commondir").exists()
    assert not (repo / ".git" / "remotes").exists()


def test_a_project_without_git_has_no_common_dir(home: Path) -> None:
    notes = home / "notes"
    notes.mkdir()
    git_plan = gitmounts.plan(notes, repository=None, home=home)
    assert (git_plan.mounts, git_plan.common_dir) == ([], None)


# -- hooks in the work tree ------------------------------------------------------------------


def test_a_hooks_path_inside_the_project_is_read_only(repo: Path, home: Path) -> None:
    write_hook(repo / ".githooks" / "pre-commit", "exit 0")
    run_git(repo, "config", "core.hooksPath", ".githooks")
    git_plan = plan(repo, home)
    assert read_only(git_plan.mounts) == {"/work/.githooks": str(repo / ".githooks")}
    assert "core.hooksPath" in protected(git_plan, repo)[".githooks"]
    assert git_plan.placeholders == []  # it exists: nothing made
    assert git_plan.protected == (".githooks",)


def test_a_missing_hooks_path_is_created_so_the_agent_cannot(repo: Path, home: Path) -> None:
    run_git(repo, "config", "core.hooksPath", "tools/hooks")
    git_plan = plan(repo, home)
    assert (repo / "tools" / "hooks").is_dir()
    assert git_plan.placeholders == [repo / "tools" / "hooks", repo / "tools"]
    assert "/work/tools/hooks" in read_only(git_plan.mounts)
    assert git_plan.protections[0].stand_in is True
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert not (repo / "tools").exists()


def test_husky_is_protected_whole(repo: Path, home: Path) -> None:
    write_hook(repo / ".husky" / "_" / "pre-commit", '. "$(dirname "$0")/h"')
    write_hook(repo / ".husky" / "pre-commit", "npm test")
    run_git(repo, "config", "core.hooksPath", ".husky/_")
    git_plan = plan(repo, home)
    assert read_only(git_plan.mounts) == {"/work/.husky": str(repo / ".husky")}
    assert "husky" in protected(git_plan, repo)[".husky"]


def test_a_global_hooks_path_outside_the_project_is_left_alone(repo: Path, home: Path) -> None:
    hooks = home / ".githooks"
    hooks.mkdir()
    run_git(repo, "config", "core.hooksPath", str(hooks))
    git_plan = plan(repo, home)
    assert git_plan.mounts == []
    assert protected(git_plan, repo) == {}


def test_a_hooks_path_inside_the_git_directory_is_left_alone(repo: Path, home: Path) -> None:
    """The human's .git is never mounted: the agent cannot reach what is in it."""
    run_git(repo, "config", "core.hooksPath", ".git/my-hooks")
    git_plan = plan(repo, home)
    assert git_plan.mounts == []
    assert not (repo / ".git" / "my-hooks").exists()


def test_a_hooks_path_through_a_symlink_in_the_project_is_refused(repo: Path, home: Path) -> None:
    (repo / "real-hooks" / "sub").mkdir(parents=True)
    (repo / "hooks").symlink_to("real-hooks")
    run_git(repo, "config", "core.hooksPath", "hooks/sub")
    with pytest.raises(UnusualRepositoryError, match="symbolic link inside the project"):
        plan(repo, home)


@pytest.mark.parametrize(
    ("framework", "hook", "files"),
    [
        (
            "pre-commit",
            "# File generated by pre-commit: https://pre-commit.com\n"
            "ARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit)",
            [".pre-commit-config.yaml"],
        ),
        ("lefthook", 'call_lefthook run "pre-commit" "$@"', ["lefthook.yml", ".lefthook"]),
        ("overcommit", "# overcommit hook", [".overcommit.yml"]),
    ],
)
def test_a_hook_frameworks_config_is_read_only(
    repo: Path, home: Path, framework: str, hook: str, files: list[str]
) -> None:
    write_hook(repo / ".git" / "hooks" / "pre-commit", hook)
    for name in files:
        if "." in name.lstrip("."):
            (repo / name).write_text("repos: []\n", encoding="utf-8")
        else:
            (repo / name).mkdir()
    git_plan = plan(repo, home)
    for name in files:
        assert read_only(git_plan.mounts)[f"/work/{name}"] == str(repo / name)
        assert framework in protected(git_plan, repo)[name]
        assert repo / name not in git_plan.placeholders


def test_a_hooks_sample_names_no_framework(repo: Path, home: Path) -> None:
    write_hook(repo / ".git" / "hooks" / "pre-commit.sample", "# pre-commit lefthook overcommit")
    assert plan(repo, home).mounts == []


def test_a_framework_config_that_does_not_exist_cannot_be_created(repo: Path, home: Path) -> None:
    """The hook would run what the agent wrote there at your next commit: an empty
    read-only directory stands in (git ignores it; the hook finds no config)."""
    write_hook(repo / ".git" / "hooks" / "pre-commit", "# File generated by pre-commit")
    git_plan = plan(repo, home)
    stand_in = repo / ".pre-commit-config.yaml"
    assert stand_in.is_dir()
    assert list(stand_in.iterdir()) == []
    assert read_only(git_plan.mounts)["/work/.pre-commit-config.yaml"] == str(stand_in)
    assert stand_in in git_plan.placeholders
    assert ".pre-commit-config.yaml" not in protected(git_plan, repo)  # not told: a stand-in
    assert run_git(repo, "status", "--porcelain", "--untracked-files=all") == ""


# -- includes --------------------------------------------------------------------------------


def test_include_targets_inside_the_project_are_read_only(repo: Path, home: Path) -> None:
    (repo / ".gitconfig-project").write_text("[alias]\n\tst = status\n", encoding="utf-8")
    run_git(repo, "config", "include.path", "../.gitconfig-project")  # relative to .git/config
    run_git(repo, "config", "includeIf.gitdir:/nowhere/.path", "local.cfg")  # inside .git
    (home / ".gitconfig-work").write_text("", encoding="utf-8")
    run_git(repo, "config", "--add", "include.path", "~/.gitconfig-work")
    run_git(repo, "config", "--add", "include.path", "%(prefix)/etc/gitconfig")
    git_plan = plan(repo, home)
    assert read_only(git_plan.mounts) == {
        "/work/.gitconfig-project": str(repo / ".gitconfig-project")
    }
    assert not (repo / ".git" / "local.cfg").exists()  # in the human's .git: out of reach
    assert "includes" in protected(git_plan, repo)[".gitconfig-project"]


# -- a worktree of Cloister's ----------------------------------------------------------------


def test_a_worktree_cloister_gets_the_humans_paths_at_its_own_place(
    repo: Path, home: Path, tmp_path: Path
) -> None:
    """The human's git runs in their checkout; the same paths of the cloister's worktree
    are read-only (where the agent's commits bring them to the human's checkout)."""
    write_hook(repo / ".githooks" / "pre-commit", "exit 0")
    run_git(repo, "config", "core.hooksPath", ".githooks")
    (repo / "shared.gitconfig").write_text("", encoding="utf-8")
    run_git(repo, "config", "include.path", "../shared.gitconfig")
    worktree = tmp_path / "data" / "worktrees" / "api" / "feature"
    make_worktree(repo, worktree, "feature")
    git_plan = plan(repo, home, worktree=worktree)
    assert read_only(git_plan.mounts) == {
        "/work/.githooks": str(worktree / ".githooks"),
        "/work/shared.gitconfig": str(worktree / "shared.gitconfig"),
    }
    # Missing there (the files are written by the cloister's git directory): stand-ins.
    assert (worktree / ".githooks").is_dir()
    assert (worktree / "shared.gitconfig").is_file()
    assert not (repo / ".githooks" / "x").exists()
    assert git_plan.common_dir == repo / ".git"


# -- nested repositories -----------------------------------------------------------------------


def test_nested_repositories_keep_their_git_directories_read_only_whole(
    repo: Path, home: Path
) -> None:
    vendor = make_repo(repo / "vendor" / "lib")
    (repo / "sub").mkdir()
    (repo / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n", encoding="utf-8")
    (repo / "linked").mkdir()
    (repo / "linked" / ".git").symlink_to(vendor / ".git")
    git_plan = plan(
        repo, home, nested=(vendor / ".git", repo / "sub" / ".git", repo / "linked" / ".git")
    )
    ro = read_only(git_plan.mounts)
    assert ro == {
        "/work/vendor/lib/.git": str(vendor / ".git"),
        "/work/sub/.git": str(repo / "sub" / ".git"),
    }
    assert not any("/work/vendor/lib/.git/" in target for target in ro)  # whole, not parts
    assert protected(git_plan, repo) == {}  # not told: the human's own, as they were
    assert set(git_plan.protected) == {"vendor/lib/.git", "sub/.git"}


def test_a_nested_repository_gets_what_the_project_gets(repo: Path, home: Path) -> None:
    """Its hooks path (husky's whole) and its config's include targets, where they are
    in the project: the human's git run inside it would otherwise run the agent's code."""
    lib = make_repo(repo / "lib" / "b")
    write_hook(lib / ".husky" / "_" / "h", "exit 0")
    run_git(lib, "config", "core.hooksPath", ".husky/_")
    (repo / "lib" / "shared.gitconfig").write_text("", encoding="utf-8")
    run_git(lib, "config", "include.path", "../../shared.gitconfig")
    write_hook(lib / ".husky" / "_" / "pre-commit", "# overcommit hook")
    git_plan = plan(repo, home, nested=(lib / ".git",))
    ro = read_only(git_plan.mounts)
    assert ro["/work/lib/b/.git"] == str(lib / ".git")
    assert ro["/work/lib/b/.husky"] == str(lib / ".husky")
    assert ro["/work/lib/shared.gitconfig"] == str(repo / "lib" / "shared.gitconfig")
    assert ro["/work/lib/b/.overcommit.yml"] == str(lib / ".overcommit.yml")  # a stand-in
    # At their own place, never the project's.
    assert "/work/.husky" not in ro
    assert not (repo / ".husky").exists()
    assert not (repo / ".overcommit.yml").exists()


def test_too_many_nested_repositories_refuse_the_start(
    repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rather than leaving some of them writable (an agent could have made many, to push
    the human's own past a limit)."""
    monkeypatch.setattr(gitmounts, "MAX_NESTED", 2)
    nested = tuple(make_repo(repo / f"r{index}") / ".git" for index in range(3))
    with pytest.raises(UnusualRepositoryError, match="holds 3 git repositories"):
        plan(repo, home, nested=nested)
    assert plan(repo, home, nested=nested[:2]).protected == ("r0/.git", "r1/.git")


# -- the human's own hooks still run -----------------------------------------------------------


def test_the_humans_hooks_still_run_on_the_host(repo: Path, home: Path, tmp_path: Path) -> None:
    marker_tree = tmp_path / "tree-hook-ran"
    marker_git = tmp_path / "git-hook-ran"
    write_hook(repo / ".githooks" / "pre-commit", f"touch '{marker_tree}'")
    run_git(repo, "config", "core.hooksPath", ".githooks")
    git_plan = plan(repo, home)
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "human")
    assert marker_tree.exists()
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    run_git(repo, "config", "--unset", "core.hooksPath")
    write_hook(repo / ".git" / "hooks" / "post-commit", f"touch '{marker_git}'")
    plan(repo, home)
    subprocess.run(
        [GIT, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "again"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert marker_git.exists()


# -- directories on the way, placeholders -----------------------------------------------------


def test_directories_above_a_protected_path_are_mount_points(repo: Path, home: Path) -> None:
    """A read-only mount travels with its directory when that is renamed; a mount point
    cannot be renamed, so each directory on the way is one (of itself, writable)."""
    write_hook(repo / ".github" / "hooks" / "pre-commit", "exit 0")
    run_git(repo, "config", "core.hooksPath", ".github/hooks")
    (repo / "conf" / "git").mkdir(parents=True)
    (repo / "conf" / "git" / "extra.gitconfig").write_text("", encoding="utf-8")
    run_git(repo, "config", "include.path", "../conf/git/extra.gitconfig")
    vendor = make_repo(repo / "vendor" / "lib")
    git_plan = plan(repo, home, nested=(vendor / ".git",))
    assert set(read_only(git_plan.mounts)) == {
        "/work/.github/hooks",
        "/work/conf/git/extra.gitconfig",
        "/work/vendor/lib/.git",
    }
    assert read_write(git_plan.mounts) == {
        "/work/.github": str(repo / ".github"),
        "/work/conf": str(repo / "conf"),
        "/work/conf/git": str(repo / "conf" / "git"),
        "/work/vendor": str(repo / "vendor"),
        "/work/vendor/lib": str(vendor),
    }
    targets = [mount["Target"] for mount in git_plan.mounts]
    assert len(targets) == len(set(targets))  # each mount once
    # Only the read-only ones are what hostexec's git must not write either.
    assert git_plan.protected == (
        ".github/hooks",
        "conf/git/extra.gitconfig",
        "vendor/lib/.git",
    )


def test_created_directories_on_the_way_are_placeholders_too(repo: Path, home: Path) -> None:
    run_git(repo, "config", "core.hooksPath", "tools/git/hooks")
    git_plan = plan(repo, home)
    assert set(git_plan.placeholders) == {
        repo / "tools",
        repo / "tools" / "git",
        repo / "tools" / "git" / "hooks",
    }
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert not (repo / "tools").exists()


def test_a_placeholder_the_agent_wrote_into_stays(repo: Path, home: Path) -> None:
    run_git(repo, "config", "core.hooksPath", "tools/hooks")
    git_plan = plan(repo, home)
    (repo / "tools" / "notes.txt").write_text("mine\n", encoding="utf-8")
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert not (repo / "tools" / "hooks").exists()
    assert (repo / "tools" / "notes.txt").read_text(encoding="utf-8") == "mine\n"


def test_removing_placeholders_follows_no_link(repo: Path, home: Path, tmp_path: Path) -> None:
    run_git(repo, "config", "core.hooksPath", "tools/hooks")
    git_plan = plan(repo, home)
    human = tmp_path / "human"
    (human / "hooks").mkdir(parents=True)  # an empty directory of the human's, same name
    (repo / "tools" / "hooks").rmdir()
    (repo / "tools").rmdir()
    (repo / "tools").symlink_to(human)  # the agent's doing
    gitmounts.remove_placeholders(git_plan.placeholders, repo)
    assert (human / "hooks").is_dir()
    assert (repo / "tools").is_symlink()


def test_placeholders_outside_the_work_tree_are_never_removed(tmp_path: Path) -> None:
    worktree = tmp_path / "work"
    worktree.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    gitmounts.remove_placeholders([outside, worktree], worktree)
    assert outside.is_dir()
    assert worktree.is_dir()


# -- the cloister's own git directory ----------------------------------------------------------


def test_own_git_mounts_at_work_git(repo: Path, tmp_path: Path) -> None:
    git_dir = tmp_path / "data" / "gitdirs" / "api"
    pointer = tmp_path / "data" / "gitdirs" / "api.git"
    mounts = gitmounts.own_git_mounts(repo, git_dir, HumanRepository.of(repo), (), pointer)
    assert [(m["Target"], m["Source"], m["ReadOnly"]) for m in mounts] == [
        ("/work/.git", str(git_dir), False),
        ("/work/.git/config", str(git_dir / "config"), True),
        ("/work/.git/hooks", str(git_dir / "hooks"), True),
        (ORIGIN_OBJECTS, str(repo / ".git" / "objects"), True),
    ]
    assert {mount["Type"] for mount in mounts} == {"bind"}
    assert str(pointer) not in {mount["Source"] for mount in mounts}


def test_own_git_mounts_where_work_git_is_a_file(repo: Path, tmp_path: Path) -> None:
    """A worktree cloister (or a project that is a linked worktree): the cloister's git
    directory elsewhere, and a read-only pointer file at /work/.git naming it."""
    worktree = tmp_path / "data" / "worktrees" / "api" / "feature"
    make_worktree(repo, worktree, "feature")
    git_dir = tmp_path / "data" / "gitdirs" / "api-feature"
    pointer = tmp_path / "data" / "gitdirs" / "api-feature.git"
    mounts = gitmounts.own_git_mounts(worktree, git_dir, HumanRepository.of(repo), (), pointer)
    assert [(m["Target"], m["Source"], m["ReadOnly"]) for m in mounts] == [
        ("/work/.git", str(pointer), True),
        (GIT_DIR_ELSEWHERE, str(git_dir), False),
        (f"{GIT_DIR_ELSEWHERE}/config", str(git_dir / "config"), True),
        (f"{GIT_DIR_ELSEWHERE}/hooks", str(git_dir / "hooks"), True),
        (ORIGIN_OBJECTS, str(repo / ".git" / "objects"), True),
    ]


def test_a_symlinked_work_git_gets_the_pointer_too(repo: Path, tmp_path: Path) -> None:
    worktree = tmp_path / "tree"
    worktree.mkdir()
    (worktree / ".git").symlink_to(repo / ".git")
    mounts = gitmounts.own_git_mounts(
        worktree, tmp_path / "g", HumanRepository.of(repo), (), tmp_path / "p"
    )
    assert (mounts[0]["Target"], mounts[0]["Source"], mounts[0]["ReadOnly"]) == (
        "/work/.git",
        str(tmp_path / "p"),
        True,
    )


def test_the_humans_own_alternates_are_mounted_and_hidden(repo: Path, tmp_path: Path) -> None:
    """The human's alternates name host paths: each store is mounted read-only, and an
    empty file covers their alternates file (the cloister's names the mounts)."""
    other = make_repo(tmp_path / "other")
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{other / '.git' / 'objects'}\n", encoding="utf-8")
    repository = HumanRepository.of(repo)
    assert repository.alternates() == [other / ".git" / "objects"]
    git_dir = tmp_path / "g"
    mounts = gitmounts.own_git_mounts(repo, git_dir, repository, repository.alternates(), repo)
    ro = read_only(mounts)
    assert ro[f"{ORIGIN_ALTERNATES}/0"] == str(other / ".git" / "objects")
    assert ro[f"{ORIGIN_OBJECTS}/info/alternates"] == os.devnull
    # The file over it comes after the store it is in (Docker mounts in order of depth).
    targets = [mount["Target"] for mount in mounts]
    assert targets.index(ORIGIN_OBJECTS) < targets.index(f"{ORIGIN_OBJECTS}/info/alternates")


def test_the_humans_submodules_git_directories_are_read_only(repo: Path, tmp_path: Path) -> None:
    (repo / ".git" / "modules" / "lib").mkdir(parents=True)
    git_dir = tmp_path / "g"
    mounts = gitmounts.own_git_mounts(repo, git_dir, HumanRepository.of(repo), (), tmp_path / "p")
    assert read_only(mounts)["/work/.git/modules"] == str(repo / ".git" / "modules")
    assert "/work/.git/modules" not in read_write(mounts)


def test_a_symlinked_modules_directory_is_not_mounted(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (repo / ".git" / "modules").symlink_to(tmp_path / "elsewhere")
    mounts = gitmounts.own_git_mounts(repo, tmp_path / "g", HumanRepository.of(repo), (), tmp_path)
    assert str(tmp_path / "elsewhere") not in {mount["Source"] for mount in mounts}
    assert "/work/.git/modules" not in read_only(mounts)


def test_protected_lists_read_only_work_tree_paths_only(tmp_path: Path) -> None:
    git_plan = GitPlan(
        mounts=[
            gitmounts.bind(tmp_path / "a", "/work/.envrc", read_only=True),
            gitmounts.bind(tmp_path / "b", "/work/.vscode", read_only=False),
            gitmounts.bind(tmp_path / "c", "/work/.vscode/tasks.json", read_only=True),
            gitmounts.bind(tmp_path / "d", "/elsewhere", read_only=True),
            gitmounts.bind(tmp_path / "e", "/work/.envrc", read_only=True),  # once
        ],
        own_mounts=[gitmounts.bind(tmp_path / "f", "/work/.git/config", read_only=True)],
    )
    assert git_plan.protected == (".envrc", ".vscode/tasks.json")
