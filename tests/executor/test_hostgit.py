"""The checks around a command in a cloister's git project, through the real daemon.

The project is a real git repository with a session record as ``cloister start``
writes it; what the agent plants is planted on disk, as it would arrive through the
bind mount. The guard is off unless a test is about it, so the checks themselves are
what refuses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cloister_core.gitdir import take_baseline
from cloister_core.sessions import SessionRecord, identity, read_events, write_session
from cloister_executor import hostgit
from cloister_executor.engine import Engine
from cloister_executor.landlock import landlock_abi
from tests.core.test_gitdir import LOCATIONS
from tests.executor.conftest import DaemonHarness, as_refusal, as_result
from tests.git_support import GIT, blob, forge_index, hermetic_git, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


def git_project(harness: DaemonHarness, cloister: str = "demo") -> Path:
    """The harness's project as a repository with one commit, and its session record."""
    repo = harness.project
    run_git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("hello\n", encoding="utf-8")
    run_git(repo, "add", "README")
    run_git(repo, "commit", "-q", "-m", "first")
    write_session(
        harness.paths,
        SessionRecord(
            cloister=cloister,
            project=cloister,
            worktree=str(repo),
            git_dir=str(repo / ".git"),
            common_dir=str(repo / ".git"),
            started_at=datetime.now(UTC),
            git_baseline=take_baseline(repo / ".git"),
            identities={
                str(path): known
                for path in (repo, repo / ".git")
                if (known := identity(path)) is not None
            },
        ),
    )
    return repo


def start(harness: DaemonHarness, *, guard: bool = False) -> None:
    harness.start(
        host_environment={"PATH": os.environ["PATH"], "HOME": str(harness.root)}, guard=guard
    )


def plant(repo: Path, location: str, target: Path) -> Path:
    path = repo / ".git" / location
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to(target)
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text("SECRET-LINE password\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_planted_link_refuses_the_command_and_names_it(
    harness: DaemonHarness, secret: Path, location: str
) -> None:
    repo = git_project(harness)
    start(harness)
    path = plant(repo, location, secret)
    refusal = as_refusal(harness.request(["git", "status"]))
    assert str(path) in refusal.reason
    assert "did not have when cloister demo started" in refusal.reason
    assert "SECRET-LINE" not in refusal.reason
    # Not git only: anything run in the project could run git.
    assert str(path) in as_refusal(harness.request(["true"])).reason


def test_alternates_the_repository_did_not_have(harness: DaemonHarness, tmp_path: Path) -> None:
    repo = git_project(harness)
    start(harness)
    (repo / ".git" / "objects" / "info" / "alternates").write_text(
        f"{tmp_path}/private/.git/objects\n", encoding="utf-8"
    )
    refusal = as_refusal(harness.request(["git", "log"]))
    assert "objects/info/alternates" in refusal.reason
    assert f"{tmp_path}/private/.git/objects" in refusal.reason


def test_a_clean_project_runs_with_hardened_git(harness: DaemonHarness) -> None:
    repo = git_project(harness)
    run_git(repo, "config", "core.hooksPath", "my-hooks")
    start(harness)
    assert as_result(harness.request(["git", "status", "--short"])).exit_code == 0
    hooks = as_result(harness.request(["git", "config", "--get", "core.hooksPath"]))
    assert hooks.stdout_text.strip() == "/dev/null"
    fsmonitor = as_result(harness.request(["git", "config", "--get", "core.fsmonitor"]))
    assert fsmonitor.stdout_text.strip() == "false"
    env = as_result(harness.request(["env"])).stdout_text
    assert "GIT_CONFIG_PARAMETERS=" in env
    assert "GIT_TERMINAL_PROMPT=0" in env


def test_git_hooks_true_keeps_the_repositorys_hooks(harness: DaemonHarness) -> None:
    repo = git_project(harness)
    run_git(repo, "config", "core.hooksPath", "my-hooks")
    harness.paths.config_dir.mkdir(parents=True, exist_ok=True)
    harness.write_config("hostexec:\n  git_hooks: true\n")
    start(harness)
    hooks = as_result(harness.request(["git", "config", "--get", "core.hooksPath"]))
    assert hooks.stdout_text.strip() == "my-hooks"


@pytest.mark.parametrize(
    "argv",
    [
        ["git", "-c", "core.fsmonitor=touch x", "status"],
        ["git", "-C", "/", "status"],
        ["git", "--git-dir=/elsewhere", "log"],
        ["git", "fetch", "--upload-pack=touch x", "origin"],
        ["git", "grep", "-Otouch x", "y"],
    ],
)
def test_git_options_that_override_the_hardening_are_refused(
    harness: DaemonHarness, argv: list[str]
) -> None:
    git_project(harness)
    start(harness)
    assert "refused" in as_refusal(harness.request(argv)).reason


def test_a_project_without_a_session_runs_as_before(harness: DaemonHarness) -> None:
    start(harness)
    assert as_result(harness.request(["echo", "hi"])).stdout_text == "hi\n"


def test_output_is_withheld_when_a_link_appears_while_it_runs(
    harness: DaemonHarness, secret: Path
) -> None:
    repo = git_project(harness)
    start(harness)
    # The command itself plants the link (as a racing agent would, between the checks).
    refusal = as_refusal(
        harness.request(["sh", "-c", f"ln -s {secret} .git/packed-refs && cat .git/packed-refs"])
    )
    assert "output is withheld" in refusal.reason
    assert "SECRET-LINE" not in refusal.reason
    assert (repo / ".git" / "packed-refs").is_symlink()


@pytest.mark.skipif(landlock_abi() < hostgit.MIN_LANDLOCK_ABI, reason="needs Landlock ABI >= 2")
def test_host_git_cannot_write_outside_the_project(harness: DaemonHarness) -> None:
    """A link planted after the checks cannot send git's writes out of the project."""
    git_project(harness)
    start(harness)
    # Not under the temporary directory, which git may write.
    elsewhere = Path(tempfile.mkdtemp(prefix="cloister-test-", dir=Path.home()))
    outside = elsewhere / "outside.bundle"
    request = ["git", "bundle", "create", str(outside), "HEAD"]
    try:
        result = as_result(harness.request(request))
    finally:
        exists = outside.exists()
        shutil.rmtree(elsewhere)
    assert result.exit_code != 0
    assert "Permission denied" in result.stderr_text
    assert not exists
    inside = as_result(harness.request(["git", "bundle", "create", "inside.bundle", "HEAD"]))
    assert inside.exit_code == 0, inside.stderr_text
    run_git(harness.project, "config", "user.name", "Test")  # the executor passes no identity
    run_git(harness.project, "config", "user.email", "test@example.invalid")
    committed = as_result(harness.request(["git", "commit", "--allow-empty", "-q", "-m", "x"]))
    assert committed.exit_code == 0, committed.stderr_text


# -- with the guard ----------------------------------------------------------------------------


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    async def pause(self: Engine, container: str) -> str | None:
        del self
        calls.append(container)
        return None

    monkeypatch.setattr(Engine, "pause", pause)
    return calls


def test_the_guard_removes_the_link_pauses_and_refuses_from_then_on(
    harness: DaemonHarness, secret: Path, paused: list[str]
) -> None:
    repo = git_project(harness)
    start(harness, guard=True)
    path = plant(repo, "objects/info/alternates", secret)
    refusal = as_refusal(harness.request(["git", "status"]))
    assert f"Cloister removed {path}" in refusal.reason
    assert repr(str(secret)) in refusal.reason
    assert "refused from now on" in refusal.reason
    assert not path.is_symlink()
    assert paused == ["cloister-demo"]
    actions = [event.action for event in read_events(harness.paths, "demo")]
    assert actions == ["removed", "paused"]
    assert "refused from now on" in as_refusal(harness.request(["true"])).reason


def test_the_guard_quarantines_a_repository_at_a_new_gitlink(
    harness: DaemonHarness, paused: list[str], tmp_path: Path
) -> None:
    repo = git_project(harness)
    start(harness, guard=True)
    sub = repo / "sub"
    sub.mkdir()
    run_git(sub, "init", "-q")
    (sub / "f").write_text("x\n", encoding="utf-8")
    run_git(sub, "add", "f")
    run_git(sub, "commit", "-q", "-m", "s")
    marker = tmp_path / "fsmonitor-ran"
    run_git(sub, "config", "core.fsmonitor", f"touch '{marker}'; echo")
    run_git(repo, "add", "sub")
    refusal = as_refusal(harness.request(["git", "add", "-A"]))
    assert "moved sub/.git out of the project" in refusal.reason
    assert not (sub / ".git").exists()
    assert list((harness.data_dir / "quarantine" / "demo").glob("*/sub/.git/config"))
    assert paused == []  # an accident is possible: nothing is paused
    assert as_result(harness.request(["git", "add", "-A"])).exit_code == 0
    subprocess.run([GIT, "-C", str(repo), "add", "-A"], check=False, capture_output=True)
    assert not marker.exists()


def test_a_replaced_git_directory_refuses_everything(
    harness: DaemonHarness, tmp_path: Path
) -> None:
    repo = git_project(harness)
    start(harness)
    (repo / ".git").rename(tmp_path / "real-git")
    run_git(tmp_path, "init", "-q", str(repo))
    refusal = as_refusal(harness.request(["git", "status"]))
    assert f"{repo / '.git'} is not what it was" in refusal.reason


@pytest.mark.parametrize("guard", [False, True], ids=["checks", "guard"])
def test_a_forged_index_naming_a_host_file_reveals_nothing(
    harness: DaemonHarness, secret: Path, guard: bool, paused: list[str]
) -> None:
    """git checks an index entry's path when it writes one, not when it reads the index."""
    repo = git_project(harness)
    start(harness, guard=guard)
    readme = blob(repo, "hello\n")
    relative = os.path.relpath(secret, repo)
    forge_index(repo, [(0o100644, readme, "README"), (0o100644, readme, relative)])
    refusal = as_refusal(harness.request(["git", "diff"]))
    assert repr(relative) in refusal.reason
    assert "SECRET-LINE" not in refusal.reason
    if guard:
        assert "rebuilt" in refusal.reason
        assert run_git(repo, "ls-files") == "README"
