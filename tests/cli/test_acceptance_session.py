"""Issue 13 acceptance: protected paths, markers and limits in a real cloister.

Through the real ``cloister`` command and a real guardian, a cloister is started on a
repository; from inside (``docker exec`` as the cloister's user, as an agent would) every
way of changing a protected path is tried and must fail, whether the path exists
(a file, a directory) or not yet (``.envrc``, ``.vscode/tasks.json``, a file in
``.cloister/``), while a normal edit and a commit work. The markers (``/.cloister``,
``CLOISTER=1``, ``CLOISTER_NAME``, ``CLOISTER_PROJECT``) and the size of ``/dev/shm``
are read inside. After ``cloister stop`` the stand-ins are gone from the host and the
project's files are as the human left them, plus what the agent changed elsewhere.

No disk quota is tried: this engine's storage driver has none (overlay2 on extfs); the
plan's storage option is covered by tests/cli/test_safeguards.py and test_cloisters.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    exec_in,
    exec_ok,
    git,
    inspect,
    squash,
    unique,
)
from tests.cli.test_acceptance import Cloisters, mounts_by_target, new_repo

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.docker

SHM_MEGABYTES = 96
CONFIG = f"""\
# Written by tests/cli/test_acceptance_session.py (protect: the defaults)
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
  shm_size: {SHM_MEGABYTES}m
"""
# The project adds a path and drops one of the defaults.
PROJECT_CONFIG = "protect:\n  paths: [docs/frozen.md]\n  except: [.husky]\n"
ENVRC = "export FROM_THE_HUMAN=1\n"
NOTES = "the human's devcontainer notes\n"
FROZEN = "do not change\n"


def refused(name: str, script: str) -> None:
    """*script* run inside must fail (the agent's attempt on a protected path)."""
    result = exec_in(name, script)
    assert result.returncode != 0, f"the agent could: {script}\n{result.describe()}"


def human_project(tmp_path: Path) -> tuple[Path, str]:
    """A repository with a committed .envrc, .devcontainer/ and docs/frozen.md, and no
    .vscode, .cloister or .husky."""
    repo, name = new_repo(tmp_path, "protect")
    (repo / ".envrc").write_text(ENVRC, encoding="utf-8")
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "notes.txt").write_text(NOTES, encoding="utf-8")
    (repo / "docs").mkdir()
    (repo / "docs" / "frozen.md").write_text(FROZEN, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "the human's setup")
    return repo, name


def test_protected_paths_cannot_be_changed_and_a_normal_edit_works(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = human_project(tmp_path)
    cli.write_project_config(name, PROJECT_CONFIG)
    # --yes: .devcontainer/ is part of the cloister's shape, asked about the first time.
    started = cloisters.start(repo, name, "--yes")
    told = squash(started.stderr)
    assert "protected paths, read-only in the cloister:" in told, started.describe()
    assert ".vscode/tasks.json (none yet: cannot be created)" in told, started.describe()
    assert "docs/frozen.md" in told, started.describe()

    # An existing file: written, appended, replaced, removed.
    for script in (
        "echo evil > .envrc",
        "echo evil >> .envrc",
        "truncate -s 0 .envrc",
        "echo evil > e.tmp && mv -f e.tmp .envrc",
        "rm -f .envrc",
        "mv .envrc moved.envrc",
    ):
        refused(name, script)
    exec_ok(name, "rm -f e.tmp")
    # An existing directory: a new file, a changed one, removal, renaming it away.
    for script in (
        "echo '{}' > .devcontainer/devcontainer.json",
        "echo evil >> .devcontainer/notes.txt",
        "rm .devcontainer/notes.txt",
        "rm -rf .devcontainer",
        "mv .devcontainer elsewhere",
    ):
        refused(name, script)
    # Paths that do not exist yet cannot be created, nor their stand-ins removed.
    for script in (
        "echo '{\"tasks\": []}' > .vscode/tasks.json",
        "rmdir .vscode/tasks.json",
        "touch .cloister/Dockerfile",
        "rm -rf .cloister && mkdir .cloister && touch .cloister/Dockerfile",
    ):
        refused(name, script)
    # The directory on the way to one cannot be renamed away (with the stand-in in it).
    refused(name, "mv .vscode vscode-old && mkdir .vscode && echo '{}' > .vscode/tasks.json")
    refused(name, "mv docs docs-old")
    refused(name, "echo evil >> docs/frozen.md")

    # The project's except: .husky is not protected (no mount, no stand-in).
    assert "/work/.husky" not in mounts_by_target(inspect(name))
    assert not (repo / ".husky").exists()
    exec_ok(name, "mkdir .husky && rmdir .husky")

    # A normal edit elsewhere works, and so does a commit; the stand-ins are invisible to
    # git (`git add -A` takes none of them).
    exec_ok(
        name,
        "echo 'written by the agent' >> README.md && echo new > docs/other.md"
        " && git add -A && git commit --quiet -m 'the agent was here'",
    )
    assert exec_ok(name, "git status --porcelain --untracked-files=all").stdout == ""

    # The markers.
    marker = json.loads(exec_ok(name, "cat /.cloister").stdout)
    assert marker == {"version": 1, "name": name, "project": name, "branch": None}
    refused(name, "echo '{}' > /.cloister")
    shown = exec_ok(name, 'printf \'%s|%s|%s\' "$CLOISTER" "$CLOISTER_NAME" "$CLOISTER_PROJECT"')
    assert shown.stdout == f"1|{name}|{name}"
    # /dev/shm has the configured size (df's 1K blocks).
    size = exec_ok(name, "df -k --output=size /dev/shm | tail -n 1").stdout.strip()
    assert int(size) == SHM_MEGABYTES * 1024

    stopped = cli.ok("stop", name)
    # Nothing of the stand-ins is left, the human's files are as they were, the agent's
    # work is there.
    assert not (repo / ".vscode").exists(), stopped.describe()
    assert not (repo / ".cloister").exists()
    assert not (repo / ".devcontainer.json").exists()
    assert (repo / ".envrc").read_text(encoding="utf-8") == ENVRC
    assert sorted(path.name for path in (repo / ".devcontainer").iterdir()) == ["notes.txt"]
    assert (repo / ".devcontainer" / "notes.txt").read_text(encoding="utf-8") == NOTES
    assert (repo / "docs" / "frozen.md").read_text(encoding="utf-8") == FROZEN
    assert (repo / "README.md").read_text(encoding="utf-8").endswith("written by the agent\n")
    assert git(repo, "log", "--format=%s", "-1") == "the agent was here"
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (cli.data_dir / "markers" / f"{name}.json").exists()


def test_a_worktree_cloister_protects_its_own_tree(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, project = new_repo(tmp_path, "protectwt")
    name = f"{project}-side"
    cloisters.start(repo, name, "-b", "side")
    worktree = cli.worktree(project, "side")
    assert (worktree / ".envrc").is_dir()  # the stand-in, in the worktree
    refused(name, "echo evil > .envrc")
    refused(name, "mkdir -p .vscode && echo '{}' > .vscode/tasks.json")
    marker = json.loads(exec_ok(name, "cat /.cloister").stdout)
    assert (marker["name"], marker["project"], marker["branch"]) == (name, project, "side")
    exec_ok(name, "echo side > side.txt && git add side.txt && git commit --quiet -m side")
    cli.ok("stop", name)
    assert not (worktree / ".envrc").exists()
    assert not (worktree / ".vscode").exists()
    assert not (repo / ".envrc").exists()
    assert git(repo, "log", "--format=%s", "-1", "side") == "side"


def test_a_directory_without_git_is_protected_too(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    name = unique("protectplain")
    directory = tmp_path / name
    directory.mkdir()
    (directory / "notes.txt").write_text("plain\n", encoding="utf-8")
    cloisters.start(directory, name, "--allow-no-git")
    refused(name, "echo evil > .envrc")
    refused(name, "touch .devcontainer/devcontainer.json")
    exec_ok(name, "echo more >> notes.txt")
    assert exec_ok(name, 'echo "$CLOISTER:$CLOISTER_NAME"').stdout == f"1:{name}\n"
    cli.ok("stop", name)
    assert sorted(path.name for path in directory.iterdir()) == ["notes.txt"]
    assert (directory / "notes.txt").read_text(encoding="utf-8") == "plain\nmore\n"
