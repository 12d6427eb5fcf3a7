"""Project, cloister and branch-directory names.

Every name Cloister derives ends up as a file name (``projects/<p>.yaml``,
``tokens/<cloister>``), a directory (``worktrees/<project>/<branch>``) and part of a
Docker container name, so one rule covers all of them: lower-case letters, digits,
``.``, ``_`` and ``-``, starting with a letter or digit, at most 63 characters. That is
inside Docker's container-name rule and a DNS label's length, and it cannot express
a path (no ``/``, and a leading ``.`` is impossible, so neither ``.`` nor ``..``).
"""

from __future__ import annotations

import re
from pathlib import PurePath

from cloister_core.errors import CloisterNameError

MAX_NAME_LENGTH = 63
# A cloister's container is cloister-<instance>-<name>, the guardian's services'
# cloister-<instance>-guardian-<service> (cloister_core.stack.Instance), and both are
# DNS names on a cloister's network: so a cloister may not be called guardian-....
RESERVED_CLOISTER_PREFIX = "guardian"

_VALID_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_INVALID_RUN = re.compile(r"[^a-z0-9_.-]+")
_DASH_RUN = re.compile(r"-{2,}")


def validate_name(name: str, *, what: str = "name") -> str:
    """Return *name* unchanged if it is a valid Cloister name, else raise.

    >>> validate_name("my-api")
    'my-api'
    """
    if not isinstance(name, str) or not name:
        raise CloisterNameError(f"{what} must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise CloisterNameError(
            f"{what} {name!r} is {len(name)} characters long; at most {MAX_NAME_LENGTH} are allowed"
        )
    if not _VALID_NAME.fullmatch(name):
        raise CloisterNameError(
            f"{what} {name!r} is not valid: use lower-case letters, digits, '.', '_' and '-',"
            " starting with a letter or digit"
        )
    return name


def _slug(text: str) -> str:
    slug = _INVALID_RUN.sub("-", text.lower())
    slug = _DASH_RUN.sub("-", slug)
    return slug.strip("-._")


def project_name_from_path(path: str | PurePath) -> str:
    """Derive a project name from a directory's basename.

    Upper case is folded and characters a container name cannot hold become ``-``
    (``~/src/My API`` → ``my-api``). Raises when nothing usable remains, so the caller
    can ask for an explicit ``-p NAME``.
    """
    base = PurePath(path).name
    slug = _slug(base)[:MAX_NAME_LENGTH].rstrip("-._")
    if not slug:
        raise CloisterNameError(
            f"cannot derive a project name from directory {base!r}; choose one with -p NAME"
        )
    return validate_name(slug, what="project name")


def sanitize_branch(branch: str) -> str:
    """Turn a git branch name into a directory and name component.

    ``feature/auth`` → ``feature-auth``, ``Fix_Bug#12`` → ``fix_bug-12``.
    """
    if not branch or "\x00" in branch:
        raise CloisterNameError(f"branch name {branch!r} is not valid")
    slug = _slug(branch)[:MAX_NAME_LENGTH].rstrip("-._")
    if not slug:
        raise CloisterNameError(f"branch name {branch!r} has no usable characters")
    return validate_name(slug, what="branch directory")


def cloister_name(project: str, branch: str | None = None) -> str:
    """``<project>`` for a main checkout, ``<project>-<branch>`` for a worktree."""
    validate_name(project, what="project name")
    if branch is None:
        return validate_cloister_name(project)
    return validate_cloister_name(f"{project}-{sanitize_branch(branch)}")


def validate_cloister_name(name: str) -> str:
    """A valid name that does not collide with the guardian stack's own containers."""
    validate_name(name, what="cloister name")
    if name.startswith(RESERVED_CLOISTER_PREFIX):
        raise CloisterNameError(
            f"cloister name {name!r} is reserved (names starting with"
            f" {RESERVED_CLOISTER_PREFIX!r} belong to the guardian stack); choose one with -p NAME"
        )
    return name
