""":func:`review`: one scan, every detector, one sorted list."""

from __future__ import annotations

import stat

from cloister_cli.session.review.detectors import DETECTORS
from cloister_cli.session.review.findings import Finding, ReviewTarget, sort_key
from cloister_cli.session.review.gitreads import Git
from cloister_cli.session.review.scan import scan
from cloister_core.errors import CloisterError


class ReviewError(CloisterError):
    """The work tree to review is not there."""


def review(target: ReviewTarget, *, git: Git | None = None) -> list[Finding]:
    """Everything found in *target* now, most severe first, then by path.

    Hostile content never raises: what cannot be read is skipped or becomes a
    finding. Only a missing work tree is an error.
    """
    try:
        mode = target.worktree.stat().st_mode
    except OSError as error:
        raise ReviewError(f"{target.worktree}: cannot review: {error.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise ReviewError(f"{target.worktree}: cannot review: not a directory")
    result = scan(target, git)
    found: dict[str, Finding] = {}
    for _kind, detector in DETECTORS:
        for item in detector(result):
            found.setdefault(item.fingerprint, item)
    return sorted(found.values(), key=sort_key)
