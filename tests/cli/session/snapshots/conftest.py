"""A repository with history, branches, a tag and uncommitted work, and Cloister's paths."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloister_cli.session.snapshots import Target
from cloister_core.config.models import SnapshotsConfig
from cloister_core.paths import CloisterPaths
from tests.filesystem_support import other_filesystem
from tests.git_support import GIT, hermetic_git, make_repo, run_git


@dataclass
class Scene:
    repo: Path
    paths: CloisterPaths
    settings: SnapshotsConfig

    def git(self, *args: str) -> str:
        return run_git(self.repo, *args)

    def kept(self, *args: str) -> str:
        """git reading the snapshot pool (where the snapshot's trees are; the repository
        never gets them)."""
        pool = self.paths.snapshot_dir("api") / "objects"
        result = subprocess.run(
            [GIT, "-C", str(self.repo), *args],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ | {"GIT_OBJECT_DIRECTORY": str(pool)},
        )
        return result.stdout.strip()

    def target(self, cloister: str = "api") -> Target:
        return Target.of(cloister, "api", self.repo)

    def state(self) -> dict[str, object]:
        """What a restore must bring back: refs, HEAD, the index and the work tree."""
        return {
            "refs": self.git("for-each-ref", "--format=%(objectname) %(refname)"),
            "head": self.git("symbolic-ref", "-q", "HEAD"),
            "head_commit": self.git("rev-parse", "HEAD"),
            "staged": self.git("diff", "--cached"),
            "unstaged": self.git("diff"),
            "status": self.git("status", "--porcelain", "--untracked-files=all"),
            "files": {
                path.relative_to(self.repo).as_posix(): path.read_bytes()
                for path in sorted(self.repo.rglob("*"))
                if path.is_file() and ".git" not in path.relative_to(self.repo).parts
            },
        }


def make_scene(repo_root: Path, data_root: Path) -> Scene:
    """The repository under *repo_root*, Cloister's paths under *data_root*."""
    repo = make_repo(repo_root / "repo")
    for number in range(5):
        (repo / f"file{number}.txt").write_text(f"version {number}\n", encoding="utf-8")
        run_git(repo, "add", ".")
        run_git(repo, "commit", "-q", "-m", f"commit {number}")
    run_git(repo, "branch", "side", "HEAD~2")
    run_git(repo, "tag", "-a", "v1", "-m", "release", "HEAD~1")
    run_git(repo, "gc", "-q")  # packed, as a clone is
    (repo / "file0.txt").write_text("unstaged change\n", encoding="utf-8")
    (repo / "file1.txt").write_text("staged change\n", encoding="utf-8")
    run_git(repo, "add", "file1.txt")
    (repo / "notes.txt").write_text("untracked work\n", encoding="utf-8")
    (repo / "build").mkdir()
    (repo / ".gitignore").write_text("build/\n", encoding="utf-8")
    (repo / "build" / "out.bin").write_bytes(b"ignored")
    paths = CloisterPaths(data_root / "config", data_root / "data")
    return Scene(repo, paths, SnapshotsConfig())


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Scene:
    hermetic_git(monkeypatch)
    return make_scene(tmp_path, tmp_path)


@pytest.fixture
def far_scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    """The repository on another filesystem than Cloister's data directory: what a
    restore moves aside is copied, not renamed."""
    hermetic_git(monkeypatch)
    with other_filesystem(tmp_path) as far:
        yield make_scene(far, tmp_path)
