"""File operations below a directory the agent rearranges: no link is ever followed."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloister_core import beneath
from tests.filesystem_support import other_filesystem
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


def _move(fd: int, name: str, destination: Path, limit: int = 1 << 20) -> None:
    """move_out of what *name* is now (the caller's lstat)."""
    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    beneath.move_out(fd, name, destination, expect=info, limit=limit)


def test_move_out_moves_a_file_and_never_what_a_link_points_to(
    directory: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root, fd = directory
    aside = tmp_path_factory.mktemp("aside")
    _move(fd, "small", aside / "deep" / "small")
    assert (aside / "deep" / "small").read_bytes() == b"12345"
    assert not (root / "small").exists()
    _move(fd, "link", aside / "link")  # the link itself, not its target
    assert (aside / "link").readlink() == Path("small")
    _move(fd, "fifo", aside / "fifo", limit=0)  # renamed: no limit to a rename
    assert stat.S_ISFIFO(os.lstat(aside / "fifo").st_mode)


def test_move_out_moves_nothing_but_the_entry_the_caller_looked_at(
    directory: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root, fd = directory
    aside = tmp_path_factory.mktemp("aside")
    seen = os.lstat(root / "small")
    (root / "sub" / "kept").hardlink_to(root / "small")  # its inode number is not reused
    (root / "other").write_bytes(b"the human's")
    (root / "other").replace(root / "small")
    with pytest.raises(beneath.ChangedError, match="'small' changed since it was looked at"):
        beneath.move_out(fd, "small", aside / "small", expect=seen, limit=100)
    assert (root / "small").read_bytes() == b"the human's"
    assert not (aside / "small").exists()


@pytest.fixture
def far(tmp_path: Path) -> Iterator[Path]:
    """A directory on another filesystem than ``tmp_path``'s (its files are moved into
    ``tmp_path``, so a rename cannot do)."""
    with other_filesystem(tmp_path) as made:
        yield made


@pytest.fixture
def far_fd(far: Path) -> Iterator[int]:
    fd = beneath.open_dir(far)
    try:
        yield fd
    finally:
        os.close(fd)


def test_move_out_copies_a_file_across_filesystems(far: Path, far_fd: int, tmp_path: Path) -> None:
    (far / "small").write_bytes(b"12345")
    assert far.stat().st_dev != tmp_path.stat().st_dev
    _move(far_fd, "small", tmp_path / "aside" / "small", limit=5)
    assert (tmp_path / "aside" / "small").read_bytes() == b"12345"
    assert not (far / "small").exists()


def test_move_out_refuses_a_sparse_file_across_filesystems(
    far: Path, far_fd: int, tmp_path: Path
) -> None:
    """An agent's ``truncate -s 1T``: copied, every hole would be written out."""
    with (far / "big").open("wb") as file:
        file.truncate(256 * 1024 * 1024)
    with pytest.raises(beneath.SparseError, match=r"'big' is a sparse file of 268435456 bytes"):
        _move(far_fd, "big", tmp_path / "aside" / "big", limit=1 << 40)
    assert (far / "big").stat().st_size == 256 * 1024 * 1024  # left where it was
    assert not (tmp_path / "aside" / "big").exists()
    assert issubclass(beneath.SparseError, beneath.TooLargeError)


def test_move_out_refuses_a_file_over_its_limit_across_filesystems(
    far: Path, far_fd: int, tmp_path: Path
) -> None:
    (far / "data").write_bytes(b"x" * 1000)
    with pytest.raises(beneath.TooLargeError, match="'data' is 1000 bytes, over 999"):
        _move(far_fd, "data", tmp_path / "data", limit=999)
    assert (far / "data").stat().st_size == 1000
    assert not (tmp_path / "data").exists()
    _move(far_fd, "data", tmp_path / "data", limit=1000)  # at the limit: copied
    assert (tmp_path / "data").read_bytes() == b"x" * 1000


def test_move_out_stops_a_file_that_grows_past_its_limit(
    far: Path, far_fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size looked at is not trusted for the copy: more than the limit is no copy."""
    (far / "data").write_bytes(b"x" * 1000)
    real_fstat = os.fstat

    def smaller(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_size == 1000:
            fields = list(info)
            fields[stat.ST_SIZE] = 10  # what it was when looked at, before it grew
            return os.stat_result(fields)
        return info

    monkeypatch.setattr(os, "fstat", smaller)
    with pytest.raises(beneath.TooLargeError, match="'data' grew over 100 bytes"):
        _move(far_fd, "data", tmp_path / "data", limit=100)
    assert not (tmp_path / "data").exists()  # no part of it
    assert (far / "data").stat().st_size == 1000


def test_move_out_moves_a_fifo_and_a_link_across_filesystems(
    far: Path, far_fd: int, tmp_path: Path
) -> None:
    """Neither holds more than its link text: made again there, as a rename would move
    them (and a FIFO is never opened, so never waited on)."""
    os.mkfifo(far / "fifo", 0o640)
    (far / "link").symlink_to("/etc/hostname")
    _move(far_fd, "fifo", tmp_path / "aside" / "fifo", limit=0)
    _move(far_fd, "link", tmp_path / "aside" / "link", limit=0)
    assert stat.S_ISFIFO(os.lstat(tmp_path / "aside" / "fifo").st_mode)
    assert (tmp_path / "aside" / "link").readlink() == Path("/etc/hostname")
    assert not os.path.lexists(far / "fifo")
    assert not os.path.lexists(far / "link")


def test_move_out_leaves_a_socket_or_a_directory_across_filesystems(
    far: Path, far_fd: int, tmp_path: Path
) -> None:
    (far / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(far / "socket"))
        for name in ("socket", "dir"):
            with pytest.raises(beneath.NotRegularError, match=f"{name!r} is no file, link or FIFO"):
                _move(far_fd, name, tmp_path / "aside" / name)
            assert os.path.lexists(far / name)
            assert not os.path.lexists(tmp_path / "aside" / name)


def test_move_out_copies_only_the_file_looked_at_across_filesystems(
    far: Path, far_fd: int, tmp_path: Path
) -> None:
    (far / "small").write_bytes(b"12345")
    seen = os.lstat(far / "small")
    (far / "kept").hardlink_to(far / "small")  # its inode number is not reused
    (far / "other").write_bytes(b"the human's")
    (far / "other").replace(far / "small")
    with pytest.raises(beneath.ChangedError):
        beneath.move_out(far_fd, "small", tmp_path / "small", expect=seen, limit=100)
    assert (far / "small").read_bytes() == b"the human's"
    assert not (tmp_path / "small").exists()


def test_move_out_copies_on_exdev_only(
    directory: tuple[Path, int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Another filesystem is known by the rename's EXDEV; any other failure is raised."""
    root, fd = directory
    aside = tmp_path_factory.mktemp("aside")

    def other_filesystem(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "rename", other_filesystem)
    _move(fd, "small", aside / "small")
    assert (aside / "small").read_bytes() == b"12345"
    assert not (root / "small").exists()

    def denied(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "rename", denied)
    with pytest.raises(PermissionError):
        _move(fd, "link", aside / "link")
    assert (root / "link").is_symlink()
