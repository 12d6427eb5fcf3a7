"""Driving the real ``cloister`` command as a person would, for the acceptance tests.

Everything goes through the console script installed in the uv environment, run as a
subprocess in a repository's directory, with ``CLOISTER_CONFIG_DIR`` and
``CLOISTER_DATA_DIR`` pointing at temporary directories; what happens inside a
cloister is seen with ``docker exec``, the way a user (or an agent) would see it.
Every subprocess is bounded by a timeout.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import grp
import io
import ipaddress
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

import docker
import docker.errors
import pytest
from ruamel.yaml import YAML

from cloister_core import stack
from cloister_core.paths import CloisterPaths
from tests.waiting import free_port, wait_until

CLI_TIMEOUT = 120.0  # a start may build the slim image on a cold machine
GUARDIAN_TIMEOUT = 900.0  # the first guardian start may build the service images
EXEC_TIMEOUT = 60.0
SLIM_IMAGE = "cloister-slim:latest"
BASE_IMAGE = "debian:bookworm-slim"
PROXY_ADDRESS = "cloister-guardian-proxy:3128"
# Denied by the module's config: a CONNECT to it with a token the proxy accepts is
# answered 403 at once (no DNS, no upstream), one the proxy refuses is answered 407.
DENIED_HOST = "denied.cloister.test"
CONNECT_ACCEPTED = "403"
CONNECT_REFUSED = "407"

# Another host user (see host_user): a system account kept between sessions; its home
# and everything it writes in a temporary directory of its own, removed at the end.
TEST_USER = "cloistertest"
USER_TIMEOUT = 60.0
DOCKER_SOCKET = Path("/var/run/docker.sock")
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# What a user's commands take from the tests' environment: the engine, the source tree,
# the locale, and how this machine reaches the package index (uv builds the images).
PASSED_THROUGH = frozenset(
    {
        "DOCKER_HOST",
        "CLOISTER_SOURCE_DIR",
        "LC_ALL",
        "TZ",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "UV_INDEX",
        "UV_INDEX_URL",
        "UV_DEFAULT_INDEX",
        "UV_EXTRA_INDEX_URL",
        "UV_FIND_LINKS",
        "UV_NATIVE_TLS",
        "UV_INSECURE_HOST",
        "UV_HTTP_TIMEOUT",
        "UV_OFFLINE",
    }
)
PROXY_VARIABLES = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"})
# Root's own: the lock a session holds while it runs tests as TEST_USER, and the ACL
# entries it gave (written down as given; a killed session's are taken back by the next).
GRANTS_DIR = Path("/run/cloister-tests")
SESSION_WAIT = 300.0  # how long host_user waits for another session's lock


def cloister_executable() -> Path:
    """The ``cloister`` console script of the environment running the tests."""
    candidate = Path(sys.executable).parent / "cloister"
    if candidate.exists():
        return candidate
    found = shutil.which("cloister")
    if found is None:
        raise FileNotFoundError("no `cloister` console script (run through `uv run`)")
    return Path(found)


def docker_executable() -> str:
    found = shutil.which("docker")
    if found is None:
        raise FileNotFoundError("the docker command is not installed")
    return found


def git_executable() -> str:
    found = shutil.which("git")
    if found is None:
        raise FileNotFoundError("the git command is not installed")
    return found


def uv_executable() -> str | None:
    """The uv running the tests (``$UV``, which ``uv run`` sets: a pyenv shim on PATH
    would need root's pyenv), else the one on PATH; ``cloister`` builds images with it."""
    given = os.environ.get("UV")
    if given and Path(given).is_file():
        return given
    return shutil.which("uv")


def setpriv_executable() -> str:
    """util-linux's ``setpriv``: runs a command as another uid, gid and groups."""
    found = shutil.which("setpriv")
    if found is None:
        raise FileNotFoundError("setpriv (util-linux) is not installed")
    return found


def squash(text: str) -> str:
    """Whitespace runs as one space: rich wraps long lines at the terminal width."""
    return re.sub(r"\s+", " ", text)


# --- the CLI ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """One finished ``cloister`` (or ``docker``/``git``) command."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\n(exit {self.returncode}, {self.seconds:.2f}s)\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_command(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = CLI_TIMEOUT,
    stdin: str | None = None,
) -> Result:
    """*argv* to its end; its input is *stdin*, else nothing."""
    started = time.perf_counter()
    completed = subprocess.run(
        argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
    )
    return Result(
        tuple(argv),
        completed.returncode,
        completed.stdout,
        completed.stderr,
        time.perf_counter() - started,
    )


@dataclass
class CloisterCli:
    """``cloister`` with its own config and data directories (one per test module).

    With a *user* (see :func:`host_user`), every command runs as that user, with its
    environment, and *root* with the config and data directories are that user's.
    """

    root: Path
    config_dir: Path = field(init=False)
    data_dir: Path = field(init=False)
    executable: Path = field(default_factory=cloister_executable)
    home: Path | None = None  # a home of its own (the docker CLI keeps the real ~/.docker)
    user: HostUser | None = None  # run as this user (its own home, not *home*)

    def __post_init__(self) -> None:
        self.config_dir = self.root / "config"
        self.data_dir = self.root / "data"
        if self.user is not None:
            for directory in (self.config_dir, self.data_dir):
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.user.adopt(self.root)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ) if self.user is None else self.user.environment()
        env.update(
            CLOISTER_CONFIG_DIR=str(self.config_dir),
            CLOISTER_DATA_DIR=str(self.data_dir),
            COLUMNS="200",  # rich wraps at 80 columns when not on a terminal
            NO_COLOR="1",
        )
        if self.home is not None and self.user is None:
            env.setdefault("DOCKER_CONFIG", str(Path.home() / ".docker"))
            env["HOME"] = str(self.home)
        return env

    @property
    def instance(self) -> stack.Instance:
        """Its guardian on the engine: its user and data directory."""
        uid = os.getuid() if self.user is None else self.user.uid
        return stack.Instance.of(CloisterPaths(self.config_dir, self.data_dir), uid)

    def container(self, name: str) -> str:
        """Cloister *name*'s container (and its network): ``cloister-<id>-<name>``."""
        return self.instance.cloister(name)

    def command(self, *args: str) -> list[str]:
        """The argv of ``cloister ARGS`` (through ``setpriv`` when run as another user)."""
        argv = [str(self.executable), *args]
        return argv if self.user is None else self.user.command(argv)

    def write_config(self, text: str) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "config.yaml").write_text(text, encoding="utf-8")
        if self.user is not None:
            self.user.adopt(self.config_dir)

    def write_project_config(self, project: str, text: str) -> None:
        path = self.config_dir / "projects" / f"{project}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if self.user is not None:
            self.user.adopt(self.config_dir)

    def run(self, *args: str, cwd: Path | None = None, timeout: float = CLI_TIMEOUT) -> Result:
        """``cloister ARGS`` in *cwd* (default: the temporary root); never raises on failure."""
        return run_command(self.command(*args), cwd=cwd or self.root, env=self.env, timeout=timeout)

    def ok(self, *args: str, cwd: Path | None = None, timeout: float = CLI_TIMEOUT) -> Result:
        """``cloister ARGS`` that must succeed."""
        result = self.run(*args, cwd=cwd, timeout=timeout)
        assert result.returncode == 0, result.describe()
        return result

    def fails(self, *args: str, cwd: Path | None = None) -> Result:
        """``cloister ARGS`` that must fail (exit status 1: a clean error, no traceback)."""
        result = self.run(*args, cwd=cwd)
        assert result.returncode == 1, result.describe()
        assert "Traceback" not in result.output, result.describe()
        return result

    def json(self, *args: str, cwd: Path | None = None) -> Any:
        return self.ok(*args, cwd=cwd).json()

    # -- what the CLI left on disk ---------------------------------------------------

    def token_file(self, name: str) -> Path:
        return self.config_dir / "tokens" / name

    def token(self, name: str) -> str:
        document = json.loads(self.token_file(name).read_text(encoding="utf-8"))
        token: str = document["token"]
        return token

    def worktree(self, project: str, branch_dir: str) -> Path:
        return self.data_dir / "worktrees" / project / branch_dir

    # -- cloisters -------------------------------------------------------------------

    def listing(self) -> dict[str, dict[str, Any]]:
        """``cloister list --json``, by name."""
        return {item["name"]: item for item in self.json("list", "--json")}

    def mine(self) -> list[str]:
        """Running cloisters that work in a directory of this test module."""
        roots = (str(self.root), str(self.root.resolve()))
        return [
            name
            for name, item in self.listing().items()
            if any(str(item["path"]).startswith(root) for root in roots)
        ]


# --- another host user --------------------------------------------------------------------
#
# CI runs as root, so its cloisters run as uid 0. To run the real CLI as a non-root user
# instead, ``host_user`` makes (or reuses) the system account TEST_USER, gives it the
# Docker engine and a way to the tools, and yields a HostUser; ``CloisterCli(root,
# user=...)`` then runs every command as that user.
#
# Docker: the user joins the group that owns the engine's socket (Debian's ``docker``,
# as docker.io sets it up), the way a person is given Docker: the socket's mode and
# group stay as they are. A socket of group root (gid 0) gets instead an ACL entry for
# that user alone (joining root's group would open every root:root 0660 file to it).
#
# Tools: the uv environment's interpreter may live where others cannot go (pyenv's, under
# /root, mode 0700), and so may uv and the compose plugin. Wherever the user lacks search
# permission on a directory on the way, it gets an ACL entry of its own with search (x)
# only, no listing, for the session: nobody else gains anything, and every entry is taken
# back at the end. A tool whose own files others cannot read is not changed: the check
# then skips (fails in CI) and says so.
#
# Files: the user's home and the directories it works in are in a temporary directory
# of its own (HostUser.scratch, removed at the end), not in pytest's: pytest keeps its
# tree 0700 and takes group and other bits off /tmp/pytest-of-<user> whenever a session
# starts, which would take an ACL entry's effect away from a session still running.

_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = (
    0x01,
    0x02,
    0x04,
    0x08,
    0x10,
    0x20,
)
_ACL_NO_ID = 0xFFFFFFFF
_ACL_HEADER = struct.Struct("<I")
_ACL_ENTRY = struct.Struct("<HHI")  # tag, permission bits, uid or gid
SEARCH = 0o1  # x, on a directory
READ_WRITE = 0o6


@dataclass(frozen=True)
class HostUser:
    """A Unix user of this machine that commands run as, with a home of its own.

    A command switches with ``setpriv --reuid --regid --init-groups`` (util-linux): this
    uid and gid, the groups ``/etc/group`` gives the user, and no capability left; it sees
    the environment of :meth:`environment`, never the tests' own.
    """

    name: str
    uid: int
    gid: int
    scratch: Path  # its own temporary directory: its home, its TMPDIR, its mktemp()s

    @property
    def owner(self) -> str:
        """``UID:GID``, as ``docker inspect`` shows a container's user."""
        return f"{self.uid}:{self.gid}"

    @property
    def home(self) -> Path:
        return self.scratch / "home"

    @property
    def tmp(self) -> Path:
        """Its TMPDIR."""
        return self.scratch / "tmp"

    def mktemp(self, prefix: str) -> Path:
        """A new empty directory of this user's (0700), in its scratch directory."""
        return self.adopt(Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=self.scratch)))

    @property
    def groups(self) -> frozenset[int]:
        """Its groups as ``/etc/group`` says now (what ``--init-groups`` gives a command)."""
        return frozenset(os.getgrouplist(self.name, self.gid))

    def command(self, argv: Sequence[str]) -> list[str]:
        """*argv* as this user."""
        return [
            setpriv_executable(),
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--init-groups",
            "--",
            *argv,
        ]

    def environment(self) -> dict[str, str]:
        """What its commands see: HOME and TMPDIR its own; PATH with the uv environment's
        bin first, then uv's, docker's and git's directories and the system's; of the
        tests' environment only PASSED_THROUGH and the proxy variables."""
        directories = [str(cloister_executable().parent)]
        for tool in (uv_executable(), docker_executable(), git_executable()):
            if tool is not None:
                directories.append(str(Path(tool).parent))
        directories.extend(SYSTEM_PATH)
        env = {
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "USER": self.name,
            "LOGNAME": self.name,
            "SHELL": "/bin/sh",
            "PATH": ":".join(dict.fromkeys(directories)),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
        }
        for key, value in os.environ.items():
            if key in PASSED_THROUGH or key.upper() in PROXY_VARIABLES:
                env[key] = value
        return env

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = USER_TIMEOUT,
        stdin: str | None = None,
    ) -> Result:
        """*argv* as this user in *cwd* (default: its home), with *env* (default: its
        :meth:`environment`); never raises on failure."""
        return run_command(
            self.command(argv),
            cwd=cwd or self.home,
            env=self.environment() if env is None else env,
            timeout=timeout,
            stdin=stdin,
        )

    def adopt(self, path: Path) -> Path:
        """*path* and everything under it made this user's (see :func:`chown_tree`)."""
        chown_tree(path, self.uid, self.gid)
        return path

    def owns(self, path: Path) -> bool:
        """Whether *path* (not a link's target) has this user's uid and gid."""
        info = path.lstat()
        return (info.st_uid, info.st_gid) == (self.uid, self.gid)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """``chown -R --no-dereference UID:GID PATH``: links are changed, never followed."""
    os.lchown(path, uid, gid)
    if path.is_symlink() or not path.is_dir():
        return
    for directory, subdirectories, files in os.walk(path):
        for name in (*subdirectories, *files):
            os.lchown(Path(directory) / name, uid, gid)


@dataclass(frozen=True, order=True)
class AclEntry:
    """One entry of a POSIX access ACL (Linux's ``system.posix_acl_access`` xattr).

    Ordered as the kernel wants them stored: by tag, then by uid or gid.
    """

    tag: int
    id: int
    perm: int


def read_acl(path: Path) -> bytes | None:
    """The access ACL of *path* as stored, or None when its mode is all it has."""
    try:
        return os.getxattr(path, _ACL_XATTR)
    except OSError as error:
        if error.errno in (errno.ENODATA, errno.EOPNOTSUPP):
            return None
        raise


def acl_entries(path: Path) -> list[AclEntry]:
    """The access ACL of *path*; its mode's three entries when it has no ACL."""
    raw = read_acl(path)
    if raw is None:
        mode = path.stat().st_mode
        return [
            AclEntry(_ACL_USER_OBJ, _ACL_NO_ID, (mode >> 6) & 0o7),
            AclEntry(_ACL_GROUP_OBJ, _ACL_NO_ID, (mode >> 3) & 0o7),
            AclEntry(_ACL_OTHER, _ACL_NO_ID, mode & 0o7),
        ]
    (version,) = _ACL_HEADER.unpack_from(raw)
    if version != _ACL_VERSION:
        raise OSError(errno.EINVAL, f"unknown POSIX ACL version {version}", str(path))
    return [
        AclEntry(tag, number, perm)
        for tag, perm, number in _ACL_ENTRY.iter_unpack(raw[_ACL_HEADER.size :])
    ]


def permits(path: Path, uid: int, groups: frozenset[int], want: int) -> bool:
    """Whether a non-root *uid* with *groups* has the *want* bits on *path* (links
    followed), by the kernel's rule for its mode and access ACL."""
    info = path.stat()
    entries = acl_entries(path)

    def granted(entry: AclEntry, mask: int = 0o7) -> bool:
        return entry.perm & mask & want == want

    if info.st_uid == uid:
        return any(granted(e) for e in entries if e.tag == _ACL_USER_OBJ)
    mask = next((e.perm for e in entries if e.tag == _ACL_MASK), 0o7)
    named = [e for e in entries if e.tag == _ACL_USER and e.id == uid]
    if named:
        return granted(named[0], mask)
    matched = [
        e
        for e in entries
        if (e.tag == _ACL_GROUP_OBJ and info.st_gid in groups)
        or (e.tag == _ACL_GROUP and e.id in groups)
    ]
    if matched:
        return any(granted(e, mask) for e in matched)
    return any(granted(e) for e in entries if e.tag == _ACL_OTHER)


@dataclass(frozen=True)
class AclGrant:
    """An entry given to one user in one file's access ACL, and what to put back."""

    path: Path
    mode: int
    original: bytes | None

    def revert(self) -> None:
        """The file's ACL (or its lack of one) and its mode as they were (if it is still
        there)."""
        try:
            if self.original is None:
                with contextlib.suppress(OSError):
                    os.removexattr(self.path, _ACL_XATTR)
            else:
                os.setxattr(self.path, _ACL_XATTR, self.original)
            self.path.chmod(self.mode)
        except FileNotFoundError:
            pass

    def to_json(self) -> dict[str, Any]:
        original = None if self.original is None else base64.b64encode(self.original).decode()
        return {"path": str(self.path), "mode": self.mode, "original": original}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> AclGrant:
        original = document["original"]
        return cls(
            Path(document["path"]),
            int(document["mode"]),
            None if original is None else base64.b64decode(original),
        )


def grant_acl(path: Path, uid: int, want: int) -> AclGrant:
    """Give *uid* the *want* bits on *path* by an ACL entry of its own (``setfacl -m
    u:UID:...``, without needing the acl package); every other entry stays, and the mask
    widens only by *want*. What was there is returned, to put back."""
    info = path.stat()
    original = read_acl(path)
    entries = acl_entries(path)
    before = next((e.perm for e in entries if e.tag == _ACL_USER and e.id == uid), 0)
    old_mask = next((e.perm for e in entries if e.tag == _ACL_MASK), None)
    entries = [
        e for e in entries if e.tag != _ACL_MASK and not (e.tag == _ACL_USER and e.id == uid)
    ]
    entries.append(AclEntry(_ACL_USER, uid, before | want))
    mask = 0
    for entry in entries:
        if entry.tag in (_ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP):
            mask |= entry.perm
    if old_mask is not None:
        mask = old_mask | want
    entries.append(AclEntry(_ACL_MASK, _ACL_NO_ID, mask))
    raw = _ACL_HEADER.pack(_ACL_VERSION) + b"".join(
        _ACL_ENTRY.pack(e.tag, e.perm, e.id) for e in sorted(entries)
    )
    os.setxattr(path, _ACL_XATTR, raw)
    return AclGrant(path, stat.S_IMODE(info.st_mode), original)


@dataclass
class AccessGrants:
    """The ACL entries given to one user for a session, taken back in reverse order.

    Each is written down in *record* as soon as given, so that entries a killed session
    could not take back are taken back by the next (see :meth:`recorded`).
    """

    user: HostUser
    record: Path
    made: list[AclGrant] = field(default_factory=list)

    @classmethod
    def recorded(cls, user: HostUser, record: Path) -> AccessGrants:
        """The grants *record* lists (those of a session that did not end cleanly)."""
        made: list[AclGrant] = []
        if record.exists():
            made = [AclGrant.from_json(item) for item in json.loads(record.read_text())]
        return cls(user, record, made)

    def _write(self) -> None:
        partial = self.record.with_name(f".{self.record.name}.tmp")
        partial.write_text(json.dumps([grant.to_json() for grant in self.made]))
        partial.replace(self.record)

    def allow(self, path: Path, want: int) -> None:
        """The user gets *want* on *path*, by an entry of its own if it lacks them."""
        if not permits(path, self.user.uid, self.user.groups, want):
            self.made.append(grant_acl(path.resolve(), self.user.uid, want))
            self._write()

    def reach(self, path: Path) -> None:
        """The user may search every directory on the way to *path* (and *path* itself,
        a directory), as written and with its links resolved."""
        seen: set[Path] = set()
        for target in dict.fromkeys((path.absolute(), path.resolve())):
            chain = [*reversed(target.parents), *([target] if target.is_dir() else [])]
            for directory in chain:
                real = directory.resolve()
                if real not in seen:
                    seen.add(real)
                    self.allow(real, SEARCH)

    def revert(self) -> None:
        while self.made:
            self.made.pop().revert()
            self._write()


def system_user(name: str) -> pwd.struct_passwd:
    """The account *name*, made if missing: a locked system account with a group of its
    own, no home on disk and no login shell (kept: the next session uses it again)."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    made = run_command(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "Cloister tests, the CLI as a non-root user",
            name,
        ],
        timeout=USER_TIMEOUT,
    )
    try:  # another session may have made it meanwhile (then useradd failed)
        return pwd.getpwnam(name)
    except KeyError:
        raise AssertionError(f"could not make user {name}:\n{made.describe()}") from None


def docker_socket() -> Path | None:
    """The engine's Unix socket: DOCKER_HOST's when it names one, else the default one;
    None for an engine over TCP or SSH (no file to give access to)."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        return DOCKER_SOCKET
    if host.startswith("unix://"):
        return Path(host.removeprefix("unix://"))
    return None


def give_docker(user: HostUser, grants: AccessGrants) -> None:
    """Let *user* use the engine's socket: join its group, or (a socket of root's group,
    or one its group may not use) an ACL entry for the session."""
    path = docker_socket()
    if path is None:
        return
    grants.reach(path.parent)
    info = path.stat()
    if info.st_gid != 0 and not permits(path, user.uid, user.groups, READ_WRITE):
        with contextlib.suppress(KeyError):
            group = grp.getgrgid(info.st_gid).gr_name
            joined = run_command(
                ["usermod", "--append", "--groups", group, user.name], timeout=USER_TIMEOUT
            )
            assert joined.returncode == 0, joined.describe()
    grants.allow(path, READ_WRITE)


def tool_paths() -> list[Path]:
    """What a user's CLI runs: the console script, the environment and its interpreter,
    the source tree, uv (to build images), docker with its compose plugin, git."""
    paths = [
        cloister_executable(),
        Path(sys.executable),
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(__file__).resolve().parents[2],  # the source tree (compose/, images/)
        Path(docker_executable()),
        Path(git_executable()),
    ]
    uv = uv_executable()
    if uv is not None:
        paths.append(Path(uv))
    if "CLOISTER_SOURCE_DIR" in os.environ:
        paths.append(Path(os.environ["CLOISTER_SOURCE_DIR"]))
    for directory in (
        "/usr/local/lib/docker/cli-plugins",
        "/usr/local/libexec/docker/cli-plugins",
        "/usr/lib/docker/cli-plugins",
        "/usr/libexec/docker/cli-plugins",
    ):
        plugin = Path(directory) / "docker-compose"
        if plugin.exists():
            paths.append(plugin)
    return paths


def check_user(user: HostUser, skip: Callable[[str], NoReturn]) -> None:
    """*user* runs the CLI, reaches the engine, runs compose, git and uv; else skip(why)."""
    uv = uv_executable()
    for argv, what in (
        (
            [str(cloister_executable()), "--version"],
            "run the uv environment's `cloister` (the environment, its interpreter and the"
            " source tree must be readable, and their programs executable, by others)",
        ),
        ([docker_executable(), "version", "--format", "{{.Server.Version}}"], "use Docker"),
        ([docker_executable(), "compose", "version"], "run docker compose"),
        ([git_executable(), "--version"], "run git"),
        *([([uv, "--version"], "run uv (it builds the images)")] if uv else []),
    ):
        result = user.run(argv)
        if result.returncode != 0:
            skip(f"user {user.name} cannot {what}:\n{result.describe()}")


def lock_session(lock: IO[str], skip: Callable[[str], NoReturn]) -> None:
    """An exclusive lock on the open file *lock*, waited for up to SESSION_WAIT."""

    def locked() -> bool:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        wait_until(locked, SESSION_WAIT, "another session's lock", interval=1)
    except AssertionError:
        skip(f"another session runs tests as {TEST_USER} (it holds {lock.name})")


@contextlib.contextmanager
def host_user(skip: Callable[[str], NoReturn], name: str = TEST_USER) -> Iterator[HostUser]:
    """A non-root user of this machine to run the CLI as, for as long as the block runs,
    with a temporary directory of its own (its home in it; removed at the end).

    The account *name* is made if missing and kept; it joins the Docker socket's group,
    and gets search permission where it lacks it on the way to the tools (see the comment
    above HostUser); those ACL entries are taken back at the end. One session at a time
    (a lock in GRANTS_DIR). Without root (nothing to switch from), setpriv or useradd, or
    when the user still cannot run what the CLI needs, this calls *skip* with the reason:
    the ``skip_or_fail`` fixture, which fails under CI.
    """
    if os.geteuid() != 0:
        skip(
            f"running the CLI as another user needs root (to make the user and switch to"
            f" it); the tests run as uid {os.geteuid()}"
        )
    missing = [tool for tool in ("setpriv", "useradd", "usermod") if shutil.which(tool) is None]
    if missing:
        skip(f"{', '.join(missing)} not found: util-linux and passwd run the CLI as another user")
    account = system_user(name)
    assert account.pw_uid != 0, f"user {name} has uid 0"
    GRANTS_DIR.mkdir(mode=0o700, exist_ok=True)
    with (GRANTS_DIR / "lock").open("w") as lock:
        lock_session(lock, skip)
        scratch = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        user = HostUser(account.pw_name, account.pw_uid, account.pw_gid, scratch)
        grants = AccessGrants.recorded(user, GRANTS_DIR / "grants.json")
        try:
            grants.revert()  # what a killed session left
            for directory in (user.home, user.tmp):
                directory.mkdir(mode=0o700)
            user.adopt(scratch)
            try:
                give_docker(user, grants)
                for path in (scratch, *tool_paths()):
                    grants.reach(path)
            except OSError as error:
                skip(f"could not give user {name} its way to Docker and the tools: {error}")
            check_user(user, skip)
            yield user
        finally:
            grants.revert()
            shutil.rmtree(scratch, ignore_errors=True)


# --- repositories -------------------------------------------------------------------------


def git(repository: Path, *args: str, user: HostUser | None = None) -> str:
    """``git -C repository ARGS``; its output (stripped); fails the test on error.

    As *user* when given: git refuses to work in a repository another user owns.
    """
    argv = ["git", "-C", str(repository), *args]
    result = run_command(argv, timeout=60) if user is None else user.run(argv, timeout=60)
    assert result.returncode == 0, result.describe()
    return result.stdout.strip()


def make_repo(path: Path, user: HostUser | None = None) -> Path:
    """A git repository at *path* with one commit (user name and email in its config).

    Made by *user* when given, who then owns all of it: *path*'s parent must exist and be
    one the user may write in (its ``CloisterCli.root``, say).
    """
    if user is None:
        path.mkdir(parents=True)
    else:
        assert not path.exists(), path
        made = user.run(["mkdir", "--", str(path)])
        assert made.returncode == 0, made.describe()
    git(path, "init", "--quiet", user=user)
    git(path, "config", "user.name", "Cloister Test", user=user)
    git(path, "config", "user.email", "test@cloister.invalid", user=user)
    git(path, "config", "commit.gpgsign", "false", user=user)
    readme = path / "README.md"
    readme.write_text("hello\n", encoding="utf-8")
    if user is not None:
        user.adopt(readme)
    git(path, "add", "README.md", user=user)
    git(path, "commit", "--quiet", "-m", "initial commit", user=user)
    return path


def unique(prefix: str) -> str:
    """A project-name-safe unique name: :func:`container` finds a cloister by it alone."""
    return f"{prefix}-{secrets.token_hex(3)}"


# --- inside a cloister --------------------------------------------------------------------


_CONTAINERS: dict[str, str] = {}


def _labelled(label: str, *, kind: str = "ps") -> list[str]:
    argv = [docker_executable(), *(["ps", "-a"] if kind == "ps" else ["network", "ls"])]
    listed = run_command(
        [
            *argv,
            "--filter",
            f"label={label}",
            "--format",
            "{{.Names}}" if kind == "ps" else "{{.Name}}",
        ],
        timeout=30,
    )
    assert listed.returncode == 0, listed.describe()
    return listed.stdout.split()


def container(name: str) -> str:
    """The container of cloister *name* (``cloister-<instance>-<name>``), whichever
    guardian runs it: the tests' names are unique (:func:`unique`)."""
    if name not in _CONTAINERS:
        found = _labelled(f"{stack.LABEL_CLOISTER}={name}")
        assert len(found) == 1, f"cloister {name!r}: containers {found}"
        _CONTAINERS[name] = found[0]
    return _CONTAINERS[name]


def exec_in(name: str, script: str, *, timeout: float = EXEC_TIMEOUT) -> Result:
    """``docker exec CONTAINER bash -c SCRIPT`` in cloister *name*'s container (in /work,
    as the cloister's user)."""
    return run_command(
        [docker_executable(), "exec", container(name), "bash", "-c", script], timeout=timeout
    )


def exec_ok(name: str, script: str, *, timeout: float = EXEC_TIMEOUT) -> Result:
    result = exec_in(name, script, timeout=timeout)
    assert result.returncode == 0, result.describe()
    return result


def connect_status(name: str, token: str | None = None, *, max_time: float = 10) -> str:
    """The proxy's answer to a CONNECT from cloister *name*, with *token* or its own.

    ``403``: the proxy accepted the token and refused the (denied) destination;
    ``407``: it refused the token; ``000``: no answer at all.
    """
    proxy = f"http://cloister:{token}@{PROXY_ADDRESS}" if token else '"$HTTPS_PROXY"'
    script = (
        f"curl --silent --output /dev/null --max-time {max_time:g}"
        " --write-out '%{http_connect}'"
        f" --proxy {proxy} https://{DENIED_HOST}/"
    )
    return exec_in(name, script).stdout.strip()


def inspect(name: str) -> dict[str, Any]:
    """``docker inspect`` of cloister *name*'s container."""
    result = run_command([docker_executable(), "inspect", container(name)], timeout=30)
    assert result.returncode == 0, result.describe()
    (document,) = result.json()
    assert isinstance(document, dict)
    return document


def inspect_network(network: str) -> dict[str, Any]:
    result = run_command([docker_executable(), "network", "inspect", network], timeout=30)
    assert result.returncode == 0, result.describe()
    (document,) = result.json()
    assert isinstance(document, dict)
    return document


def network_gateway(network: str) -> str | None:
    """The IPv4 gateway of a Docker network, as ``docker network inspect`` reports it;
    for a subnet given without one (a cloister's network), the address Docker keeps for
    it: the subnet's first."""
    for pool in (inspect_network(network).get("IPAM") or {}).get("Config") or []:
        gateway = pool.get("Gateway")
        if gateway and ":" not in gateway:
            return str(gateway)
        subnet = pool.get("Subnet")
        if subnet and ":" not in subnet:
            return str(next(ipaddress.IPv4Network(subnet).hosts()))
    return None


def environment(document: Mapping[str, Any]) -> dict[str, str]:
    """A container's environment (from ``docker inspect``) as a dict."""
    pairs = (entry.partition("=") for entry in document["Config"]["Env"] or [])
    return {key: value for key, _, value in pairs}


def remove_containers(names: list[str]) -> None:
    """``docker rm -f`` whatever of these cloisters' containers still exists."""
    found = [each for name in names for each in _labelled(f"{stack.LABEL_CLOISTER}={name}")]
    if found:
        run_command([docker_executable(), "rm", "-f", *found], timeout=60)


def remove_instance_networks(instance: stack.Instance) -> None:
    """``docker network rm`` every network of *instance* (its stack is stopped: nothing of
    it is connected any more); a temporary data directory's would stay forever."""
    found = _labelled(instance.label_filter, kind="network")
    if found:
        run_command([docker_executable(), "network", "rm", *found], timeout=60)


def with_free_ui_port(config: str) -> str:
    """*config* with a free ``guardian.ui_port`` unless it names one: the default port is
    the one a user's own guardian (or another suite's) has on this engine."""
    yaml = YAML(typ="safe")
    document = yaml.load(config) or {}
    section = document.setdefault("guardian", {})
    if "ui_port" in section:
        return config
    section["ui_port"] = free_port()
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()


@contextlib.contextmanager
def guardian(
    client: docker.DockerClient,
    root: Path,
    config: str,
    skip: Callable[[str], NoReturn],
    home: Path | None = None,
    *,
    user: HostUser | None = None,
) -> Iterator[CloisterCli]:
    """``cloister`` with its own directories under *root*, *config* written, and its own
    guardian started (an instance of its own: other guardians on the engine run on),
    stopped at the end with every cloister of *root*, and its networks removed.

    Run as *user* when given (see :func:`host_user`).
    """
    for image in (SLIM_IMAGE, BASE_IMAGE):
        try:
            client.images.get(image)
            break
        except docker.errors.ImageNotFound:
            continue
    else:
        skip(f"neither {SLIM_IMAGE} nor its base {BASE_IMAGE} is present locally")
    tool = CloisterCli(root, home=home, user=user)
    tool.write_config(with_free_ui_port(config))
    try:
        started = tool.run("guardian", "start", timeout=GUARDIAN_TIMEOUT)
        if started.returncode != 0:
            pytest.fail(f"the guardian did not start:\n{started.describe()}", pytrace=False)
        yield tool
    finally:
        problems: list[str] = []
        leftovers: list[str] = []
        try:
            leftovers = tool.mine()
        except AssertionError as error:
            problems.append(f"cloister list failed: {error}")
        for name in leftovers:
            tool.run("stop", name)
        remove_containers(leftovers)
        stopped = tool.run("guardian", "stop")
        if stopped.returncode != 0:
            problems.append(stopped.describe())
        remove_instance_networks(tool.instance)
        if problems:
            pytest.fail("cleanup failed: " + "\n".join(problems), pytrace=False)
