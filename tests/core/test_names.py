"""Project, branch, cloister and container names."""

from __future__ import annotations

import hashlib

import pytest

from cloister_core.errors import CloisterNameError
from cloister_core.names import (
    MAX_NAME_LENGTH,
    SHORTENED_LENGTH,
    cloister_name,
    project_name_from_path,
    sanitize_branch,
    validate_cloister_name,
    validate_name,
)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/home/me/repos/my-api", "my-api"),
        ("/home/me/repos/my-api/", "my-api"),
        ("/home/me/My API", "my-api"),
        ("/src/Foo_Bar.v2", "foo_bar.v2"),
        ("/src/.dotfiles", "dotfiles"),
        ("/src/--weird--", "weird"),
        ("/src/" + "x" * 80, "x" * 63),
    ],
)
def test_project_name_from_path(path: str, name: str) -> None:
    assert project_name_from_path(path) == name


@pytest.mark.parametrize("path", ["/", "/src/...", "/src/日本語"])
def test_project_name_from_path_refuses(path: str) -> None:
    with pytest.raises(CloisterNameError, match="-p NAME"):
        project_name_from_path(path)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../etc", "a/b", "A", "-x", "_x", ".x", "x y", "x" * 64, "x\x00"]
)
def test_validate_name_refuses(name: str) -> None:
    with pytest.raises(CloisterNameError):
        validate_name(name)


@pytest.mark.parametrize("name", ["a", "my-api", "a.b_c-d", "0x", "x" * 63])
def test_validate_name_accepts(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    ("branch", "directory"),
    [
        ("main", "main"),
        ("feature/auth", "feature-auth"),
        ("Fix_Bug#12", "fix_bug-12"),
        ("a//b", "a-b"),
        ("../../etc", "etc"),
        ("user/ünïcode", "user-n-code"),
    ],
)
def test_sanitize_branch(branch: str, directory: str) -> None:
    assert sanitize_branch(branch) == directory


@pytest.mark.parametrize("branch", ["", "///", "\x00x", "..."])
def test_sanitize_branch_refuses(branch: str) -> None:
    with pytest.raises(CloisterNameError):
        sanitize_branch(branch)


def test_cloister_names() -> None:
    assert cloister_name("my-api") == "my-api"
    assert cloister_name("my-api", "feature/auth") == "my-api-feature-auth"
    with pytest.raises(CloisterNameError, match="reserved"):
        cloister_name("guardian")


# The branch: 70 characters with its project, too long for a name before.
LONG = "feature/PROJ-1234-implement-oauth-login-flow-for-mobile-clients"
EIGHTY = "feature/PROJ-1234-implement-oauth-login-flow-for-mobile-clients-and-the-web-also"


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def test_a_long_branch_gets_a_shortened_name_with_the_hash_of_the_whole_branch() -> None:
    name = cloister_name("my-api", LONG)
    assert len(f"my-api-{LONG}") == 70
    assert name == f"my-api-feature-proj-1234-implement-{digest(LONG)}"
    # Its container, cloister-<8 hex>-<name>, is a DNS label on its network still.
    assert len(f"cloister-01234567-{name}") <= MAX_NAME_LENGTH
    # The same on every run (no salt, no state): computed again, and as written above.
    assert cloister_name("my-api", LONG) == name


def test_a_branch_longer_than_a_name_gets_a_shortened_directory() -> None:
    assert len(EIGHTY) == 80
    directory = sanitize_branch(EIGHTY)
    # Cut where a word ends, near the limit.
    assert directory == f"feature-proj-1234-implement-oauth-login-flow-for-{digest(EIGHTY)}"
    # The cloister's name has the same hash: the directory and the name go together.
    assert cloister_name("my-api", EIGHTY).endswith(f"-{digest(EIGHTY)}")


def test_two_long_branches_with_a_common_start_get_two_names() -> None:
    first, second = f"{EIGHTY}-one", f"{EIGHTY}-two"
    assert first[:MAX_NAME_LENGTH] == second[:MAX_NAME_LENGTH]
    assert cloister_name("my-api", first) != cloister_name("my-api", second)
    assert sanitize_branch(first) != sanitize_branch(second)


def test_a_name_that_fits_is_not_shortened() -> None:
    branch = "b" * (MAX_NAME_LENGTH - len("my-api-"))
    assert cloister_name("my-api", branch) == f"my-api-{branch}"
    assert sanitize_branch("x" * MAX_NAME_LENGTH) == "x" * MAX_NAME_LENGTH


def test_a_long_word_is_cut_where_the_limit_is() -> None:
    branch = "x" * 100
    assert sanitize_branch(branch) == "x" * (MAX_NAME_LENGTH - 9) + f"-{digest(branch)}"


def test_a_long_project_is_cut_too_and_named_in_the_hash() -> None:
    """A project's name may take 63 characters itself: it is cut so the branch still
    shows, and two projects that share the cut start keep two names."""
    one, two = "p" * 60 + "one", "p" * 60 + "two"
    first = cloister_name(one, "long-branch")
    assert len(first) <= SHORTENED_LENGTH
    assert "-long-branch-" in first
    assert first.startswith("p" * 20)
    assert first.endswith(f"-{digest('long-branch', one)}")
    assert first != cloister_name(two, "long-branch")


@pytest.mark.parametrize(
    "branch",
    [
        EIGHTY,
        "a" * 200,
        "x/" * 60,
        "feature/" + "-" * 70 + "end",
        "Ünïcödé/" * 20,
        "a" * 54 + "." * 20 + "b",
    ],
)
@pytest.mark.parametrize("project", ["a", "my-api", "p" * 23, "p" * 24, "q" * 63])
def test_shortened_names_are_valid_cloister_names(project: str, branch: str) -> None:
    name = cloister_name(project, branch)
    assert name == validate_cloister_name(name)
    assert len(name) <= SHORTENED_LENGTH
    assert validate_name(sanitize_branch(branch)) == sanitize_branch(branch)
    assert name.startswith(project[:20])
