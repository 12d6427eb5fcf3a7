"""Shared set-up of the review tests: hermetic git and a real repository per test.

Set-up git runs hardened (:func:`cloister_core.gitsafety.git_environment`), like every
git call Cloister makes; only :meth:`Project.human_git` runs git the way the human
would, to show what a planted thing does to them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloister_cli.session.review import Finding, ReviewTarget, review
from cloister_core.gitsafety import git_environment
from tests.git_support import hermetic_git

GIT = shutil.which("git") or "git"
GIT_TIMEOUT = 60


def run_git(directory: Path, *args: str, hardened: bool = True) -> str:
    environment = git_environment(os.environ, hooks=False) if hardened else dict(os.environ)
    result = subprocess.run(
        [GIT, "-C", str(directory), *args],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=GIT_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def init_repo(path: Path, *, commit: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q", "-b", "main")
    if commit:
        (path / "README").write_text("hello\n", encoding="utf-8")
        run_git(path, "add", "README")
        run_git(path, "commit", "-q", "-m", "first")
    return path


@dataclass
class Project:
    """A real repository with one commit, and a place outside it."""

    root: Path  # the work tree
    outside: Path  # a directory next to it, standing for the human's files

    @property
    def target(self) -> ReviewTarget:
        return ReviewTarget(self.root, self.root / ".git", self.root / ".git")

    def git(self, *args: str) -> str:
        return run_git(self.root, *args)

    def human_git(self, *args: str) -> subprocess.CompletedProcess[str]:
        """git as the human runs it: their (hermetic) config, nothing hardened."""
        return subprocess.run(
            [GIT, "-C", str(self.root), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=GIT_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def link(self, relative: str, target: str | Path) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()
        path.symlink_to(target)
        return path

    def nested(self, relative: str, *config: tuple[str, str]) -> Path:
        """A repository with one commit at *relative*, with *config* set in it."""
        path = init_repo(self.root / relative)
        for key, value in config:
            run_git(path, "config", key, value)
        return path

    def review(self) -> list[Finding]:
        return review(self.target)


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, a fixed identity, no inherited repository."""
    hermetic_git(monkeypatch)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    outside = tmp_path / "outside"
    outside.mkdir()
    return Project(init_repo(tmp_path / "project"), outside)


def of_kind(findings: Sequence[Finding], kind: str) -> list[Finding]:
    return [item for item in findings if item.kind == kind]
