"""Host git for the agent: the argv rules, and the environment checked against real git."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from cloister_core.gitsafety import (
    HARDENED_GIT_CONFIG,
    _config_parameters,
    git_environment,
    hardened_git_config,
)

GIT = shutil.which("git") or "git"
TIMEOUT = 60

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
        "protocol.allow",
        "protocol.https.allow",
        "protocol.http.allow",
        "protocol.ssh.allow",
        "protocol.git.allow",
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


@pytest.mark.parametrize("url", ["./evil.git", "file://{repo}/evil.git", "{repo}/evil.git"])
@pytest.mark.parametrize("command", ["push", "fetch"])
def test_no_local_transport_runs_the_other_repositorys_hooks(
    tmp_path: Path, base_env: dict[str, str], url: str, command: str
) -> None:
    """A push to a local path runs git-receive-pack, and its hooks, in that repository:
    one the agent made, with a pre-receive hook of its own."""
    repo = make_repo(tmp_path / "repo", base_env)
    evil = repo / "evil.git"
    git(repo, "init", "-q", "--bare", str(evil), env=base_env)
    marker = tmp_path / "hook-ran"
    for hook in ("pre-receive", "post-receive"):
        (evil / "hooks" / hook).write_text(f"#!/bin/sh\ntouch '{marker}'\n", encoding="utf-8")
        (evil / "hooks" / hook).chmod(0o755)
    target = url.format(repo=repo)
    argv = ["push", target, "HEAD:refs/heads/x"] if command == "push" else ["fetch", target]
    refused = git(repo, *argv, env=git_environment(base_env, hooks=False), check=False)
    assert "transport 'file' not allowed" in refused.stderr
    assert not marker.exists()
    if command == "push":  # the control: without the hardening the hook runs
        git(repo, *argv, env=base_env)
        assert marker.exists()
