"""Project, cloister and branch-directory names.

Every name Cloister derives ends up as a file name (``projects/<p>.yaml``,
``tokens/<cloister>``), a directory (``worktrees/<project>/<branch>``) and part of a
Docker container name, so one rule covers all of them: lower-case letters, digits,
``.``, ``_`` and ``-``, starting with a letter or digit, at most 63 characters. That is
inside Docker's container-name rule and a DNS label's length, and it cannot express
a path (no ``/``, and a leading ``.`` is impossible, so neither ``.`` nor ``..``).

A branch too long for that is shortened, not refused: the start of the name is kept
(recognisable in ``cloister list``) and ``-`` and 8 hex digits of the SHA-256 of the
whole branch name end it, so the name is the same on every run and machine, and two
branches that only differ past the cut get two names. A cloister's name is shortened
further, to :data:`SHORTENED_LENGTH`: its container's name, ``cloister-<instance>-<name>``,
is a name on its network, and a DNS label holds at most 63 characters.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePath

from cloister_core.errors import CloisterNameError

MAX_NAME_LENGTH = 63
# A cloister's container is cloister-<instance>-<name>, the guardian's services'
# cloister-<instance>-guardian-<service> (cloister_core.stack.Instance), and both are
# DNS names on a cloister's network: so a cloister may not be called guardian-....
RESERVED_CLOISTER_PREFIX = "guardian"

HASH_LENGTH = 8  # hex digits of a shortened name's suffix
# A shortened cloister name, so that "cloister-" + 8 hex (cloister_core.stack.Instance)
# + "-" + it is a DNS label still.
SHORTENED_LENGTH = MAX_NAME_LENGTH - len("cloister-") - 8 - 1
# What a shortened cloister name keeps of its branch at least: its project's name is cut
# to leave this much room (a name that is almost all project says little of its branch).
MIN_BRANCH_KEPT = 12
WORD_CUT = 8  # a shortened name ends at a word when one ends this near the cut

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


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:HASH_LENGTH]


def _shorten(slug: str, room: int, digest: str) -> str:
    """*slug* cut to leave room for ``-<digest>`` within *room* characters: at a ``-``
    when one is near the cut, so that no word is left half."""
    keep = room - HASH_LENGTH - 1
    cut = slug[:keep]
    if slug[keep : keep + 1] not in ("", "-") and (dash := cut.rfind("-")) >= keep - WORD_CUT:
        cut = cut[:dash]
    return f"{cut.rstrip('-._')}-{digest}"


def sanitize_branch(branch: str) -> str:
    """Turn a git branch name into a directory and name component.

    ``feature/auth`` → ``feature-auth``, ``Fix_Bug#12`` → ``fix_bug-12``; one longer
    than a name may be is shortened, with a hash of the whole branch name at its end
    (see the module docstring).
    """
    if not branch or "\x00" in branch:
        raise CloisterNameError(f"branch name {branch!r} is not valid")
    slug = _slug(branch)
    if not slug:
        raise CloisterNameError(f"branch name {branch!r} has no usable characters")
    if len(slug) > MAX_NAME_LENGTH:
        slug = _shorten(slug, MAX_NAME_LENGTH, _digest(branch))
    return validate_name(slug, what="branch directory")


def cloister_name(project: str, branch: str | None = None) -> str:
    """``<project>`` for a main checkout, ``<project>-<branch>`` for a worktree.

    A worktree's name longer than a name may be is shortened to :data:`SHORTENED_LENGTH`:
    the start of the branch and the hash of the whole branch name (of the project's too,
    when even the project's name had to be cut), so ``-p`` is never needed for a long
    branch. Names that fit are as they always were.
    """
    validate_name(project, what="project name")
    if branch is None:
        return validate_cloister_name(project)
    sanitize_branch(branch)  # refuses what has no name
    name = f"{project}-{_slug(branch)}"
    if len(name) > MAX_NAME_LENGTH:
        # The project's name stays whole while the branch keeps MIN_BRANCH_KEPT
        # characters; past that it is cut too, and then named in the hash.
        room = SHORTENED_LENGTH - HASH_LENGTH - 1 - MIN_BRANCH_KEPT - 1
        kept = project if len(project) <= room else project[:room].rstrip("-._")
        digest = _digest(branch) if kept == project else _digest(branch, project)
        name = _shorten(f"{kept}-{_slug(branch)}", SHORTENED_LENGTH, digest)
    return validate_cloister_name(name)


def validate_cloister_name(name: str) -> str:
    """A valid name that does not collide with the guardian stack's own containers."""
    validate_name(name, what="cloister name")
    if name.startswith(RESERVED_CLOISTER_PREFIX):
        raise CloisterNameError(
            f"cloister name {name!r} is reserved (names starting with"
            f" {RESERVED_CLOISTER_PREFIX!r} belong to the guardian stack); choose one with -p NAME"
        )
    return name
