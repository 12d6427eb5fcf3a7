"""A cloister's own git directory: branch names, what the export wrote, a sync's plan, push."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cloister_core.owngit import (
    AGENT_REF_PREFIX,
    MAX_REF_LENGTH,
    MAX_REFS,
    ExportError,
    Head,
    SyncPlan,
    agent_ref,
    branch_name_problem,
    parse_head,
    parse_refs,
    plan_sync,
    push_argv,
)
from tests.git_support import GIT, hermetic_git, make_repo, run_git

A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)
SHA256 = "0123456789abcdef" * 4

# --- branch names: git's rules --------------------------------------------------------------


@pytest.fixture(scope="module")
def outside_any_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory git finds no repository from (`--branch` would expand ``@{-1}`` in one)."""
    return tmp_path_factory.mktemp("no-repository")


def git_takes_branch(name: str, where: Path) -> bool:
    """Whether ``git check-ref-format --branch NAME`` accepts *name* (argv, no shell; a
    surrogate-escaped name reaches git as the bytes it stands for)."""
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("GIT_")
    } | {"GIT_CEILING_DIRECTORIES": str(where.parent)}
    result = subprocess.run(
        [GIT, "check-ref-format", "--branch", name],
        cwd=where,
        env=environment,
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


# Deliberate differences, where Cloister is stricter than git:
# * "@": outside a repository `git check-ref-format --branch @` accepts refs/heads/@ (in
#   one, "@" is HEAD); Cloister never takes it for a branch.
# * longer than MAX_REF_LENGTH bytes: git has no bound.
# * bytes that are no UTF-8: git takes them; every line Cloister writes of a branch is
#   text (its log, JSON), so such a branch does not come back.
# (NUL cannot be passed to git in argv at all; Cloister refuses it.)
STRICTER = {"@"}


def stricter(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return name in STRICTER


NAMES = [
    "main",
    "feature/x",
    "release/1.2",
    "a.b",
    "a-",
    "a/b-",
    "a/-b",
    "a@b",
    "@a",
    "a@",
    "{",
    "a{b}",
    "HEADS",
    "head",
    "x/HEAD",
    "HEAD/x",
    "a.lock.b",
    "a.LOCK",
    "lock",
    "café",
    "caf\udcff",  # a byte that is no UTF-8, as the export's output is decoded
    "\udc80",
    "x" * 300,
    "a/" * 10 + "b",
    # refused by both
    "",
    "HEAD",
    "-",
    "--",
    "-a",
    "a..b",
    "..",
    "...",
    "a/.b",
    ".a",
    "a/./b",
    "a/../b",
    "a.",
    "a/b.",
    "a/",
    "/a",
    "a//b",
    "a.lock",
    "a.lock/b",
    "a/b.lock",
    ".lock",
    "a@{b",
    "@{-1}",
    "a b",
    "a\tb",
    "a\nb",
    "a~b",
    "a^b",
    "a:b",
    "a?b",
    "a*b",
    "a[b",
    "a\\b",
    "a\x7fb",
    "a\x01b",
    # stricter
    "@",
]


@pytest.mark.parametrize("name", NAMES)
def test_branch_names_as_git_checks_them(name: str, outside_any_repository: Path) -> None:
    git = git_takes_branch(name, outside_any_repository)
    cloister = branch_name_problem(name) is None
    if stricter(name):
        assert git
        assert not cloister
    else:
        assert cloister == git, (name, git, cloister)


def test_what_git_cannot_be_asked() -> None:
    assert branch_name_problem("a\x00b") is not None
    assert branch_name_problem("x" * MAX_REF_LENGTH) is None
    assert branch_name_problem("x" * (MAX_REF_LENGTH + 1)) is not None
    # The bound is in bytes, as git stores the name.
    assert branch_name_problem("é" * (MAX_REF_LENGTH // 2)) is None
    assert branch_name_problem("é" * (MAX_REF_LENGTH // 2 + 1)) is not None
    assert branch_name_problem("\udcff" * (MAX_REF_LENGTH + 1)) is not None


def test_a_problem_says_what_is_wrong() -> None:
    assert "'..'" in (branch_name_problem("a..b") or "")
    assert ".lock" in (branch_name_problem("a.lock") or "")
    assert "HEAD" in (branch_name_problem("HEAD") or "")
    assert "control character" in (branch_name_problem("a b") or "")


_PIECES = ["a", "b", "z9", ".", "..", "/", "//", "-", "@", "@{", "{", "}", ".lock", "lock"]
_ODD = [*" \t\n~^:?*[\\\x7f\x01", "é", "\udcff", "HEAD"]
_NAME_TEXT = st.lists(st.sampled_from(_PIECES + _ODD), max_size=8).map("".join)
_NAME_BYTES = st.binary(max_size=12).map(lambda raw: raw.decode("utf-8", "surrogateescape"))
_COMPONENTS = st.lists(
    st.text(st.sampled_from("ab.-@{}/lock"), min_size=0, max_size=6), min_size=1, max_size=4
).map("/".join)


@settings(max_examples=300)
@given(name=st.one_of(_NAME_TEXT, _NAME_BYTES, _COMPONENTS).filter(lambda n: "\x00" not in n))
@example(name="a.lock")
@example(name="HEAD")
@example(name="-x")
@example(name="@")
def test_branch_names_never_accepted_when_git_refuses(
    name: str, outside_any_repository: Path
) -> None:
    git = git_takes_branch(name, outside_any_repository)
    cloister = branch_name_problem(name) is None
    if cloister:
        assert git, f"Cloister takes {name!r}, git does not"
    elif not stricter(name):
        assert not git, f"git takes {name!r}, Cloister does not: {branch_name_problem(name)}"


# --- what the export container wrote --------------------------------------------------------


def refs_text(*lines: str, newline: bool = True) -> bytes:
    return ("\n".join(lines) + ("\n" if newline and lines else "")).encode()


def test_parse_refs_good_input() -> None:
    data = refs_text(f"{A} refs/agent/main", f"{B} refs/agent/feature/x")
    expected: tuple[dict[str, str], dict[str, str]] = ({"main": A, "feature/x": B}, {})
    assert parse_refs(data, prefix="refs/agent/", hash_length=40) == expected
    without_newline = refs_text(f"{A} refs/agent/main", f"{B} refs/agent/feature/x", newline=False)
    assert parse_refs(without_newline, prefix="refs/agent/", hash_length=40) == expected
    assert parse_refs(b"", prefix="refs/agent/", hash_length=40) == ({}, {})


def test_parse_refs_sha256() -> None:
    data = refs_text(f"{SHA256} refs/agent/main")
    assert parse_refs(data, prefix="refs/agent/", hash_length=64) == ({"main": SHA256}, {})
    with pytest.raises(ExportError, match="not an object name"):
        parse_refs(data, prefix="refs/agent/", hash_length=40)
    with pytest.raises(ExportError, match="not an object name"):
        parse_refs(refs_text(f"{A} refs/agent/main"), prefix="refs/agent/", hash_length=64)


def test_parse_refs_leaves_out_a_branch_that_is_no_utf8() -> None:
    data = f"{A} refs/agent/caf".encode() + b"\xff" + f"\n{B} refs/agent/".encode() + "é".encode()
    refs, skipped = parse_refs(data, prefix="refs/agent/", hash_length=40)
    assert refs == {"é": B}
    assert skipped == {"'caf\\udcff'": "bytes that are no UTF-8"}
    assert all(name.isascii() for name in skipped)  # safe in any log line


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\n", "not a ref line"),  # an empty line
        (f"{A}refs/agent/main\n".encode(), "not a ref line"),  # no space
        (f"{A}\trefs/agent/main\n".encode(), "not a ref line"),
        (f"{A} refs/heads/main\n".encode(), "a ref outside refs/agent/"),
        (f"{A} refs/agentx/main\n".encode(), "a ref outside"),
        (f"{A}  refs/agent/main\n".encode(), "a ref outside"),  # two spaces
        (f"{A} refs/agent/main\n\n".encode(), "not a ref line"),  # a blank line at the end
        (f"{'g' * 40} refs/agent/main\n".encode(), "not an object name"),
        (f"{A.upper()} refs/agent/main\n".encode(), "not an object name"),
        (f"{A[:39]} refs/agent/main\n".encode(), "not an object name"),
        (f"{A}0 refs/agent/main\n".encode(), "not an object name"),
        (f"{A[:39]}é refs/agent/main\n".encode(), "not an object name"),
        (f" {A} refs/agent/main\n".encode(), "a ref outside"),  # a leading space
    ],
)
def test_parse_refs_bad_lines(data: bytes, message: str) -> None:
    good = f"{B} refs/agent/good\n".encode()
    for text in (data, good + data):
        with pytest.raises(ExportError, match=message):
            parse_refs(text, prefix="refs/agent/", hash_length=40)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("main\x01", "a control character"),
        ("", "an empty"),
        ("a..b", "'@', '@{' or '..'"),
        ("-x", "leading"),
        ("HEAD", "HEAD"),
        ("x.lock", ".lock"),
        ("a b", "space"),
        ("a\x00b", "control character"),
        ("x" * 2000, "overlong"),
    ],
)
def test_a_branch_cloister_does_not_take_is_left_out(name: str, message: str) -> None:
    """Git made it; Cloister does not take it: the others come back, it is named."""
    data = f"{B} refs/agent/good\n{A} refs/agent/{name}\n".encode()
    refs, skipped = parse_refs(data, prefix="refs/agent/", hash_length=40)
    assert refs == {"good": B}
    (why,) = skipped.values()
    assert message.strip("'") in why or message in why


def test_parse_refs_too_many_lines() -> None:
    lines = [f"{A} refs/agent/b{number}" for number in range(MAX_REFS)]
    assert len(parse_refs(refs_text(*lines), prefix="refs/agent/", hash_length=40)[0]) == MAX_REFS
    with pytest.raises(ExportError, match=f"at most {MAX_REFS}"):
        parse_refs(
            refs_text(*lines, f"{A} refs/agent/one-more"), prefix="refs/agent/", hash_length=40
        )


@pytest.mark.parametrize(
    ("data", "head"),
    [
        (b"refs/heads/main\n", Head(branch="main")),
        (b"refs/heads/feature/x", Head(branch="feature/x")),
        # a branch that does not come back: as good as none
        (b"refs/heads/caf\xff\n", Head()),
        (b"refs/heads/\n", Head()),
        (b"refs/heads/a..b\n", Head()),
        (b"refs/heads/HEAD\n", Head()),
        (b"refs/heads/main\nrefs/heads/other\n", Head()),  # a newline: no branch name
        (f"{A}\n".encode(), Head(commit=A)),
        (b"", Head()),
        (b"\n", Head()),
    ],
)
def test_parse_head(data: bytes, head: Head) -> None:
    assert parse_head(data, hash_length=40) == head


def test_parse_head_sha256() -> None:
    assert parse_head(f"{SHA256}\n".encode(), hash_length=64) == Head(commit=SHA256)
    with pytest.raises(ExportError):
        parse_head(f"{A}\n".encode(), hash_length=64)


@pytest.mark.parametrize(
    "data",
    [
        b"garbage\n",
        b"ref: refs/heads/main\n",
        b"refs/tags/v1\n",
        A.upper().encode(),
        A[:39].encode(),
        (A + "\n" + B).encode(),
    ],
)
def test_parse_head_garbage(data: bytes) -> None:
    with pytest.raises(ExportError):
        parse_head(data, hash_length=40)


# --- one sync's plan ------------------------------------------------------------------------


def plan(
    *,
    agent: Mapping[str, str],
    human: Mapping[str, str],
    bases: Mapping[str, str],
    imported: Mapping[str, str] | None = None,
    head: Head | None = None,
    shared: str | None = None,
) -> SyncPlan:
    arguments = {
        "agent": dict(agent),
        "human": dict(human),
        "imported": dict(agent if imported is None else imported),
        "bases": dict(bases),
    }
    copies = {key: dict(value) for key, value in arguments.items()}
    result = plan_sync(
        agent=arguments["agent"],
        human=arguments["human"],
        imported=arguments["imported"],
        bases=arguments["bases"],
        agent_head=head or Head(branch="main"),
        shared_checkout_branch=shared,
    )
    assert arguments == copies  # nothing given is changed
    return result


def test_plan_agent_committed() -> None:
    result = plan(agent={"main": B}, human={"main": A}, bases={"main": A}, imported={"main": A})
    assert result == SyncPlan(imports={"main": B}, bases={"main": A})


def test_plan_nothing_changed() -> None:
    result = plan(agent={"main": A}, human={"main": A}, bases={"main": A})
    assert result == SyncPlan(bases={"main": A})


def test_plan_human_committed_on_a_branch_the_agent_left() -> None:
    result = plan(
        agent={"main": A, "dev": A}, human={"main": A, "dev": B}, bases={"main": A, "dev": A}
    )
    assert result.to_cloister == {"dev": (B, A)}
    assert result.bases == {"main": A, "dev": B}
    assert result.imports == {}
    assert result.removals == []


def test_plan_both_moved_a_branch() -> None:
    result = plan(agent={"dev": C}, human={"dev": B}, bases={"dev": A}, imported={"dev": A})
    assert result.to_cloister == {}
    assert result.imports == {"dev": C}
    assert result.bases == {"dev": A}  # where their work began, still


def test_plan_both_made_the_same_commit() -> None:
    result = plan(agent={"dev": C}, human={"dev": C}, bases={"dev": A})
    assert result.to_cloister == {}
    assert result.bases == {"dev": C}


def test_plan_human_made_a_new_branch() -> None:
    result = plan(agent={"main": A}, human={"main": A, "new": B}, bases={"main": A})
    assert result.to_cloister == {"new": (B, None)}
    assert result.bases == {"main": A, "new": B}


def test_plan_agent_made_a_new_branch() -> None:
    result = plan(agent={"main": A, "wip": B}, human={"main": A}, bases={"main": A}, imported={})
    assert result.imports == {"main": A, "wip": B}
    assert result.to_cloister == {}
    assert result.bases == {"main": A}  # nothing agreed on for wip


def test_plan_both_made_a_branch_of_the_same_name() -> None:
    result = plan(agent={"main": A, "x": B}, human={"main": A, "x": C}, bases={"main": A})
    assert result.to_cloister == {}
    assert "x" not in result.bases


def test_plan_agent_deleted_a_branch() -> None:
    result = plan(
        agent={"main": A},
        human={"main": A, "old": A},
        bases={"main": A, "old": A},
        imported={"main": A, "old": A},
    )
    assert result.removals == ["old"]
    assert result.imports == {}
    assert result.to_cloister == {}  # not brought back: the agent deleted it
    assert result.bases == {"main": A, "old": A}


def test_plan_human_deleted_a_branch() -> None:
    result = plan(
        agent={"main": A, "feat": B},
        human={"main": A},
        bases={"main": A, "feat": A},
        imported={"main": A, "feat": B},
    )
    assert result.imports == {}
    assert result.removals == []
    assert result.to_cloister == {}
    assert result.bases == {"main": A, "feat": A}


def test_plan_a_branch_both_deleted_loses_its_base() -> None:
    result = plan(agent={"main": A}, human={"main": A}, bases={"main": A, "gone": B})
    assert result.bases == {"main": A}


@pytest.mark.parametrize(
    ("shared", "moved"),
    [
        (None, False),  # a worktree cloister: its files are not the human's checkout
        ("other", False),  # the human's checkout has another branch
        ("main", True),  # the agent sees the human's files already
    ],
)
def test_plan_the_checked_out_branch_moved_by_the_human(shared: str | None, moved: bool) -> None:
    result = plan(
        agent={"main": A, "dev": A},
        human={"main": B, "dev": C},
        bases={"main": A, "dev": A},
        head=Head(branch="main"),
        shared=shared,
    )
    assert result.to_cloister.get("dev") == (C, A)  # not checked out: moved either way
    if moved:
        assert result.to_cloister["main"] == (B, A)
        assert result.bases["main"] == B
    else:
        assert "main" not in result.to_cloister
        assert result.bases["main"] == A


def test_plan_a_detached_cloister_has_no_checked_out_branch() -> None:
    result = plan(agent={"main": A}, human={"main": B}, bases={"main": A}, head=Head(commit=A))
    assert result.to_cloister == {"main": (B, A)}


def test_plan_imports_and_removals_are_relative_to_what_is_imported() -> None:
    result = plan(
        agent={"main": A, "x": B, "new": C},
        human={"main": A},
        bases={"main": A},
        imported={"main": A, "x": C, "gone": D, "also-gone": D},
    )
    assert result.imports == {"x": B, "new": C}
    assert result.removals == ["also-gone", "gone"]


def test_agent_ref() -> None:
    assert agent_ref("api", "feature/x") == "refs/cloister/api/feature/x"
    assert agent_ref("api", "").startswith(AGENT_REF_PREFIX)


# --- hostexec git push ----------------------------------------------------------------------

AGENT = {"main": A, "feat": B}
ON_FEAT = Head(branch="feat")


def push(argv: list[str], *, head: Head = ON_FEAT, agent: Mapping[str, str] = AGENT) -> list[str]:
    return push_argv(
        argv, cloister="api", agent_branches=agent, agent_head=head, default_remote="upstream"
    )


MAIN = "refs/cloister/api/main:refs/heads/main"
FEAT = "refs/cloister/api/feat:refs/heads/feat"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["git", "push", "origin", "main"], ["git", "push", "--", "origin", MAIN]),
        (["git", "push"], ["git", "push", "--", "upstream", FEAT]),
        (["git", "push", "origin"], ["git", "push", "--", "origin", FEAT]),
        (["git", "push", "-u", "origin", "HEAD"], ["git", "push", "-u", "--", "origin", FEAT]),
        (["git", "push", "origin", "+main"], ["git", "push", "--", "origin", f"+{MAIN}"]),
        (
            ["git", "push", "origin", "main:other"],
            ["git", "push", "--", "origin", "refs/cloister/api/main:other"],
        ),
        (
            ["git", "push", "origin", "+HEAD:refs/heads/review"],
            ["git", "push", "--", "origin", "+refs/cloister/api/feat:refs/heads/review"],
        ),
        (["git", "push", "origin", "main:"], ["git", "push", "--", "origin", MAIN]),
        (["git", "push", "origin", "refs/heads/main"], ["git", "push", "--", "origin", MAIN]),
        (
            ["git", "push", "origin", "main", "feat", "topic"],
            ["git", "push", "--", "origin", MAIN, FEAT, "topic"],
        ),
        # a branch the agent does not have: the human's, as it was
        (["git", "push", "origin", "topic"], ["git", "push", "--", "origin", "topic"]),
        (["git", "push", "origin", "v1.0"], ["git", "push", "--", "origin", "v1.0"]),
        (
            ["git", "push", "origin", "refs/tags/main"],
            ["git", "push", "--", "origin", "refs/tags/main"],
        ),
        # a deletion by refspec names the remote's ref
        (["git", "push", "origin", ":gone"], ["git", "push", "--", "origin", ":gone"]),
        (["git", "push", "origin", ":main"], ["git", "push", "--", "origin", ":main"]),
        # an option's value is no refspec
        (
            ["git", "push", "-o", "main", "origin", "main"],
            ["git", "push", "-o", "main", "--", "origin", MAIN],
        ),
        (
            ["git", "push", "--push-option", "feat", "origin"],
            ["git", "push", "--push-option", "feat", "--", "origin", FEAT],
        ),
        (
            ["git", "push", "-fo", "main", "origin", "main"],
            ["git", "push", "-fo", "main", "--", "origin", MAIN],
        ),
        (
            ["git", "push", "-omain", "origin", "main"],
            ["git", "push", "-omain", "--", "origin", MAIN],
        ),
        (
            ["git", "push", "--push-option=main", "origin", "main"],
            ["git", "push", "--push-option=main", "--", "origin", MAIN],
        ),
        (
            ["git", "push", "--force-with-lease=main:abc", "origin", "main"],
            ["git", "push", "--force-with-lease=main:abc", "--", "origin", MAIN],
        ),
        # options anywhere, `--` ending them
        (["git", "push", "origin", "main", "-f"], ["git", "push", "-f", "--", "origin", MAIN]),
        (["git", "push", "--", "origin", "main"], ["git", "push", "--", "origin", MAIN]),
        (["git", "push", "origin", "--", "main"], ["git", "push", "--", "origin", MAIN]),
        (["git", "push", "origin", "--", "-f"], ["git", "push", "--", "origin", "-f"]),
        # global options before push
        (
            ["git", "--no-pager", "push", "origin", "main"],
            ["git", "--no-pager", "push", "--", "origin", MAIN],
        ),
        (["/usr/bin/git", "-P", "push"], ["/usr/bin/git", "-P", "push", "--", "upstream", FEAT]),
    ],
)
def test_push_argv(argv: list[str], expected: list[str]) -> None:
    assert push(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["git", "push", "--tags"],
        ["git", "push", "--tags", "origin", "main"],
        ["git", "push", "--all", "origin"],
        ["git", "push", "--mirror", "origin"],
        ["git", "push", "--branches", "origin"],
        # the refspecs of --delete name the remote's refs, which git takes only as they are
        ["git", "push", "-d", "origin", "main"],
        ["git", "push", "--delete", "origin", "main"],
        ["git", "push", "--del", "origin", "main"],
        ["git", "push", "-fd", "origin", "main"],
        ["git", "push", "origin", "--delete", "main"],
        # not a push
        ["git"],
        ["git", "status"],
        ["git", "log", "origin/main"],
    ],
)
def test_push_argv_unchanged(argv: list[str]) -> None:
    assert push(argv) == argv


def test_push_argv_when_the_cloister_is_detached() -> None:
    detached = Head(commit=C)
    # The cloister's commit, never the human's HEAD.
    assert push(["git", "push", "origin", "HEAD:refs/heads/x"], head=detached) == [
        "git",
        "push",
        "--",
        "origin",
        f"{C}:refs/heads/x",
    ]
    # Without a destination git refuses a commit, as the agent's own git refuses to
    # push from a detached HEAD.
    assert push(["git", "push"], head=detached) == ["git", "push", "--", "upstream", C]
    assert push(["git", "push", "origin", "+HEAD"], head=detached) == [
        "git",
        "push",
        "--",
        "origin",
        f"+{C}",
    ]
    # Branches by name are the agent's still.
    assert push(["git", "push", "origin", "main"], head=detached)[-1] == MAIN


def test_push_argv_when_the_cloisters_branch_has_no_commit() -> None:
    unborn = Head(branch="new")
    expected = ["git", "push", "--", "upstream", "refs/cloister/api/new:refs/heads/new"]
    assert push(["git", "push"], head=unborn) == expected
    assert push(["git", "push", "upstream", "HEAD"], head=unborn) == expected


def test_push_argv_with_no_head_known() -> None:
    assert push(["git", "push"], head=Head()) == ["git", "push"]
    assert push(["git", "push", "origin", "main"], head=Head()) == [
        "git",
        "push",
        "--",
        "origin",
        MAIN,
    ]


def test_push_argv_pushes_what_git_should(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rewritten argv, run by real git: the agent's commit reaches the remote, the
    human's own stays home, and what cannot be the agent's fails."""
    hermetic_git(monkeypatch)
    remote = tmp_path / "remote.git"
    run_git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    human = make_repo(tmp_path / "human")
    run_git(human, "remote", "add", "origin", str(remote))
    theirs = run_git(human, "rev-parse", "HEAD")
    ours = run_git(human, "commit-tree", "-p", theirs, "-m", "the agent's", f"{theirs}^{{tree}}")
    run_git(human, "update-ref", "refs/cloister/api/main", ours)
    agent = {"main": ours}

    def run(argv: list[str], head: Head) -> subprocess.CompletedProcess[str]:
        rewritten = push_argv(
            argv, cloister="api", agent_branches=agent, agent_head=head, default_remote="origin"
        )
        return subprocess.run(
            [GIT, *rewritten[1:]], cwd=human, capture_output=True, text=True, check=False
        )

    def remote_ref(name: str) -> str:
        return subprocess.run(
            [GIT, "--git-dir", str(remote), "rev-parse", "--verify", "--quiet", name],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()

    assert run(["git", "push", "origin", "main"], Head(branch="main")).returncode == 0
    assert remote_ref("refs/heads/main") == ours
    assert run(["git", "push"], Head(branch="main")).returncode == 0
    assert run(["git", "push", "origin", "HEAD:refs/heads/x"], Head(commit=ours)).returncode == 0
    assert remote_ref("refs/heads/x") == ours
    # Detached without a destination, or on a branch with no commit: refused by git.
    assert run(["git", "push", "origin", "HEAD"], Head(commit=ours)).returncode != 0
    assert run(["git", "push", "origin", "HEAD:y"], Head(commit=D)).returncode != 0
    assert run(["git", "push", "origin", "HEAD"], Head(branch="unborn")).returncode != 0
    assert remote_ref("refs/heads/y") == ""
    assert remote_ref("refs/heads/unborn") == ""
    # A deletion as the agent wrote it.
    assert run(["git", "push", "-d", "origin", "x"], Head(branch="main")).returncode == 0
    assert remote_ref("refs/heads/x") == ""
    # The human's HEAD (theirs) was never pushed.
    assert remote_ref("refs/heads/main") == ours
