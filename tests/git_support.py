"""Git for the tests: no user or system config, a fixed identity, real repositories.

Shared by every test that makes a repository (the CLI's, the executor's, the review's).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from hashlib import sha1
from pathlib import Path

import pytest

GIT = shutil.which("git") or "git"


def hermetic_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, a fixed identity, no inherited repository."""
    for key, value in {
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Cloister Test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "Cloister Test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE"):
        monkeypatch.delenv(key, raising=False)


def run_git(directory: Path, *args: str) -> str:
    """Run git as a test's own set-up step; its output, stripped."""
    result = subprocess.run(
        [GIT, "-C", str(directory), *args],
        capture_output=True,
        text=True,
        errors="surrogateescape",
        check=True,
    )
    return result.stdout.strip()


def make_repo(path: Path) -> Path:
    """A repository at *path* on branch ``main`` with one commit (README)."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("hello\n", encoding="utf-8")
    run_git(path, "add", "README")
    run_git(path, "commit", "-q", "-m", "first")
    return path


def forge_index(repo: Path, entries: list[tuple[int, str, str]]) -> None:
    """Write ``.git/index`` by hand (version 2): (mode, blob id, path) per entry, as an
    agent can; git checks paths only when it writes an index itself."""
    body = b""
    for mode, blob, path in sorted(entries, key=lambda item: item[2]):
        name = path.encode()
        entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0, 0)
        entry += bytes.fromhex(blob) + struct.pack(">H", min(len(name), 0xFFF)) + name
        entry += b"\0" * (8 - (len(entry) % 8))
        body += entry
    data = b"DIRC" + struct.pack(">II", 2, len(entries)) + body
    (repo / ".git" / "index").write_bytes(data + sha1(data).digest())  # noqa: S324 - git's format


def blob(repo: Path, text: str) -> str:
    (repo / ".blob").write_text(text, encoding="utf-8")
    return run_git(repo, "hash-object", "-w", ".blob")
