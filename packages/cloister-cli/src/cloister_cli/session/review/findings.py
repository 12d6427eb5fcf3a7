"""What a review reports: findings, the fix each allows, and their fingerprints.

A fingerprint names a finding across runs (kind, where, and a digest of the content
that matters), so ``cloister stop`` can tell what the agent left from what the human
already had when the cloister started: same thing, same fingerprint; changed content,
new fingerprint.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cloister_core.printable import printable

FindingKind = Literal[
    "nested-repository",
    "attributes-driver",
    "envrc",
    "vscode-task",
    "mise",
    "hook-config",
    "gitmodules",
    "outside-symlink",
]
Severity = Literal["runs-code", "reads-outside", "review"]
FixAction = Literal["quarantine"]

SEVERITY_ORDER: dict[Severity, int] = {"runs-code": 0, "reads-outside": 1, "review": 2}
MAX_DETAILS = 40
MAX_DETAIL_WIDTH = 300
MAX_SUMMARY_WIDTH = 400


@dataclass(frozen=True, slots=True)
class ReviewTarget:
    """What to review: a work tree and, for a git project, the human's git directories.

    The git directories are never reviewed (the agent never had them): git is only asked
    where the human's hooks are and which paths the human's index holds as gitlinks.
    """

    worktree: Path  # the work tree (host path) the cloister had at /work
    git_dir: Path | None  # that work tree's own git dir (.git, or .git/worktrees/<id>)
    common_dir: Path | None  # the repository's shared git dir (None with git_dir: no git)


@dataclass(frozen=True, slots=True)
class Fix:
    """What ``--fix`` does about a finding; data is moved aside, never deleted."""

    action: FixAction
    target: Path  # absolute host path moved to the quarantine
    description: str  # "move sub/.git to the quarantine"
    relative: str  # where it goes below the quarantine: "sub/.git"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing that would run code or read outside the project, or needs a look."""

    kind: FindingKind
    path: str  # for humans, relative to the work tree: "sub/", ".envrc", "mise.toml"
    severity: Severity
    summary: str  # one line: what it would run or read, and when
    details: tuple[str, ...]
    fingerprint: str
    fix: Fix | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "severity": self.severity,
            "summary": self.summary,
            "details": list(self.details),
            "fingerprint": self.fingerprint,
            "fix": None
            if self.fix is None
            else {
                "action": self.fix.action,
                "target": str(self.fix.target),
                "description": self.fix.description,
            },
        }


def finding(
    kind: FindingKind,
    path: str,
    severity: Severity,
    summary: str,
    *,
    content: str,
    details: Sequence[str] = (),
    fix: Fix | None = None,
) -> Finding:
    """A finding whose texts are safe to print and whose fingerprint is *content*'s.

    *content* is the digest of what matters (see :func:`files.digest`); the texts are
    stripped of control characters, since every one of them comes from the agent.
    """
    shown = [_cut(printable(line), MAX_DETAIL_WIDTH) for line in details[:MAX_DETAILS]]
    if len(details) > MAX_DETAILS:
        shown.append(f"… and {len(details) - MAX_DETAILS} more")
    return Finding(
        kind=kind,
        path=printable(path),
        severity=severity,
        summary=_cut(printable(" ".join(summary.split())), MAX_SUMMARY_WIDTH),
        details=tuple(shown),
        fingerprint=f"{kind}:{printable(path)}:{content}",
        fix=fix,
    )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def sort_key(item: Finding) -> tuple[int, str, str, str]:
    return (SEVERITY_ORDER[item.severity], item.path, item.kind, item.fingerprint)


def new_findings(findings: Sequence[Finding], baseline: Collection[str]) -> list[Finding]:
    """The findings whose fingerprint is not in *baseline* (what was there at start)."""
    known = set(baseline)
    return [item for item in findings if item.fingerprint not in known]
