"""The git guard in a repository's config: what the human's git does with it, and that
adding and removing it leaves everything else of the config as it was."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from cloister_cli import gitguard
from cloister_cli.gitguard import GitGuardError, add_guard, is_guarded, remove_guard
from tests.git_support import GIT, hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def guard(tmp_path: Path) -> Path:
    return tmp_path / "data with spaces #1" / "git-guard.gitconfig"


def plant_gitlink(repo: Path, marker: Path) -> None:
    """The issue's first escape: a repository with a code-running config, as a gitlink."""
    sub = make_repo(repo / "sub")
    run_git(sub, "config", "core.fsmonitor", f"touch '{marker}'; echo")
    run_git(repo, "add", "sub")
    run_git(repo, "commit", "-q", "-m", "add sub")
    (sub / "README").write_text("changed\n", encoding="utf-8")


def human_git(repo: Path, *args: str) -> None:
    subprocess.run([GIT, "-C", str(repo), *args], capture_output=True, check=False, timeout=60)


@pytest.mark.parametrize("command", [("status",), ("diff",), ("commit", "-a", "-m", "x")])
def test_the_human_git_does_not_enter_a_planted_gitlink(
    repo: Path, guard: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    marker = tmp_path / "ran"
    plant_gitlink(repo, marker)
    marker.unlink(missing_ok=True)
    human_git(repo, *command)
    assert marker.exists(), "control: without the guard git runs the planted fsmonitor"
    marker.unlink()
    add_guard(repo / ".git", guard)
    human_git(repo, *command)
    assert not marker.exists()
    assert run_git(repo, "config", "diff.ignoreSubmodules") == "all"


def test_added_once_removed_exactly(repo: Path, guard: Path) -> None:
    config = repo / ".git" / "config"
    before = config.read_bytes()
    assert add_guard(repo / ".git", guard) is True
    assert add_guard(repo / ".git", guard) is False
    assert is_guarded(repo / ".git", guard)
    assert config.read_text(encoding="utf-8").count(gitguard.MARK) == 1
    assert guard.read_text(encoding="utf-8") == gitguard.guard_file_text()
    assert remove_guard(repo / ".git", guard) is True
    assert remove_guard(repo / ".git", guard) is False
    assert config.read_bytes() == before
    assert not is_guarded(repo / ".git", guard)


def test_the_humans_edits_meanwhile_stay(repo: Path, guard: Path) -> None:
    add_guard(repo / ".git", guard)
    run_git(repo, "config", "user.name", "Human")  # git rewrites the whole file
    run_git(repo, "config", "--add", "include.path", "../extra.cfg")  # lands in our section
    remove_guard(repo / ".git", guard)
    assert run_git(repo, "config", "user.name") == "Human"
    assert run_git(repo, "config", "--get-all", "include.path") == "../extra.cfg"
    assert gitguard.MARK not in (repo / ".git" / "config").read_text(encoding="utf-8")


def test_a_config_without_final_newline(repo: Path, guard: Path) -> None:
    config = repo / ".git" / "config"
    config.write_text(config.read_text(encoding="utf-8").rstrip("\n"), encoding="utf-8")
    add_guard(repo / ".git", guard)
    assert run_git(repo, "config", "diff.ignoreSubmodules") == "all"


def test_the_config_mode_is_kept(repo: Path, guard: Path) -> None:
    config = repo / ".git" / "config"
    config.chmod(0o640)
    add_guard(repo / ".git", guard)
    assert config.stat().st_mode & 0o777 == 0o640


def test_gits_lock_is_respected(repo: Path, guard: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitguard, "LOCK_TIMEOUT", 0.2)
    lock = repo / ".git" / "config.lock"
    lock.write_text("", encoding="utf-8")
    with pytest.raises(GitGuardError, match=r"config\.lock' exists"):
        add_guard(repo / ".git", guard)
    lock.unlink()
    # A lock released while we wait is fine.
    monkeypatch.setattr(gitguard, "LOCK_TIMEOUT", 5.0)
    lock.write_text("", encoding="utf-8")
    threading.Timer(0.2, lock.unlink).start()
    assert add_guard(repo / ".git", guard) is True
    assert not lock.exists()


def test_concurrent_git_config_writers_lose_nothing(repo: Path, guard: Path) -> None:
    """git config and the guard take the same lock: a write either fails loudly (git
    reports the lock) or stays; none is silently lost."""
    written: list[str] = []

    def human() -> None:
        for index in range(40):
            result = subprocess.run(
                [GIT, "-C", str(repo), "config", f"test.key{index}", "v"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
            if result.returncode == 0:
                written.append(f"test.key{index}")
            else:
                assert "lock" in result.stderr, result.stderr

    thread = threading.Thread(target=human)
    thread.start()
    for _ in range(20):
        add_guard(repo / ".git", guard)
        remove_guard(repo / ".git", guard)
    thread.join()
    assert written, "git config never got the lock"
    for key in written:
        assert run_git(repo, "config", key) == "v", key
    assert not is_guarded(repo / ".git", guard)
