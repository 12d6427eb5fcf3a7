"""Project, branch, cloister and container names."""

from __future__ import annotations

import pytest

from cloister_core.errors import CloisterNameError
from cloister_core.names import (
    cloister_name,
    project_name_from_path,
    sanitize_branch,
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
    with pytest.raises(CloisterNameError, match="at most 63"):
        cloister_name("p" * 60, "long-branch")
