"""Detectors for the reviewed repository's own git directories.

What an agent can leave in ``.git`` that host git acts on: links and FIFOs (followed
or blocked on), alternates (other object stores), ``info/`` files (what git shows),
and a made-up operation in progress (whose ``exec`` lines ``--continue`` runs).
"""

from __future__ import annotations

from cloister_cli.review.files import Entry, digest, lexical_target, shorten
from cloister_cli.review.findings import Finding, Fix, finding
from cloister_cli.review.gitstate import Operation
from cloister_cli.review.scan import TreeScan

INFO_EFFECTS: dict[str, str] = {
    "exclude": "hides the files matching its patterns from git status and git add",
    "attributes": "sets attributes (filter, diff and merge drivers) for every file",
    "grafts": "changes the history git shows (commits get other parents)",
    "sparse-checkout": "changes which files git checks out and shows",
    "refs": "is what dumb-HTTP clients are told the refs are",
}


def _quarantine(scan: TreeScan, entry: Entry) -> Fix:
    relative = scan.places.stash(entry.path)
    return Fix(
        "quarantine", entry.path, f"move {scan.places.show(entry.path)} to the quarantine", relative
    )


def detect_git_dir_links(scan: TreeScan) -> list[Finding]:
    found = []
    for special in scan.git_state.specials:
        shown = scan.places.show(special.path)
        relative = scan.places.stash(special.path)
        if special.entry.kind == "symlink":
            link = special.entry.target or ""
            target = lexical_target(special.path, link)
            found.append(
                finding(
                    "git-dir-link",
                    shown,
                    "reads-outside",
                    f"a symbolic link in the git directory: git reads and may write that "
                    f"file instead: {target}",
                    content=digest("symlink", link),
                    details=(f"link text: {link}",),
                    fix=Fix("remove", special.path, f"remove the link {shown}", relative),
                )
            )
        else:
            found.append(
                finding(
                    "git-dir-link",
                    shown,
                    "review",
                    "a FIFO in the git directory: git blocks on it when it reads "
                    f"{special.path.name}",
                    content=digest("fifo"),
                    fix=Fix("remove", special.path, f"remove the FIFO {shown}", relative),
                )
            )
    return found


def detect_alternates(scan: TreeScan) -> list[Finding]:
    found = []
    for entry in scan.git_state.alternates:
        sources = [
            line.strip() for line in entry.lines if line.strip() and not line.startswith("#")
        ]
        first = sources[0] if sources else "(nothing listed)"
        more = f" (and {len(sources) - 1} more)" if len(sources) > 1 else ""
        found.append(
            finding(
                "alternates",
                scan.places.show(entry.path),
                "reads-outside",
                f"git reads objects from {first}{more} whenever it reads this repository's "
                "objects (and `git cat-file` prints them)",
                content=entry.content_digest,
                details=sources,
                fix=_quarantine(scan, entry),
            )
        )
    return found


def _meaningful(entry: Entry) -> list[str]:
    return [line for line in entry.lines if line.strip() and not line.lstrip().startswith("#")]


def detect_git_info_files(scan: TreeScan) -> list[Finding]:
    found = []
    for entry in scan.git_state.info_files:
        lines = _meaningful(entry)
        if not lines and not entry.truncated:
            continue  # only comments (git's own template): it does nothing
        effect = INFO_EFFECTS.get(
            entry.path.name, "is in info/, which git reads for the whole repository"
        )
        found.append(
            finding(
                "git-info-file",
                scan.places.show(entry.path),
                "review",
                f"{entry.path.name} {effect}: `{shorten(lines[0] if lines else '…', 80)}`"
                + (f" (and {len(lines) - 1} more lines)" if len(lines) > 1 else ""),
                content=entry.content_digest,
                details=lines,
                fix=_quarantine(scan, entry),
            )
        )
    return found


def _head(operation: Operation) -> str:
    return operation.files[0].text.strip()[:12] if operation.files else "?"


def _operation_texts(operation: Operation) -> tuple[str, str]:
    """(what it runs or means, how to drop it) for an operation in progress."""
    name = operation.name
    commands = operation.exec_lines
    if name == "rebase-merge":
        abort = "`git rebase --abort` if you did not start it"
        if commands:
            return f"`git rebase --continue` runs `{shorten(commands[0], 80)}`", abort
        return "a rebase is in progress: `git rebase --continue` goes on with its todo list", abort
    if name == "sequencer":
        abort = "`git cherry-pick --abort` or `git revert --abort` if you did not start it"
        if commands:
            return (
                f"`git cherry-pick --continue` (or revert) runs `{shorten(commands[0], 80)}`",
                abort,
            )
        return "a cherry-pick or revert is in progress (sequencer)", abort
    if name == "rebase-apply":
        return (
            "a `git am` or rebase is in progress: `--continue` applies its patches",
            "`git am --abort` or `git rebase --abort` if you did not start it",
        )
    what = {"MERGE_HEAD": "merge", "CHERRY_PICK_HEAD": "cherry-pick", "REVERT_HEAD": "revert"}[name]
    return (
        f"a {what} is in progress: your next `git commit` records it ({name} {_head(operation)})",
        f"`git {what} --abort` if you did not start it",
    )


def detect_sequencer(scan: TreeScan) -> list[Finding]:
    found = []
    for operation in scan.git_state.operations:
        commands = operation.exec_lines
        summary, abort = _operation_texts(operation)
        if len(commands) > 1:
            summary += f" (and {len(commands) - 1} more exec lines)"
        found.append(
            finding(
                "sequencer",
                scan.places.show(operation.path),
                "runs-code" if commands else "review",
                summary,
                content=operation.content_digest,
                details=[f"exec {command}" for command in commands] + [abort],
            )
        )
    return found


def detect_unsafe_index_entries(scan: TreeScan) -> list[Finding]:
    """Entries git must not be given: the agent wrote the index file itself (git checks
    an entry's path when it writes one, never when it reads the index back)."""
    if not scan.unsafe_entries or scan.places.git_dir is None:
        return []
    index = scan.places.git_dir / "index"
    listed = sorted(scan.unsafe_entries.items())
    return [
        finding(
            "index-entry",
            scan.places.show(index),
            "runs-code",
            f"the index names {len(listed)} path(s) outside the work tree or in .git"
            f" ({listed[0][0]!r}: {listed[0][1]}): `git diff` prints such a file, `git"
            " checkout` and `git restore` write it",
            content=digest(*(f"{path}\0{why}" for path, why in listed)),
            details=tuple(f"{path!r}: {why}" for path, why in listed),
            fix=Fix(
                "rebuild-index",
                index,
                "rebuild the index from HEAD (the forged one goes to the quarantine; staged"
                " changes become unstaged, the work tree is not touched)",
                scan.places.stash(index),
            ),
        )
    ]
