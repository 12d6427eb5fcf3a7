"""Where the command server listens, and the records the console script and it exchange."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from cloister_cli.launch import wire


def test_the_socket_is_in_a_private_directory_under_the_runtime_directory(
    short_tmp: Path,
) -> None:
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    path = wire.socket_path({"XDG_RUNTIME_DIR": str(runtime), "TMPDIR": str(short_tmp)})
    assert path is not None
    assert Path(path).parent == runtime / "cloister"
    assert (runtime / "cloister").stat().st_mode & 0o777 == 0o700
    assert Path(path).name.startswith("cli-")


def test_a_directory_others_may_enter_is_not_used(short_tmp: Path) -> None:
    runtime = short_tmp / "run"
    (runtime / "cloister").mkdir(parents=True)
    (runtime / "cloister").chmod(0o755)
    path = wire.socket_path({"XDG_RUNTIME_DIR": str(runtime), "TMPDIR": str(short_tmp)})
    assert path is not None
    assert Path(path).parent == short_tmp / f"cloister-{os.getuid()}"  # the fallback


def test_a_symlink_is_not_a_private_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"cloister-{os.getuid()}").symlink_to(elsewhere)
    assert wire.socket_path({"TMPDIR": str(tmp_path)}) is None


def test_a_directory_others_may_rename_it_in_is_not_used(short_tmp: Path) -> None:
    shared = short_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, and not sticky: anyone may rename in it
    assert wire.socket_path({"TMPDIR": str(shared)}) is None
    shared.chmod(0o1777)  # sticky, as /tmp is: only the owner renames its own
    assert wire.socket_path({"TMPDIR": str(shared)}) is not None


def test_a_directory_in_another_users_directory_is_not_used(short_tmp: Path) -> None:
    """Root run with a user's environment (sudo -E) must not make its socket where that
    user could rename it."""
    if os.getuid() != 0:
        pytest.skip("a directory of another user's is made by root")
    theirs = short_tmp / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 4242, -1)
    assert wire.directory({"TMPDIR": str(theirs)}) is None
    assert not (theirs / "cloister-0").exists()


def test_the_directories_a_cloister_must_never_see_include_the_defaults() -> None:
    found = wire.reachable_directories({"TMPDIR": "/elsewhere", "XDG_RUNTIME_DIR": "/run/x"})
    uid = os.getuid()
    assert found == [
        "/run/x/cloister",
        f"/elsewhere/cloister-{uid}",
        f"/run/user/{uid}/cloister",
        f"/tmp/cloister-{uid}",
    ]


def test_the_mount_namespace_is_this_processs_or_unknown() -> None:
    assert wire.same_mount_namespace(os.getpid())
    assert not wire.same_mount_namespace(0)
    assert not wire.same_mount_namespace(2**22 + 1)  # above any pid


def test_no_private_place_means_no_server(tmp_path: Path) -> None:
    taken = tmp_path / f"cloister-{os.getuid()}"
    taken.write_text("a file", encoding="utf-8")
    assert wire.socket_path({"XDG_RUNTIME_DIR": "relative", "TMPDIR": str(tmp_path)}) is None


def test_a_socket_path_too_long_for_the_kernel_is_not_used(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    assert wire.socket_path({"TMPDIR": str(deep)}) is None


def test_the_key_tells_pythonpaths_apart_and_nothing_else() -> None:
    plain = wire.key({"HOME": "/a"})
    assert wire.key({"HOME": "/b", "CLOISTER_DATA_DIR": "/x"}) == plain
    assert wire.key({"PYTHONPATH": "/somewhere"}) != plain
    assert len(plain) == 16


def channels() -> tuple[wire.Channel, wire.Channel]:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return wire.Channel(left), wire.Channel(right)


def test_a_message_and_its_descriptors_cross(tmp_path: Path) -> None:
    sender, receiver = channels()
    shared = tmp_path / "shared"
    shared.write_text("seen through the descriptor", encoding="utf-8")
    fd = os.open(shared, os.O_RDONLY)
    try:
        sender.send({"argv": ["start", "-d"], "umask": 0o022}, fds=[fd])
        sender.send({"pid": 42})
        assert receiver.receive() == {"argv": ["start", "-d"], "umask": 0o022}
        (passed,) = receiver.take_fds()
        assert os.read(passed, 100) == b"seen through the descriptor"
        os.close(passed)
        assert receiver.receive() == {"pid": 42}
        assert receiver.take_fds() == []
        sender.close()
        assert receiver.receive() is None
    finally:
        os.close(fd)
        receiver.close()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ((5).to_bytes(4, "big") + b"\xff\xff\xff\xff\xff", "not a message"),
        ((1 << 30).to_bytes(4, "big"), "a message of 1073741824 bytes"),
        ((100).to_bytes(4, "big") + b"short", "ended after"),
        (b"\x00\x00", "ended after 2 bytes"),
    ],
    ids=["garbage", "too long", "cut in the body", "cut in the length"],
)
def test_what_is_not_the_protocol_is_an_error(raw: bytes, error: str) -> None:
    sender, receiver = channels()
    sender.connection.sendall(raw)
    sender.close()
    with pytest.raises(wire.WireError, match=error):
        receiver.receive()
    receiver.close()


def test_a_record_that_is_not_a_mapping_is_refused() -> None:
    import marshal

    sender, receiver = channels()
    body = marshal.dumps(["a", "list"])
    sender.connection.sendall(len(body).to_bytes(4, "big") + body)
    with pytest.raises(wire.WireError, match="not a message"):
        receiver.receive()
    sender.close()
    receiver.close()


def test_the_peer_is_this_user() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert wire.peer(left) == (os.getpid(), os.getuid())
