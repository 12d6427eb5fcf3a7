"""What an agent left in a project that would run code or read outside it.

When a cloister is done, the human will use git in the project again and open it in
an editor: :func:`review` lists what is there now that git, direnv, VS Code or a hook
manager would run, or that would make them read outside the project; the caller
keeps only what was not there at the start (:func:`new_findings`, by fingerprint),
and :func:`apply_fixes` moves the fixable part into a quarantine.

The package is split by concern: :mod:`.scan` walks the tree once (and asks git the
few things only git knows), :mod:`.detectors` turns the scan into findings (one pure
function per kind), :mod:`.fixes` quarantines.
"""

from __future__ import annotations

from cloister_cli.review.findings import (
    Finding,
    FindingKind,
    Fix,
    ReviewTarget,
    Severity,
    new_findings,
)
from cloister_cli.review.fixes import apply_fixes
from cloister_cli.review.run import ReviewError, review
from cloister_cli.review.scan import nested_git_entries

__all__ = [
    "Finding",
    "FindingKind",
    "Fix",
    "ReviewError",
    "ReviewTarget",
    "Severity",
    "apply_fixes",
    "nested_git_entries",
    "new_findings",
    "review",
]
