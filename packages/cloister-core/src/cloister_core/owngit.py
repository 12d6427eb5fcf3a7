"""A cloister's own git directory: where things are, and how its work comes back.

The human's ``.git`` is never the agent's. Inside a cloister ``/work`` is the project's
work tree, but its git directory is one of the cloister's own (``<data>/gitdirs/<name>``,
mounted over ``/work/.git`` inside the container only): it starts as the human's
repository looks (``HEAD``, branches, tags, the index), reads the human's objects through
a read-only mount (``objects/info/alternates``) and writes new ones to its own store.

The agent's commits reach the human's repository only as what git itself received: a
``git fetch`` with ``transfer.fsckObjects`` in a throwaway container, whose pack and ref
list the host takes in (``cloister_executor.gitsync``); the refs land under
``refs/cloister/<cloister>/<branch>``, never over the human's own. This module is the
pure part of that: names and places, the parsing of what the container wrote (hostile
input: a compromised git in there could write anything), the rewriting of a hostexec
``git push``, and the plan of one sync.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cloister_core.errors import CloisterError

__all__ = [
    "AGENT_REF_PREFIX",
    "EXPORT_OUTPUT",
    "EXPORT_SOURCE",
    "GIT_DIR_ELSEWHERE",
    "GIT_DIR_IN_WORK",
    "HOST_REMOTE",
    "ORIGIN_ALTERNATES",
    "ORIGIN_OBJECTS",
    "POINTER",
    "ExportError",
    "Head",
    "SyncPlan",
    "agent_ref",
    "branch_name_problem",
    "parse_head",
    "parse_refs",
    "plan_sync",
    "protected_pathspecs",
    "push_argv",
    "touches_protected",
]

# Inside a cloister: its git directory where the project's is, or (when /work/.git is a
# file: a worktree cloister, a project that is itself a linked worktree) elsewhere, with
# /work/.git a read-only file naming it. On the host that file names a path that exists
# only in the container, so the human's git there says "not a git repository".
GIT_DIR_IN_WORK = "/work/.git"
GIT_DIR_ELSEWHERE = "/opt/cloister/git"
POINTER = f"gitdir: {GIT_DIR_ELSEWHERE}\n"
# The human's object store, read-only, in the cloister and in the export container
# alike (the cloister's alternates name it); the human's own alternates, if any, below.
ORIGIN_OBJECTS = "/opt/cloister/origin/objects"
ORIGIN_ALTERNATES = "/opt/cloister/origin/alternates"
# In the export container: the cloister's git directory (read-only) and the output.
EXPORT_SOURCE = "/cloister/git"
EXPORT_OUTPUT = "/out"
# Where the agent's branches land in the human's repository, and where the human's
# branches show in the cloister's (``git merge host/main``).
AGENT_REF_PREFIX = "refs/cloister/"
HOST_REMOTE = "host"

MAX_REFS = 10_000
MAX_REF_LENGTH = 1024
_HEX = re.compile(rb"[0-9a-f]+")
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


class ExportError(CloisterError):
    """What the export container wrote is not what Cloister's script writes."""


def agent_ref(cloister: str, branch: str) -> str:
    """``refs/cloister/<cloister>/<branch>``: the agent's *branch* in the human's repository."""
    return f"{AGENT_REF_PREFIX}{cloister}/{branch}"


def branch_name_problem(name: str) -> str | None:
    """Why ``refs/heads/<name>`` is not a ref git would make, or None (git's
    ``check-ref-format`` rules, and Cloister's bound on the length)."""
    if not name or len(name.encode("utf-8", "surrogateescape")) > MAX_REF_LENGTH:
        return "an empty or overlong name"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # bytes git takes, but no text (every log line has it)
        return "bytes that are no UTF-8"
    if _FORBIDDEN.search(name):
        return "a control character, space or one of ~^:?*[\\"
    if name == "@" or "@{" in name or ".." in name:
        return "'@', '@{' or '..'"
    if name == "HEAD":  # `git branch HEAD` refuses it too (`check-ref-format --branch`)
        return "the name HEAD"
    if name.startswith(("/", "-")) or name.endswith(("/", ".")) or "//" in name:
        return "a leading '/' or '-', a trailing '/' or '.', or '//'"
    for component in name.split("/"):
        if component.startswith(".") or component.endswith(".lock"):
            return "a component starting with '.' or ending with '.lock'"
    return None


def _oid(raw: bytes, length: int) -> str:
    if len(raw) != length or _HEX.fullmatch(raw) is None:
        raise ExportError(f"not an object name: {raw[:80]!r}")
    return raw.decode("ascii")


def parse_refs(
    data: bytes, *, prefix: str, hash_length: int
) -> tuple[dict[str, str], dict[str, str]]:
    """``<oid> <prefix><branch>`` lines (``git for-each-ref``) as ``{branch: oid}``, and
    the branches left out, with why (a name Cloister does not take: not UTF-8, say).

    A line that does not fit is an :class:`ExportError`: Cloister's script writes no
    such line.
    """
    refs: dict[str, str] = {}
    skipped: dict[str, str] = {}
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if len(lines) > MAX_REFS:
        raise ExportError(f"{len(lines)} branches; Cloister takes at most {MAX_REFS}")
    for line in lines:
        raw_oid, space, raw_name = line.partition(b" ")
        if not space:
            raise ExportError(f"not a ref line: {line[:80]!r}")
        name = raw_name.decode("utf-8", "surrogateescape")
        if not name.startswith(prefix):
            raise ExportError(f"a ref outside {prefix}: {name[:80]!r}")
        branch = name.removeprefix(prefix)
        oid = _oid(raw_oid, hash_length)
        problem = branch_name_problem(branch)
        if problem is not None:
            skipped[ascii(branch[:80])] = problem
            continue
        refs[branch] = oid
    return refs, skipped


@dataclass(frozen=True, slots=True)
class Head:
    """Where the cloister's ``HEAD`` is: on a branch, or detached at a commit."""

    branch: str | None = None
    commit: str | None = None


def parse_head(data: bytes, *, hash_length: int) -> Head:
    """``refs/heads/<branch>`` or an object name (what the export script wrote)."""
    text = data.strip()
    if not text:
        return Head()
    if text.startswith(b"refs/heads/"):
        branch = text.removeprefix(b"refs/heads/").decode("utf-8", "surrogateescape")
        # On a branch that does not come back (parse_refs): as good as nowhere.
        return Head() if branch_name_problem(branch) is not None else Head(branch=branch)
    return Head(commit=_oid(text, hash_length))


# -- protected paths in trees ---------------------------------------------------------------


def touches_protected(path: str, protected: Sequence[str]) -> bool:
    """Whether a change of tree entry *path* changes a protected path: the path itself,
    one inside it, or one on the way to it (``.vscode`` turned into a link to a
    directory of the agent's changes ``.vscode/tasks.json`` as much as an edit does)."""
    for item in protected:
        name = item.strip("/")
        if path == name or path.startswith(name + "/") or name.startswith(path + "/"):
            return True
    return False


def protected_pathspecs(protected: Sequence[str]) -> list[str]:
    """Pathspecs (literal) that select every entry :func:`touches_protected` looks at:
    the protected paths and the directories on the way to them."""
    found: dict[str, None] = {}
    for item in protected:
        parts = item.strip("/").split("/")
        for end in range(1, len(parts) + 1):
            found["/".join(parts[:end])] = None
    return list(found)


# -- one sync ------------------------------------------------------------------------------


@dataclass(slots=True)
class SyncPlan:
    """What one sync changes besides a fast-forward (which needs git's answers).

    * ``imports``/``removals``: ``refs/cloister/<cloister>/<branch>`` set to the agent's
      branches as they are now (a branch the agent deleted goes too);
    * ``to_cloister``: the cloister's branches the human moved while the agent left them
      where both agreed (``branch -> (new, old)``; old None: a branch the human made);
    * ``bases``: per branch, the last commit both sides agreed on (where the agent's work
      on it began), after this sync.
    """

    imports: dict[str, str] = field(default_factory=dict)
    removals: list[str] = field(default_factory=list)
    to_cloister: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    bases: dict[str, str] = field(default_factory=dict)


def plan_sync(
    *,
    agent: Mapping[str, str],
    human: Mapping[str, str],
    imported: Mapping[str, str],
    bases: Mapping[str, str],
    agent_head: Head,
    shared_checkout_branch: str | None,
) -> SyncPlan:
    """The plan for the agent's branches *agent*, the human's *human* (``refs/heads``),
    what ``refs/cloister/<cloister>/`` holds now (*imported*) and the *bases* of the
    last sync.

    The cloister's checked-out branch is moved to the human's only when the human's
    checkout is the cloister's work tree and has that branch checked out
    (*shared_checkout_branch*): the files the agent sees are then the human's already;
    elsewhere that would change what the agent works on under it.
    """
    plan = SyncPlan()
    plan.imports = {branch: oid for branch, oid in agent.items() if imported.get(branch) != oid}
    plan.removals = sorted(branch for branch in imported if branch not in agent)
    new_bases = {branch: oid for branch, oid in bases.items() if branch in human or branch in agent}
    for branch, oid in agent.items():
        if human.get(branch) == oid:
            new_bases[branch] = oid
    for branch, theirs in human.items():
        ours = agent.get(branch)
        base = bases.get(branch)
        if ours is None:
            if base is None:  # the human made it (a branch the agent deleted stays so)
                plan.to_cloister[branch] = (theirs, None)
                new_bases[branch] = theirs
            continue
        if ours == theirs or ours != base:
            continue  # agreed, or the agent moved it: the human merges (or the agent does)
        if branch == agent_head.branch and branch != shared_checkout_branch:
            continue
        plan.to_cloister[branch] = (theirs, ours)
        new_bases[branch] = theirs
    plan.bases = new_bases
    return plan


# -- hostexec git push ------------------------------------------------------------------------

# `git push` options that take the next argument as their value (git 2.39 `push -h`).
_PUSH_VALUE_OPTIONS = frozenset({"-o", "--push-option", "--repo", "--receive-pack", "--exec"})
# Options after which git pushes refs it chooses, not the ones named.
_PUSH_WHOLESALE = frozenset({"--all", "--branches", "--mirror", "--tags"})


def _short_flags(arg: str) -> str:
    """The flags of a cluster of short options, before ``-o`` and its value (``-fu``,
    ``-fdoX``); empty for anything else."""
    if arg.startswith("--") or not arg.startswith("-"):
        return ""
    return arg[1:].partition("o")[0]


def _takes_value(arg: str) -> bool:
    """Whether *arg* takes the next argument as its value (``-o X``, ``-fo X``)."""
    short = not arg.startswith("--")
    return arg in _PUSH_VALUE_OPTIONS or (short and arg[1:].find("o") == len(arg) - 2)


def _deletes(arg: str) -> bool:
    """``-d``/``--delete`` (abbreviated, or in a cluster): the refspecs then name the
    remote's refs, which git takes only as they are."""
    if arg.startswith("--"):
        return len(arg) > 3 and "--delete".startswith(arg)
    return "d" in _short_flags(arg)


def push_argv(
    argv: Sequence[str],
    *,
    cloister: str,
    agent_branches: Mapping[str, str],
    agent_head: Head,
    default_remote: str,
) -> list[str]:
    """``git push …`` with the agent's branches in place of the human's.

    A refspec whose source names one of the agent's branches (``main``,
    ``refs/heads/main``, ``HEAD`` when the cloister is on a branch, each with an optional
    ``+`` and ``:destination``) pushes ``refs/cloister/<cloister>/<branch>`` to that
    branch's name (or the destination given); ``HEAD`` when the cloister's is detached
    is its commit. Without a refspec it is the agent's ``HEAD``, to *default_remote*
    when no remote was named. Everything else (options, tags, deletions, ``--delete``,
    names the agent has no branch of) stays as it was.
    """
    if len(argv) < 2:
        return list(argv)
    at = next((index for index, arg in enumerate(argv) if arg == "push"), None)
    if at is None:
        return list(argv)
    head, rest = list(argv[: at + 1]), list(argv[at + 1 :])
    options: list[str] = []
    positional: list[str] = []
    wholesale = False
    index = 0
    while index < len(rest):
        arg = rest[index]
        index += 1
        if arg == "--":
            positional.extend(rest[index:])
            break
        if arg.startswith("-") and arg != "-":
            options.append(arg)
            wholesale = wholesale or arg in _PUSH_WHOLESALE or _deletes(arg)
            if _takes_value(arg) and index < len(rest):
                options.append(rest[index])
                index += 1
            continue
        positional.append(arg)
    remote, refspecs = (positional[0], positional[1:]) if positional else (None, [])
    if wholesale:
        return list(argv)
    if not refspecs:
        if agent_head.branch is None and agent_head.commit is None:
            return list(argv)
        refspecs = ["HEAD"]
        remote = remote or default_remote
    translated = [
        _refspec(spec, cloister=cloister, agent_branches=agent_branches, head=agent_head)
        for spec in refspecs
    ]
    return [*head, *options, "--", remote or default_remote, *translated]


def _refspec(spec: str, *, cloister: str, agent_branches: Mapping[str, str], head: Head) -> str:
    force = "+" if spec.startswith("+") else ""
    source, colon, destination = spec.removeprefix("+").partition(":")
    if source == "HEAD":
        # The cloister's HEAD, never the human's: the commit it is detached at (git
        # pushes that only to a destination named, and only when the human's repository
        # has it), or its branch (git refuses one with no commit yet: no such ref).
        if head.branch is None:
            return spec if head.commit is None else f"{force}{head.commit}{colon}{destination}"
        branch = head.branch
    else:
        branch = source.removeprefix("refs/heads/")
        if not source or branch not in agent_branches:
            return spec
    target = destination if colon and destination else f"refs/heads/{branch}"
    return f"{force}{agent_ref(cloister, branch)}:{target}"
