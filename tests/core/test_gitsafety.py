"""Host git for the agent: the argv rules, and the environment checked against real git."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from cloister_core.errors import InvalidCommandError
from cloister_core.gitsafety import (
    HARDENED_GIT_CONFIG,
    UnsafeGitCommandError,
    _config_parameters,
    check_git_argv,
    git_environment,
    hardened_git_config,
    is_git_program,
    writes_only_the_index,
)

GIT = shutil.which("git") or "git"
TIMEOUT = 60

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
    "rebase-continue": (["git", "rebase", "--continue"], "--continue"),
    "rebase-cont": (["git", "rebase", "--cont"], "--cont"),
    "cherry-pick-continue": (["git", "cherry-pick", "--continue"], "--continue"),
    "revert-skip": (["git", "revert", "--skip"], "--skip"),
    "am-resolved": (["git", "am", "--resolved"], "--resolved"),
    "checkout-index-prefix": (["git", "checkout-index", "-a", "--prefix=/x/"], "--prefix=/x/"),
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
    "am-r": (["git", "am", "-r"], "-r"),
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


# --- configuration and environment ------------------------------------------------


def test_hardened_config_order_and_hooks() -> None:
    keys = [key for key, _ in HARDENED_GIT_CONFIG]
    assert keys == [
        "core.fsmonitor",
        "core.hooksPath",
        "submodule.recurse",
        "diff.ignoreSubmodules",
        "status.submoduleSummary",
        "fetch.recurseSubmodules",
        "push.recurseSubmodules",
        "diff.submodule",
        "protocol.ext.allow",
        "core.pager",
    ]
    assert hardened_git_config(hooks=False) == HARDENED_GIT_CONFIG
    assert ("core.hooksPath", "/dev/null") in HARDENED_GIT_CONFIG
    assert hardened_git_config(hooks=True) == tuple(
        pair for pair in HARDENED_GIT_CONFIG if pair[0] != "core.hooksPath"
    )


REDIRECTING = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_0",
    "GIT_CONFIG_VALUE_0",
    "GIT_CONFIG_KEY_17",
    "GIT_EXTERNAL_DIFF",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_REPLACE_REF_BASE",
    "GIT_SHALLOW_FILE",
    "GIT_GRAFT_FILE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_ALLOW_PROTOCOL",
    "GIT_QUARANTINE_PATH",
]


@pytest.mark.parametrize("name", REDIRECTING)
def test_environment_removes(name: str) -> None:
    environment = git_environment({name: "/elsewhere", "PATH": "/usr/bin"}, hooks=False)
    if name == "GIT_CONFIG_PARAMETERS":
        assert environment[name] != "/elsewhere"
    else:
        assert name not in environment
    assert environment["PATH"] == "/usr/bin"


def test_environment_keeps_the_humans_plumbing_and_sets_ours() -> None:
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/human",
        "GIT_SSH_COMMAND": "ssh -i ~/.ssh/work",
        "GIT_SSH": "/usr/bin/ssh",
        "GIT_ASKPASS": "/usr/bin/ksshaskpass",
        "SSH_AUTH_SOCK": "/run/user/1000/ssh",
        "GIT_CONFIG_GLOBAL": "/home/human/.config/git/work",
        "GIT_AUTHOR_NAME": "Human",
        "GIT_PAGER": "less",
        "GIT_TERMINAL_PROMPT": "1",
        "GIT_CONFIG_PARAMETERS": "'core.fsmonitor=evil'",
    }
    original = dict(base)
    environment = git_environment(base, hooks=True)
    assert base == original, "the base mapping is not changed"
    for name in ("PATH", "HOME", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_ASKPASS", "SSH_AUTH_SOCK"):
        assert environment[name] == base[name]
    assert environment["GIT_CONFIG_GLOBAL"] == base["GIT_CONFIG_GLOBAL"]
    assert environment["GIT_AUTHOR_NAME"] == "Human"
    assert environment["GIT_TERMINAL_PROMPT"] == "0"
    assert environment["GIT_PAGER"] == "cat"
    assert environment["GIT_CONFIG_PARAMETERS"] == _config_parameters(
        hardened_git_config(hooks=True)
    )
    assert "evil" not in environment["GIT_CONFIG_PARAMETERS"]


def test_config_parameters_format() -> None:
    assert _config_parameters([("core.pager", "cat"), ("a.b", "it's")]) == (
        "'core.pager=cat' 'a.b=it'\\''s'"
    )


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    """os.environ without the human's git config, a fixed identity, no inherited repo."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("GIT_") or name in {"GIT_SSH_COMMAND", "GIT_ASKPASS"}
    }
    environment.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Cloister Test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="Cloister Test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
        HOME=str(tmp_path / "home"),
    )
    return environment


def git(
    directory: Path, *args: str, env: Mapping[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GIT, *args],
        cwd=directory,
        env=dict(env),
        capture_output=True,
        text=True,
        check=check,
        timeout=TIMEOUT,
    )


def make_repo(path: Path, env: Mapping[str, str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main", env=env)
    (path / "README").write_text("hello\n", encoding="utf-8")
    git(path, "add", "README", env=env)
    git(path, "commit", "-q", "-m", "first", env=env)
    return path


def test_config_parameters_round_trip_in_real_git(tmp_path: Path, base_env: dict[str, str]) -> None:
    repo = make_repo(tmp_path / "repo", base_env)
    tricky = 'it\'s "quoted" !bang = with spaces\\ and\ttab'
    environment = git_environment(base_env, hooks=False)
    extra = _config_parameters([("cloister.test", tricky), ("cloister.empty", "")])
    environment["GIT_CONFIG_PARAMETERS"] += " " + extra
    got = git(repo, "config", "--get", "cloister.test", env=environment)
    assert got.stdout == tricky + "\n"
    assert git(repo, "config", "--get", "cloister.empty", env=environment).stdout == "\n"


def test_hardened_settings_beat_the_repository_config(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", base_env)
    for key, value in [
        ("core.fsmonitor", "touch planted"),
        ("core.hooksPath", ".githooks"),
        ("protocol.ext.allow", "always"),
        ("diff.ignoreSubmodules", "none"),
        ("core.pager", "less"),
    ]:
        git(repo, "config", key, value, env=base_env)
    environment = git_environment(base_env, hooks=False)
    for key, value in HARDENED_GIT_CONFIG:
        got = git(repo, "config", "--show-scope", "--get", key, env=environment)
        assert got.stdout == f"command\t{value}\n", key
    with_hooks = git_environment(base_env, hooks=True)
    got = git(repo, "config", "--get", "core.hooksPath", env=with_hooks)
    assert got.stdout == ".githooks\n"


def fsmonitor(marker: Path) -> str:
    return f"touch {shlex.quote(str(marker))}; echo"


@pytest.mark.parametrize(
    "command", [("status",), ("diff-files",), ("add", "-A")], ids=["status", "diff-files", "add"]
)
def test_no_fsmonitor_runs_in_the_repo_or_a_nested_one(
    tmp_path: Path, base_env: dict[str, str], command: tuple[str, ...]
) -> None:
    outer = make_repo(tmp_path / "outer", base_env)
    inner = make_repo(outer / "sub", base_env)
    git(outer, "add", "sub", env=base_env)  # a gitlink: git enters it as a submodule
    git(outer, "commit", "-q", "-m", "gitlink", env=base_env)
    outer_marker, inner_marker = tmp_path / "outer-ran", tmp_path / "inner-ran"
    git(outer, "config", "core.fsmonitor", fsmonitor(outer_marker), env=base_env)
    git(inner, "config", "core.fsmonitor", fsmonitor(inner_marker), env=base_env)
    (inner / "README").write_text("changed\n", encoding="utf-8")

    git(outer, *command, env=git_environment(base_env, hooks=False), check=False)
    assert not outer_marker.exists()
    assert not inner_marker.exists()

    git(outer, *command, env=base_env, check=False)
    assert outer_marker.exists(), "control: without the environment git runs the fsmonitor"
    assert inner_marker.exists(), "control: without the environment git enters the gitlink"


@pytest.mark.parametrize("hooks", [False, True], ids=["hooks-off", "hooks-on"])
def test_hooks(tmp_path: Path, base_env: dict[str, str], hooks: bool) -> None:
    repo = make_repo(tmp_path / "repo", base_env)
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\n", encoding="utf-8")
    hook.chmod(0o755)
    environment = git_environment(base_env, hooks=hooks)
    git(repo, "commit", "-q", "--allow-empty", "-m", "x", env=environment)
    assert marker.exists() is hooks


def test_hooks_off_beats_a_configured_hooks_path(tmp_path: Path, base_env: dict[str, str]) -> None:
    repo = make_repo(tmp_path / "repo", base_env)
    marker = tmp_path / "hook-ran"
    hooks = repo / "githooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\n", "utf-8")
    (hooks / "pre-commit").chmod(0o755)
    git(repo, "config", "core.hooksPath", str(hooks), env=base_env)
    git(
        repo, "commit", "-q", "--allow-empty", "-m", "x", env=git_environment(base_env, hooks=False)
    )
    assert not marker.exists()
    git(repo, "commit", "-q", "--allow-empty", "-m", "y", env=base_env)
    assert marker.exists(), "control: the configured hooks path runs without the environment"


@pytest.mark.parametrize(
    ("argv", "only_index"),
    [
        (["git", "status", "--short"], True),
        (["git", "-P", "log", "--oneline"], True),
        (["git", "diff", "HEAD"], True),
        (["git", "--no-pager", "show", "HEAD"], True),
        (["git", "commit", "-m", "status"], False),
        (["git", "fetch"], False),
        (["git", "branch", "new"], False),
        (["git", "tag", "-f", "x"], False),
        (["git", "--version"], False),
        (["git", "my-alias"], False),
    ],
)
def test_writes_only_the_index(argv: list[str], only_index: bool) -> None:
    """Only these run unconfined by Landlock (a full fork of the daemon is the cost)."""
    assert writes_only_the_index(argv) is only_index
