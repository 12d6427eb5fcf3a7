"""Issue 21 acceptance: a long branch, stand-ins that never outlive their cloister, and
``stop`` after the agent removed ``/work/.git`` (a real engine).

Through the real ``cloister`` command and a real guardian: ``start -b`` with an
80-character branch starts, under a shortened name that is the same on the next start;
the empty stand-ins a start makes for missing protected paths exist while the cloister
runs and are gone after a stop that did not finish (the container removed out of band,
or the stop killed after it recorded the end), whichever of ``start``, ``stop`` or
``gc`` comes next, while a directory of the human's of such a name stays.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cloister_core.names import MAX_NAME_LENGTH, cloister_name, sanitize_branch
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    exec_in,
    exec_ok,
    remove_containers,
    squash,
)
from tests.cli.test_acceptance import Cloisters, new_repo

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.docker

CONFIG = f"""\
# Written by tests/cli/test_acceptance_arrivals.py (protect: the defaults)
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
"""
BRANCH = "feature/PROJ-1234-implement-oauth-login-flow-for-mobile-clients-and-the-web-also"
# The defaults' protected paths a fresh repository lacks: each gets an empty stand-in.
STAND_INS = (".cloister", ".devcontainer", ".devcontainer.json", ".envrc", ".husky")
TASKS = Path(".vscode/tasks.json")


def test_a_long_branch_starts_under_a_stable_name(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    assert len(BRANCH) == 80
    repo, project = new_repo(tmp_path, "long")
    name = cloister_name(project, BRANCH)
    assert name.startswith(f"{project}-feature-proj-1234-")
    # Its container's name is a DNS label on its network: the start's engine check
    # resolves it from inside.
    assert len(cli.container(name)) <= MAX_NAME_LENGTH
    started = cloisters.start(repo, name, "-b", BRANCH)
    worktree = cli.worktree(project, sanitize_branch(BRANCH))
    listing = cli.listing()
    assert listing[name]["branch"] == BRANCH, listing
    assert listing[name]["path"] == str(worktree), listing
    assert cli.ok("path", name).stdout.strip() == str(worktree)
    assert exec_ok(name, "git symbolic-ref --short HEAD").stdout.strip() == BRANCH
    assert "Traceback" not in started.output

    cli.ok("stop", name)
    assert name not in cli.listing()
    again = cloisters.start(repo, name, "-b", BRANCH)  # the same name, the same worktree
    assert "Traceback" not in again.output
    assert cli.listing()[name]["path"] == str(worktree)
    # From inside its worktree, without -b: the same cloister.
    assert "already running" in squash(cli.ok("start", "-d", cwd=worktree).stderr)
    cli.ok("stop", name)


def present(repo: Path) -> set[str]:
    """The stand-in paths (the defaults' protected paths) that are in *repo* now."""
    return {name for name in (*STAND_INS, str(TASKS)) if (repo / name).exists()}


def start_with_stand_ins(cloisters: Cloisters, repo: Path, name: str) -> None:
    started = cloisters.start(repo, name, "--json")
    told = squash(started.stderr)
    assert "made empty read-only stand-ins for protected paths that did not exist" in told
    for path in (*STAND_INS, str(TASKS)):
        assert path in told, started.describe()
        assert (repo / path).is_dir(), path
    assert sorted(started.json()["stand_ins"]) == sorted((*STAND_INS, str(TASKS)))
    # The cloister's own stand-ins are there, read-only, while it runs.
    assert exec_in(name, f"rmdir {TASKS}").returncode != 0


def test_no_stand_in_after_a_killed_stop_and_the_next_start(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "standin")
    start_with_stand_ins(cloisters, repo, name)
    remove_containers([name])  # the stop killed once the container was gone

    again = cloisters.start(repo, name)
    assert "ended without a finished `cloister stop`" in squash(again.stderr), again.describe()
    # The new session made (and recorded) its own stand-ins: none is taken for the human's.
    assert present(repo) == {*STAND_INS, str(TASKS)}
    assert (repo / TASKS).is_dir()
    cli.ok("stop", name)
    assert present(repo) == set()
    assert not (repo / ".vscode").exists()


def test_no_stand_in_after_a_killed_stop_and_gc(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "gcstand")
    start_with_stand_ins(cloisters, repo, name)
    remove_containers([name])
    assert present(repo) == {*STAND_INS, str(TASKS)}
    cleaned = cli.ok("gc")
    assert f"cleaned up after cloister {name}" in cleaned.stdout, cleaned.describe()
    assert present(repo) == set()


def test_stand_ins_a_stop_recorded_but_did_not_remove_go_at_the_next_stop_or_gc(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    """A stop killed between recording the end and removing the stand-ins: the record
    says stopped, and still lists them. Another cloister's stop removes them, so does
    gc; a directory of the human's of such a name stays."""
    repo, name = new_repo(tmp_path, "recorded")
    start_with_stand_ins(cloisters, repo, name)
    session_file = cli.data_dir / "sessions" / f"{name}.json"
    made = json.loads(session_file.read_text(encoding="utf-8"))["placeholders"]
    assert made
    cli.ok("stop", name)
    assert present(repo) == set()
    stopped = json.loads(session_file.read_text(encoding="utf-8"))
    assert stopped["stopped_at"] is not None
    assert stopped["placeholders"] == []  # forgotten once removed

    def killed_half_way() -> None:
        """What the stop leaves when killed after it recorded the end."""
        for path in made:
            Path(path).mkdir(parents=True, exist_ok=True)
        session_file.write_text(json.dumps({**stopped, "placeholders": made}), encoding="utf-8")

    # The human's own empty directory, never recorded: it stays.
    other, other_name = new_repo(tmp_path, "human")
    (other / ".envrc").mkdir()
    cloisters.start(other, other_name)
    killed_half_way()
    survey = cli.json("gc", "--dry-run", "--json")
    assert sorted(survey["stand_ins"][name]) == sorted(
        str(repo / path) for path in (*STAND_INS, str(TASKS))
    ), survey
    assert present(repo) == {*STAND_INS, str(TASKS)}  # a dry run changes nothing
    stopped_other = cli.ok("stop", other_name)
    told = squash(stopped_other.stderr)
    assert "removed the stand-ins an unfinished stop left" in told, stopped_other.describe()
    assert present(repo) == set()
    assert not (repo / ".vscode").exists()
    assert (other / ".envrc").is_dir()

    killed_half_way()
    cleaned = cli.json("gc", "--json")
    assert sorted(cleaned["removed_stand_ins"]) == sorted(
        str(repo / path) for path in (*STAND_INS, str(TASKS))
    ), cleaned
    assert present(repo) == set()
    assert (other / ".envrc").is_dir()
    assert cli.json("gc", "--dry-run", "--json")["stand_ins"] == {}


def test_stop_after_the_agent_removed_its_git_directory_points_at_restore(
    cli: CloisterCli, cloisters: Cloisters, tmp_path: Path
) -> None:
    repo, name = new_repo(tmp_path, "nogit")
    cloisters.start(repo, name)
    exec_in(name, "rm -rf /work/.git")
    stopped = cli.ok("stop", name)
    told = squash(stopped.output)
    assert "the agent removed cloister" in told, stopped.describe()
    assert f"run: cloister restore {name}" in told, stopped.describe()
    assert "review --fix" not in told, stopped.describe()
    assert "`cloister sync" not in told, stopped.describe()  # no retry can bring it back
    assert not (cli.data_dir / "gitdirs" / name).exists()
    assert name not in cli.json("gc", "--dry-run", "--json")["dead_cloisters"]
    restored = cli.ok("restore", name)
    assert "restored" in restored.stdout, restored.describe()
