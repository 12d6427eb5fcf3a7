"""The argv host git may get from the agent: what would override the hardened settings
of :mod:`cloister_core.gitsafety`, run a command, or write outside the project.

:func:`check_git_argv` refuses global options outside a small allowlist, a few
subcommands, and options after the subcommand, matched the way git matches them (any
unambiguous prefix of a long option, ``--opt=value``, short-option clusters). The rules
are data tables (the reason next to each entry). Option meanings were checked with
``git <cmd> -h`` on git 2.39.5. Aliases are not expanded: they come from the human's
own configuration. What these rules do not cover is listed in this package's README
(nested repositories, positional paths, reading outside).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from cloister_core.errors import InvalidCommandError

__all__ = [
    "READ_ONLY_SUBCOMMANDS",
    "UnsafeGitCommandError",
    "check_git_argv",
    "git_subcommand",
    "is_git_program",
    "may_change_checkout",
    "revision_candidates",
]


class UnsafeGitCommandError(InvalidCommandError):
    """A git argv that could run code or write outside the project on the host."""


# --- argv --------------------------------------------------------------------------


def is_git_program(argv0: str) -> bool:
    """Whether *argv0* runs git itself (``git``, ``/usr/bin/git``; not ``git-lfs``)."""
    return PurePosixPath(argv0).name == "git"


# Options git.c accepts before the subcommand that only page, choose pathspec magic,
# or print; git matches these exactly (no abbreviations, `=value` only where listed).
_GLOBAL_OPTIONS = frozenset(
    {
        "--no-pager",
        "-P",
        "--paginate",
        "-p",
        "--no-optional-locks",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-replace-objects",
        "--no-lazy-fetch",
        "--no-advice",
        "--version",
        "-v",
        "--help",
        "-h",
        "--html-path",
        "--man-path",
        "--info-path",
        "--exec-path",  # prints it; `--exec-path=DIR` is refused below
    }
)
_OVERRIDES = "it would override the settings Cloister runs host git with"
_ELSEWHERE = "it would point git at a repository or directory other than the project"
_GLOBAL_REASONS: dict[str, str] = {
    "-c": _OVERRIDES,
    "--config-env": _OVERRIDES,
    "-C": _ELSEWHERE,
    "--git-dir": _ELSEWHERE,
    "--work-tree": _ELSEWHERE,
    "--namespace": _ELSEWHERE,
    "--bare": _ELSEWHERE,
    "--super-prefix": _ELSEWHERE,
    "--exec-path": "it would make git run its helper programs from another directory",
}
_GLOBAL_OTHER = (
    "before the subcommand only paging, pathspec, --version and --help options are allowed"
)

# Subcommands that run commands given as arguments, change the host persistently,
# or hand out the human's credentials.
_REFUSED_SUBCOMMANDS: dict[str, str] = {
    "filter-branch": "it runs the shell commands given as its --*-filter arguments",
    "filter-repo": "it runs the Python code given as its --*-callback arguments",
    "instaweb": "it starts a web server and a browser on the host",
    "daemon": "it serves repositories to the network",
    "send-email": "it runs --to-cmd/--cc-cmd commands and sends mail as the human",
    "web--browse": "it starts a browser on the host",
    "maintenance": "it installs cron/systemd/launchd timers on the host",
    "hook": "'git hook run' runs hooks by name",
    "remote-ext": "it runs its argument as a command (the ext:: transport)",
    "submodule--helper": "git's internal helper; 'foreach' runs commands",
    "bisect--helper": "git's internal helper; '--bisect-run' runs commands",
    "credential": "it prints the human's stored credentials",
    "credential-cache": "it prints the human's stored credentials",
    "credential-cache--daemon": "it serves the human's stored credentials",
    "credential-store": "it prints the human's stored credentials",
}

# Sub-actions (the first argument after the subcommand that is not an option).
_REFUSED_SUB_ACTIONS: dict[str, dict[str, str]] = {
    "submodule": {"foreach": "it runs a shell command in every submodule"},
    "bisect": {"run": "it runs a command on every bisection step"},
}

_NEGATIVE = frozenset({"no", "false", "off", "0"})


@dataclass(frozen=True, slots=True)
class _LongOption:
    """A long option to refuse, matched by any prefix git would accept.

    Git takes any unambiguous prefix (``git clone --u=CMD`` is ``--upload-pack``, on
    2.39), so every prefix of at least *shortest* characters is refused; *shortest*
    is raised only where a shorter prefix is a real, harmless option (``--to``).
    """

    name: str
    reason: str
    shortest: int = 1
    harmless_values: frozenset[str] = frozenset()

    def matches(self, name: str) -> bool:
        return len(name) >= self.shortest and self.name.startswith(name)


_RECURSE = "it runs git inside the agent's nested repositories, whose config git obeys"
_OUTPUT = "it writes a file wherever the argument points, outside the project too"

# Refused after every subcommand (and after aliases, which are not expanded).
_LONG_OPTIONS: tuple[_LongOption, ...] = (
    _LongOption("upload-pack", "it names the program git runs to serve the fetch"),
    _LongOption("receive-pack", "it names the program git runs to receive the push"),
    _LongOption("exec", "it names a program or command git runs"),
    _LongOption("open-files-in-pager", "it names a program git runs on the matching files"),
    _LongOption("extcmd", "it names a command git runs on every changed file"),
    _LongOption("output", _OUTPUT),
    _LongOption("output-directory", _OUTPUT),
    _LongOption("recurse-submodules", _RECURSE, harmless_values=_NEGATIVE),
    _LongOption("recurse-submodules-default", _RECURSE, harmless_values=_NEGATIVE),
    _LongOption("unsafe-paths", "it lets git apply write outside the work tree"),
    # git send-email's (refused anyway); `--to`, `--cc`, `--header` are real options.
    _LongOption("to-cmd", "it names a command git runs", shortest=3),
    _LongOption("cc-cmd", "it names a command git runs", shortest=3),
    _LongOption("header-cmd", "it names a command git runs", shortest=7),
)

_TEMPLATE = "it copies hooks and config from a directory the agent may have written"
_GIT_DIR_ELSEWHERE = "it creates the repository's .git directory wherever it points"
_MARKS = "it writes a marks file wherever it points, outside the project too"

# Refused after one subcommand only.
_SUBCOMMAND_LONG_OPTIONS: dict[str, tuple[_LongOption, ...]] = {
    # `clone --recurse-submodules=<pathspec>`: "no" is a pathspec here, not false.
    "clone": (
        _LongOption("recurse-submodules", _RECURSE),
        _LongOption("recursive", _RECURSE),
        _LongOption("config", "it sets config (filter drivers, hooksPath…) used by the clone"),
        _LongOption("template", _TEMPLATE),
        _LongOption("separate-git-dir", _GIT_DIR_ELSEWHERE),
    ),
    "init": (
        _LongOption("template", _TEMPLATE),
        _LongOption("separate-git-dir", _GIT_DIR_ELSEWHERE),
    ),
    "checkout-index": (_LongOption("prefix", "it writes the files under any path prefix"),),
    "apply": (_LongOption("build-fake-ancestor", _OUTPUT),),
    "fast-export": (_LongOption("export-marks", _MARKS),),
    "fast-import": (
        _LongOption("export-marks", _MARKS),
        _LongOption("export-pack-edges", _MARKS),
        _LongOption("allow-unsafe-features", "it lets the input stream name files to write"),
    ),
    "commit-graph": (_LongOption("object-dir", "it writes into another object directory"),),
    "multi-pack-index": (_LongOption("object-dir", "it writes into another object directory"),),
    "help": (_LongOption("web", "it starts a browser on the host"),),
}

# Short options, by subcommand, with their meaning there (git <cmd> -h, 2.39.5). A
# letter anywhere in a cluster is refused, even where git would read it as another
# option's attached value (`-eO`): refusing too much is the safe mistake.
_SHORT_OPTIONS: dict[str, dict[str, str]] = {
    "grep": {"O": "-O/--open-files-in-pager runs a program on the matching files"},
    "difftool": {"x": "-x/--extcmd runs a command on every changed file"},
    "rebase": {"x": "-x/--exec runs a shell command after every commit"},
    "clone": {
        "u": "-u/--upload-pack names the program git runs to serve the clone",
        "c": "-c/--config sets config (filter drivers, hooksPath…) used by the clone",
    },
    "archive": {"o": "-o/--output writes the archive wherever it points"},
    "format-patch": {"o": "-o/--output-directory writes the patches wherever it points"},
    "bugreport": {"o": "-o/--output-directory writes the report wherever it points"},
    "diagnose": {"o": "-o/--output-directory writes the archive wherever it points"},
    "index-pack": {"o": "-o writes the index file wherever it points"},
    "help": {"w": "-w/--web starts a browser on the host"},
}


@dataclass(frozen=True, slots=True)
class _ProgramName:
    """An option whose value names a program or script git looks up and runs.

    A plain name is looked up where git keeps its own (exec path, ``PATH``, the
    mergetools directory); a value with ``/`` is used as a path, relative to the
    project, so ``git cherry-pick --strategy=x/../evil`` runs ``./evil`` (git 2.39;
    ``git merge`` checks the name, cherry-pick, revert and rebase do not).
    """

    name: str
    reason: str
    shortest: int = 1
    glob: bool = False  # git-mergetool.sh takes `--tool*` (e.g. `--tools=X`)
    exceptions: frozenset[str] = frozenset()

    def matches(self, name: str) -> bool:
        if name in self.exceptions:
            return False
        if self.glob and name.startswith(self.name):
            return True
        return len(name) >= self.shortest and self.name.startswith(name)


# Long forms are checked after every subcommand (aliases are not expanded).
_PROGRAM_NAMES: tuple[_ProgramName, ...] = (
    # merge, pull, rebase, cherry-pick, revert
    _ProgramName("strategy", "a merge strategy with '/' runs that path as a program", shortest=3),
    # difftool, mergetool
    _ProgramName(
        "tool",
        "a diff/merge tool with '/' sources that path as a shell script",
        shortest=3,
        glob=True,
        exceptions=frozenset({"tool-help"}),
    ),
)
# The short spellings, only where the letter means that option.
_SHORT_PROGRAM_NAMES: dict[str, tuple[str, _ProgramName]] = {
    "merge": ("s", _PROGRAM_NAMES[0]),
    "pull": ("s", _PROGRAM_NAMES[0]),
    "rebase": ("s", _PROGRAM_NAMES[0]),
    "difftool": ("t", _PROGRAM_NAMES[1]),
    "mergetool": ("t", _PROGRAM_NAMES[1]),
}

# git config: allowed only when it reads. Checked with an allowlist, not by looking
# for a read action: `git config --get --no-get k v` sets k, `git config -f --get k v`
# writes to a file named "--get", and `--a` abbreviates `--add` (all on 2.39).
_CONFIG_READ_ACTIONS = frozenset(
    {
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--list",
        "-l",
        "--get-color",
        "--get-colorbool",
    }
)
_CONFIG_READ_SUBCOMMANDS = frozenset({"get", "list"})  # git >= 2.46, first argument only
_CONFIG_WRITE_OPTIONS = (
    "add",
    "unset",
    "unset-all",
    "replace-all",
    "rename-section",
    "remove-section",
    "edit",
)
_CONFIG_WRITE_WORDS = frozenset({"-e", "set", "unset", "edit", "rename-section", "remove-section"})
_CONFIG_FLAGS = frozenset(
    {
        "--global",
        "--system",
        "--local",
        "--worktree",
        "--includes",
        "--no-includes",
        "--show-origin",
        "--show-scope",
        "--name-only",
        "-z",
        "--null",
        "--bool",
        "--int",
        "--bool-or-int",
        "--bool-or-str",
        "--path",
        "--expiry-date",
        "--fixed-value",
        # git >= 2.46 `git config get`/`list`
        "--all",
        "--regexp",
        "--show-names",
    }
)
_CONFIG_VALUE_OPTIONS = frozenset(
    {"-f", "--file", "--blob", "-t", "--type", "--default", "--url", "--value"}
)


def _check_global(option: str) -> None:
    if option in _GLOBAL_OPTIONS:
        return
    name = option.partition("=")[0]
    reason = _GLOBAL_REASONS.get(name)
    if reason is None and option.startswith(("-c", "-C")):  # `-cx=y`, `-Cdir`
        reason = _GLOBAL_REASONS[option[:2]]
    raise UnsafeGitCommandError(f"git option {option!r} is refused: {reason or _GLOBAL_OTHER}")


def _first_positional(args: Sequence[str]) -> str | None:
    for arg in args:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _check_config(args: Sequence[str]) -> None:
    for arg in args:
        name = arg[2:].partition("=")[0] if arg.startswith("--") else ""
        writes = arg in _CONFIG_WRITE_WORDS or (
            bool(name) and any(option.startswith(name) for option in _CONFIG_WRITE_OPTIONS)
        )
        if writes:
            raise UnsafeGitCommandError(
                f"git config {arg!r} is refused: it would change git's configuration"
            )
    reads = bool(args) and args[0] in _CONFIG_READ_SUBCOMMANDS
    index = 1 if reads else 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            continue
        if arg in _CONFIG_READ_ACTIONS:
            reads = True
        elif arg in _CONFIG_VALUE_OPTIONS:
            index += 1  # its value, whatever it looks like
        elif not (
            arg in _CONFIG_FLAGS
            or arg.partition("=")[0] in _CONFIG_VALUE_OPTIONS
            or arg[:2] in {"-f", "-t"}  # -fFILE, -tTYPE
        ):
            raise UnsafeGitCommandError(
                f"git config option {arg!r} is refused: it is not one of the options "
                "of a read-only git config"
            )
    if not reads:
        raise UnsafeGitCommandError(
            "git config is refused unless it only reads (--get, --get-all, --get-regexp, "
            f"--get-urlmatch, --list, --get-color, --get-colorbool): {list(args)!r}"
        )


def _program_value(rule: _ProgramName, option: str, value: str | None) -> None:
    if value is not None and "/" in value:
        raise UnsafeGitCommandError(
            f"git option {option!r} with value {value!r} is refused: {rule.reason}"
        )


def _check_long(subcommand: str, arg: str, following: str | None) -> None:
    name, equals, value = arg[2:].partition("=")
    if name.startswith("no-"):
        return  # a negation only turns an option off
    for option in _LONG_OPTIONS + _SUBCOMMAND_LONG_OPTIONS.get(subcommand, ()):
        if option.matches(name) and not (equals and value.lower() in option.harmless_values):
            raise UnsafeGitCommandError(f"git option {arg!r} is refused: {option.reason}")
    for rule in _PROGRAM_NAMES:
        if rule.matches(name):
            _program_value(rule, arg, value if equals else following)


def _check_short(subcommand: str, arg: str, following: str | None) -> None:
    cluster = arg[1:]
    for letter, reason in _SHORT_OPTIONS.get(subcommand, {}).items():
        if letter in cluster:
            raise UnsafeGitCommandError(f"git {subcommand} option {arg!r} is refused: {reason}")
    short = _SHORT_PROGRAM_NAMES.get(subcommand)
    if short is not None and short[0] in cluster:
        attached = cluster.partition(short[0])[2]
        _program_value(short[1], arg, attached or following)


def _may_take_value(previous: str) -> bool:
    """Whether *previous* may be an option that takes the next argument as its value.

    ``git grep -e -- --open-files-in-pager=CMD`` reads ``--`` as the pattern, so a bare
    ``--`` ends the options only after something that cannot take a value.
    """
    if previous in {"-", "--"} or not previous.startswith("-"):
        return False
    return not (previous.startswith("--") and "=" in previous)


def _check_options(subcommand: str, args: Sequence[str]) -> None:
    previous = subcommand
    for index, arg in enumerate(args):
        if arg == "--" and not _may_take_value(previous):
            return  # the rest are pathspecs
        following = args[index + 1] if index + 1 < len(args) else None
        if arg.startswith("--") and len(arg) > 2:
            _check_long(subcommand, arg, following)
        elif arg.startswith("-") and len(arg) > 1 and arg != "--":
            _check_short(subcommand, arg, following)
        previous = arg


def check_git_argv(argv: Sequence[str]) -> None:
    """Refuse a git argv that could run code or write outside the project on the host.

    *argv* is a whole command whose ``argv[0]`` runs git (:func:`is_git_program`).
    Raises :class:`UnsafeGitCommandError` naming the offending argument.
    """
    if isinstance(argv, str):
        raise UnsafeGitCommandError(f"argv must be a list of strings, not a string: {argv!r}")
    if not argv:
        raise UnsafeGitCommandError("argv must not be empty")
    args = list(argv[1:])
    index = 0
    while index < len(args) and args[index].startswith("-"):
        _check_global(args[index])
        index += 1
    if index == len(args):
        return  # `git --version`, `git --help`
    subcommand, rest = args[index], args[index + 1 :]
    reason = _REFUSED_SUBCOMMANDS.get(subcommand)
    if reason is not None:
        raise UnsafeGitCommandError(f"git subcommand {subcommand!r} is refused: {reason}")
    action = _first_positional(rest)
    reason = _REFUSED_SUB_ACTIONS.get(subcommand, {}).get(action or "")
    if reason is not None:
        raise UnsafeGitCommandError(f"git {subcommand} {action!r} is refused: {reason}")
    if subcommand == "config":
        _check_config(rest)
    _check_options(subcommand, rest)


# Subcommands that change neither the work tree nor the human's branches (at most the
# index's stat data, or refs of remotes): git run for the agent may run them whatever
# the protected paths are.
READ_ONLY_SUBCOMMANDS = frozenset(
    {
        "blame", "cat-file", "count-objects", "describe", "diff", "diff-files",
        "diff-index", "diff-tree", "fetch", "for-each-ref", "grep", "log", "ls-files",
        "ls-remote", "ls-tree", "merge-base", "name-rev", "push", "rev-list", "rev-parse",
        "shortlog", "show", "show-ref", "status", "var", "version", "whatchanged",
    }
)  # fmt: skip


def git_subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand of a git argv (after the global options), None when there is none."""
    return next((arg for arg in argv[1:] if not arg.startswith("-")), None)


def may_change_checkout(argv: Sequence[str]) -> bool:
    """Whether a checked git argv (:func:`check_git_argv`) may write the work tree, the
    index or the human's branches (unknown subcommands may)."""
    subcommand = git_subcommand(argv)
    return subcommand is not None and subcommand not in READ_ONLY_SUBCOMMANDS


# Suffixes that name a commit's parents or a range's end, not another commit (`A^!`,
# `A^@`, `A^-`, `A^-2`): cat-file resolves none of them, git's commands do.
_REVISION_SUFFIX = re.compile(r"\^(?:!|@|-[0-9]*)\Z")
_PREVIOUS = {"checkout", "switch", "merge", "rebase", "cherry-pick", "worktree"}


def _attached_values(word: str) -> list[str]:
    """What a cluster of short options may carry as an attached value (``-s<rev>``,
    ``-qs<rev>`` of ``git restore``): git reads flags up to the first letter that takes
    a value and the rest of the word as that value, so the value starts after the first
    occurrence of some letter; flags are printable ASCII (at most 94 candidates)."""
    values: list[str] = []
    seen: set[str] = set()
    for index, letter in enumerate(word[1:], start=2):
        if not (letter.isascii() and letter.isprintable()) or letter == " ":
            break
        if letter not in seen:
            seen.add(letter)
            values.append(word[index:])
    return values


def revision_candidates(argv: Sequence[str]) -> list[str]:
    """Every word of *argv* after the subcommand that may name a revision, as git would
    read it: each argument, an option's ``=value`` or attached value (``-s<rev>``), both
    ends of a range (``A..B``), a negated one (``^A``) plainly, and ``-`` as the previous
    branch (``@{-1}``). Which of them do name one is git's to say; this list only has to
    hold every one that does."""
    subcommand = git_subcommand(argv)
    if subcommand is None:
        return []
    words = list(argv[list(argv).index(subcommand) + 1 :])
    found: list[str] = []
    for word in words:
        if word == "-" and subcommand in _PREVIOUS:
            found.append("@{-1}")
            continue
        values = [word]
        if word.startswith("-"):
            values = [word.partition("=")[2]]
            if not word.startswith("--"):
                values += _attached_values(word)
        for value in values:
            for end in value.replace("...", "..").split(".."):
                revision = _REVISION_SUFFIX.sub("", end.removeprefix("^"))
                if revision:
                    found.append(revision)
    return list(dict.fromkeys(found))
