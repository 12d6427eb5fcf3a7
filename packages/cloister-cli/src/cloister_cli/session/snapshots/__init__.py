"""Session snapshots: kept at ``cloister start``, brought back by ``cloister restore``.

:mod:`~cloister_cli.session.snapshots.take` takes one (and expires old ones),
:mod:`~cloister_cli.session.snapshots.restore` brings one back, and
:mod:`~cloister_cli.session.snapshots.pool` moves object files between a repository and the
pool without following the agent's links. The record format is
:mod:`cloister_core.snapshots`.
"""

from cloister_cli.session.snapshots.choose import (
    chosen,
    cloister_for_directory,
    records_of,
    summary,
)
from cloister_cli.session.snapshots.restore import RestoreOutcome, restore
from cloister_cli.session.snapshots.take import Target, expire_project, take

__all__ = [
    "RestoreOutcome",
    "Target",
    "chosen",
    "cloister_for_directory",
    "expire_project",
    "records_of",
    "restore",
    "summary",
    "take",
]
