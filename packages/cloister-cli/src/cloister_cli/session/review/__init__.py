"""What an agent left in the work tree that would run code or read outside the project.

The agent shares the work tree with the human, live; it never writes the human's git
directory (a cloister commits to a git directory of its own, and its commits come back
by a fetch), so only the work tree is reviewed. When a cloister is done, the human
will use git in the project again, enter it in a shell and open it in an editor:
:func:`review` lists what is there now that git, a hook manager, direnv, mise or VS
Code would run, or that would make them read outside the project; the caller keeps
only what was not there at the start (:func:`new_findings`, by fingerprint), and
:func:`apply_fixes` moves the fixable part (nested repositories) into a quarantine.

The package is split by concern: :mod:`.scan` walks the tree once (and asks git the
two things only git knows: where the human's hooks are, which paths the human's index
holds as gitlinks), :mod:`.detectors` turns the scan into findings (one pure function
per kind), :mod:`.fixes` quarantines.
"""

from __future__ import annotations

from cloister_cli.session.review.findings import (
    Finding,
    FindingKind,
    Fix,
    ReviewTarget,
    Severity,
    new_findings,
)
from cloister_cli.session.review.fixes import apply_fixes
from cloister_cli.session.review.run import ReviewError, review
from cloister_cli.session.review.scan import nested_git_entries

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
