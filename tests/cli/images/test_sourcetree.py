"""Finding the Cloister source tree that images and the compose file are built from."""

from __future__ import annotations

from pathlib import Path

import pytest

import cloister_cli
from cloister_cli.images.sourcetree import (
    SourceTreeError,
    find_workspace,
    is_source_tree,
    source_tree,
)

CHECKOUT = Path(__file__).resolve().parents[3]


def fake_tree(root: Path) -> Path:
    """The three things that make a directory a source tree."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "uv.lock").write_text("version = 1\n", encoding="utf-8")
    (root / "images").mkdir()
    (root / "compose").mkdir()
    return root


def test_this_checkout_is_a_source_tree() -> None:
    assert is_source_tree(CHECKOUT)


@pytest.mark.parametrize("missing", ["uv.lock", "images", "compose"])
def test_a_tree_needs_all_three(tmp_path: Path, missing: str) -> None:
    root = fake_tree(tmp_path / "tree")
    gone = root / missing
    if gone.is_dir():
        gone.rmdir()
    else:
        gone.unlink()
    assert not is_source_tree(root)


def test_uv_lock_must_be_a_file(tmp_path: Path) -> None:
    root = fake_tree(tmp_path / "tree")
    (root / "uv.lock").unlink()
    (root / "uv.lock").mkdir()
    assert not is_source_tree(root)


def test_find_workspace_searches_upwards(tmp_path: Path) -> None:
    root = fake_tree(tmp_path / "tree")
    deep = root / "packages" / "x" / "src"
    deep.mkdir(parents=True)
    assert find_workspace(deep) == root
    assert find_workspace(root) == root


def test_find_workspace_takes_the_nearest(tmp_path: Path) -> None:
    outer = fake_tree(tmp_path / "outer")
    inner = fake_tree(outer / "vendor" / "inner")
    assert find_workspace(inner / "images") == inner


def test_find_workspace_without_a_tree(tmp_path: Path) -> None:
    with pytest.raises(SourceTreeError) as caught:
        find_workspace(tmp_path)
    assert str(caught.value) == (
        f"no Cloister source tree (uv.lock, images/, compose/) at or above {tmp_path}"
    )


def test_the_environment_variable_wins(tmp_path: Path) -> None:
    root = fake_tree(tmp_path / "elsewhere")
    assert source_tree({"CLOISTER_SOURCE_DIR": str(root)}) == root


@pytest.mark.parametrize("value", ["{tmp}/missing", "{tmp}", "{tmp}/tree/images"])
def test_the_environment_variable_must_name_a_tree(tmp_path: Path, value: str) -> None:
    fake_tree(tmp_path / "tree")
    explicit = value.format(tmp=tmp_path)
    with pytest.raises(SourceTreeError) as caught:
        source_tree({"CLOISTER_SOURCE_DIR": explicit})
    assert str(caught.value) == f"CLOISTER_SOURCE_DIR={explicit!r} is not a Cloister source tree"


def test_an_empty_variable_is_unset(tmp_path: Path) -> None:
    assert source_tree({"CLOISTER_SOURCE_DIR": ""}) == CHECKOUT


def test_found_from_the_package_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install: the tree the package lives in, wherever the command runs."""
    package = Path(cloister_cli.__file__).resolve().parent
    assert package.is_relative_to(CHECKOUT)
    monkeypatch.chdir(fake_tree(tmp_path / "project"))
    assert source_tree({}) == CHECKOUT


@pytest.fixture
def installed_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the package were installed from a wheel into site-packages."""
    from cloister_cli.images import sourcetree

    site = tmp_path / "venv" / "site-packages" / "cloister_cli"
    site.mkdir(parents=True)
    monkeypatch.setattr(sourcetree, "__file__", str(site / "sourcetree.py"))


@pytest.mark.usefixtures("installed_elsewhere")
def test_never_found_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project an agent wrote can look like a source tree: its templates would render,
    its Dockerfiles build and its build backend run on the host."""
    root = fake_tree(tmp_path / "project")
    (root / "compose" / "sub").mkdir()
    monkeypatch.chdir(root / "compose" / "sub")
    with pytest.raises(SourceTreeError, match="cannot find the Cloister source tree"):
        source_tree({})


@pytest.mark.usefixtures("installed_elsewhere")
def test_no_tree_anywhere_says_what_to_do() -> None:
    with pytest.raises(SourceTreeError) as caught:
        source_tree({})
    message = str(caught.value)
    assert message.startswith("cannot find the Cloister source tree to build images from")
    assert "uv tool install --editable ./packages/cloister-cli" in message
    assert "CLOISTER_SOURCE_DIR" in message
