"""The detectors: one pure function per finding kind over a :class:`TreeScan`.

They look at the work tree the human shares with the agent, never at a git directory
(the human's is not the agent's, and the cloister's own is Cloister's to check). Each
returns what it found now; whether the human already had it when the cloister started
is the caller's question (fingerprints, :func:`new_findings`). This module holds the
work-tree file detectors and the :data:`DETECTORS` table; nested repositories are in
:mod:`.repodetectors`, mise in :mod:`.misedetectors`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cloister_cli.session.review.files import Entry, digest, inside, lexical_target, shorten
from cloister_cli.session.review.findings import Finding, FindingKind, finding
from cloister_cli.session.review.misedetectors import detect_mise
from cloister_cli.session.review.repodetectors import detect_nested_repositories
from cloister_cli.session.review.scan import TASKS_FILE, Marked, TreeScan
from cloister_core import jsonc

Detector = Callable[[TreeScan], Iterable[Finding]]

DRIVER = re.compile(r"^(filter|diff|merge)=(.+)$")
GITMODULES_KEY = re.compile(r"^submodule\..+\.(url|update)$")
FOLDER_OPEN = "folderOpen"
HOOK_MANAGERS: dict[str, str] = {
    "pre-commit": "pre-commit runs the hooks this file lists when you commit (once installed)",
    "overcommit": "overcommit runs the hooks this file configures when you commit (once installed)",
    "lefthook": "lefthook runs the commands this file lists when git runs a hook (once installed)",
}


def _where(relative: str) -> str:
    parent = relative.rpartition("/")[0]
    return f"{parent}/" if parent else "the project"


def _drivers(line: str) -> list[tuple[str, str]]:
    """The (kind, driver) pairs an attributes line sets, its pattern excepted."""
    tokens = line.split()
    return [
        (match.group(1), match.group(2))
        for token in tokens[1:]
        if (match := DRIVER.match(token)) is not None
    ]


def _attributes_findings(shown: str, entry: Entry) -> list[Finding]:
    found = []
    seen: set[str] = set()
    for number, raw in enumerate(entry.lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#") or line in seen:
            continue
        drivers = _drivers(line)
        if not drivers:
            continue
        seen.add(line)
        names = ", ".join(f"{kind} `{name}`" for kind, name in drivers)
        plural = "commands" if len(drivers) > 1 else "command"
        found.append(
            finding(
                "attributes-driver",
                shown,
                "review",
                f"git runs the {plural} your config defines for {names} on "
                f"`{shorten(line.split()[0], 60)}` files (line {number})",
                content=digest(line),
                details=(f"line {number}: {line}",),
            )
        )
    return found


def detect_attributes_drivers(scan: TreeScan) -> list[Finding]:
    found = []
    for marked in scan.attributes:
        found.extend(_attributes_findings(marked.relative, marked.entry))
    return found


def detect_envrcs(scan: TreeScan) -> list[Finding]:
    found = []
    for marked in scan.envrcs:
        entry = marked.entry
        where = _where(marked.relative)
        if entry.kind == "symlink":
            target = lexical_target(entry.path, entry.link or "")
            summary = (
                f"direnv runs {target} (this file links to it) when you enter {where} "
                "once it is allowed"
            )
            details: list[str] = [f"link text: {entry.link}"]
        else:
            lines = [line for line in entry.lines if line.strip() and not line.startswith("#")]
            first = f" (`{shorten(lines[0], 60)}`…)" if lines else ""
            summary = f"direnv runs this script{first} when you enter {where} once it is allowed"
            details = entry.lines
        found.append(
            finding(
                "envrc",
                marked.relative,
                "runs-code",
                summary,
                content=entry.content_digest,
                details=details,
            )
        )
    return found


def _task_command(task: Mapping[str, Any]) -> str:
    """The command line VS Code would run for *task* on Linux, as well as it can tell."""
    linux = task.get("linux")
    merged = {**task, **(linux if isinstance(linux, dict) else {})}
    if merged.get("type") == "npm" and "script" in merged:
        return f"npm run {merged['script']}"
    command = merged.get("command", "")
    if isinstance(command, dict):
        command = command.get("value", "")
    args = merged.get("args", [])
    words = [str(command)] + [
        str(arg.get("value", "")) if isinstance(arg, dict) else str(arg)
        for arg in (args if isinstance(args, list) else [])
    ]
    return " ".join(word for word in words if word) or f"a `{merged.get('type', '?')}` task"


def _task_list(document: object, *, workspace: bool) -> list[object]:
    """The tasks of a parsed tasks.json (``tasks``) or workspace file (``tasks.tasks``)."""
    tasks = document.get("tasks") if isinstance(document, dict) else None
    if workspace:
        tasks = tasks.get("tasks") if isinstance(tasks, dict) else None
    return tasks if isinstance(tasks, list) else []


def _vscode_findings(shown: str, entry: Entry, opening: str, *, workspace: bool) -> list[Finding]:
    """The tasks of one file that VS Code runs on opening; *opening* says what is opened.

    Read as VS Code reads it (lenient JSONC: a key given twice is the last). What cannot
    be read here is graded as running code: VS Code's parser recovers from errors, and
    ``folderOpen`` can be spelt with escapes no search of the text finds.
    """
    try:
        if entry.truncated:
            raise ValueError("larger than 1 MiB")
        document = jsonc.loads(entry.text, "lenient")
    except ValueError as error:
        mentioned = FOLDER_OPEN in entry.text
        return [
            finding(
                "vscode-task",
                shown,
                "runs-code",
                f"VS Code may run a task when you open {opening} (in a trusted workspace): "
                + (f"the file mentions {FOLDER_OPEN} but " if mentioned else "the file ")
                + f"does not parse ({error})",
                content=entry.content_digest,
                details=[line.strip() for line in entry.lines if FOLDER_OPEN in line],
            )
        ]
    found = []
    for task in _task_list(document, workspace=workspace):
        if not isinstance(task, dict):
            continue
        options = task.get("runOptions")
        if not isinstance(options, dict) or options.get("runOn") != FOLDER_OPEN:
            continue
        command = _task_command(task)
        canonical = json.dumps(task, sort_keys=True)
        found.append(
            finding(
                "vscode-task",
                shown,
                "runs-code",
                f"VS Code runs `{shorten(command, 80)}` when you open {opening} "
                "(in a trusted workspace)",
                content=digest(canonical),
                details=(f"label: {task.get('label', '?')}", f"command: {command}"),
            )
        )
    return found


def detect_vscode_tasks(scan: TreeScan) -> list[Finding]:
    """Tasks run on folder open: in every ``.vscode/tasks.json`` (a workspace file may
    list any folder) and in every ``*.code-workspace`` file."""
    found = []
    for marked in scan.tasks:
        entry = scan.regular(marked.entry)
        if entry is None:
            continue
        folder = marked.relative.removesuffix(TASKS_FILE)
        opening = f"the folder {folder} (or a workspace with it)" if folder else "the folder"
        found.extend(_vscode_findings(marked.relative, entry, opening, workspace=False))
    for marked in scan.workspaces:
        entry = scan.regular(marked.entry)
        if entry is not None:
            found.extend(_vscode_findings(marked.relative, entry, "this workspace", workspace=True))
    return found


def _hook_summary(marked: Marked) -> str:
    name = marked.relative.rpartition("/")[2]
    if marked.entry.kind == "symlink":
        runs = (
            f"{lexical_target(marked.entry.path, marked.entry.link or '')} (this file links to it)"
        )
    else:
        runs = "it"
    if marked.label in HOOK_MANAGERS:
        return HOOK_MANAGERS[marked.label]
    if marked.label == "husky":
        return f"husky runs {runs} when git runs the `{name}` hook (once husky is installed)"
    if marked.label == "githooks":
        return f"git runs {runs} as the `{name}` hook when core.hooksPath is .githooks"
    return f"git runs {runs} as the `{name}` hook: it is in your hooks directory"


def detect_hook_configs(scan: TreeScan) -> list[Finding]:
    found = []
    for marked in scan.hook_configs:
        entry = marked.entry
        details = [f"link text: {entry.link}"] if entry.kind == "symlink" else entry.lines
        found.append(
            finding(
                "hook-config",
                marked.relative,
                "runs-code",
                _hook_summary(marked),
                content=entry.content_digest,
                details=details,
            )
        )
    return found


def detect_gitmodules(scan: TreeScan) -> list[Finding]:
    entry = scan.gitmodules
    if entry is None or entry.kind != "file":
        return []
    lines = [
        f"{key} = {value}"
        for key, value in scan.gitmodules_config.entries
        if GITMODULES_KEY.match(key.lower())
    ]
    urls = [
        value
        for key, value in scan.gitmodules_config.entries
        if value is not None and key.lower().endswith(".url")
    ]
    if scan.gitmodules_config.error is not None:
        summary = f"git cannot parse it ({scan.gitmodules_config.error})"
    elif not urls:
        return []
    else:
        more = f" (and {len(urls) - 1} more)" if len(urls) > 1 else ""
        summary = f"`git submodule update` clones from these URLs: {shorten(urls[0], 80)}{more}"
    return [
        finding(
            "gitmodules",
            ".gitmodules",
            "review",
            summary,
            content=entry.content_digest,
            details=lines,
        )
    ]


def _outside(scan: TreeScan, marked: Marked) -> str | None:
    """Where a work-tree link leads when that is outside the work tree."""
    link = marked.entry.link
    if link is None:
        return None
    places = scan.places
    target = lexical_target(marked.entry.path, link)
    if not inside(target, places.worktree) and not inside(target, places.real_worktree):
        return target
    if ".." in Path(link).parts:
        # A ".." after a linked directory climbs from where that link leads.
        real = os.path.realpath(marked.entry.path)
        if not inside(real, places.real_worktree):
            return real
    return None


# Where a link to the system's programs and libraries leads (a virtualenv's
# bin/python, a node_modules/.bin entry): nothing of the human's is read there.
SYSTEM_DIRECTORIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt", "/nix/store")


def _system(target: str) -> bool:
    return any(inside(target, Path(directory)) for directory in SYSTEM_DIRECTORIES) or (
        target == "/dev/null"
    )


def detect_outside_symlinks(scan: TreeScan) -> list[Finding]:
    found = []
    for marked in scan.symlinks:
        target = _outside(scan, marked)
        if target is None or _system(target):
            continue
        found.append(
            finding(
                "outside-symlink",
                marked.relative,
                "reads-outside",
                f"an editor or a hostexec command that opens it reads {target}",
                content=digest(marked.entry.link or ""),
                details=(f"link text: {marked.entry.link}",),
            )
        )
    return found


DETECTORS: tuple[tuple[FindingKind, Detector], ...] = (
    ("nested-repository", detect_nested_repositories),
    ("attributes-driver", detect_attributes_drivers),
    ("envrc", detect_envrcs),
    ("vscode-task", detect_vscode_tasks),
    ("mise", detect_mise),
    ("hook-config", detect_hook_configs),
    ("gitmodules", detect_gitmodules),
    ("outside-symlink", detect_outside_symlinks),
)
