"""The argv host git may get from the agent: what is refused, and that it is named."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cloister_core.errors import InvalidCommandError
from cloister_core.gitargv import (
    READ_ONLY_SUBCOMMANDS,
    UnsafeGitCommandError,
    check_git_argv,
    is_git_program,
    may_change_checkout,
    revision_candidates,
)
from tests.git_support import GIT, hermetic_git, make_repo, run_git

# --- argv -------------------------------------------------------------------------

ALLOWED: dict[str, list[str]] = {
    "status": ["git", "status"],
    "global-P": ["git", "-P", "log", "--oneline"],
    "global-no-pager": ["git", "--no-pager", "--literal-pathspecs", "diff"],
    "message-with-option-text": ["git", "commit", "-m", "x -c y"],
    "push": ["git", "push", "origin", "main"],
    "after-dashdash": ["git", "log", "--", "--output=x"],
    "after-dashdash-value": ["git", "grep", "-e", "x", "--", "--open-files-in-pager=x"],
    "cherry-pick-x": ["git", "cherry-pick", "-x", "abc"],
    "add-u": ["git", "add", "-u"],
    "config-get": ["git", "config", "--get", "user.name"],
    "config-list": ["git", "config", "--list"],
    "config-l-show-origin": ["git", "config", "-l", "--show-origin", "--file", ".gitmodules"],
    "config-get-type": ["git", "config", "--type=bool", "--get", "core.bare"],
    "config-new-get": ["git", "config", "get", "--all", "user.name"],
    "fetch-recurse-no": ["git", "fetch", "--recurse-submodules=no"],
    "fetch-recurse-abbrev-false": ["git", "fetch", "--recurse-sub=false"],
    "fetch-no-recurse": ["git", "fetch", "--no-recurse-submodules"],
    "fetch-u-update-head": ["git", "fetch", "-u", "origin"],
    "version": ["git", "--version"],
    "exec-path-prints": ["git", "--exec-path"],
    "bare-git": ["git"],
    "format-patch-to-cc": ["git", "format-patch", "--to=a@example.com", "--cc=b@x", "-3"],
    "rev-list-header": ["git", "rev-list", "--header", "HEAD"],
    "log-output-indicator": ["git", "log", "--output-indicator-new=>", "-p"],
    "diff-ext-diff": ["git", "diff", "--ext-diff", "--exit-code"],
    "rebase-strategy-option": ["git", "rebase", "-Xtheirs", "--strategy=ort", "main"],
    "rebase-abort": ["git", "rebase", "--abort"],
    "merge-strategy": ["git", "merge", "-s", "ours", "topic"],
    "difftool-tool": ["git", "difftool", "--tool=vimdiff", "--tool-help"],
    "clone-origin": ["git", "clone", "-o", "up", "--no-recurse-submodules", "url", "dir"],
    "archive-format": ["git", "archive", "--format=tar", "HEAD"],
    "grep-o-lowercase": ["git", "grep", "-o", "-i", "pattern"],
    "submodule-status": ["git", "submodule", "status"],
    "submodule-update": ["git", "submodule", "--quiet", "update", "--init"],
    "bisect-start": ["git", "bisect", "start", "HEAD", "HEAD~3"],
    "alias-not-expanded": ["git", "st", "-sb"],
    "absolute-git": ["/usr/bin/git", "status"],
    # A cloister's git directory is its own: resuming from its state is no longer refused.
    "rebase-continue": ["git", "rebase", "--continue"],
    "rebase-cont": ["git", "rebase", "--cont"],
    "rebase-skip": ["git", "rebase", "--skip"],
    "cherry-pick-continue": ["git", "cherry-pick", "--continue"],
    "revert-skip": ["git", "revert", "--skip"],
    "am-continue": ["git", "am", "--continue"],
    "am-resolved": ["git", "am", "--resolved"],
    "am-r": ["git", "am", "-r"],
}


@pytest.mark.parametrize("argv", list(ALLOWED.values()), ids=list(ALLOWED))
def test_allowed(argv: list[str]) -> None:
    check_git_argv(argv)


# id: (argv, the argument the message must name)
REFUSED: dict[str, tuple[list[str], str]] = {
    # global options
    "global-c": (["git", "-c", "core.pager=less", "log"], "-c"),
    "global-c-attached": (["git", "-ccore.pager=less", "log"], "-ccore.pager=less"),
    "global-config-env": (["git", "--config-env=core.pager=X", "log"], "--config-env=core.pager=X"),
    "global-C": (["git", "-C", "/etc", "status"], "-C"),
    "global-git-dir": (["git", "--git-dir=/tmp/x", "status"], "--git-dir=/tmp/x"),
    "global-work-tree": (["git", "--work-tree", "/", "status"], "--work-tree"),
    "global-namespace": (["git", "--namespace=x", "log"], "--namespace=x"),
    "global-exec-path-value": (["git", "--exec-path=/tmp", "status"], "--exec-path=/tmp"),
    "global-super-prefix": (["git", "--super-prefix=x/", "status"], "--super-prefix=x/"),
    "global-bare": (["git", "--bare", "status"], "--bare"),
    "global-attr-source": (["git", "--attr-source=HEAD", "status"], "--attr-source=HEAD"),
    "global-unknown": (["git", "--frobnicate", "status"], "--frobnicate"),
    "global-dashdash": (["git", "--", "status"], "--"),
    # subcommands
    "filter-branch": (["git", "filter-branch", "--tree-filter", "x"], "filter-branch"),
    "instaweb": (["git", "instaweb"], "instaweb"),
    "daemon": (["git", "daemon", "--export-all"], "daemon"),
    "send-email": (["git", "send-email", "x.patch"], "send-email"),
    "web--browse": (["git", "web--browse", "http://x"], "web--browse"),
    "maintenance": (["git", "maintenance", "start"], "maintenance"),
    "hook": (["git", "hook", "run", "pre-commit"], "hook"),
    "remote-ext": (["git", "remote-ext", "x", "sh -c id"], "remote-ext"),
    "submodule--helper": (["git", "submodule--helper", "foreach", "id"], "submodule--helper"),
    "credential": (["git", "credential", "fill"], "credential"),
    "submodule-foreach": (["git", "submodule", "foreach", "id"], "foreach"),
    "submodule-quiet-foreach": (["git", "submodule", "--quiet", "foreach", "id"], "foreach"),
    "bisect-run": (["git", "bisect", "run", "make", "test"], "run"),
    # git config
    "config-set": (["git", "config", "user.name", "x"], "user.name"),
    "config-add": (["git", "config", "--add", "a.b", "c"], "--add"),
    "config-add-abbrev": (["git", "config", "--a", "a.b", "c"], "--a"),
    "config-unset": (["git", "config", "--unset-all", "a.b"], "--unset-all"),
    "config-replace": (["git", "config", "--replace-all", "a.b", "c"], "--replace-all"),
    "config-rename": (["git", "config", "--rename-section", "a", "b"], "--rename-section"),
    "config-remove": (["git", "config", "--remove-section", "a"], "--remove-section"),
    "config-edit": (["git", "config", "--edit"], "--edit"),
    "config-e": (["git", "config", "-e"], "-e"),
    "config-get-and-add": (["git", "config", "--get", "--add", "a.b", "c"], "--add"),
    "config-new-set": (["git", "config", "set", "a.b", "c"], "set"),
    "config-new-unset": (["git", "config", "unset", "a.b"], "unset"),
    "config-negated-read": (["git", "config", "--get", "--no-get", "a.b", "c"], "--no-get"),
    "config-read-as-value": (["git", "config", "-f", "--get", "a.b", "c"], "-f"),
    "config-list-as-value": (["git", "config", "a.b", "list"], "list"),
    "config-cluster": (["git", "config", "-zl"], "-zl"),
    # long options after any subcommand, abbreviated too
    "fetch-upload-pack": (["git", "fetch", "--upload-pack=touch x", "origin"], "--upload-pack"),
    "fetch-upload-p": (["git", "fetch", "--upload-p=x", "origin"], "--upload-p=x"),
    "clone-u-1char": (["git", "clone", "--u=x", "src", "dst"], "--u=x"),
    "ls-remote-upload-pack": (["git", "ls-remote", "--upload-pack", "x", "o"], "--upload-pack"),
    "push-receive-pack": (["git", "push", "--receive-pack=x", "o"], "--receive-pack=x"),
    "push-exec": (["git", "push", "--exec=x", "origin"], "--exec=x"),
    "rebase-exec": (["git", "rebase", "--exec", "make", "main"], "--exec"),
    "rebase-exec-abbrev": (["git", "rebase", "--ex", "make", "main"], "--ex"),
    "archive-exec": (["git", "archive", "--remote=r", "--exec=x", "HEAD"], "--exec=x"),
    "fetch-pack-exec": (["git", "fetch-pack", "--exec=x", "r"], "--exec=x"),
    "grep-open-files": (["git", "grep", "--open-files-in-pager=vim", "x"], "--open-files"),
    "grep-op": (["git", "grep", "--op", "x"], "--op"),
    "difftool-extcmd": (["git", "difftool", "--extcmd=x"], "--extcmd=x"),
    "log-output": (["git", "log", "--output=/home/u/.bashrc"], "--output="),
    "diff-outp": (["git", "diff", "--outp=f"], "--outp=f"),
    "format-patch-output-dir": (["git", "format-patch", "--output-directory", "/x"], "--output-"),
    "pull-recurse": (["git", "pull", "--recurse-submodules"], "--recurse-submodules"),
    "fetch-recurse-on-demand": (["git", "fetch", "--recurse-submodules=on-demand"], "on-demand"),
    "checkout-recurse-abbrev": (["git", "checkout", "--recurse-sub", "main"], "--recurse-sub"),
    "push-recurse-check": (["git", "push", "--recurse-submodules=check"], "=check"),
    "fetch-recurse-default": (["git", "fetch", "--recurse-submodules-default=yes"], "-default"),
    "apply-unsafe-paths": (["git", "apply", "--unsafe-paths", "p.diff"], "--unsafe-paths"),
    "send-email-to-cmd-alias": (["git", "se", "--to-cmd=x"], "--to-cmd=x"),
    "header-cmd": (["git", "se", "--header-cmd=x"], "--header-cmd=x"),
    "dashdash-as-value": (["git", "grep", "-e", "--", "--open-files-in-pager=x"], "--open"),
    # subcommand-specific long options
    "clone-recurse-no-is-pathspec": (["git", "clone", "--recurse-submodules=no", "u"], "=no"),
    "clone-recursive": (["git", "clone", "--recursive", "u"], "--recursive"),
    "clone-config": (["git", "clone", "--config", "filter.x.smudge=y", "u"], "--config"),
    "clone-template": (["git", "clone", "--template=./t", "u"], "--template=./t"),
    "init-separate-git-dir": (["git", "init", "--separate-git-dir=/x"], "--separate-git-dir"),
    "checkout-index-prefix": (["git", "checkout-index", "-a", "--prefix=/x/"], "--prefix=/x/"),
    "apply-fake-ancestor": (["git", "apply", "--build-fake-ancestor=/x", "p"], "--build-fake"),
    "apply-fake-ancestor-prefix": (["git", "apply", "--b=/x", "p"], "--b=/x"),
    "fast-export-marks": (["git", "fast-export", "--export-marks=/x"], "--export-marks=/x"),
    "help-web": (["git", "help", "--web", "log"], "--web"),
    # short options, where they mean that
    "grep-O": (["git", "grep", "-O", "x"], "-O"),
    "grep-O-cluster": (["git", "grep", "-iO", "x"], "-iO"),
    "grep-O-attached": (["git", "grep", "-Ovim", "x"], "-Ovim"),
    "difftool-x": (["git", "difftool", "-x", "sh"], "-x"),
    "difftool-x-attached": (["git", "difftool", "-xsh", "HEAD"], "-xsh"),
    "difftool-x-cluster": (["git", "difftool", "-yx", "sh"], "-yx"),
    "rebase-x": (["git", "rebase", "-x", "make", "main"], "-x"),
    "rebase-x-cluster": (["git", "rebase", "-ix", "make", "main"], "-ix"),
    "clone-u": (["git", "clone", "-u", "x", "src"], "-u"),
    "clone-c": (["git", "clone", "-c", "core.x=y", "src"], "-c"),
    "clone-c-cluster": (["git", "clone", "-qc", "core.x=y", "src"], "-qc"),
    "archive-o": (["git", "archive", "-o", "/x.tar", "HEAD"], "-o"),
    "format-patch-o": (["git", "format-patch", "-o", "/x", "HEAD~1"], "-o"),
    # programs named by a value
    "cherry-pick-strategy-path": (["git", "cherry-pick", "--strategy=x/../e", "a"], "x/../e"),
    "revert-strategy-separate": (["git", "revert", "--strategy", "x/../e", "a"], "x/../e"),
    "rebase-s-path": (["git", "rebase", "-s", "x/../e", "main"], "x/../e"),
    "pull-s-attached": (["git", "pull", "-sx/../e"], "-sx/../e"),
    "difftool-tool-path": (["git", "difftool", "--tool=../../x"], "../../x"),
    "mergetool-tool-glob": (["git", "mergetool", "--tools=../../x"], "--tools=../../x"),
    "mergetool-t": (["git", "mergetool", "-t", "../../x"], "../../x"),
}


@pytest.mark.parametrize(
    ("argv", "named"), [pytest.param(*case, id=name) for name, case in REFUSED.items()]
)
def test_refused(argv: list[str], named: str) -> None:
    with pytest.raises(UnsafeGitCommandError) as caught:
        check_git_argv(argv)
    message = str(caught.value)
    assert named in message
    assert "is refused" in message


def test_message_quotes_the_argument_and_says_why() -> None:
    with pytest.raises(UnsafeGitCommandError) as caught:
        check_git_argv(["git", "-c", "core.pager=less", "log"])
    assert str(caught.value) == (
        "git option '-c' is refused: it would override the settings Cloister runs host git with"
    )
    assert isinstance(caught.value, InvalidCommandError)


@pytest.mark.parametrize("argv", [[], "git status"], ids=["empty", "string"])
def test_malformed_argv(argv: object) -> None:
    with pytest.raises(UnsafeGitCommandError):
        check_git_argv(argv)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv0", "expected"),
    [
        ("git", True),
        ("/usr/bin/git", True),
        ("./git", True),
        ("git-lfs", False),
        ("gitk", False),
        ("mygit", False),
        ("/usr/bin/git-upload-pack", False),
        ("", False),
    ],
)
def test_is_git_program(argv0: str, expected: bool) -> None:
    assert is_git_program(argv0) is expected


# --- what may change the checkout -----------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "may_change"),
    [
        (["git", "status", "--short"], False),
        (["git", "-P", "log", "--oneline"], False),
        (["git", "diff", "HEAD"], False),
        (["git", "--no-pager", "show", "HEAD"], False),
        (["git", "fetch", "origin"], False),
        (["git", "push", "origin", "main"], False),
        (["git", "ls-remote", "origin"], False),
        (["git", "rev-parse", "HEAD"], False),
        (["git", "--version"], False),  # no subcommand
        (["git"], False),
        (["git", "commit", "-m", "status"], True),  # the message is no subcommand
        (["git", "checkout", "main"], True),
        (["git", "switch", "-c", "x"], True),
        (["git", "restore", "-s", "HEAD~1", "f"], True),
        (["git", "reset", "--hard"], True),
        (["git", "merge", "topic"], True),
        (["git", "rebase", "--continue"], True),
        (["git", "cherry-pick", "abc"], True),
        (["git", "stash", "pop"], True),
        (["git", "branch", "-f", "main", "x"], True),
        (["git", "tag", "-f", "x"], True),
        (["git", "update-ref", "refs/heads/main", "x"], True),
        (["git", "-P", "apply", "p.diff"], True),
        (["git", "my-alias"], True),  # unknown: it may
    ],
)
def test_may_change_checkout(argv: list[str], may_change: bool) -> None:
    assert may_change_checkout(argv) is may_change


def test_every_read_only_subcommand_is_read_only() -> None:
    for subcommand in READ_ONLY_SUBCOMMANDS:
        assert not may_change_checkout(["git", subcommand, "--", "x"])
        assert not may_change_checkout(["git", "--no-pager", subcommand])


# --- the words that may name a revision -------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["git", "checkout", "main"], ["main"]),
        (["git", "-P", "checkout", "main"], ["main"]),
        (["git", "status"], []),
        (["git", "--version"], []),
        (["git"], []),
        # ranges: both ends
        (["git", "cherry-pick", "A..B"], ["A", "B"]),
        (["git", "cherry-pick", "A...B"], ["A", "B"]),
        (["git", "cherry-pick", "..B"], ["B"]),
        (["git", "cherry-pick", "A.."], ["A"]),
        # negated, and the parent shorthands, name the commit itself
        (["git", "cherry-pick", "^A", "B"], ["A", "B"]),
        (["git", "cherry-pick", "A^!"], ["A"]),
        (["git", "cherry-pick", "A^@"], ["A"]),
        (["git", "cherry-pick", "A^-"], ["A"]),
        (["git", "cherry-pick", "A^-2"], ["A"]),
        (["git", "cherry-pick", "A~2^!"], ["A~2"]),
        # what git resolves as it is stays as it is
        (["git", "checkout", "A~1"], ["A~1"]),
        (["git", "checkout", "A^{tree}"], ["A^{tree}"]),
        (["git", "checkout", ":/fix the bug"], [":/fix the bug"]),
        (["git", "checkout", "A:.envrc"], ["A:.envrc"]),
        # options: a value after `=`, attached, or the next word
        (["git", "rebase", "--onto=A", "B"], ["A", "B"]),
        (["git", "rebase", "--onto", "A", "B"], ["A", "B"]),
        (["git", "checkout", "-b", "new", "start"], ["new", "start"]),
        (["git", "checkout", "--", "f"], ["f"]),
        # words after `--` are kept: which of them git reads as a revision is its to say
        (["git", "checkout", "main", "--", "a..b", "c"], ["main", "a", "b", "c"]),
        (["git", "reset", "--", "^x"], ["x"]),
        # a word with a line break is kept (the executor refuses it)
        (["git", "checkout", "a\nb"], ["a\nb"]),
        # duplicates once, in order
        (["git", "cherry-pick", "A", "A..B", "B"], ["A", "B"]),
    ],
)
def test_revision_candidates(argv: list[str], expected: list[str]) -> None:
    assert revision_candidates(argv) == expected


@pytest.mark.parametrize("subcommand", ["checkout", "switch", "merge", "rebase", "cherry-pick"])
def test_a_lone_dash_is_the_previous_branch(subcommand: str) -> None:
    assert revision_candidates(["git", subcommand, "-"]) == ["@{-1}"]


def test_a_lone_dash_elsewhere_names_nothing() -> None:
    assert revision_candidates(["git", "reset", "-"]) == []
    assert revision_candidates(["git", "checkout", "-b", "new", "-"]) == ["new", "@{-1}"]


@pytest.mark.parametrize(
    ("argv", "revision"),
    [
        # `git restore -s<rev>` and `-qS -W -s<rev>` clusters: the value is attached
        (["git", "restore", "-scloister/api/evil", ".envrc"], "cloister/api/evil"),
        (["git", "restore", "-qqWScloister/api/evil", ".envrc"], "cloister/api/evil"),
        (["git", "restore", "-s=x", ".envrc"], "x"),
        (["git", "restore", "-sA..B"], "B"),
        (["git", "restore", "--source=A^!", "f"], "A"),
        (["git", "checkout", "-bnew", "start"], "new"),
    ],
)
def test_attached_option_values_are_candidates(argv: list[str], revision: str) -> None:
    assert revision in revision_candidates(argv)


def test_attached_values_are_bounded() -> None:
    """A long cluster gives one candidate per distinct letter, not one per position."""
    word = "-" + "q" * 5000 + "s" + "x" * 5000
    found = revision_candidates(["git", "restore", word, "f"])
    assert "x" * 5000 in found
    assert len(found) <= 96


@pytest.mark.parametrize(
    "words",
    [
        ["evil"],
        ["evil^!"],
        ["evil^@"],
        ["evil^-"],
        ["evil^-1"],
        ["^main", "evil"],
        ["main..evil"],
        ["main...evil"],
        ["-sevil", "f"],
        ["-qWsevil", "f"],
        ["--source=evil", "f"],
        ["-s", "evil", "f"],
        ["--onto=evil", "main"],
        ["-m1", "evil"],
    ],
)
def test_a_revision_git_would_use_is_among_the_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, words: list[str]
) -> None:
    """What the executor does with the candidates: `git cat-file --batch-check` on each.
    The commit git's commands take from these words must be one of the answers."""
    hermetic_git(monkeypatch)
    repo = make_repo(tmp_path / "repo")
    run_git(repo, "checkout", "-q", "-b", "evil")
    (repo / ".envrc").write_text("evil\n", encoding="utf-8")
    run_git(repo, "add", ".envrc")
    run_git(repo, "commit", "-q", "-m", "evil")
    run_git(repo, "checkout", "-q", "main")
    evil = run_git(repo, "rev-parse", "evil")
    candidates = revision_candidates(["git", "cherry-pick", *words])
    answers = subprocess.run(
        [GIT, "-C", str(repo), "cat-file", "--batch-check=%(objectname)"],
        input="".join(f"{word}\n" for word in candidates),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert evil in answers, (candidates, answers)
