"""What a hostexec command gets in a cloister's git project, and what is checked first.

The human's git directory is never the agent's (each cloister has its own), so host git
reads nothing the agent wrote there. What is left to the executor:

* every command in a git project runs with git's hardened settings in its environment
  (so the git that ``make`` or ``gh`` runs is hardened too), and a ``git`` argv that
  would override them or run a command is refused (:mod:`cloister_core.gitargv`);
* a worktree cloister's ``git`` commands run in the human's checkout: the worktree is
  no repository on the host (its ``.git`` names a path that exists only inside);
* ``git push`` pushes the agent's branches: the cloister is synced first, and a
  refspec naming one of its branches names ``refs/cloister/<cloister>/<branch>``
  (:func:`cloister_core.owngit.push_argv`);
* a git command that may write the work tree, the index or the human's branches is
  refused when it could bring a change to a protected path (the read-only paths of the
  cloister, ``.envrc``, ``.husky/``, …): when the index or the work tree already differs
  from ``HEAD`` there, or a revision it names does (an agent's commit that changes
  ``.envrc``, by branch name, hash or ``:/message``), or a patch it applies, or a path
  it writes (``git mv -f``, ``git merge-file``); ``git am`` and ``git pull``, whose
  input cannot be looked at first, are refused there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cloister_core.config.models import HostexecConfig
from cloister_core.gitargv import (
    UnsafeGitCommandError,
    check_git_argv,
    git_subcommand,
    is_git_program,
    may_change_checkout,
    revision_candidates,
)
from cloister_core.gitrun import GitError, run_git
from cloister_core.gitsafety import FILTER_QUERY, filters_off, git_environment
from cloister_core.owngit import protected_pathspecs, push_argv, touches_protected
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord
from cloister_core.tokens import TokenRecord
from cloister_core.watch import Signature, file_signature
from cloister_executor.gitsync import Syncer, SyncError
from cloister_executor.protocol import ExecRefusal

LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}
SYSTEM_CONFIG = Path("/etc/gitconfig")  # protected paths are names, not patterns


@dataclass(slots=True)
class Prepared:
    """How one command runs."""

    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]


@dataclass(slots=True)
class _Cached:
    signature: Signature
    record: SessionRecord | None


@dataclass(slots=True)
class GitProjects:
    """The git side of hostexec for every cloister (session records cached)."""

    paths: CloisterPaths
    syncer: Syncer | None
    report: Callable[[str], None]
    _sessions: dict[str, _Cached] = field(default_factory=dict)
    _filters: dict[str, tuple[tuple[Signature, ...], dict[str, str]]] = field(default_factory=dict)

    def filters_off(self, checkout: Path, common: Path, env: Mapping[str, str]) -> dict[str, str]:
        """Variables switching off every filter driver of the human's config in
        *checkout* (re-read when a config file changed; includes are not watched)."""
        home = Path(env.get("HOME") or Path.home())
        xdg = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
        files = (common / "config", home / ".gitconfig", xdg / "git" / "config")
        signature = (*(file_signature(path) for path in files), file_signature(SYSTEM_CONFIG))
        cached = self._filters.get(str(checkout))
        if cached is None or cached[0] != signature:
            listed = run_git("-C", str(checkout), *FILTER_QUERY, check=False).stdout
            cached = (signature, filters_off(listed))
            self._filters[str(checkout)] = cached
        return cached[1]

    def session(self, cloister: str) -> SessionRecord | None:
        """The cloister's running session (re-read when the file changed); None if none."""
        path = self.paths.session_file(cloister)
        signature = file_signature(path)
        cached = self._sessions.get(cloister)
        if cached is None or cached.signature != signature:
            try:
                record = SessionRecord.model_validate_json(path.read_bytes())
            except (OSError, ValueError):
                record = None
            cached = _Cached(signature, record if record and record.running else None)
            self._sessions[cloister] = cached
        return cached.record

    async def before(
        self,
        record: TokenRecord,
        argv: tuple[str, ...],
        env: Mapping[str, str],
        config: HostexecConfig,
    ) -> Prepared | ExecRefusal:
        prepared = Prepared(argv, Path(record.path), dict(env))
        git = is_git_program(argv[0])
        if git:
            try:
                check_git_argv(argv)
            except UnsafeGitCommandError as error:
                return ExecRefusal(reason=str(error))
        session = self.session(record.cloister)
        if session is None or session.checkout is None or not session.is_git:
            return prepared
        # Hardened, and none of the human's filter drivers: the agent's .gitattributes
        # chooses which files they run on (git-lfs's fetch from its .lfsconfig's URL).
        prepared.env = git_environment(env, hooks=config.git_hooks) | await asyncio.to_thread(
            self.filters_off, Path(session.checkout), Path(session.common_dir or ""), env
        )
        if not git:
            return prepared
        prepared.cwd = Path(session.checkout)
        if git_subcommand(argv) == "push":
            return await self._push(session, prepared)
        if may_change_checkout(argv):
            problem = await asyncio.to_thread(
                _protected_problem, prepared.cwd, argv, session.protected
            )
            if problem is not None:
                return ExecRefusal(reason=problem)
        return prepared

    async def _push(self, session: SessionRecord, prepared: Prepared) -> Prepared | ExecRefusal:
        """Sync, then push the agent's branches rather than the human's."""
        if self.syncer is None:
            return ExecRefusal(reason="the executor cannot sync cloisters here; refused")
        try:
            outcome = await asyncio.to_thread(self.syncer.sync, session.cloister, running=True)
        except SyncError as error:
            return ExecRefusal(
                reason=f"git push: the cloister's branches could not be synced: {error}"
            )
        for line in outcome.lines():
            self.report(f"{session.cloister}: {line}")
        agent = await asyncio.to_thread(_agent_branches, prepared.cwd, session.cloister)
        head = outcome.head
        default = await asyncio.to_thread(_default_remote, prepared.cwd, head.branch)
        prepared.argv = tuple(
            push_argv(
                prepared.argv,
                cloister=session.cloister,
                agent_branches=agent,
                agent_head=head,
                default_remote=default,
            )
        )
        return prepared


def _agent_branches(checkout: Path, cloister: str) -> dict[str, str]:
    prefix = f"refs/cloister/{cloister}/"
    output = run_git(
        "-C", str(checkout), "for-each-ref", "--format=%(objectname) %(refname)", prefix
    ).stdout
    return {
        name.removeprefix(prefix): oid
        for oid, _, name in (line.partition(" ") for line in output.splitlines())
    }


def _default_remote(checkout: Path, branch: str | None) -> str:
    """Where ``git push`` without a remote pushes *branch*: its pushRemote,
    remote.pushDefault, its remote, else origin (git's order)."""
    keys = [f"branch.{branch}.pushRemote"] if branch else []
    keys.append("remote.pushDefault")
    if branch:
        keys.append(f"branch.{branch}.remote")
    for key in keys:
        result = run_git("-C", str(checkout), "config", "--get", key, check=False)
        if result.returncode == 0 and result.stdout.strip():
            return result.stdout.strip()
    return "origin"


def _protected_problem(checkout: Path, argv: Sequence[str], protected: Sequence[str]) -> str | None:
    """Why *argv* could write a protected path of the work tree, or None."""
    command = " ".join(argv[:2])
    if not protected:
        return None
    if any("\n" in arg or "\0" in arg for arg in argv):
        return f"`{command} …` is refused: an argument holds a line break"
    try:
        problem = _input_problem(checkout, argv, protected)
        if problem is None:
            base = _base(checkout)
            problem = _checkout_problem(checkout, protected, base) or _revision_problem(
                checkout, argv, protected, base
            )
    except GitError as error:
        return f"`{command} …` is refused: the protected paths could not be checked ({error})"
    return f"`{command} …` is refused: {problem}" if problem else None


def _base(checkout: Path) -> str:
    """``HEAD``, or the empty tree while the checked-out branch has no commit yet (a
    branch checked out then brings every file it has)."""
    head = run_git("-C", str(checkout), "rev-parse", "--verify", "--quiet", "HEAD", check=False)
    if head.returncode == 0:
        return "HEAD"
    return _git_in(checkout, "hash-object", "-t", "tree", "/dev/null").strip()


# Subcommands that write the files their input names rather than a revision's: git am
# (a mailbox's patches) and git pull (commits not fetched yet) cannot be checked first.
_UNCHECKABLE = {
    "am": "git am writes whatever files its patches name; apply them in the cloister and"
    " let the sync bring the commits",
    "pull": "git pull merges commits that are not fetched yet, which cannot be checked"
    " first; run `git fetch`, then merge or rebase what it fetched",
}
# cherry-pick and revert take rev-list options, which pick commits by pattern or from
# input (`--glob=refs/cloister/*`, `--stdin`): no word names them, so none is checked.
_WALKS = frozenset({"cherry-pick", "revert"})
_PICKING = frozenset(
    {
        "--all", "--branches", "--tags", "--remotes", "--glob", "--stdin", "--reflog",
        "--alternate-refs", "--indexed-objects", "--exclude", "--bisect",
    }
)  # fmt: skip
# Subcommands whose path arguments name files they write (git mv -f, git merge-file).
_WRITES_ITS_PATHS = frozenset({"mv", "merge-file"})
# git apply options whose separate value is no patch file; -p and -C take one too.
_APPLY_VALUES = frozenset({"--directory", "--whitespace", "--include", "--exclude"})


def _input_problem(checkout: Path, argv: Sequence[str], protected: Sequence[str]) -> str | None:
    """A protected path written from what *argv* names besides revisions: a patch (git
    apply, git am), a path (git mv, git merge-file), a remote's commits (git pull)."""
    subcommand = git_subcommand(argv)
    if subcommand is None:
        return None
    args = list(argv[list(argv).index(subcommand) + 1 :])
    reason = _UNCHECKABLE.get(subcommand)
    if reason is not None:
        return f"{reason} (the project has protected paths)"
    if subcommand == "apply":
        return _patch_problem(checkout, args, protected)
    if subcommand in _WALKS:
        for arg in args:
            if arg == "--":
                break
            if arg.partition("=")[0] in _PICKING:
                return f"{arg!r} picks commits that cannot be checked first; name them"
    if subcommand in _WRITES_ITS_PATHS:
        ended = False
        for arg in args:
            if arg == "--" and not ended:
                ended = True
            elif (ended or not arg.startswith("-")) and _names_protected(checkout, arg, protected):
                return f"{arg!r} is, holds or is in a protected path"
    return None


def _names_protected(checkout: Path, path: str, protected: Sequence[str]) -> bool:
    """Whether *path* (relative to the checkout, or absolute) is a protected path, is in
    one or holds one; as written and with its links resolved, ignoring case (a macOS
    file system does)."""
    root = Path(os.path.realpath(checkout))
    lexical = os.path.normpath(checkout / path)
    names = {os.path.relpath(lexical, checkout), os.path.relpath(os.path.realpath(lexical), root)}
    for name in names:
        relative = "" if name == "." else name.casefold()
        if relative == ".." or relative.startswith("../"):
            continue  # outside the work tree
        for item in protected:
            candidate = os.path.normpath(item).casefold()
            if (
                not relative
                or relative == candidate
                or candidate.startswith(relative + "/")
                or relative.startswith(candidate + "/")
            ):
                return True
    return False


def _patch_problem(checkout: Path, args: Sequence[str], protected: Sequence[str]) -> str | None:
    """The paths the patches of a ``git apply`` would write, listed by git itself
    (``--numstat``), with the options that move them (``-p``, ``--directory``) and no
    other of the agent's: nothing is applied or written to check."""
    for arg in args:
        name = arg.partition("=")[0]
        if len(name) > 3 and "--build-fake-ancestor".startswith(name):
            return "git apply --build-fake-ancestor writes a file wherever it points"
    files, moves = _apply_words(args)
    output = _git_in(checkout, "apply", "--numstat", "-z", *moves, "--", *files)
    for record in output.split("\0"):
        path = record.rpartition("\t")[2]
        if path and _names_protected(checkout, path, protected):
            return f"a patch it applies writes {path!r}, a protected path"
    return None


def _apply_words(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """The patch files of a ``git apply`` argv, and its ``-p``/``--directory`` options
    (a value this misreads as a file makes the check fail: refused, the safe mistake)."""
    files: list[str] = []
    moves: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        name, equals, value = arg.partition("=")
        if arg == "--":
            files.extend(args[index:])
            break
        if arg.startswith("--"):
            if name in _APPLY_VALUES and not equals and index < len(args):
                value = args[index]
                index += 1
            if len(name) > 3 and "--directory".startswith(name) and (equals or value):
                moves.append(f"--directory={value}")
        elif arg.startswith("-") and arg != "-":
            for at, letter in enumerate(arg[1:], start=2):
                if letter in "pC":  # the rest of the cluster, or the next word, is its value
                    value = arg[at:]
                    if not value and index < len(args):
                        value = args[index]
                        index += 1
                    if letter == "p":
                        moves.append(f"-p{value}")
                    break
        else:
            files.append(arg)
    return files, moves


def _git_in(checkout: Path, *args: str, check: bool = True, input: str | None = None) -> str:
    return run_git("-C", str(checkout), *args, check=check, env=LITERAL, input=input).stdout


def _touching(output: str, protected: Sequence[str]) -> list[str]:
    """The paths of *output* (``--name-only -z``) that change a protected path."""
    return [path for path in output.split("\0") if path and touches_protected(path, protected)]


def _checkout_problem(checkout: Path, protected: Sequence[str], base: str) -> str | None:
    """A protected path where the index or the work tree already differs from HEAD."""
    specs = protected_pathspecs(protected)
    staged = _touching(
        _git_in(checkout, "diff-index", "--cached", "--name-only", "-z", base, "--", *specs),
        protected,
    )
    if staged:
        return (
            f"the index holds a change to {staged[0]!r}, a protected path (or the way to"
            " one); look at `git diff --cached` on the host"
        )
    changed = _touching(
        _git_in(checkout, "diff-files", "--name-only", "-z", "--", *specs), protected
    )
    if changed:
        return f"{changed[0]!r}, a protected path (or the way to one), differs from HEAD"
    return None


def _objects(checkout: Path, names: Sequence[str]) -> list[tuple[str, str]]:
    """(object, type) of each of *names* as git resolves it; ("", "missing") if it does not."""
    output = _git_in(
        checkout,
        "cat-file",
        "--batch-check=%(objectname) %(objecttype)",
        input="".join(f"{name}\n" for name in names),
    ).splitlines()
    found = []
    for line in output:
        oid, _, kind = line.rpartition(" ")
        found.append((oid, kind) if kind in {"commit", "tag", "tree", "blob"} else ("", "missing"))
    return found


def _revision_problem(
    checkout: Path, argv: Sequence[str], protected: Sequence[str], base: str
) -> str | None:
    """A revision *argv* names whose tree differs from HEAD's on a protected path (by
    name, hash, ``:/message``, ``X:`` …: whatever git resolves)."""
    words = revision_candidates(argv)
    if any("\n" in word or "\0" in word for word in words):
        return "an argument holds a line break"
    if not words:
        return None
    named = _objects(checkout, words)
    trees: dict[str, str] = {
        oid: word for (oid, kind), word in zip(named, words, strict=False) if kind == "tree"
    }
    peel = [
        (oid, word)
        for (oid, kind), word in zip(named, words, strict=False)
        if kind in {"commit", "tag"}
    ]
    if peel:
        peeled = _objects(checkout, [f"{oid}^{{tree}}" for oid, _ in peel])
        trees |= {
            tree: word
            for (tree, kind), (_, word) in zip(peeled, peel, strict=False)
            if kind == "tree"
        }
    specs = protected_pathspecs(protected)
    for tree, word in trees.items():
        changed = _touching(
            _git_in(checkout, "diff-tree", "-r", "--name-only", "-z", base, tree, "--", *specs),
            protected,
        )
        if changed:
            return (
                f"{word!r} changes {changed[0]!r}, a protected path (the cloister keeps it"
                " read-only); look at it, and run the command on the host if you mean it"
            )
    return None
