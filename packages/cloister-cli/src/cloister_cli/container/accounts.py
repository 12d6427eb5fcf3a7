"""A name for the host user's uid inside any image: ``/etc/passwd`` and ``/etc/group``.

A cloister runs as the host user's uid and gid so that files in ``/work`` stay the
user's. Most images have no account with that uid (the host user is 1001, the image's
user 1000): ``whoami`` fails, and ssh, npm scripts or Python's ``getpass`` can break.
At start the image's own files are read (once per image id, cached), an account for
the uid is added (or the existing one given the cloister's home), and both files are
mounted read-only over the image's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from cloister_cli.container.engine import Engine, Image
from cloister_core import beneath
from cloister_core.fileio import atomic_write
from cloister_core.paths import CloisterPaths

_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
FALLBACK_NAME = "cloister"
SHELL = "/bin/bash"


@dataclass(frozen=True, slots=True)
class Accounts:
    passwd: str
    group: str


def _entries(text: str) -> list[list[str]]:
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _render(entries: list[list[str]]) -> str:
    return "".join(":".join(fields) + "\n" for fields in entries)


def host_user_name(uid: int) -> str:
    """The host user's name when it makes a valid account name, else ``cloister``."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return FALLBACK_NAME
    return name if _NAME.fullmatch(name) else FALLBACK_NAME


def with_user(image: Accounts, *, uid: int, gid: int, name: str, home: str) -> Accounts:
    """The image's accounts plus one for *uid* (home *home*) and a group for *gid*.

    An account the image already has for *uid* keeps its name and gets *home* (root
    keeps ``/root``: its tools expect it). A name the image uses for another uid is
    not taken: ``<name>-<uid>`` then.
    """
    users = [fields for fields in _entries(image.passwd) if len(fields) == 7]
    groups = [fields for fields in _entries(image.group) if len(fields) == 4]
    taken = {fields[0] for fields in users}
    for fields in users:
        if fields[2] == str(uid):
            if uid != 0:
                fields[5] = home
            break
    else:
        account = name if name not in taken else f"{name}-{uid}"
        users.append([account, "x", str(uid), str(gid), "Cloister", home, SHELL])
    if not any(fields[2] == str(gid) for fields in groups):
        group_names = {fields[0] for fields in groups}
        group = name if name not in group_names else f"{name}-{gid}"
        groups.append([group, "x", str(gid), ""])
    return Accounts(_render(users), _render(groups))


def _read_from_image(client: Engine, image: str) -> Accounts:
    """``/etc/passwd`` and ``/etc/group`` of *image* (empty where it has none)."""
    import tarfile  # noqa: PLC0415 - once per image: a start finds them in the cache

    container = client.containers.create(image, command=["true"], network_disabled=True)
    try:
        texts = []
        for path in ("/etc/passwd", "/etc/group"):
            try:
                chunks, _ = container.get_archive(path)
            except docker.errors.NotFound:
                texts.append("")
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
                member = archive.next()
                handle = archive.extractfile(member) if member and member.isfile() else None
                texts.append(handle.read().decode("utf-8", "replace") if handle else "")
        return Accounts(*texts)
    finally:
        container.remove(force=True)


def image_accounts(client: Engine, paths: CloisterPaths, image: Image) -> Accounts:
    """The accounts of *image* (as the engine answered its inspect), read once per image
    id (``<data>/cache/accounts/``)."""
    image_id = str(image.id).removeprefix("sha256:")
    cache = paths.data_dir / "cache" / "accounts" / f"{image_id}.json"
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        return Accounts(str(data["passwd"]), str(data["group"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _read_from_image(client, str(image.id))
    atomic_write(cache, json.dumps({"passwd": found.passwd, "group": found.group}), mode=0o600)
    return found


def accounts_dir(paths: CloisterPaths, cloister: str) -> Path:
    return paths.data_dir / "accounts" / cloister


def files(paths: CloisterPaths, cloister: str) -> tuple[Path, Path]:
    """Where :func:`write` puts the ``passwd`` and ``group`` files of *cloister*."""
    directory = accounts_dir(paths, cloister)
    return directory / "passwd", directory / "group"


def write(paths: CloisterPaths, cloister: str, accounts: Accounts) -> tuple[Path, Path]:
    """The files to mount at ``/etc/passwd`` and ``/etc/group`` (world-readable, as there)."""
    passwd, group = files(paths, cloister)
    atomic_write(passwd, accounts.passwd, mode=0o644)
    atomic_write(group, accounts.group, mode=0o644)
    return passwd, group


def remove(paths: CloisterPaths, cloister: str) -> None:
    with contextlib.suppress(OSError):
        beneath.remove_tree(accounts_dir(paths, cloister))


def valid_name(name: str) -> bool:
    """Whether *name* may be an account name in a cloister (never root's)."""
    return name != "root" and _NAME.fullmatch(name) is not None


def for_cloister(
    client: Engine,
    paths: CloisterPaths,
    cloister: str,
    image: Image,
    home: str,
    *,
    name: str | None = None,
) -> tuple[Path, Path]:
    """Write the accounts of *cloister*, which runs *image* (its inspect): *name* (a
    devcontainer's ``remoteUser``) for the user's uid when valid, else the host user's
    name (see :func:`with_user` for when the image already has an account for the uid,
    or uses the name)."""
    uid, gid = os.getuid(), os.getgid()
    found = with_user(
        image_accounts(client, paths, image),
        uid=uid,
        gid=gid,
        name=name if name is not None and valid_name(name) else host_user_name(uid),
        home=home,
    )
    return write(paths, cloister, found)
