"""What an agent can plant in a git directory: found against a baseline, cheaply re-checked."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cloister_core import gitdir
from cloister_core.gitdir import SpecialScanner, planted, take_baseline


def git_directory(root: Path) -> Path:
    """A git directory's shape (no git needed to scan it)."""
    for sub in (
        "objects/info",
        "objects/pack",
        "objects/ab",
        "refs/heads/feature",
        "logs/refs/heads",
        "info",
        "hooks",
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for name in (
        "HEAD",
        "config",
        "index",
        "packed-refs",
        "logs/HEAD",
        "refs/heads/main",
        "objects/ab/cdef",
    ):
        (root / name).write_text("x\n", encoding="utf-8")
    return root


# Every place the agent might plant a link that host git reads or writes.
LOCATIONS = [
    "objects/info/alternates",
    "objects/info/http-alternates",
    "packed-refs",
    "shallow",
    "info/grafts",
    "info/exclude",
    "HEAD",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_MSG",
    "COMMIT_EDITMSG",
    "index",
    "logs/HEAD",
    "logs/refs/heads/main",
    "refs/heads/main",
    "refs/heads/feature/deep",
    "objects/ab/cdef",
    "objects/pack/pack-1.idx",
    "rebase-merge/git-rebase-todo",
    "worktrees/side/HEAD",
    "modules/sub/config",
]


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_planted_symlink_is_found_and_named(tmp_path: Path, location: str) -> None:
    root = git_directory(tmp_path / "git")
    baseline = take_baseline(root)
    secret = tmp_path / "secret"
    secret.write_text("password\n", encoding="utf-8")
    path = root / location
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to(secret)
    (found,) = planted(root, baseline)
    assert found.path == path
    assert found.relative == location
    assert found.kind == "symlink"
    assert repr(str(secret)) in found.describe()
    assert str(path) in found.describe()


def test_a_fifo_is_found(tmp_path: Path) -> None:
    root = git_directory(tmp_path / "git")
    baseline = take_baseline(root)
    (root / "packed-refs").unlink()
    os.mkfifo(root / "packed-refs")
    (found,) = planted(root, baseline)
    assert (found.kind, found.relative) == ("fifo", "packed-refs")
    assert "FIFO" in found.describe()


def test_links_that_were_there_at_start_are_the_humans(tmp_path: Path) -> None:
    root = git_directory(tmp_path / "git")
    (root / "info" / "exclude").symlink_to(tmp_path / "shared-excludes")
    baseline = take_baseline(root)
    assert [entry.path for entry in baseline.special] == ["info/exclude"]
    assert planted(root, baseline) == []
    # Re-pointed: that is new.
    (root / "info" / "exclude").unlink()
    (root / "info" / "exclude").symlink_to(tmp_path / "elsewhere")
    assert [item.relative for item in planted(root, baseline)] == ["info/exclude"]


def test_alternates_new_or_changed(tmp_path: Path) -> None:
    root = git_directory(tmp_path / "git")
    baseline = take_baseline(root)
    alternates = root / "objects" / "info" / "alternates"
    alternates.write_text("/home/user/private/.git/objects\n", encoding="utf-8")
    (found,) = planted(root, baseline)
    assert found.kind == "alternates"
    assert "'/home/user/private/.git/objects'" in found.describe()
    # The human's own alternates (a clone --reference) are not flagged, unless changed.
    assert planted(root, take_baseline(root)) == []
    human = take_baseline(root)
    alternates.write_text("/elsewhere\n", encoding="utf-8")
    assert [item.kind for item in planted(root, human)] == ["alternates"]
    alternates.unlink()
    assert planted(root, human) == []


def test_sockets_are_not_reported(tmp_path: Path) -> None:
    import socket

    root = git_directory(tmp_path / "git")
    baseline = take_baseline(root)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(root / "fsmonitor--daemon.ipc"))
        assert planted(root, baseline) == []


def test_a_cached_scan_sees_changes_made_right_after_it(tmp_path: Path) -> None:
    """The racy-git rule: a directory changed within the clock's granularity of the last
    scan is read again, however its change time looks."""
    root = git_directory(tmp_path / "git")
    baseline = take_baseline(root)
    scanner = SpecialScanner()
    assert planted(root, baseline, scanner) == []
    (root / "packed-refs").unlink()
    (root / "packed-refs").symlink_to("/etc/hostname")
    assert [item.relative for item in planted(root, baseline, scanner)] == ["packed-refs"]


def test_an_old_unchanged_directory_is_not_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = git_directory(tmp_path / "git")
    old = time.time() - 10
    for directory, _, _ in os.walk(root):
        os.utime(directory, (old, old))
    scanner = SpecialScanner()
    # ctime cannot be set back; pretend the clock moved on instead.
    monkeypatch.setattr(gitdir, "RACY_NANOSECONDS", -(10**12))
    scanner.scan(root)
    listed: list[str] = []
    real_scandir = os.scandir

    def counting(path: str) -> os._ScandirIterator[str]:
        listed.append(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting)
    scanner.scan(root)
    assert listed == []
    (root / "objects" / "ab" / "new").symlink_to("/etc/hostname")
    found = scanner.scan(root)
    assert listed == [str(root / "objects" / "ab")]
    assert "objects/ab/new" in found


def test_forgotten_directories_leave_the_cache(tmp_path: Path) -> None:
    root = git_directory(tmp_path / "git")
    scanner = SpecialScanner()
    scanner.scan(root)
    assert str(root / "refs" / "heads" / "feature") in scanner._cache
    (root / "refs" / "heads" / "feature").rmdir()
    scanner.scan(root)
    assert str(root / "refs" / "heads" / "feature") not in scanner._cache


def test_a_directory_replaced_by_a_link_is_found(tmp_path: Path) -> None:
    root = git_directory(tmp_path / "git")
    baseline = take_baseline(root)
    scanner = SpecialScanner()
    planted(root, baseline, scanner)
    (root / "refs" / "heads" / "feature").rename(tmp_path / "moved")
    (root / "refs" / "heads" / "feature").symlink_to(tmp_path)
    assert [item.relative for item in planted(root, baseline, scanner)] == ["refs/heads/feature"]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("README", None),
        ("src/.eslintrc", None),
        (".github/workflows/ci.yml", None),
        ("a/.gitignore", None),
        ("x..y/z", None),
        ("../secret", "'..'"),
        ("a/../../b", "'..'"),
        ("./a", "'.'"),
        ("/etc/passwd", "absolute"),
        ("a//b", "empty"),
        ("a/", "empty"),
        ("", "empty"),
        (".git/hooks/pre-commit", ".git"),
        ("sub/.GIT/config", ".git"),
    ],
)
def test_unsafe_index_paths(path: str, reason: str | None) -> None:
    found = gitdir.unsafe_index_path(path)
    assert (found is None) if reason is None else (found is not None and reason in found)
