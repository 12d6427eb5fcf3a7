"""A cloister's own git directory, made from the human's repository with real git.

The cloister's git directory names the human's objects at the path they have inside a
cloister (``/opt/cloister/origin/objects``); on the host the tests give git that store
with ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` instead, and read the directory as the
cloister's git would.
"""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cloister_cli.repo import git, gitdirs, projects
from cloister_cli.repo.gitdirs import OwnGitDir
from cloister_cli.repo.projects import Project
from cloister_cli.start.worktree import make_worktree
from cloister_core.owngit import ORIGIN_ALTERNATES, ORIGIN_OBJECTS, POINTER
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from cloister_core.sessions import SessionRecord, write_session
from tests.git_support import GIT, hermetic_git, make_repo, run_git

STAMP = r"\d{8}T\d{6}"


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "src" / "api")


def inside(
    git_dir: Path, work: Path, repo: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` as the cloister's git would run it, the human's objects given."""
    return subprocess.run(
        [GIT, f"--git-dir={git_dir}", f"--work-tree={work}", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=60,
        env={**os.environ, "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / ".git" / "objects")},
    )


def packed(git_dir: Path) -> dict[str, str]:
    """ref -> object of the directory's packed-refs."""
    refs = {}
    for line in (git_dir / "packed-refs").read_text(encoding="utf-8").splitlines():
        oid, name = line.split(" ")
        refs[name] = oid
    return refs


def config_value(config: Path, key: str) -> list[str]:
    """Every value of *key* in the file *config*, exactly as git reads it back."""
    result = subprocess.run(
        [GIT, "config", "-f", str(config), "--null", "--get-all", key],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert result.returncode in (0, 1), result.stderr
    return [value.decode() for value in result.stdout.split(b"\0")[:-1]]


def commit(repo: Path, parent: str, files: dict[str, str] | None = None, message: str = "x") -> str:
    """A commit on *parent* (its tree, or one of *files*), made without touching a ref."""
    if files is None:
        tree = run_git(repo, "rev-parse", f"{parent}^{{tree}}")
    else:
        entries = ""
        for name, text in files.items():
            blob = git.run(repo, "hash-object", "-w", "--stdin", input=text).stdout.strip()
            entries += f"100644 blob {blob}\t{name}\n"
        tree = git.run(repo, "mktree", input=entries).stdout.strip()
    return run_git(repo, "commit-tree", tree, "-p", parent, "-m", message)


def create(paths: CloisterPaths, repo: Path, name: str = "api") -> OwnGitDir:
    return gitdirs.create(paths, name, HumanRepository.of(repo), worktree=repo, branch=None)


# -- the shared case: the cloister works in the human's checkout --------------------------------


def test_head_refs_and_alternates_are_the_humans(paths: CloisterPaths, repo: Path) -> None:
    main = run_git(repo, "rev-parse", "HEAD")
    run_git(repo, "branch", "feature")
    run_git(repo, "tag", "-a", "-m", "one", "v1")
    run_git(repo, "update-ref", "refs/remotes/origin/main", main)
    run_git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    run_git(repo, "notes", "add", "-m", "a note", "HEAD")
    run_git(repo, "update-ref", "refs/stash-like/other", main)  # not a kind it copies
    own = create(paths, repo)
    assert own.path == paths.cloister_git_dir("api")
    assert (own.path / "HEAD").read_text(encoding="utf-8") == "ref: refs/heads/main\n"
    refs = packed(own.path)
    tag = run_git(repo, "rev-parse", "refs/tags/v1")
    notes = run_git(repo, "rev-parse", "refs/notes/commits")
    assert refs == {
        "refs/heads/main": main,
        "refs/heads/feature": main,
        "refs/tags/v1": tag,
        "refs/remotes/origin/main": main,
        "refs/notes/commits": notes,
        # The human's branches as the cloister shows them: `git merge host/main`.
        "refs/remotes/host/main": main,
        "refs/remotes/host/feature": main,
    }
    assert (own.path / "objects" / "info" / "alternates").read_text(encoding="utf-8") == (
        f"{ORIGIN_OBJECTS}\n"
    )
    assert own.bases == {"main": main, "feature": main}
    assert own.host_heads == {"main": main, "feature": main}
    assert (own.alternates, own.hooks_path, own.notes) == ((), None, ())
    log = inside(own.path, repo, repo, "log", "--format=%H", "host/main").stdout.split()
    assert log == [main]
    described = inside(own.path, repo, repo, "describe", "--tags", "HEAD").stdout.strip()
    assert described == "v1"


def test_a_detached_head_stays_detached(paths: CloisterPaths, repo: Path) -> None:
    run_git(repo, "checkout", "-q", "--detach")
    own = create(paths, repo)
    head = run_git(repo, "rev-parse", "HEAD")
    assert (own.path / "HEAD").read_text(encoding="utf-8") == f"{head}\n"


def test_the_index_is_copied_so_status_shows_the_same_work(
    paths: CloisterPaths, repo: Path
) -> None:
    (repo / "staged").write_text("new\n", encoding="utf-8")
    run_git(repo, "add", "staged")
    (repo / "README").write_text("changed, not staged\n", encoding="utf-8")
    (repo / "untracked").write_text("x\n", encoding="utf-8")
    (repo / ".git" / "info" / "exclude").write_text("ignored-here\n", encoding="utf-8")
    (repo / "ignored-here").write_text("x\n", encoding="utf-8")
    humans = git.run(repo, "status", "--porcelain").stdout
    own = create(paths, repo)
    assert (own.path / "index").read_bytes() == (repo / ".git" / "index").read_bytes()
    assert not (own.path / "index").is_symlink()
    theirs = inside(own.path, repo, repo, "status", "--porcelain").stdout
    assert theirs == humans
    assert sorted(humans.splitlines()) == [" M README", "?? untracked", "A  staged"]
    assert (own.path / "info" / "exclude").read_text(encoding="utf-8") == "ignored-here\n"


def test_a_split_index_is_written_whole(paths: CloisterPaths, repo: Path) -> None:
    """Its shared part is in the human's .git, which the cloister does not see."""
    (repo / "more").write_text("x\n", encoding="utf-8")
    run_git(repo, "add", "more")
    run_git(repo, "update-index", "--split-index")
    assert list((repo / ".git").glob("sharedindex.*"))
    own = create(paths, repo)
    assert not list(own.path.glob("sharedindex.*"))
    listed = inside(own.path, repo, repo, "ls-files").stdout.split()
    assert listed == ["README", "more"]
    status = inside(own.path, repo, repo, "status", "--porcelain").stdout
    assert status == git.run(repo, "status", "--porcelain").stdout == "A  more\n"


def test_no_index_is_no_index(paths: CloisterPaths, tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    own = create(paths, repo)
    assert not (own.path / "index").exists()
    assert (own.path / "packed-refs").read_text(encoding="utf-8") == ""
    assert own.bases == {}


def test_the_config_has_identity_remotes_and_the_hooks_path_in_the_tree(
    paths: CloisterPaths, repo: Path
) -> None:
    run_git(repo, "config", "user.name", "Ada Lovelace")
    run_git(repo, "config", "user.email", "ada@example.invalid")
    run_git(repo, "remote", "add", "origin", "https://example.invalid/api.git")
    run_git(repo, "config", "remote.origin.pushurl", "git@example.invalid:api.git")
    run_git(repo, "config", "--add", "remote.origin.fetch", "+refs/tags/*:refs/tags/*")
    # Keys that run code are the human's alone.
    run_git(repo, "config", "remote.origin.uploadpack", "touch /tmp/pwned; git-upload-pack")
    run_git(repo, "config", "core.fsmonitor", "touch /tmp/pwned")
    run_git(repo, "config", "core.sshCommand", "touch /tmp/pwned; ssh")
    run_git(repo, "config", "alias.st", "!touch /tmp/pwned")
    run_git(repo, "config", "core.hooksPath", ".githooks")
    own = create(paths, repo)
    config = own.path / "config"
    assert config_value(config, "user.name") == ["Ada Lovelace"]
    assert config_value(config, "user.email") == ["ada@example.invalid"]
    assert config_value(config, "remote.origin.url") == ["https://example.invalid/api.git"]
    assert config_value(config, "remote.origin.pushurl") == ["git@example.invalid:api.git"]
    assert config_value(config, "remote.origin.fetch") == [
        "+refs/heads/*:refs/remotes/origin/*",
        "+refs/tags/*:refs/tags/*",
    ]
    assert config_value(config, "core.hooksPath") == ["/work/.githooks"]
    assert own.hooks_path == "/work/.githooks"
    for key in ("remote.origin.uploadpack", "core.fsmonitor", "core.sshCommand", "alias.st"):
        assert config_value(config, key) == [], key
    assert config_value(config, "core.bare") == ["false"]
    assert config_value(config, "core.repositoryformatversion") == ["0"]
    assert config_value(config, "extensions.objectFormat") == []


@pytest.mark.parametrize(
    ("hooks_path", "inside_path"),
    [
        (".", "/work"),
        ("tools/hooks", "/work/tools/hooks"),
        (".git/hooks", None),  # git's own place: the cloister's hooks directory is empty
        ("/usr/share/hooks", None),  # outside the work tree
    ],
)
def test_the_hooks_path_inside_is_the_projects_own(
    paths: CloisterPaths, repo: Path, hooks_path: str, inside_path: str | None
) -> None:
    run_git(repo, "config", "core.hooksPath", hooks_path)
    own = create(paths, repo)
    assert own.hooks_path == inside_path
    expected = [] if inside_path is None else [inside_path]
    assert config_value(own.path / "config", "core.hooksPath") == expected
    assert list((own.path / "hooks").iterdir()) == []


HOSTILE = [
    'with "quotes"',
    "back\\slash \\n not a newline",
    "tab\there",
    "new\nline",
    "  leading and trailing  ",
    "semi; colon # hash",
    "",
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_config_values_are_read_back_exactly(paths: CloisterPaths, repo: Path, value: str) -> None:
    run_git(repo, "config", "user.name", value)
    run_git(repo, "config", "remote.origin.url", value)
    own = create(paths, repo)
    assert config_value(own.path / "config", "user.name") == [value]
    assert config_value(own.path / "config", "remote.origin.url") == [value]


def test_config_text_quotes_names_and_values(tmp_path: Path) -> None:
    text = gitdirs.config_text(
        object_format="sha1",
        identity={"name": 'A "B" \\ C\tD\nE', "email": "e@x.invalid"},
        remotes={'we"ird\\name': {"url": ["u1", 'u"2'], "fetch": ["+a:b"]}},
        hooks_path='/work/odd "hooks"',
    )
    config = tmp_path / "config"
    config.write_text(text, encoding="utf-8")
    assert config_value(config, "user.name") == ['A "B" \\ C\tD\nE']
    assert config_value(config, "user.email") == ["e@x.invalid"]
    assert config_value(config, 'remote.we"ird\\name.url') == ["u1", 'u"2']
    assert config_value(config, 'remote.we"ird\\name.fetch') == ["+a:b"]
    assert config_value(config, "core.hooksPath") == ['/work/odd "hooks"']
    assert text.startswith("# Written by Cloister")


def test_a_sha256_repository_gets_its_object_format(paths: CloisterPaths, tmp_path: Path) -> None:
    repo = tmp_path / "sha256"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main", "--object-format=sha256")
    (repo / "README").write_text("hello\n", encoding="utf-8")
    run_git(repo, "add", "README")
    run_git(repo, "commit", "-q", "-m", "first")
    own = create(paths, repo)
    config = own.path / "config"
    assert config_value(config, "extensions.objectFormat") == ["sha256"]
    assert config_value(config, "core.repositoryformatversion") == ["1"]
    fmt = inside(own.path, repo, repo, "rev-parse", "--show-object-format").stdout.strip()
    assert fmt == "sha256"
    head = run_git(repo, "rev-parse", "HEAD")
    assert len(head) == 64
    assert inside(own.path, repo, repo, "rev-parse", "HEAD").stdout.strip() == head
    assert inside(own.path, repo, repo, "status", "--porcelain").stdout == ""


def test_shallow_is_copied(paths: CloisterPaths, repo: Path, tmp_path: Path) -> None:
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    clone = tmp_path / "shallow"
    run_git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    own = create(paths, clone)
    assert (own.path / "shallow").read_bytes() == (clone / ".git" / "shallow").read_bytes()
    assert inside(own.path, clone, clone, "log", "--format=%s").stdout.split() == ["second"]


def test_links_among_the_humans_files_are_never_followed(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not the agent's to see\n", encoding="utf-8")
    exclude = repo / ".git" / "info" / "exclude"
    exclude.unlink()
    exclude.symlink_to(secret)
    (repo / ".git" / "shallow").symlink_to(secret)
    own = create(paths, repo)
    assert not (own.path / "info" / "exclude").exists()
    assert not (own.path / "shallow").exists()
    assert not any(path.is_symlink() for path in own.path.rglob("*"))


def test_the_humans_own_alternates_are_named_at_their_mounts(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    other = make_repo(tmp_path / "other")
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(
        f"# a comment\n\n{other / '.git' / 'objects'}\n{tmp_path / 'gone'}\n", encoding="utf-8"
    )
    own = create(paths, repo)
    assert own.alternates == (other / ".git" / "objects",)
    assert (own.path / "objects" / "info" / "alternates").read_text(encoding="utf-8") == (
        f"{ORIGIN_OBJECTS}\n{ORIGIN_ALTERNATES}/0\n"
    )


def test_a_relative_alternate_is_relative_to_the_objects(repo: Path, tmp_path: Path) -> None:
    other = make_repo(tmp_path / "src" / "other")
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text("../../../other/.git/objects\n", encoding="utf-8")
    assert HumanRepository.of(repo).alternates() == [other / ".git" / "objects"]


def test_making_it_again_starts_afresh(paths: CloisterPaths, repo: Path) -> None:
    own = create(paths, repo)
    (own.path / "refs" / "heads" / "agents-own").write_text("x\n", encoding="utf-8")
    (own.path / "objects" / "pack" / "junk.pack").write_text("x", encoding="utf-8")
    again = create(paths, repo)
    assert again.path == own.path
    assert not (own.path / "refs" / "heads" / "agents-own").exists()
    assert not (own.path / "objects" / "pack" / "junk.pack").exists()


def test_a_failure_leaves_no_git_directory(
    paths: CloisterPaths, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise git.GitError("boom")

    monkeypatch.setattr(gitdirs, "_shared_index", broken)
    with pytest.raises(git.GitError, match="boom"):
        create(paths, repo)
    assert not paths.cloister_git_dir("api").exists()
    assert paths.git_dirs_dir.is_dir()


def test_write_pointer_and_remove(paths: CloisterPaths, repo: Path, tmp_path: Path) -> None:
    own = create(paths, repo)
    pointer = gitdirs.write_pointer(paths, "api")
    assert pointer == paths.git_pointer("api")
    assert pointer.read_text(encoding="utf-8") == POINTER
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x", encoding="utf-8")
    (own.path / "link").symlink_to(outside)
    gitdirs.remove(paths, "api")
    assert not own.path.exists()
    assert not pointer.exists()
    assert (outside / "keep").is_file()
    gitdirs.remove(paths, "api")  # nothing left: no error


# -- the agent's branches of an earlier session ---------------------------------------------------


def test_an_earlier_sessions_branches_come_back(paths: CloisterPaths, repo: Path) -> None:
    main = run_git(repo, "rev-parse", "HEAD")
    for branch in ("feature", "diverged", "merged"):
        run_git(repo, "branch", branch)
    human_diverged = commit(repo, main, message="human's")
    run_git(repo, "update-ref", "refs/heads/diverged", human_diverged)
    agent = {
        "main": commit(repo, main, message="agent's main"),  # checked out here
        "feature": commit(repo, main, message="agent's feature"),
        "diverged": commit(repo, main, message="agent's diverged"),
        "new": commit(repo, main, message="agent's new branch"),
        "merged": main,  # the human has it all
    }
    for branch, oid in agent.items():
        run_git(repo, "update-ref", f"refs/cloister/api/{branch}", oid)
    run_git(repo, "update-ref", "refs/cloister/other/feature", human_diverged)  # not its own
    own = create(paths, repo)
    refs = packed(own.path)
    # The human's checked-out branch is theirs (the index is theirs): the agent's aside.
    assert refs["refs/heads/main"] == main
    (aside,) = [name for name in refs if name.startswith("refs/heads/main@")]
    assert re.fullmatch(rf"refs/heads/main@{STAMP}", aside)
    assert refs[aside] == agent["main"]
    branch = aside.removeprefix("refs/heads/")
    assert own.notes == (
        f"the agent's main of its last session (not in yours) is its branch {branch}",
    )
    assert refs["refs/heads/feature"] == agent["feature"]
    assert refs["refs/heads/diverged"] == agent["diverged"]
    assert refs["refs/heads/new"] == agent["new"]
    assert refs["refs/heads/merged"] == main
    # The human's, as they are, whatever the agent's.
    assert refs["refs/remotes/host/feature"] == main
    assert refs["refs/remotes/host/diverged"] == human_diverged
    assert "refs/remotes/host/new" not in refs
    assert own.host_heads == {
        "main": main,
        "feature": main,
        "diverged": human_diverged,
        "merged": main,
    }
    # Where the agent's work on each began: the human's commit it builds on; none where
    # it does not build on the human's.
    assert own.bases == {"main": main, "feature": main, "merged": main}
    assert not any(name.startswith("refs/cloister/") for name in refs)


def test_an_earlier_sessions_branch_the_human_lacks_the_commits_of_is_seeded_in_a_worktree(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    main = run_git(repo, "rev-parse", "HEAD")
    run_git(repo, "branch", "feature")
    agents = commit(repo, main, {"README": "the agent's\n"})
    run_git(repo, "update-ref", "refs/cloister/api-feature/feature", agents)
    worktree = tmp_path / "data" / "worktrees" / "api" / "feature"
    make_worktree(repo, worktree, "feature")
    own = gitdirs.create(
        paths, "api-feature", HumanRepository.of(repo), worktree=worktree, branch="feature"
    )
    assert packed(own.path)["refs/heads/feature"] == agents
    assert own.bases["feature"] == main
    assert own.notes == ()
    assert (worktree / "README").read_text(encoding="utf-8") == "the agent's\n"


# -- a worktree of Cloister's ----------------------------------------------------------------------


def worktree_dir(paths: CloisterPaths, repo: Path, branch: str = "feature") -> Path:
    directory = paths.worktree("api", branch)
    make_worktree(repo, directory, branch)
    return directory


def test_a_new_worktree_gets_its_branchs_files(paths: CloisterPaths, repo: Path) -> None:
    main = run_git(repo, "rev-parse", "HEAD")
    run_git(repo, "branch", "feature", commit(repo, main, {"README": "hi", "app.py": "x\n"}))
    worktree = worktree_dir(paths, repo)
    own = gitdirs.create(
        paths, "api-f", HumanRepository.of(repo), worktree=worktree, branch="feature"
    )
    assert (own.path / "HEAD").read_text(encoding="utf-8") == "ref: refs/heads/feature\n"
    assert (worktree / "README").read_text(encoding="utf-8") == "hi"
    assert (worktree / "app.py").read_text(encoding="utf-8") == "x\n"
    assert (worktree / ".git").read_text(encoding="utf-8") == POINTER
    assert inside(own.path, worktree, repo, "status", "--porcelain").stdout == ""
    # The human's checkout is left as it was.
    assert run_git(repo, "status", "--porcelain") == ""
    assert (repo / "README").read_text(encoding="utf-8") == "hello\n"


def test_an_existing_worktree_keeps_its_files_and_gets_an_index(
    paths: CloisterPaths, repo: Path
) -> None:
    worktree = worktree_dir(paths, repo)
    (worktree / "README").write_text("the agent's last session\n", encoding="utf-8")
    (worktree / "extra").write_text("x\n", encoding="utf-8")
    own = gitdirs.create(
        paths, "api-f", HumanRepository.of(repo), worktree=worktree, branch="feature"
    )
    assert (worktree / "README").read_text(encoding="utf-8") == "the agent's last session\n"
    status = inside(own.path, worktree, repo, "status", "--porcelain").stdout.splitlines()
    assert sorted(status) == [" M README", "?? extra"]


def test_a_worktrees_git_directory_has_no_copy_of_the_humans_index(
    paths: CloisterPaths, repo: Path
) -> None:
    (repo / "staged").write_text("x\n", encoding="utf-8")
    run_git(repo, "add", "staged")
    worktree = worktree_dir(paths, repo)
    own = gitdirs.create(
        paths, "api-f", HumanRepository.of(repo), worktree=worktree, branch="feature"
    )
    assert inside(own.path, worktree, repo, "ls-files").stdout.split() == ["README"]
    assert not (worktree / "staged").exists()


# -- what a worktree holds ------------------------------------------------------------------------


def test_uncommitted_tells_work_its_branch_lacks(paths: CloisterPaths, repo: Path) -> None:
    worktree = worktree_dir(paths, repo)
    gitdirs.create(paths, "api-f", HumanRepository.of(repo), worktree=worktree, branch="feature")
    repository = HumanRepository.of(repo)
    head = run_git(repo, "rev-parse", "feature")
    assert not gitdirs.uncommitted(repository, worktree, head)
    (worktree / "README").write_text("changed\n", encoding="utf-8")
    assert gitdirs.uncommitted(repository, worktree, head)
    (worktree / "README").unlink()
    assert gitdirs.uncommitted(repository, worktree, head)  # deleted
    (worktree / "README").write_text("hello\n", encoding="utf-8")
    assert not gitdirs.uncommitted(repository, worktree, head)
    (worktree / "new").write_text("x\n", encoding="utf-8")
    assert gitdirs.uncommitted(repository, worktree, head)  # untracked
    (worktree / "new").unlink()
    (repo / ".gitignore").write_text("build/\n", encoding="utf-8")  # not the branch's
    (worktree / ".gitignore").write_text("build/\n", encoding="utf-8")
    assert gitdirs.uncommitted(repository, worktree, head)


def test_uncommitted_without_a_commit_is_any_file(repo: Path, tmp_path: Path) -> None:
    worktree = tmp_path / "tree"
    worktree.mkdir()
    (worktree / ".git").write_text(POINTER, encoding="utf-8")
    repository = HumanRepository.of(repo)
    assert not gitdirs.uncommitted(repository, worktree, None)
    (worktree / "x").write_text("", encoding="utf-8")
    assert gitdirs.uncommitted(repository, worktree, None)


def test_uncommitted_runs_none_of_the_humans_filters(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    """The files are the agent's: a filter of the human's config would run on them."""
    worktree = worktree_dir(paths, repo)
    gitdirs.create(paths, "api-f", HumanRepository.of(repo), worktree=worktree, branch="feature")
    marker = tmp_path / "filter-ran"
    run_git(repo, "config", "filter.evil.clean", f"touch {marker}; cat")
    run_git(repo, "config", "filter.evil.required", "true")
    (worktree / ".gitattributes").write_text("* filter=evil\n", encoding="utf-8")
    (worktree / "README").write_text("changed\n", encoding="utf-8")
    head = run_git(repo, "rev-parse", "feature")
    assert gitdirs.uncommitted(HumanRepository.of(repo), worktree, head)
    assert not marker.exists()


def test_made_worktrees_know_their_branch_and_repository(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    projects.register(paths, Project("api", repo, git=True))
    feature = worktree_dir(paths, repo, "feature-login")
    other = worktree_dir(paths, repo, "other")
    (paths.worktrees_dir / "api" / "a-file").write_text("", encoding="utf-8")
    (paths.worktrees_dir / "api" / "a-link").symlink_to(tmp_path)
    (paths.worktrees_dir / "web" / "main").mkdir(parents=True)  # no project file
    write_session(
        paths,
        SessionRecord(
            cloister="api-feature-login",
            project="api",
            worktree=str(feature),
            checkout=str(repo),
            common_dir=str(repo / ".git"),
            branch="feature/login",
            started_at=datetime.now(UTC),
        ),
    )
    found = gitdirs.made_worktrees(paths)
    assert [(m.directory, m.project, m.checkout, m.branch, m.cloister) for m in found] == [
        (feature, "api", repo, "feature/login", "api-feature-login"),
        (other, "api", repo, None, None),
        (paths.worktrees_dir / "web" / "main", "web", None, None, None),
    ]
    assert [m.directory for m in gitdirs.made_worktrees(paths, "web")] == [
        paths.worktrees_dir / "web" / "main"
    ]
    assert gitdirs.made_worktrees(paths, "none") == []
    feature_made, other_made, web = found
    assert not feature_made.uncommitted()  # written from its branch, nothing changed
    assert other_made.uncommitted()  # no session: which branch is not known
    assert web.uncommitted()  # no repository known


def test_made_worktrees_of_an_empty_data_directory(paths: CloisterPaths) -> None:
    assert gitdirs.made_worktrees(paths) == []


def test_a_made_worktree_whose_repository_is_gone_counts_as_work(
    paths: CloisterPaths, repo: Path, tmp_path: Path
) -> None:
    worktree = worktree_dir(paths, repo)
    made = gitdirs.MadeWorktree(worktree, "api", tmp_path / "gone", "feature", "api-feature")
    assert made.uncommitted()
    (worktree / ".git").write_text(f"gitdir: {repo / '.git'}\n", encoding="utf-8")
    older = gitdirs.MadeWorktree(worktree, "api", repo, "feature", "api-feature")
    assert older.uncommitted()  # not Cloister's pointer: cannot tell
