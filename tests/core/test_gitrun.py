"""The one git runner: git's own message on failure, a timeout, stdin, the hardened environment."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cloister_core.gitrun import GitError, run_git
from cloister_core.gitsafety import HARDENED_GIT_CONFIG
from tests.git_support import hermetic_git, make_repo
from tests.git_support import run_git as setup_git

EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
HELLO_BLOB = "ce013625030ba8dba906f756967f9e9ca394464a"  # "hello\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hermetic_git(monkeypatch)
    return make_repo(tmp_path / "repo")


def test_output(repo: Path) -> None:
    head = setup_git(repo, "rev-parse", "HEAD")
    result = run_git("rev-parse", "HEAD", cwd=repo)
    assert result.returncode == 0
    assert result.stdout == f"{head}\n"


def test_the_error_is_gits_own(repo: Path) -> None:
    with pytest.raises(GitError) as caught:
        run_git("rev-parse", "--verify", "no-such-branch", cwd=repo)
    message = str(caught.value)
    assert message.startswith(f"git rev-parse --verify no-such-branch failed in {repo}: ")
    assert "fatal: Needed a single revision" in message
    assert not message.endswith("\n")


def test_unchecked_failure_is_returned(repo: Path) -> None:
    result = run_git("rev-parse", "--verify", "--quiet", "nope", cwd=repo, check=False)
    assert result.returncode == 1
    assert result.stdout == ""


def test_a_timeout_is_a_git_error(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()  # nothing is ever written: git waits on stdin
    try:
        with pytest.raises(GitError, match=r"git hash-object --stdin took over 0\.3s"):
            run_git("hash-object", "--stdin", cwd=tmp_path, stdin=read_end, timeout=0.3)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_stdin_from_a_descriptor(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(b"hello\n")
    fd = os.open(data, os.O_RDONLY)
    try:
        result = run_git("hash-object", "--stdin", cwd=tmp_path, stdin=fd)
    finally:
        os.close(fd)
    assert result.stdout.strip() == HELLO_BLOB


def test_input_text(tmp_path: Path) -> None:
    assert run_git("hash-object", "--stdin", cwd=tmp_path, input="hello\n").stdout == (
        f"{HELLO_BLOB}\n"
    )


def test_stdin_is_closed_otherwise(tmp_path: Path) -> None:
    """Nothing waits on the executor's own stdin: git reads an empty one."""
    assert run_git("hash-object", "--stdin", cwd=tmp_path, timeout=10).stdout.strip() == EMPTY_BLOB


def test_the_hardened_settings_beat_the_repositorys(repo: Path) -> None:
    setup_git(repo, "config", "core.fsmonitor", "true")
    setup_git(repo, "config", "core.hooksPath", "my-hooks")
    setup_git(repo, "config", "protocol.allow", "always")
    assert setup_git(repo, "config", "--get", "core.fsmonitor") == "true"  # plain git obeys
    assert run_git("config", "--get", "core.fsmonitor", cwd=repo).stdout.strip() == "false"
    assert run_git("config", "--get", "core.hooksPath", cwd=repo).stdout.strip() == "/dev/null"
    assert run_git("config", "--get", "protocol.allow", cwd=repo).stdout.strip() == "never"
    # Every hardened setting, in git's own reading of the command-line scope.
    listed = run_git("config", "--list", "--show-scope", cwd=repo).stdout.splitlines()
    command = {line.removeprefix("command\t") for line in listed if line.startswith("command\t")}
    assert {f"{key}={value}".lower() for key, value in HARDENED_GIT_CONFIG} <= {
        line.lower() for line in command
    }


def test_hooks_keep_the_repositorys_setting(repo: Path) -> None:
    setup_git(repo, "config", "core.hooksPath", "my-hooks")
    result = run_git("config", "--get", "core.hooksPath", cwd=repo, hooks=True)
    assert result.stdout.strip() == "my-hooks"
    # The rest stays hardened.
    assert run_git("config", "--get", "core.fsmonitor", cwd=repo, hooks=True).stdout == "false\n"


def test_the_callers_environment_cannot_redirect_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = make_repo(tmp_path / "elsewhere")
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.fsmonitor=true'")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "/evil")
    top = run_git("rev-parse", "--show-toplevel", cwd=repo).stdout.strip()
    assert Path(top) == repo.resolve()
    assert run_git("config", "--get", "core.fsmonitor", cwd=repo).stdout.strip() == "false"
    assert run_git("config", "--get", "core.hooksPath", cwd=repo).stdout.strip() == "/dev/null"


def test_the_callers_own_variables_come_after(repo: Path, tmp_path: Path) -> None:
    """*env* is Cloister's own (a temporary index, an identity): applied as given."""
    result = run_git(
        "var", "GIT_AUTHOR_IDENT", cwd=repo, env={"GIT_AUTHOR_NAME": "Sync Bot"}
    ).stdout
    assert result.startswith("Sync Bot <")
    index = tmp_path / "other-index"
    run_git("read-tree", "--empty", cwd=repo, env={"GIT_INDEX_FILE": str(index)})
    assert index.is_file()
    assert run_git("ls-files", cwd=repo).stdout == "README\n"  # the real index is untouched


def test_names_that_are_no_utf8_survive(repo: Path) -> None:
    name = os.fsdecode(b"caf\xff")
    (repo / name).write_bytes(b"x")
    setup_git(repo, "add", "--", name)
    listed = run_git("ls-files", "-z", cwd=repo).stdout.split("\0")
    assert name in listed
    assert os.fsencode(name) == b"caf\xff"


def test_a_carriage_return_in_a_name_stays_one(repo: Path) -> None:
    """No newline translation: a name git prints with a CR goes back to git the same."""
    name = "a\rb"
    (repo / name).write_bytes(b"x")
    listed = run_git("ls-files", "-z", "--others", cwd=repo).stdout
    assert listed == f"{name}\0"
    run_git("update-index", "--add", "-z", "--stdin", cwd=repo, input=listed)
    assert name in run_git("ls-files", "-z", cwd=repo).stdout.split("\0")


def test_input_bytes_go_as_they_are(tmp_path: Path) -> None:
    data = b"caf\xff\r\n"
    expected = run_git("hash-object", "--stdin", cwd=tmp_path, input=data).stdout
    source = tmp_path / "data"
    source.write_bytes(data)
    assert expected == run_git("hash-object", str(source), cwd=tmp_path).stdout


def test_git_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(GitError, match="git is not installed"):
        run_git("version", cwd=tmp_path)


def test_a_missing_directory_is_a_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="cannot run git"):
        run_git("version", cwd=tmp_path / "missing")
