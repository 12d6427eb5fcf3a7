"""The git guardrails: a ``git`` first on PATH in every cloister.

``bin/git`` (POSIX sh, for any image's ``/bin/sh``: dash, bash, busybox) refuses what an
eager agent may do by accident that skips the project's checks or loses history
(``commit --no-verify``, force pushes, deleting a protected branch), saying why and how
to do it on the host, and runs the real git for everything else; its header lists what
it refuses. It is mounted read-only at :data:`BIN`, which goes first on the cloister's
PATH (the image's own PATH, or the devcontainer's, after it). A login shell sets PATH
afresh in ``/etc/profile`` (Debian's does), so ``/etc/profile.d`` gets a read-only
snippet that puts :data:`BIN` first again.

A guard against accidents, not a boundary: the agent can run ``/usr/bin/git`` itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from docker.types import Mount

from cloister_cli.repo.gitmounts import bind
from cloister_core.config.models import GitGuardrailsConfig
from cloister_core.errors import CloisterError

BIN = "/opt/cloister/bin"
PROFILE = "/etc/profile.d/cloister-git-guardrails.sh"
# The protected branches, space-separated (the config allows no blanks in a name).
PROTECTED_VARIABLE = "CLOISTER_GIT_PROTECTED_BRANCHES"
# The PATH Docker gives a container whose image sets none.
DOCKER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_HERE = Path(__file__).resolve().parent
WRAPPER_DIR = _HERE / "bin"
WRAPPER = WRAPPER_DIR / "git"
PROFILE_SNIPPET = _HERE / "profile" / "cloister-git-guardrails.sh"


class GuardrailsError(CloisterError):
    """The guardrails are on but their files cannot be used."""


@dataclass(frozen=True, slots=True)
class Guardrails:
    """What the guardrails add to a cloister's ``docker run``."""

    protected_branches: tuple[str, ...]
    image_path: str | None  # the image's PATH; None while the image is not built

    def mounts(self) -> list[Mount]:
        return [
            bind(WRAPPER_DIR, BIN, read_only=True),
            bind(PROFILE_SNIPPET, PROFILE, read_only=True),
        ]

    def environment(self, path: str | None) -> dict[str, str]:
        """The variables to set; *path* is the PATH the cloister would have without the
        guardrails (a devcontainer's), None for the image's own."""
        base = path or self.image_path or DOCKER_PATH
        first = base if base == BIN or base.startswith(f"{BIN}:") else f"{BIN}:{base}"
        return {"PATH": first, PROTECTED_VARIABLE: " ".join(self.protected_branches)}

    def notes(self, path: str | None) -> tuple[str, ...]:
        if path or self.image_path is not None:
            return ()
        return (
            f"PATH shown as {BIN} before Docker's default: the image's own PATH is known"
            " once it is built",
        )


def guardrails_for(
    config: GitGuardrailsConfig, image_env: Mapping[str, str] | None
) -> Guardrails | None:
    """The guardrails of *config* (None when off); *image_env* is the image's environment
    (None when the image does not exist yet, as in a dry run that would build it)."""
    if not config.enabled:
        return None
    for needed, mode in ((WRAPPER, os.R_OK | os.X_OK), (PROFILE_SNIPPET, os.R_OK)):
        if not os.access(needed, mode):
            raise GuardrailsError(
                f"the git guardrails' file {str(needed)!r} is missing or not"
                f" {'executable' if mode & os.X_OK else 'readable'}: reinstall cloister-cli,"
                " or set `git_guardrails: {enabled: false}` in config.yaml"
            )
    image_path = None if image_env is None else (image_env.get("PATH") or DOCKER_PATH)
    return Guardrails(config.protected_branches, image_path)
