"""File operations below a directory the agent rearranges: no link is ever followed."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloister_core import beneath
from tests.tree_support import DEPTH, deep_tree


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


# -- whole trees: walked and removed without recursion, never through a link ----------------

NOBODY = 65534


@contextlib.contextmanager
def few_descriptors(limit: int = 128) -> Iterator[None]:
    """Far fewer descriptors than the tree has levels: one held per level would run out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, soft), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def unprivileged() -> Iterator[Path]:
    """A scratch directory where permission bits hold: as root (CI), nobody's, worked in
    with nobody's uid; root ignores a read-only directory, the agent's uid does not."""
    scratch = Path(tempfile.mkdtemp())
    try:
        if os.geteuid() != 0:
            yield scratch
            return
        os.chown(scratch, NOBODY, NOBODY)
        os.seteuid(NOBODY)
        try:
            yield scratch
        finally:
            os.seteuid(0)
    finally:
        beneath.remove_tree(scratch)


def test_walk_is_os_walk_with_links_among_the_files(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "a" / "file").write_text("x", encoding="utf-8")
    (root / "a" / "to-outside").symlink_to(outside)
    (root / "a" / "b" / "to-file").symlink_to(outside / "file")
    walked = {path: (sorted(dirs), sorted(files)) for path, dirs, files in beneath.walk(root)}
    assert walked == {
        str(root): (["a"], []),
        str(root / "a"): (["b"], ["file", "to-outside"]),
        str(root / "a" / "b"): ([], ["to-file"]),
    }
    assert list(beneath.walk(root / "a" / "to-outside")) == []  # a link at the top too


def test_walk_prunes_what_the_caller_removes_and_skips_what_it_cannot_list(
    tree: tuple[Path, Path],
) -> None:
    root, _ = tree
    (root / "c" / "d").mkdir(parents=True)
    seen = []
    for path, dirs, _ in beneath.walk(root):
        seen.append(Path(path).relative_to(root).as_posix())
        dirs[:] = [name for name in dirs if name != "a"]
    assert sorted(seen) == [".", "c", "c/d"]
    errors: list[OSError] = []
    assert list(beneath.walk(root / "missing", onerror=errors.append)) == []
    assert [error.errno for error in errors] == [errno.ENOENT]


def test_a_deep_tree_is_walked_and_removed_with_few_descriptors(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with deep_tree(root) as bottom, few_descriptors():
        walked = list(beneath.walk(root))
        assert len(walked) == DEPTH + 1
        assert walked[-1] == (str(bottom), [], ["f"])
        beneath.remove_tree(root)
    assert not root.exists()
    assert tmp_path.is_dir()


def test_links_are_unlinked_never_followed(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    with deep_tree(root / "a", depth=50) as bottom:
        (root / "a" / "to-outside").symlink_to(outside)
        (bottom / "to-outside").symlink_to(outside)
        (bottom / "to-file").symlink_to(outside / "file")
        link = root.parent / "link-to-outside"
        link.symlink_to(outside)
        beneath.remove_tree(link)  # the link itself goes, not what it points to
        assert not link.is_symlink()
        beneath.remove_tree(root)
        assert not root.exists()
    assert sorted(path.name for path in outside.iterdir()) == ["file", "link"]
    assert (outside / "file").read_text(encoding="utf-8") == "human\n"


def test_a_directory_swapped_for_a_link_midway_is_not_entered(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = tree
    clear = beneath._Removal.clear

    def swapping(removal: beneath._Removal, fd: int) -> list[str]:
        listed = clear(removal, fd)
        if "b" in listed:  # listed as a directory; a link by the time it is entered
            (root / "a" / "b").rename(outside.parent / "b-moved")
            (root / "a" / "b").symlink_to(outside)
        return listed

    monkeypatch.setattr(beneath._Removal, "clear", swapping)
    beneath.remove_tree(root)
    assert not root.exists()
    assert sorted(path.name for path in outside.iterdir()) == ["file", "link"]


def test_a_parent_moved_meanwhile_is_not_taken_for_the_one_on_the_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # root/a/{b/c, x}; while c is emptied it is moved into a look-alike of a outside
    # (elsewhere/b/c, beside elsewhere/x): `..` now leads there, and climbing it blindly
    # would take elsewhere for a and remove its x.
    root = tmp_path / "root"
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "f").write_text("x", encoding="utf-8")
    (root / "a" / "x").mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "b").mkdir(parents=True)
    (elsewhere / "x").mkdir()
    (elsewhere / "x" / "keep").write_text("human\n", encoding="utf-8")
    c = (root / "a" / "b" / "c").stat().st_ino
    clear = beneath._Removal.clear

    def moving(removal: beneath._Removal, fd: int) -> list[str]:
        if os.fstat(fd).st_ino == c:
            (root / "a" / "b" / "c").rename(elsewhere / "b" / "c")
        return sorted(clear(removal, fd), reverse=True)  # visited in order: b before x

    monkeypatch.setattr(beneath._Removal, "clear", moving)
    beneath.remove_tree(root)
    assert not root.exists()
    assert (elsewhere / "x" / "keep").read_text(encoding="utf-8") == "human\n"


def test_read_only_directories_are_made_writable_and_removed() -> None:
    with unprivileged() as scratch:
        root = scratch / "root"
        with deep_tree(root, depth=30) as bottom:
            (bottom / "empty").mkdir()
            (bottom / "empty").chmod(0)
            for directory in (bottom, bottom.parent.parent, root / "d", root):
                directory.chmod(0o500)
            (root / "d" / "d").chmod(0o100)  # searchable only: not even listed
            beneath.remove_tree(root)
            assert not root.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a directory the remover does not own")
def test_what_cannot_be_removed_is_an_error_and_the_rest_goes() -> None:
    with unprivileged() as scratch:
        root = scratch / "root"
        (root / "mine").mkdir(parents=True)
        (root / "mine" / "f").write_text("x", encoding="utf-8")
        os.seteuid(0)
        (root / "theirs").mkdir()  # root's: nobody can neither unlink in it nor chmod it
        (root / "theirs" / "f").write_text("x", encoding="utf-8")
        os.seteuid(NOBODY)
        with pytest.raises(PermissionError) as raised:
            beneath.remove_tree(root)
        assert raised.value.filename == str(root / "theirs" / "f")
        assert sorted(path.name for path in root.iterdir()) == ["theirs"]
        os.seteuid(0)
        beneath.remove_tree(root / "theirs")
        os.seteuid(NOBODY)


def test_a_missing_path_is_fine(tmp_path: Path) -> None:
    beneath.remove_tree(tmp_path / "missing")
    beneath.remove_tree(tmp_path / "missing" / "below")
    file = tmp_path / "file"
    file.write_text("x", encoding="utf-8")
    beneath.remove_tree(file)
    assert not file.exists()


def test_a_bounded_read_refuses_what_is_no_small_regular_file(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"12345")
    assert beneath.read_file_bounded(small, 5) == b"12345"
    with pytest.raises(beneath.TooLargeError):
        beneath.read_file_bounded(small, 4)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(beneath.NotRegularError):  # opened without blocking: no hang
        beneath.read_file_bounded(fifo, 5)
    link = tmp_path / "link"
    link.symlink_to(small)
    assert beneath.read_file_bounded(link, 5) == b"12345"
    with pytest.raises(OSError, match="Too many levels"):
        beneath.read_file_bounded(link, 5, follow_links=False)


# -- one file, relative to a directory descriptor ------------------------------------------


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A directory holding ``small`` (5 bytes), a FIFO, a link to ``small`` and a
    subdirectory, with a descriptor of it."""
    (tmp_path / "small").write_bytes(b"12345")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to("small")
    (tmp_path / "sub").mkdir()
    fd = beneath.open_dir(tmp_path)
    try:
        yield tmp_path, fd
    finally:
        os.close(fd)


def test_read_at_reads_a_regular_file_up_to_its_bound(directory: tuple[Path, int]) -> None:
    _, fd = directory
    data, info = beneath.read_at(fd, "small", 5)
    assert (data, info.st_size) == (b"12345", 5)
    data, info = beneath.read_at(fd, "small", 3)  # more than the bound: the size says so
    assert (data, info.st_size) == (b"123", 5)


def test_read_at_never_follows_a_link_nor_blocks_on_a_fifo(directory: tuple[Path, int]) -> None:
    _, fd = directory
    with pytest.raises(OSError, match="Too many levels") as caught:
        beneath.read_at(fd, "link", 5)
    assert caught.value.errno == errno.ELOOP
    with pytest.raises(beneath.NotRegularError):  # opened without blocking: no hang
        beneath.read_at(fd, "fifo", 5)
    with pytest.raises(beneath.NotRegularError):
        beneath.read_at(fd, "sub", 5)


def test_a_file_swapped_after_lstat_is_not_read(directory: tuple[Path, int]) -> None:
    root, fd = directory
    seen = os.lstat("small", dir_fd=fd)
    (root / "sub" / "kept").hardlink_to(root / "small")  # its inode number is not reused
    (root / "other").write_bytes(b"the human's")
    (root / "other").replace(root / "small")
    with pytest.raises(beneath.ChangedError, match="changed while being read"):
        beneath.read_at(fd, "small", 100, expect=seen)
    (root / "small").unlink()
    os.mkfifo(root / "small")  # a FIFO swapped in: refused as changed, never blocking
    with pytest.raises(beneath.ChangedError):
        beneath.read_at(fd, "small", 100, expect=seen)


def test_open_dir_refuses_a_link(directory: tuple[Path, int]) -> None:
    root, fd = directory
    (root / "to-sub").symlink_to("sub")
    with pytest.raises(OSError, match=r"Not a directory|Too many levels"):
        beneath.open_dir("to-sub", dir_fd=fd)
    with pytest.raises(OSError, match=r"Not a directory|Too many levels"):
        beneath.open_dir(root / "to-sub")
    os.close(beneath.open_dir("sub", dir_fd=fd))


def test_open_regular_hands_a_checked_descriptor(directory: tuple[Path, int]) -> None:
    root, fd = directory
    opened = beneath.open_regular("small", dir_fd=fd, expect=os.lstat(root / "small"))
    try:
        assert os.read(opened, 10) == b"12345"
        assert os.get_inheritable(opened) is False
    finally:
        os.close(opened)
    with pytest.raises(OSError, match="Too many levels"):
        beneath.open_regular(root / "link")
    os.close(beneath.open_regular(root / "link", follow_links=True))


def test_move_out_moves_a_file_and_never_what_a_link_points_to(
    directory: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root, fd = directory
    aside = tmp_path_factory.mktemp("aside")
    beneath.move_out(fd, "small", aside / "deep" / "small")
    assert (aside / "deep" / "small").read_bytes() == b"12345"
    assert not (root / "small").exists()
    beneath.move_out(fd, "link", aside / "link")  # the link itself, not its target
    assert (aside / "link").readlink() == Path("small")


def test_move_out_copies_across_filesystems(
    directory: tuple[Path, int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root, fd = directory
    aside = tmp_path_factory.mktemp("aside")

    def other_filesystem(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "rename", other_filesystem)
    beneath.move_out(fd, "small", aside / "small")
    assert (aside / "small").read_bytes() == b"12345"
    assert not (root / "small").exists()
    with pytest.raises(beneath.NotRegularError):  # a FIFO is never opened blocking
        beneath.move_out(fd, "fifo", aside / "fifo")
    assert (root / "fifo").exists()
