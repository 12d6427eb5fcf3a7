"""The git guardrails' wrapper (``inside/bin/git``), run for real: real git, real
repositories and a real bare remote, under each POSIX shell it must work with.

Each test runs the script as it is shipped, only its ``#!`` line naming the shell
under test (dash, bash, and busybox's ash where it is installed), from a directory first
on PATH, exactly as it sits in a cloister; the real git is the next one on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cloister_cli.inside.guardrails import PROTECTED_VARIABLE, WRAPPER
from tests.git_support import hermetic_git, make_repo, run_git

SH = shutil.which("sh") or "/bin/sh"
REFUSED = 2  # the wrapper's exit status for a refusal
ZERO = "0" * 40


def _shells() -> list[tuple[str, str]]:
    """(name, ``#!`` line) of every shell to test that this machine has."""
    found = []
    for name, argument in (("dash", ""), ("bash", ""), ("busybox", " sh")):
        path = shutil.which(name)
        if path is not None:
            found.append((name, f"#!{path}{argument}"))
    return found


SHELLS = _shells()


@dataclass
class Guarded:
    """The wrapper under one shell, a repository on ``main`` (with ``master`` and
    ``feature`` beside it) and its bare remote ``origin`` holding all three."""

    bin: Path
    repo: Path
    remote: Path
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def git_path(self) -> Path:
        return self.bin / "git"

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``git ARGS`` through the wrapper, in the repository (or *cwd*)."""
        return subprocess.run(
            [str(self.git_path), *args],
            cwd=cwd or self.repo,
            env=self.env | (env or {}),
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert "guardrails" not in result.stderr
        return result

    def refused(self, *args: str, stdin: str | None = None) -> str:
        """``git ARGS`` must be refused, changing nothing; its message."""
        before = self.state()
        result = self.run(*args, stdin=stdin)
        assert result.returncode == REFUSED, (args, result.stdout, result.stderr)
        assert "the git guardrails refused" in result.stderr, result.stderr
        assert result.stdout == ""
        assert self.state() == before
        return result.stderr

    def not_refused(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``git ARGS`` reaches the real git (which may still fail for its own reasons)."""
        result = self.run(*args)
        assert result.returncode != REFUSED, (args, result.stderr)
        assert "guardrails" not in result.stderr
        return result

    def state(self) -> tuple[str, str, list[str]]:
        """Every ref here and at the remote, and the temporary directory's files."""
        return (
            run_git(self.repo, "for-each-ref"),
            run_git(self.remote, "for-each-ref"),
            sorted(item.name for item in self.tmp.iterdir()),
        )

    def head(self) -> str:
        return run_git(self.repo, "rev-parse", "HEAD")

    def message(self) -> str:
        return run_git(self.repo, "log", "-1", "--format=%B")


@pytest.fixture(params=[name for name, _ in SHELLS])
def guarded(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Guarded:
    hermetic_git(monkeypatch)
    shebang = dict(SHELLS)[request.param]
    directory = tmp_path / "bin"
    directory.mkdir()
    script = WRAPPER.read_text(encoding="utf-8")
    assert script.startswith("#!/bin/sh\n")
    wrapper = directory / "git"
    wrapper.write_text(shebang + script.removeprefix("#!/bin/sh"), encoding="utf-8")
    wrapper.chmod(0o755)
    repo = make_repo(tmp_path / "work")
    run_git(repo, "branch", "master")
    run_git(repo, "branch", "feature")
    # A pre-commit hook that leaves a trace: the checks ran.
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text('#!/bin/sh\necho ran >> "$(git rev-parse --git-dir)/hook-ran"\n')
    hook.chmod(0o755)
    remote = tmp_path / "remote.git"
    run_git(tmp_path, "init", "-q", "--bare", str(remote))
    run_git(repo, "remote", "add", "origin", str(remote))
    run_git(repo, "push", "-q", "origin", "main", "master", "feature")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ)
    env.update(PATH=f"{directory}:{env['PATH']}", TMPDIR=str(scratch))
    env.pop(PROTECTED_VARIABLE, None)
    return Guarded(directory, repo, remote, scratch, env)


def new_commit(guarded: Guarded, name: str = "file") -> None:
    (guarded.repo / name).write_text(f"{name}\n", encoding="utf-8")
    run_git(guarded.repo, "add", name)
    run_git(guarded.repo, "commit", "-q", "--no-verify", "-m", name)  # the test's own git


# -- commit ------------------------------------------------------------------------------


def test_a_normal_commit_works_and_runs_the_hooks(guarded: Guarded) -> None:
    before = guarded.head()
    guarded.ok("commit", "--allow-empty", "-m", "normal")
    assert guarded.head() != before
    assert (guarded.repo / ".git" / "hook-ran").read_text() == "ran\n"


@pytest.mark.parametrize(
    "options",
    [
        ["--no-verify"],
        ["-n"],
        ["-an"],
        ["-a", "-n"],
        ["-nm", "x"],
        ["-vn"],
        ["--no-verif"],  # git takes an unambiguous prefix
        ["--no-verify", "-m", "again"],
        ["-n", "--", "README"],
    ],
)
def test_skipping_the_hooks_is_refused(guarded: Guarded, options: list[str]) -> None:
    (guarded.repo / "README").write_text("changed\n", encoding="utf-8")
    message = guarded.refused("commit", "--allow-empty", "-m", "skip", *options)
    assert "skipping the hooks skips the project's checks" in message
    assert not (guarded.repo / ".git" / "hook-ran").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["-m", "n"], "n"),
        (["-mn"], "n"),  # n is -m's value
        (["-m", "-n"], "-n"),
        (["--message", "-n"], "-n"),
        (["-am", "all of it"], "all of it"),
        (["-uno", "-m", "x"], "x"),  # "no" is -u's value (attached only)
        (["-n", "--verify", "-m", "on again"], "on again"),  # the last one wins
    ],
)
def test_values_that_look_like_n_are_not_refused(
    guarded: Guarded, options: list[str], message: str | None
) -> None:
    (guarded.repo / "README").write_text("changed\n", encoding="utf-8")
    result = guarded.not_refused("commit", "--allow-empty", *options)
    if message is not None:
        assert result.returncode == 0, result.stderr
        assert guarded.message() == message
        assert (guarded.repo / ".git" / "hook-ran").exists()


def test_a_pathspec_named_like_an_option_is_not_an_option(guarded: Guarded) -> None:
    (guarded.repo / "-n").write_text("a file\n", encoding="utf-8")
    run_git(guarded.repo, "add", "--", "-n")
    guarded.ok("commit", "-m", "a file named -n", "--", "-n")
    assert guarded.message() == "a file named -n"


def test_arguments_pass_through_exactly(guarded: Guarded) -> None:
    text = 'it\'s "quoted" $HOME `id` \\ * ?\n\nsecond  paragraph\twith a tab'
    guarded.ok("commit", "--allow-empty", "--cleanup=verbatim", "-m", text)
    assert guarded.message() == text.strip("\n")
    guarded.ok("commit", "--allow-empty", "-F", "-", stdin="from standard input\n")
    assert guarded.message() == "from standard input"


def test_global_options_before_the_command(guarded: Guarded) -> None:
    repo = str(guarded.repo)
    guarded.refused("-C", repo, "-c", "user.name=Other", "--no-pager", "commit", "-n", "-m", "x")
    guarded.refused(f"--git-dir={repo}/.git", "--work-tree", repo, "-p", "commit", "--no-verify")
    before = guarded.head()
    guarded.ok("-C", repo, "-c", "user.name=Other", "--no-pager", "commit", "--allow-empty",
               "-m", "x")  # fmt: skip
    assert guarded.head() != before
    abbreviated = guarded.ok("-C", repo, "-c", "core.abbrev=13", "log", "-1", "--format=%h")
    assert abbreviated.stdout == guarded.head()[:13] + "\n"


def test_pointing_the_hooks_elsewhere_is_refused(guarded: Guarded) -> None:
    message = guarded.refused(
        "-c", "core.hooksPath=/dev/null", "commit", "--allow-empty", "-m", "x"
    )
    assert "-c core.hooksPath=/dev/null points the hooks elsewhere" in message
    guarded.refused("-c", "CORE.HOOKSPATH=/tmp", "push", "origin", "main")
    guarded.refused("--config-env=core.hooksPath=HOME", "merge", "feature")


def test_merge_and_pull_refuse_only_the_long_option(guarded: Guarded) -> None:
    guarded.refused("merge", "--no-verify", "feature")
    guarded.refused("pull", "--no-verify", "origin", "main")
    guarded.ok("merge", "-n", "feature")  # merge's -n is --no-stat


# -- aliases -----------------------------------------------------------------------------


def test_an_alias_is_checked_as_what_it_stands_for(guarded: Guarded) -> None:
    run_git(guarded.repo, "config", "alias.pf", "push --force")
    run_git(guarded.repo, "config", "alias.ci", 'commit --allow-empty -m "a -n"')
    run_git(guarded.repo, "config", "alias.skip", "ci -n")  # an alias of an alias
    message = guarded.refused("pf", "origin", "main")
    assert "`git push --force origin main`" in message  # shown as git expands it
    guarded.refused("skip")
    guarded.refused("-c", "alias.nv=commit --no-verify", "nv", "--allow-empty", "-m", "x")
    guarded.ok("ci")
    assert guarded.message() == "a -n"
    # A shell alias is not looked into (documented): it runs as git runs it.
    assert guarded.ok("-c", "alias.hi=!echo hello", "hi").stdout == "hello\n"
    # Not an alias, not a command: git says so.
    assert "is not a git command" in guarded.not_refused("no-such-command").stderr


# -- push --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--force"],
        ["--force", "origin", "main"],
        ["-f", "origin", "main"],
        ["-uf", "origin", "main"],
        ["origin", "main", "--force"],
        ["--forc", "origin", "main"],
        ["--force-with-lease"],
        ["--force-with-lease=main", "origin", "main"],
        ["--force-if-includes", "origin", "main"],
        ["origin", "+main"],
        ["origin", "+feature"],  # any branch
        ["origin", "+HEAD:refs/heads/feature"],
    ],
)
def test_force_pushes_are_refused(guarded: Guarded, args: list[str]) -> None:
    new_commit(guarded)
    message = guarded.refused("push", *args)
    assert "a force push rewrites history others may already have" in message


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["origin", ":main"], "it deletes the protected branch main on the remote"),
        (["origin", ":refs/heads/master"], "protected branch master"),
        (["origin", "--delete", "main"], "protected branch main"),
        (["--delete", "origin", "refs/heads/main"], "protected branch main"),
        (["-d", "origin", "feature", "master"], "protected branch master"),
        (["origin", "main", "-d"], "protected branch main"),
        (["--mirror", "origin"], "it can delete or rewrite branches on the remote"),
        (["--prune", "origin", "refs/heads/*:refs/heads/*"], "can delete or rewrite"),
        (["--no-verify", "origin", "main"], "skipping the hooks"),
    ],
)
def test_pushes_that_delete_or_skip_are_refused(
    guarded: Guarded, args: list[str], why: str
) -> None:
    assert why in guarded.refused("push", *args)


def test_ordinary_pushes_work(guarded: Guarded) -> None:
    new_commit(guarded)
    guarded.ok("push", "-q", "origin", "main")
    assert run_git(guarded.remote, "rev-parse", "main") == guarded.head()
    guarded.ok("push", "-q", "origin", "main:topic")
    guarded.ok("push", "-q", "origin", "--delete", "feature")  # not protected
    guarded.ok("push", "-q", "origin", ":topic")
    assert run_git(guarded.remote, "branch", "--format=%(refname:short)").split() == [
        "main",
        "master",
    ]
    guarded.ok("push", "-q", "--no-verify", "--verify", "origin", "main")  # the last wins
    # -o takes a value: -of is the push option "f", not a force (this remote refuses it).
    assert "push options" in guarded.not_refused("push", "-of", "origin", "main").stderr


# -- branches ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["update-ref", "-d", "refs/heads/main"],
        ["update-ref", "-m", "why", "-d", "refs/heads/master"],
        ["update-ref", "refs/heads/master", "-d"],
        ["update-ref", "-d", "HEAD"],  # HEAD is main
        ["update-ref", "refs/heads/main", ZERO],
        ["branch", "-D", "master"],
        ["branch", "-d", "main"],
        ["branch", "--delete", "--force", "master"],
        ["branch", "-fd", "master"],
    ],
)
def test_deleting_a_protected_branch_is_refused(guarded: Guarded, args: list[str]) -> None:
    message = guarded.refused(*args)
    assert "deletes the protected branch" in message
    assert "and its reflog" in message


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["branch", "-M", "feature", "main"], "replaces the protected branch main"),
        (["branch", "-m", "-f", "feature", "master"], "replaces the protected branch master"),
        (["branch", "-C", "feature", "main"], "replaces the protected branch main"),
        (["branch", "-m", "main", "trunk"], "renames the protected branch main away"),
        (["branch", "--move", "master", "trunk"], "renames the protected branch master away"),
        (["branch", "-M", "trunk"], "renames the protected branch main away"),  # HEAD: main
    ],
)
def test_replacing_or_renaming_a_protected_branch_is_refused(
    guarded: Guarded, args: list[str], why: str
) -> None:
    assert why in guarded.refused(*args)  # which changes nothing


def test_other_renames_and_copies_go_through(guarded: Guarded) -> None:
    guarded.ok("branch", "-m", "feature", "topic")
    guarded.ok("branch", "-c", "main", "copy-of-main")  # main stays
    guarded.ok("branch", "-M", "topic", "release")  # not protected here
    names = run_git(guarded.repo, "branch", "--format=%(refname:short)").split()
    assert names == ["copy-of-main", "main", "master", "release"]


def test_other_branches_can_be_deleted(guarded: Guarded) -> None:
    run_git(guarded.repo, "branch", "other")
    guarded.ok("update-ref", "-d", "refs/heads/feature")
    guarded.ok("branch", "-d", "other")
    guarded.ok("branch", "-d", "-r", "origin/main")  # a remote-tracking branch
    guarded.ok("update-ref", "--no-deref", "refs/heads/moved", "HEAD")
    assert run_git(guarded.repo, "branch", "--format=%(refname:short)").split() == [
        "main",
        "master",
        "moved",
    ]


def test_update_ref_stdin_is_read_and_checked(guarded: Guarded) -> None:
    guarded.refused("update-ref", "--stdin", stdin="delete refs/heads/main\n")
    guarded.refused("update-ref", "--stdin", stdin=f"update refs/heads/master {ZERO}\n")
    guarded.refused("update-ref", "-z", "--stdin", stdin="delete refs/heads/main\0\0")
    guarded.refused("update-ref", "-z", "--stdin", stdin=f"update refs/heads/main\0{ZERO}\0\0")
    # An empty new value is zero to git: it deletes too.
    guarded.refused("update-ref", "--stdin", stdin="update refs/heads/main \n")
    guarded.refused("update-ref", "-z", "--stdin", stdin="update refs/heads/main\0\0\0")
    guarded.refused(
        "update-ref", "--stdin", stdin="delete refs/heads/feature\ndelete refs/heads/master"
    )
    head = guarded.head()
    guarded.ok(
        "update-ref", "--stdin", stdin=f"delete refs/heads/feature\nupdate refs/heads/new {head}\n"
    )
    assert run_git(guarded.repo, "branch", "--format=%(refname:short)").split() == [
        "main",
        "master",
        "new",
    ]
    assert list(guarded.tmp.iterdir()) == []  # the copy of the input is gone


def test_protected_branches_come_from_the_environment(guarded: Guarded) -> None:
    head = guarded.head()
    run_git(guarded.repo, "branch", "release/1.0")
    protect = {PROTECTED_VARIABLE: "release/* feature"}
    refused = guarded.run("update-ref", "-d", "refs/heads/release/1.0", env=protect)
    assert refused.returncode == REFUSED
    assert "protected branch release/1.0" in refused.stderr
    assert guarded.run("push", "origin", ":feature", env=protect).returncode == REFUSED
    assert guarded.run("update-ref", "-d", "refs/heads/master", env=protect).returncode == 0
    assert (
        guarded.run("push", "-q", "origin", ":main", env={PROTECTED_VARIABLE: ""}).returncode == 0
    )
    # A force push is refused whatever the branches.
    assert (
        guarded.run("push", "-f", "origin", "feature", env={PROTECTED_VARIABLE: ""}).returncode == 2
    )
    assert guarded.head() == head


# -- the message, and what the wrapper itself does ----------------------------------------


def test_the_message_says_what_why_and_how_on_the_host(guarded: Guarded) -> None:
    work = {"CLOISTER_CLOISTER": "web-api", "CLOISTER_WORK": str(guarded.repo)}
    result = guarded.run("push", "--force", "origin", "it's main", env=work)
    assert result.returncode == REFUSED
    assert result.stderr.splitlines() == [
        "cloister: the git guardrails refused `git push --force origin 'it'\\''s main'`: a force"
        " push rewrites history others may already have.",
        "cloister: to do it anyway, run it on the host:",
        "  git -C \"$(cloister path web-api)\" push --force origin 'it'\\''s main'",
        "cloister: (this cloister's branches are refs/cloister/web-api/BRANCH there, after"
        " `cloister sync web-api`)",
    ]


def test_the_host_command_keeps_the_directory_and_the_global_options(guarded: Guarded) -> None:
    """Run as suggested, it acts on the same repository (a nested one here), and a word
    the host shell would expand (``~``) is quoted."""
    nested = guarded.repo / "vendor"
    nested.mkdir()
    work = {"CLOISTER_CLOISTER": "web-api", "CLOISTER_WORK": str(guarded.repo)}
    result = guarded.run("-C", "lib", "push", "-f", "origin", "~main", env=work, cwd=nested)
    assert result.returncode == REFUSED
    assert result.stderr.splitlines()[-2] == (
        "  git -C \"$(cloister path web-api)\"'/vendor' '-C' 'lib' push -f origin '~main'"
    )
    elsewhere = guarded.run("push", "-f", "origin", "main", env={"CLOISTER_WORK": "/work"})
    assert elsewhere.stderr.splitlines()[-1] == (
        "cloister: this repository is not under /work: it is not yours on the host"
    )


def test_exit_status_and_input_pass_through(guarded: Guarded) -> None:
    assert guarded.run("rev-parse", "--verify", "-q", "nothing-here").returncode == 1
    assert guarded.run("no-such-command").returncode == 1
    blob = guarded.ok("hash-object", "--stdin", stdin="hello\n").stdout.strip()
    assert blob == run_git(guarded.repo, "hash-object", "README")  # README holds "hello"
    assert guarded.ok("--version").stdout.startswith("git version ")


def test_git_found_on_path_through_a_shell(guarded: Guarded) -> None:
    """As an agent runs it: `git` looked up on PATH by a shell."""
    result = subprocess.run(
        [SH, "-c", "git commit --allow-empty -n -m x; echo status=$?"],
        cwd=guarded.repo,
        env=guarded.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout == "status=2\n"
    assert "the git guardrails refused" in result.stderr


def test_the_wrapper_never_finds_itself(guarded: Guarded, tmp_path: Path) -> None:
    """Its directory on PATH twice, once through a link: the real git still runs."""
    link = tmp_path / "link"
    link.symlink_to(guarded.bin)
    env = {"PATH": f"{link}:{guarded.bin}:{guarded.env['PATH']}"}
    result = subprocess.run(
        [str(link / "git"), "--version"],
        env=guarded.env | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("git version ")


def test_without_a_real_git_it_says_so(guarded: Guarded) -> None:
    result = guarded.run("status", env={"PATH": str(guarded.bin)})
    assert result.returncode == 127
    assert "no git on PATH besides Cloister's guardrails" in result.stderr


def test_the_shipped_file_is_a_posix_shell_script_anyone_may_run() -> None:
    assert WRAPPER.read_text(encoding="utf-8").startswith("#!/bin/sh\n")
    assert WRAPPER.stat().st_mode & 0o555 == 0o555
