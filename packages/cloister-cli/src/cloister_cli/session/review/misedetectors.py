"""The detector for mise config files: what mise runs when the human enters a directory.

With ``mise activate`` in the human's shell, entering a directory loads the config files
there and above, and mise runs their ``[hooks]`` (``enter``, ``leave``, ``cd``, any
other), the scripts ``[env]`` ``_.source`` names, and every ``exec(…)`` in a template;
``mise install`` runs the ``preinstall``/``postinstall`` hooks and a tool's own
``postinstall``. mise trusts a file by its path: one the human trusted before runs
whatever the agent put in it, without asking. Tasks run only on request and ``_.file``
only reads a dotenv file: neither is reported.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cloister_cli.session.review.files import Entry, digest, shorten
from cloister_cli.session.review.findings import Finding, finding
from cloister_cli.session.review.scan import Marked, TreeScan

ACTIVATED = "(mise activated)"
INSTALL = "(`mise install`)"
# Templates are rendered in most values; hooks and tasks are reported (or not) whole.
NOT_TEMPLATED = frozenset({"hooks", "tasks"})
EXEC_CALL = re.compile(r"\bexec\s*\(")
# Bounded, so that a hostile value cannot make the search quadratic.
EXEC_COMMAND = re.compile(r"""\bexec\s*\(\s*command\s*=\s*(?:"([^"]{0,500})"|'([^']{0,500})')""")
MENTIONS = ("hook", "source", "exec", "install")
TRUST = "mise asks before it trusts a new file; one you trusted before runs this unasked"


@dataclass(frozen=True, slots=True)
class Run:
    """One thing a mise config makes mise run."""

    what: str  # "the `enter` hook", "_.source", "a template's exec"
    command: str
    when: str  # "when you enter sub/ (mise activated)"


def _where(marked: Marked) -> str:
    return marked.label or "the project"


def _strings(value: object) -> list[str]:
    """Every string in *value* (lists and tables flattened, a hook's ``shell`` left
    out), without recursion: the nesting is the agent's (the size is at most a MiB's)."""
    found: list[str] = []
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, list):
            pending.extend(reversed(item))
        elif isinstance(item, dict):
            pending.extend(reversed([v for k, v in item.items() if k != "shell"]))
    return found


def _hook_when(name: str, where: str) -> str:
    return {
        "enter": f"when you enter {where} {ACTIVATED}",
        "leave": f"when you leave {where} {ACTIVATED}",
        "cd": f"whenever you change directory in {where} {ACTIVATED}",
        "preinstall": f"before it installs tools for {where} {INSTALL}",
        "postinstall": f"after it installs tools for {where} {INSTALL}",
    }.get(name, f"as its `{name}` hook in {where} {ACTIVATED}")


def _hooks(document: dict[str, Any], where: str) -> Iterator[Run]:
    hooks = document.get("hooks")
    for name, value in hooks.items() if isinstance(hooks, dict) else ():
        for command in _strings(value):
            yield Run(f"the `{name}` hook", command, _hook_when(name, where))


def _sources(document: dict[str, Any], where: str) -> Iterator[Run]:
    """``_.source`` of ``[env]`` (or of each ``[[env]]``): a path, a list of paths, or
    tables with a ``path``."""
    env = document.get("env")
    tables = env if isinstance(env, list) else [env]
    for table in tables:
        if not isinstance(table, dict):
            continue
        underscore = table.get("_")
        values = [table.get("_.source")]
        if isinstance(underscore, dict):
            values.append(underscore.get("source"))
        for value in values:
            items = value if isinstance(value, list) else [value]
            for item in items:
                path = item.get("path") if isinstance(item, dict) else item
                if isinstance(path, str):
                    yield Run("_.source", path, f"when you enter {where} {ACTIVATED}")


def _tool_postinstalls(document: dict[str, Any], where: str) -> Iterator[Run]:
    tools = document.get("tools")
    for name, value in tools.items() if isinstance(tools, dict) else ():
        for option in value if isinstance(value, list) else [value]:
            command = option.get("postinstall") if isinstance(option, dict) else None
            if isinstance(command, str):
                yield Run(
                    f"`{name}`'s postinstall",
                    command,
                    f"after it installs `{name}` for {where} {INSTALL}",
                )


def _template_command(text: str) -> str:
    match = EXEC_COMMAND.search(text)
    return next((group for group in match.groups() if group is not None), text) if match else text


def _template_exec(text: str) -> bool:
    """Whether *text* calls ``exec`` after a template opens (linear: no backtracking)."""
    opens = [index for index in (text.find("{{"), text.find("{%")) if index >= 0]
    return bool(opens) and EXEC_CALL.search(text, min(opens)) is not None


def _templates(values: list[str], where: str) -> Iterator[Run]:
    for value in values:
        if _template_exec(value):
            yield Run(
                "a template's exec",
                _template_command(value),
                f"when you enter {where} {ACTIVATED}",
            )


def _runs(document: dict[str, Any], where: str) -> list[Run]:
    templated = [value for key, value in document.items() if key not in NOT_TEMPLATED]
    return [
        *_hooks(document, where),
        *_sources(document, where),
        *_tool_postinstalls(document, where),
        *_templates(_strings(templated), where),
    ]


def _unparsed(marked: Marked, entry: Entry, why: str) -> Finding:
    """A config file mise reads that this review cannot: its parser is not mise's (mise
    takes TOML 1.1), so what it would run cannot be ruled out."""
    lines = [line.strip() for line in entry.lines if any(word in line for word in MENTIONS)]
    return finding(
        "mise",
        marked.relative,
        "review",
        f"mise reads this file when you enter {_where(marked)} {ACTIVATED}, but it does not"
        f" parse here ({why}): look for hooks and _.source before you do",
        content=entry.content_digest,
        details=lines,
    )


def _finding(marked: Marked, run: Run) -> Finding:
    return finding(
        "mise",
        marked.relative,
        "runs-code",
        f"mise runs `{shorten(run.command, 80)}` ({run.what}) {run.when}",
        content=digest(run.what, run.command),
        details=(f"{run.what}: {run.command}", TRUST),
    )


def _mise_file(marked: Marked, entry: Entry) -> list[Finding]:
    if entry.truncated:
        return [_unparsed(marked, entry, "larger than 1 MiB")]
    if marked.relative.rpartition("/")[2] == ".tool-versions":
        # Not TOML, but templates are rendered in it all the same.
        return [_finding(marked, run) for run in _templates(entry.lines, _where(marked))]
    try:
        document = tomllib.loads(entry.text)
    except tomllib.TOMLDecodeError as error:
        return [_unparsed(marked, entry, str(error))]
    except RecursionError:
        return [_unparsed(marked, entry, "nested too deeply")]
    return [_finding(marked, run) for run in _runs(document, _where(marked))]


def detect_mise(scan: TreeScan) -> list[Finding]:
    found = []
    for marked in scan.mise:
        entry = scan.regular(marked.entry)
        if entry is not None:
            found.extend(_mise_file(marked, entry))
    return found
