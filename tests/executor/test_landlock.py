"""Write confinement with Landlock: real child processes, real files, real git.

Every confined command runs in a child (``preexec_fn``, or ``confine_writes`` in a child
Python) so the test process itself is never restricted. The core case is the symlink an
agent plants inside ``.git``: under confinement, git writing through it fails and the
file outside the project stays as it was.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from cloister_executor import landlock
from cloister_executor.landlock import (
    ACCESS_FS_REFER,
    ACCESS_FS_TRUNCATE,
    ACCESS_FS_WRITE_FILE,
    LandlockError,
    WriteConfinement,
    confine_writes,
    handled_access,
    landlock_abi,
    preexec,
)
from tests.executor.conftest import HOST_PATH

TIMEOUT = 30.0
ENV = {"PATH": HOST_PATH}
needs_landlock = pytest.mark.skipif(
    landlock_abi() == 0,
    reason="Landlock is unavailable here (not Linux >= 5.13, disabled, or blocked by seccomp)",
)


def spawn(
    argv: Sequence[str],
    confine: Callable[[], None] | None,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] = ENV,
) -> subprocess.CompletedProcess[str]:
    """Run *argv* with *confine* as its ``preexec_fn``, output captured, bounded in time."""
    return subprocess.run(
        list(argv),
        cwd=cwd,
        env=dict(env),
        preexec_fn=confine,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def run(
    argv: Sequence[str],
    writable: Sequence[Path] | None,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] = ENV,
) -> subprocess.CompletedProcess[str]:
    """Run *argv* with writes confined to *writable* (``None``: unconfined, a control)."""
    confine = None if writable is None else preexec(WriteConfinement(tuple(writable)))
    return spawn(argv, confine, cwd=cwd, env=env)


def sh(
    script: str, writable: Sequence[Path] | None, *, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` (an argv: no shell in Python), confined to *writable*."""
    return run(["sh", "-c", script], writable, cwd=cwd)


def names(directory: Path) -> list[str]:
    return sorted(entry.name for entry in directory.iterdir())


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """An ``allowed`` directory and an ``outside`` one holding a ``victim`` file."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "victim").write_text("original\n", encoding="utf-8")
    return allowed, outside


# --- availability and the handled rights ---------------------------------------------------


@needs_landlock
def test_abi_is_known_here() -> None:
    abi = landlock_abi()
    assert isinstance(abi, int)
    assert abi >= 1
    assert landlock_abi() == abi  # cached


def test_unavailable_landlock_is_an_error_not_a_silent_no_op(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(landlock, "landlock_abi", lambda: 0)
    for apply in (preexec, confine_writes):
        with pytest.raises(LandlockError) as raised:
            apply(WriteConfinement((tmp_path,)))
        assert raised.value.errno == errno.ENOSYS
        assert isinstance(raised.value, OSError)


def test_handled_rights_are_write_like_only_and_grow_with_the_abi() -> None:
    read_like = (1 << 0) | (1 << 2) | (1 << 3) | (1 << 15)  # EXECUTE, READ_*, IOCTL_DEV
    for abi in range(1, 8):
        access = handled_access(abi)
        assert access & read_like == 0
        assert access & ACCESS_FS_WRITE_FILE
        assert bool(access & ACCESS_FS_REFER) == (abi >= 2)
        assert bool(access & ACCESS_FS_TRUNCATE) == (abi >= 3)
    assert handled_access(1) == 0b1_1111_1111_0010  # WRITE_FILE, REMOVE_* .. MAKE_SYM


# --- directories ---------------------------------------------------------------------------


@needs_landlock
def test_writes_inside_an_allowed_directory_work(tree: tuple[Path, Path]) -> None:
    allowed, _ = tree
    script = (
        "set -e; echo one > new; echo two >> new; mkdir -p a/b; mv new a/b/moved;"
        " ln -s a/b/moved link; : > link; rm link; mkfifo fifo; rm fifo; rm -r a; echo done"
    )
    result = sh(script, [allowed], cwd=allowed)
    assert (result.returncode, result.stdout, result.stderr) == (0, "done\n", "")
    assert names(allowed) == []


@needs_landlock
def test_writes_outside_fail_and_change_nothing(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    attempts = [
        ["sh", "-c", f"echo x > {outside}/victim"],
        ["sh", "-c", f"echo x >> {outside}/victim"],
        ["sh", "-c", f"echo x > {outside}/created"],
        ["truncate", "-s", "0", str(outside / "victim")],
        ["mkdir", str(outside / "dir")],
        ["ln", "-s", "target", str(outside / "symlink")],
        ["rm", str(outside / "victim")],
        ["mv", str(outside / "victim"), str(allowed / "stolen")],
    ]
    for argv in attempts:
        result = run(argv, [allowed])
        assert result.returncode != 0, argv
        assert "Permission denied" in result.stderr or "Operation not permitted" in result.stderr
    assert names(outside) == ["victim"]
    assert (outside / "victim").read_text(encoding="utf-8") == "original\n"
    assert names(allowed) == []


@needs_landlock
def test_a_file_cannot_be_moved_out_of_the_allowed_directory(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    (allowed / "secret").write_text("s\n", encoding="utf-8")
    result = run(["mv", str(allowed / "secret"), str(outside / "secret")], [allowed])
    assert result.returncode != 0
    assert (allowed / "secret").exists()
    assert not (outside / "secret").exists()


@needs_landlock
def test_a_write_through_a_planted_symlink_fails(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    git_dir = allowed / ".git"
    git_dir.mkdir()
    (git_dir / "COMMIT_EDITMSG").symlink_to(outside / "victim")
    for redirect in (">", ">>"):
        result = sh(f"echo pwned {redirect} .git/COMMIT_EDITMSG", [allowed], cwd=allowed)
        assert result.returncode != 0
        assert "Permission denied" in result.stderr
    assert (outside / "victim").read_text(encoding="utf-8") == "original\n"
    # The control: unconfined, the same write lands outside.
    assert sh("echo pwned > .git/COMMIT_EDITMSG", None, cwd=allowed).returncode == 0
    assert (outside / "victim").read_text(encoding="utf-8") == "pwned\n"


@needs_landlock
def test_reading_and_executing_outside_still_work(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    script = f"cat {outside}/victim; ls {outside}; {sys.executable} -c 'print(6 * 7)'"
    result = sh(script, [allowed])
    assert (result.returncode, result.stdout, result.stderr) == (0, "original\nvictim\n42\n", "")


@needs_landlock
def test_dev_null_and_the_inherited_pipes_stay_writable(tree: tuple[Path, Path]) -> None:
    allowed, _ = tree
    script = (
        "echo gone > /dev/null && echo kept >> /dev/null && echo out > /dev/stdout && echo err >&2"
    )
    result = sh(script, [allowed])
    assert (result.returncode, result.stdout, result.stderr) == (0, "out\n", "err\n")


@needs_landlock
def test_missing_writable_paths_are_skipped(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    missing = [outside / "not-yet", outside / "victim" / "under-a-file"]
    result = sh(f"echo x > {allowed}/ok && echo x > {outside}/not-yet", [allowed, *missing])
    assert result.returncode != 0
    assert (allowed / "ok").exists()
    assert not (outside / "not-yet").exists()


@needs_landlock
def test_the_parent_is_not_confined(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    confine = preexec(WriteConfinement((allowed,)))
    (outside / "victim").write_text("still mine\n", encoding="utf-8")
    assert callable(confine)
    assert (outside / "victim").read_text(encoding="utf-8") == "still mine\n"


# --- single files --------------------------------------------------------------------------


@needs_landlock
def test_an_allowed_file_is_writable_but_not_its_siblings(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    single = outside / "single"
    single.write_text("old old old\n", encoding="utf-8")
    ok = sh(f"echo new > {single} && echo more >> {single}", [allowed, single])
    assert (ok.returncode, ok.stderr) == (0, "")
    assert single.read_text(encoding="utf-8") == "new\nmore\n"
    for script in (f"echo x > {outside}/victim", f"echo x > {outside}/sibling", f"rm {single}"):
        result = sh(script, [allowed, single])
        assert result.returncode != 0, script
    assert names(outside) == ["single", "victim"]
    assert (outside / "victim").read_text(encoding="utf-8") == "original\n"


# --- confine_writes and asyncio ------------------------------------------------------------


@needs_landlock
def test_confine_writes_restricts_the_calling_process(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from cloister_executor.landlock import WriteConfinement, confine_writes\n"
        "allowed, victim = Path(sys.argv[1]), Path(sys.argv[2])\n"
        "confine_writes(WriteConfinement((allowed,)))\n"
        "(allowed / 'inside').write_text('ok')\n"
        "try:\n"
        "    victim.write_text('pwned')\n"
        "except PermissionError:\n"
        "    print('denied')\n"
    )
    result = run(
        [sys.executable, "-c", program, str(allowed), str(outside / "victim")],
        None,
        env=dict(os.environ),
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "denied\n", "")
    assert (allowed / "inside").read_text(encoding="utf-8") == "ok"
    assert (outside / "victim").read_text(encoding="utf-8") == "original\n"


@needs_landlock
def test_asyncio_spawn_like_the_runner(tree: tuple[Path, Path]) -> None:
    allowed, outside = tree

    async def main() -> tuple[int, bytes]:
        process = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            f"echo in > inside; echo out > {outside}/victim",
            cwd=allowed,
            env=ENV,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec(WriteConfinement((allowed,))),
        )
        _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
        return await process.wait(), stderr

    returncode, stderr = asyncio.run(main())
    assert returncode != 0
    assert b"Permission denied" in stderr
    assert (allowed / "inside").read_text(encoding="utf-8") == "in\n"
    assert (outside / "victim").read_text(encoding="utf-8") == "original\n"


# --- real git ------------------------------------------------------------------------------

IDENTITY = ("-c", "user.name=Cloister Test", "-c", "user.email=test@cloister.invalid")


def git_env(home: Path) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    return {"PATH": HOST_PATH, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}


def git(
    repo: Path, writable: Sequence[Path] | None, home: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return run(["git", *IDENTITY, *args], writable, cwd=repo, env=git_env(home))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit, made unconfined."""
    path = tmp_path / "repo"
    path.mkdir()
    home = tmp_path / "home"
    assert git(path, None, home, "init", "-q").returncode == 0
    (path / "file").write_text("one\n", encoding="utf-8")
    assert git(path, None, home, "add", "file").returncode == 0
    assert git(path, None, home, "commit", "-qm", "one").returncode == 0
    return path


@needs_landlock
def test_git_commit_works_under_confinement(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "fresh"
    repo.mkdir()
    steps = [
        ("init", "-q"),
        ("config", "core.autocrlf", "false"),
        ("add", "file"),
        ("commit", "-qm", "first"),
        ("checkout", "-qb", "topic"),
        ("commit", "-qam", "second"),
        ("gc", "-q"),
    ]
    for step in steps:
        if step[0] == "add":
            (repo / "file").write_text("one\n", encoding="utf-8")
        if step[0] == "commit" and step[2] == "second":
            (repo / "file").write_text("two\n", encoding="utf-8")
        result = git(repo, [repo], home, *step)
        assert (result.returncode, result.stderr) == (0, ""), step
    log = git(repo, [repo], home, "log", "--format=%s")
    assert log.stdout == "second\nfirst\n"
    assert names(home) == []


@needs_landlock
def test_git_cannot_append_through_a_symlinked_reflog(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    victim = tmp_path / "victim"
    victim.write_text("original\n", encoding="utf-8")
    reflog = repo / ".git" / "logs" / "HEAD"
    reflog.unlink()
    reflog.symlink_to(victim)
    (repo / "file").write_text("two\n", encoding="utf-8")
    result = git(repo, [repo], home, "commit", "-qam", "two")
    assert result.returncode != 0
    assert "Permission denied" in result.stderr
    assert victim.read_text(encoding="utf-8") == "original\n"
    # The control: unconfined, git appends its reflog line to the file outside.
    assert git(repo, None, home, "commit", "-qam", "two").returncode == 0
    assert victim.read_text(encoding="utf-8").startswith("original\n")
    assert "commit: two" in victim.read_text(encoding="utf-8")


@needs_landlock
def test_git_cannot_write_a_symlinked_commit_message(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    victim = tmp_path / "victim"
    victim.write_text("original\n", encoding="utf-8")
    message = repo / ".git" / "COMMIT_EDITMSG"
    message.unlink()
    message.symlink_to(victim)
    (repo / "file").write_text("two\n", encoding="utf-8")
    result = git(repo, [repo], home, "commit", "-qam", "two")
    assert result.returncode != 0
    assert "Permission denied" in result.stderr
    assert victim.read_text(encoding="utf-8") == "original\n"
    # The control: unconfined, git overwrites the file outside with the message.
    assert git(repo, None, home, "commit", "-qam", "two").returncode == 0
    assert victim.read_text(encoding="utf-8") == "two\n"


@needs_landlock
def test_the_ruleset_fd_lives_as_long_as_the_preexec_callable(tree: tuple[Path, Path]) -> None:
    allowed, _ = tree
    open_fds = Path("/proc/self/fd")
    before = names(open_fds)
    confine = preexec(WriteConfinement((allowed,)))
    assert len(names(open_fds)) == len(before) + 1
    for _ in range(2):  # one callable serves several spawns
        assert spawn(["sh", "-c", "echo x > reused"], confine, cwd=allowed).returncode == 0
        assert sh("echo x > reused", [], cwd=allowed).returncode != 0
    del confine
    assert names(open_fds) == before
