"""Confining a host command's writes to the project with Linux Landlock.

Why: hostexec runs git on the host, in a project directory the agent can also write.
Between Cloister's checks and the moment git writes, the agent can plant a symlink
inside ``.git`` (``.git/COMMIT_EDITMSG -> ../../.bashrc``); git follows it and
overwrites a file outside the project. Landlock (an unprivileged LSM, Linux >= 5.13)
lets a process restrict its own filesystem access for itself and every descendant,
and it checks the *resolved* file, so a write through such a symlink fails with
``EACCES`` whatever the path looked like.

What is confined: only writes. The ruleset handles every write-like right the running
kernel knows, and grants them again beneath the paths of :class:`WriteConfinement`
(whole hierarchies for directories; only ``WRITE_FILE`` and ``TRUNCATE`` for a single
file) and on ``/dev/null``. Reading, executing, device ioctls (terminals) and the
network are not handled, so they behave as before.

Handled rights, per Landlock ABI version:

* ABI 1: ``WRITE_FILE``, ``REMOVE_DIR``, ``REMOVE_FILE``, ``MAKE_CHAR``, ``MAKE_DIR``,
  ``MAKE_REG``, ``MAKE_SOCK``, ``MAKE_FIFO``, ``MAKE_BLOCK``, ``MAKE_SYM``. Moving or
  linking a file to another directory is always refused under ABI 1 (``EXDEV``), which
  breaks git's object writes (``objects/tmp_obj_*`` renamed into ``objects/xx/``).
* ABI 2 and later: also ``REFER``, granted beneath the writable directories, so moves
  within them work again (and moves out of or into them stay refused).
* ABI 3 and later: also ``TRUNCATE`` (before it, ``truncate(2)`` by path is not
  checked, though opening for writing still is).

Always writable: ``/dev/null`` only. git opens it read-write for its children's stdio
and scripts redirect to it; ssh does the same. Not ``/dev/tty``: hostexec commands run
in a new session without a controlling terminal, where opening it fails with ``ENXIO``
anyway, and elsewhere a confined command has no business writing to a human's
terminal (a caller that wants it can list it in ``writable``). Writes to descriptors
the command inherited (its stdout and stderr pipes) are not checked by Landlock.

Not covered (Landlock does not handle them): changing metadata (``chmod``, ``chown``,
``utimes``, extended attributes) and connecting to existing Unix sockets. Landlock
restricts the calling *thread* and the children it starts afterwards, which is why
this is meant for a ``preexec_fn``: the child is single-threaded between fork and exec.

Paths of :class:`WriteConfinement` are opened (following symlinks) when the ruleset
is built, and rules hold the inodes found then: list paths the agent cannot redirect
(the project directory itself, not something inside it that it could swap).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The unified syscall table (Linux 5.1+) gives these numbers on every architecture but
# alpha; we only vouch for the ones we run on.
_SYSCALL_NUMBERS: dict[str, tuple[int, int, int]] = {
    "x86_64": (444, 445, 446),
    "aarch64": (444, 445, 446),
    "arm64": (444, 445, 446),
}

_PR_SET_NO_NEW_PRIVS = 38
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

# LANDLOCK_ACCESS_FS_* (include/uapi/linux/landlock.h)
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_REMOVE_DIR = 1 << 4
ACCESS_FS_REMOVE_FILE = 1 << 5
ACCESS_FS_MAKE_CHAR = 1 << 6
ACCESS_FS_MAKE_DIR = 1 << 7
ACCESS_FS_MAKE_REG = 1 << 8
ACCESS_FS_MAKE_SOCK = 1 << 9
ACCESS_FS_MAKE_FIFO = 1 << 10
ACCESS_FS_MAKE_BLOCK = 1 << 11
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13  # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3

_WRITE_ACCESS_ABI_1 = (
    ACCESS_FS_WRITE_FILE
    | ACCESS_FS_REMOVE_DIR
    | ACCESS_FS_REMOVE_FILE
    | ACCESS_FS_MAKE_CHAR
    | ACCESS_FS_MAKE_DIR
    | ACCESS_FS_MAKE_REG
    | ACCESS_FS_MAKE_SOCK
    | ACCESS_FS_MAKE_FIFO
    | ACCESS_FS_MAKE_BLOCK
    | ACCESS_FS_MAKE_SYM
)
# The only handled rights a rule on a non-directory may grant (else the kernel's EINVAL).
_FILE_ACCESS = ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE

ALWAYS_WRITABLE: tuple[Path, ...] = (Path("/dev/null"),)


class LandlockError(OSError):
    """Landlock could not be set up; ``errno`` and the message say which step failed."""


@dataclass(frozen=True, slots=True)
class WriteConfinement:
    """Where a confined command may still write: directories (whole) and single files."""

    writable: tuple[Path, ...]


def handled_access(abi: int) -> int:
    """The write-like rights Landlock ABI *abi* knows, as a ``LANDLOCK_ACCESS_FS_*`` mask."""
    access = _WRITE_ACCESS_ABI_1
    if abi >= 2:
        access |= ACCESS_FS_REFER
    if abi >= 3:
        access |= ACCESS_FS_TRUNCATE
    return access


class _RulesetAttr(ctypes.Structure):
    # struct landlock_ruleset_attr, only its first field: the kernel takes any size that
    # covers handled_access_fs and reads the rest (network, scopes) as zero.
    _fields_ = (("handled_access_fs", ctypes.c_uint64),)


class _PathBeneathAttr(ctypes.Structure):
    # struct landlock_path_beneath_attr is packed: 12 bytes.
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


@dataclass(frozen=True, slots=True)
class _Kernel:
    """libc's ``syscall`` and ``prctl``, looked up once (never in a forked child)."""

    syscall: Any
    prctl: Any
    create_ruleset: int
    add_rule: int
    restrict_self: int

    def call(self, number: int, *args: int) -> tuple[int, int]:
        """``syscall(number, *args)``: the result and errno (each argument a C long)."""
        ctypes.set_errno(0)
        result = int(self.syscall(ctypes.c_long(number), *(ctypes.c_long(arg) for arg in args)))
        return result, ctypes.get_errno()


@functools.cache
def _kernel() -> _Kernel | None:
    if sys.platform != "linux":
        return None
    numbers = _SYSCALL_NUMBERS.get(os.uname().machine)
    if numbers is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall, prctl = libc.syscall, libc.prctl
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    prctl.restype = ctypes.c_int
    prctl.argtypes = (ctypes.c_int, *(ctypes.c_ulong,) * 4)
    return _Kernel(syscall, prctl, *numbers)


@functools.cache
def landlock_abi() -> int:
    """The running kernel's Landlock ABI version; 0 when Landlock cannot be used.

    0 covers: not Linux, an architecture we have no syscall numbers for, a kernel built
    without Landlock (``ENOSYS``), Landlock disabled at boot (``EOPNOTSUPP``), and a
    seccomp filter refusing the call (``EPERM``, e.g. inside a container).
    """
    kernel = _kernel()
    if kernel is None:
        return 0
    version, _ = kernel.call(kernel.create_ruleset, 0, 0, _CREATE_RULESET_VERSION)
    return max(version, 0)


def _error(number: int | None, what: str) -> LandlockError:
    number = number or errno.EIO
    return LandlockError(number, f"{what}: {os.strerror(number)}")


def _available() -> tuple[_Kernel, int]:
    abi = landlock_abi()
    kernel = _kernel()
    if abi == 0 or kernel is None:
        raise LandlockError(errno.ENOSYS, "Landlock is not available on this system")
    return kernel, abi


def _add_path_rule(kernel: _Kernel, ruleset_fd: int, path: Path, handled: int) -> None:
    """Grant *handled* beneath directory *path*, the file rights on a file; skip absent."""
    try:
        path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as error:
        raise _error(error.errno, f"cannot open {str(path)!r} for a Landlock rule") from None
    try:
        is_directory = stat.S_ISDIR(os.fstat(path_fd).st_mode)
        rule = _PathBeneathAttr(
            allowed_access=handled if is_directory else handled & _FILE_ACCESS,
            parent_fd=path_fd,
        )
        result, number = kernel.call(
            kernel.add_rule, ruleset_fd, _RULE_PATH_BENEATH, ctypes.addressof(rule), 0
        )
        if result != 0:
            raise _error(number, f"landlock_add_rule for {str(path)!r}")
    finally:
        os.close(path_fd)


def _build_ruleset(kernel: _Kernel, abi: int, confinement: WriteConfinement) -> int:
    """A ruleset fd (close-on-exec) handling writes, with a rule per writable path."""
    handled = handled_access(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    ruleset_fd, number = kernel.call(
        kernel.create_ruleset, ctypes.addressof(attr), ctypes.sizeof(attr), 0
    )
    if ruleset_fd < 0:
        raise _error(number, "landlock_create_ruleset")
    try:
        for path in (*confinement.writable, *ALWAYS_WRITABLE):
            _add_path_rule(kernel, ruleset_fd, path, handled)
    except BaseException:
        os.close(ruleset_fd)
        raise
    return ruleset_fd


def _restrict_self(kernel: _Kernel, ruleset_fd: int) -> None:
    """Enforce *ruleset_fd* on the calling thread: only syscalls, nothing to import."""
    ctypes.set_errno(0)
    if kernel.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _error(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    result, number = kernel.call(kernel.restrict_self, ruleset_fd, 0)
    if result != 0:
        raise _error(number, "landlock_restrict_self")


def confine_writes(confinement: WriteConfinement) -> None:
    """Restrict the calling thread (and what it starts) to writing where *confinement* says.

    Irreversible. Meant for a process about to exec a command; see :func:`preexec` for
    doing it between fork and exec. Raises :class:`LandlockError` when Landlock is
    unavailable or a step fails, so a caller can refuse to run unconfined.
    """
    kernel, abi = _available()
    ruleset_fd = _build_ruleset(kernel, abi, confinement)
    try:
        _restrict_self(kernel, ruleset_fd)
    finally:
        os.close(ruleset_fd)


def preexec(confinement: WriteConfinement) -> Callable[[], None]:
    """A ``preexec_fn`` that confines the child's writes to *confinement*.

    Everything that can fail on paths (opening them, building the ruleset) happens here,
    in the parent, where a :class:`LandlockError` says what went wrong; the child then
    makes two syscalls, with nothing to import or look up after fork. If those fail, the
    child raises and the command does not run (``subprocess`` reports an exception in
    ``preexec_fn``). The ruleset fd stays open in the parent, close-on-exec, until the
    returned callable is garbage collected; one callable may serve several spawns.
    """
    kernel, abi = _available()
    ruleset_fd = _build_ruleset(kernel, abi, confinement)

    def confine() -> None:
        _restrict_self(kernel, ruleset_fd)

    weakref.finalize(confine, os.close, ruleset_fd)
    return confine
