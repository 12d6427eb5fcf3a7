"""The environment an approved command gets: little of the host's, nothing by accident.

A host command runs with the human's credentials on the human's machine, so what it
inherits is chosen, not everything the executor happened to be started with (cloud
keys, tokens in the shell): ``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``LANG``, the
``LC_*`` locale, the names listed in ``hostexec.env_passthrough``, and two variables
saying which cloister asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cloister_core.tokens import TokenRecord

BASELINE = ("PATH", "HOME", "USER", "LOGNAME", "LANG")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def command_environment(
    host: Mapping[str, str], passthrough: Iterable[str], record: TokenRecord
) -> dict[str, str]:
    """The environment for a command of *record*'s cloister."""
    names = set(BASELINE) | set(passthrough)
    env = {name: value for name, value in host.items() if name in names or name.startswith("LC_")}
    env.setdefault("PATH", DEFAULT_PATH)
    env["CLOISTER_CLOISTER"] = record.cloister
    env["CLOISTER_PROJECT"] = record.project
    return env
