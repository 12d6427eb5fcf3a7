"""File operations below a directory the agent rearranges: no link is ever followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloister_core import beneath


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A root with ``a/b/``, and a directory outside it holding the human's files."""
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "link").symlink_to("/etc/hostname")
    (outside / "file").write_text("human\n", encoding="utf-8")
    return root, outside


def swap_for_link(directory: Path, target: Path) -> None:
    directory.rename(directory.with_name(directory.name + ".moved"))
    directory.symlink_to(target)


def test_a_link_on_the_way_is_never_followed(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    swap_for_link(root / "a" / "b", outside)
    # O_DIRECTORY|O_NOFOLLOW on a link: ELOOP or, as Linux says it, ENOTDIR.
    with pytest.raises(OSError, match=r"Not a directory|Too many levels"):
        beneath.unlink_special(root, "a/b/link")
    assert (outside / "link").is_symlink()
    assert beneath.lstat_below(root, "a/b/file") is None
    assert beneath.read_regular(root, "a/b/file") is None
    with pytest.raises(OSError, match=r"Not a directory|Too many levels"):
        beneath.replace_file(root, "a/b/file", "agent\n")
    assert (outside / "file").read_text(encoding="utf-8") == "human\n"
    assert not beneath.is_real_directory(root, "a/b")
    assert beneath.readlink_below(root, "a/b/link") is None


def test_climbing_out_is_refused(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    with pytest.raises(OSError, match="not a path below"):
        beneath.unlink_special(root, "a/../../outside/link")


def test_links_and_fifos_are_removed_files_are_not(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "a" / "link").symlink_to("/etc/hostname")
    os.mkfifo(root / "a" / "fifo")
    (root / "a" / "file").write_text("x\n", encoding="utf-8")
    assert beneath.readlink_below(root, "a/link") == "/etc/hostname"
    assert beneath.unlink_special(root, "a/link") == "/etc/hostname"
    assert beneath.unlink_special(root, "a/fifo") == ""
    assert beneath.unlink_special(root, "a/file") is None
    assert (root / "a" / "file").exists()
    assert beneath.unlink_regular(root, "a/file") is True
    assert not (root / "a" / "file").exists()


def test_replace_and_read(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    beneath.replace_file(root, "a/b/alternates", "/ref/objects\n")
    assert beneath.read_regular(root, "a/b/alternates") == "/ref/objects\n"
    assert [path.name for path in (root / "a" / "b").iterdir()] == ["alternates"]
    assert beneath.is_real_directory(root, "a/b")
