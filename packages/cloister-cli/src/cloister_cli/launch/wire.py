"""What the console script and the command server share: where the server listens, and
how they talk.

Where: one socket per user and installation, ``$XDG_RUNTIME_DIR/cloister/`` or else
``$TMPDIR/cloister-UID/`` (``/tmp`` by default), a directory the user owns and no one
else may enter (mode 0700; anything else there, a symlink or another owner, and the
server is not used). Its name is a checksum of what makes a server the right one for a
caller: the interpreter, this package's directory, Python's version and every
``PYTHON*`` and locale variable (the server is started with the caller's, so a
different ``PYTHONPATH`` or ``LANG`` gets a server of its own). Both ends check the
other (``SO_PEERCRED``): the same user, in the same mount namespace (a process in a
container is refused, even one of the same uid that could reach the socket), and the
caller trusts only a server that runs its own interpreter; the server runs a command
only for a caller that may do and see what it may
(:class:`cloister_cli.launch.server.Credentials`). A cloister never has these
directories mounted
(:class:`cloister_cli.container.cloisters.Forbidden`).

How: length-prefixed :mod:`marshal` records on a Unix stream socket; the request carries
the caller's standard streams as file descriptors (``SCM_RIGHTS``). Both ends are the
same interpreter (the name says so) run by the same user (checked), which is what
marshal asks for.

The console script imports this module before anything else, at every command, so it
uses only what the interpreter loads for nothing or almost: ``_socket`` rather than
:mod:`socket` (whose enums cost milliseconds), marshal rather than :mod:`json`, no
:mod:`pathlib` or :mod:`typing`.
"""

from __future__ import annotations

import _socket
import marshal
import os
import stat
import sys
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

DISABLE_VARIABLE = "CLOISTER_NO_SERVER"
MAX_FDS = 4  # the standard streams and the working directory
MAX_MESSAGE = 4 << 20  # an environment and argv, with room to spare
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux
FD_SIZE = 4  # a C int in SCM_RIGHTS
LENGTH_SIZE = 4


class WireError(Exception):
    """The other end said something that is not this protocol."""


def directories(environ: Mapping[str, str]) -> list[str]:
    """Where a server's socket may be, best first (see the module docstring)."""
    found = []
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        found.append(os.path.join(os.path.normpath(runtime), "cloister"))
    temporary = environ.get("TMPDIR", "")
    # The user's own 0700 directory in it, checked by directory(), never a file of /tmp
    base = temporary if os.path.isabs(temporary) else "/tmp"  # noqa: S108
    found.append(os.path.join(os.path.normpath(base), f"cloister-{os.getuid()}"))
    return found


def reachable_directories(environ: Mapping[str, str]) -> list[str]:
    """Every directory a server of this user may listen in: *environ*'s, and those of an
    environment with systemd's runtime directory and no ``TMPDIR`` (a cloister must
    never see any of them)."""
    default = {"XDG_RUNTIME_DIR": f"/run/user/{os.getuid()}"}
    return list(dict.fromkeys([*directories(environ), *directories(default)]))


def directory(environ: Mapping[str, str]) -> str | None:
    """The user's private directory for the server's socket, made if missing; None when
    no candidate is one only this user can enter, in a directory where only this user
    (or root) can rename it: root run with another user's environment (``sudo -E``)
    never uses that user's directories."""
    uid = os.getuid()
    for candidate in directories(environ):
        try:
            parent = os.lstat(os.path.dirname(candidate))
        except OSError:
            continue
        others_write = parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX
        if not stat.S_ISDIR(parent.st_mode) or parent.st_uid not in (0, uid) or others_write:
            continue
        try:
            os.mkdir(candidate, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue
        try:
            found = os.lstat(candidate)
        except OSError:
            continue
        private = not found.st_mode & 0o077
        if stat.S_ISDIR(found.st_mode) and found.st_uid == uid and private:
            return candidate
    return None


def key(environ: Mapping[str, str]) -> str:
    """What tells one installation's server from another's (see the module docstring):
    64 bits of two checksums, enough to tell apart the installations of one user."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    interpreter = sorted(
        (name, value)
        for name, value in environ.items()
        if name.startswith(("PYTHON", "LC_")) or name == "LANG"
    )
    facts = repr((sys.executable, package, sys.version, interpreter, sys.flags.utf8_mode))
    return f"{zlib.crc32(facts.encode()):08x}{zlib.adler32(facts.encode()):08x}"


def socket_path(environ: Mapping[str, str]) -> str | None:
    """The server's socket for this caller; None when there is no safe place for one."""
    where = directory(environ)
    if where is None:
        return None
    path = os.path.join(where, f"cli-{key(environ)}.sock")
    return path if len(os.fsencode(path)) <= SOCKET_PATH_MAX else None


def peer(connection: _socket.socket) -> tuple[int, int]:
    """The process at the other end of *connection* and its user (``struct ucred``);
    its pid is 0 when it is in a pid namespace this process cannot see into."""
    credentials = connection.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    pid, uid = credentials[0:4], credentials[4:8]
    return int.from_bytes(pid, sys.byteorder), int.from_bytes(uid, sys.byteorder)


def same_mount_namespace(pid: int) -> bool:
    """Whether process *pid* sees the files this process sees: a host process, not one
    in a container (whose mount namespace is its own). Unknown (no pid, no access): no."""
    if pid <= 0:
        return False
    try:
        theirs = os.stat(f"/proc/{pid}/ns/mnt")
        ours = os.stat("/proc/self/ns/mnt")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


class Channel:
    """Records over a connected Unix socket, with file descriptors beside them."""

    def __init__(self, connection: _socket.socket) -> None:
        self.connection = connection
        self._buffer = b""
        self._fds: list[int] = []

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        body = marshal.dumps(message)
        data = len(body).to_bytes(LENGTH_SIZE, "big") + body
        if fds:
            rights = b"".join(fd.to_bytes(FD_SIZE, sys.byteorder) for fd in fds)
            sent = self.connection.sendmsg(
                [data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)]
            )
            data = data[sent:]
        if data:  # sendall of nothing still writes: EPIPE once the other end has answered
            self.connection.sendall(data)

    def receive(self) -> dict[str, Any] | None:
        """The next message (None at the end); its descriptors are in :meth:`take_fds`."""
        if not self._fill(LENGTH_SIZE):
            return None
        length = int.from_bytes(self._buffer[:LENGTH_SIZE], "big")
        if length > MAX_MESSAGE:
            raise WireError(f"a message of {length} bytes (at most {MAX_MESSAGE})")
        self._fill(LENGTH_SIZE + length)  # the buffer is not empty: it ends in an error
        body = self._buffer[LENGTH_SIZE : LENGTH_SIZE + length]
        self._buffer = self._buffer[LENGTH_SIZE + length :]
        try:
            message = marshal.loads(body)  # noqa: S302 - from this user's own process
        except (EOFError, ValueError, TypeError) as error:
            raise WireError(f"not a message: {body[:100]!r} ({error})") from None
        if not isinstance(message, dict):
            raise WireError(f"not a message: {message!r:.100}")
        return message

    def _fill(self, size: int) -> bool:
        """Read until *size* bytes are buffered; False if the connection ends first with
        nothing buffered (an error inside a message)."""
        while len(self._buffer) < size:
            chunk, ancillary, _, _ = self.connection.recvmsg(
                1 << 16, _socket.CMSG_SPACE(MAX_FDS * FD_SIZE)
            )
            for level, kind, data in ancillary:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                    usable = len(data) - len(data) % FD_SIZE
                    self._fds += [
                        int.from_bytes(data[at : at + FD_SIZE], sys.byteorder)
                        for at in range(0, usable, FD_SIZE)
                    ]
            if not chunk:
                if self._buffer:
                    raise WireError(f"the connection ended after {len(self._buffer)} bytes")
                return False
            self._buffer += chunk
        return True

    def take_fds(self) -> list[int]:
        """The descriptors received so far (the caller owns them now)."""
        fds, self._fds = self._fds, []
        return fds

    def close(self) -> None:
        for fd in self.take_fds():
            os.close(fd)
        self.connection.close()
