"""The host paths no cloister may bind-mount, and why.

A ``mounts`` bind is kept only inside the project (:mod:`.mounts`); this list names
what a refused source is (``is ~/.ssh (your SSH keys)``), and it is what ``-v`` in
``runArgs`` (always dropped) is refused by.

A bind mount is refused when its source *is*, *holds* or *is inside* a blocked path:
``~`` holds ``~/.ssh``, ``~/.ssh/config`` is inside it. The root and the home
directory are blocked only as themselves and what holds them (the project usually
lives inside the home directory).

Both sides are compared as written (``..`` collapsed) and with symbolic links resolved,
so neither ``~/proj/../.ssh`` nor a link in the project that points at ``~/.ssh`` gets
through; and case-folded, as macOS's file system ignores case.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Relative to the home directory: credentials, and the agents' own homes.
_HOME_SECRETS: tuple[tuple[str, str], ...] = (
    (".ssh", "your SSH keys"),
    (".aws", "your AWS credentials"),
    (".config/gcloud", "your Google Cloud credentials"),
    (".gnupg", "your GnuPG keys"),
    (".config/gh", "the GitHub CLI's token"),
    (".kube", "your Kubernetes credentials"),
    (".docker", "Docker's credentials (and, with Docker Desktop, its socket)"),
    (".npmrc", "your npm tokens"),
    (".pypirc", "your PyPI tokens"),
    (".netrc", "your passwords for hosts"),
    (".git-credentials", "git's stored passwords"),
    (".Xauthority", "the key to your X display"),
    (".claude", "Claude Code's login and history"),
    (".claude.json", "Claude Code's settings and history"),
    (".codex", "Codex's login and history"),
    (".gemini", "Gemini CLI's login and history"),
    (".config", "every program's settings and tokens"),
    (".local", "programs' data, Cloister's state among it"),
)
_SYSTEM: tuple[tuple[str, str], ...] = (
    ("/var/run/docker.sock", "the Docker socket: root on the host"),
    ("/run/docker.sock", "the Docker socket: root on the host"),
    ("/etc", "the host's system configuration"),
    ("/proc", "the host's processes"),
    ("/sys", "the host kernel's settings"),
    ("/dev", "the host's devices"),
    ("/boot", "the host's kernel and boot loader"),
    # Sockets of running services: Docker's, D-Bus, your session's agents (/run/user).
    ("/run", "the sockets of the host's services"),
    ("/var/run", "the sockets of the host's services"),
    ("/var/lib/docker", "every container's files"),
    ("/tmp/.X11-unix", "your X display (it can read and type your keys)"),  # noqa: S108 (blocked, not used)
)


@dataclass(frozen=True, slots=True)
class _Entry:
    shown: str  # as a human reads it: "~/.ssh"
    what: str
    forms: tuple[str, ...]  # normalised, case-folded; as written and resolved
    tree: bool  # inside it is blocked too (not for / and the home directory)


def normalize(path: str) -> str:
    """*path* with ``.``, ``..``, repeated and trailing slashes collapsed: ``//work/.`` is
    ``/work``. (posixpath keeps a leading ``//``, which Linux reads as ``/``.)"""
    normalized = posixpath.normpath(path)
    return "/" + normalized.lstrip("/") if normalized.startswith("//") else normalized


def _forms(path: str) -> tuple[str, ...]:
    written = normalize(path)
    try:
        resolved = str(Path(written).resolve())
    except (OSError, RuntimeError, ValueError):  # a loop of links, a NUL: as written
        resolved = written
    return tuple(dict.fromkeys(form.casefold() for form in (written, resolved)))


MAX_SEARCHED_PER_LOAD = 100_000
"""The most entries searched for git directories over all the bind sources of one load."""


class BlockedPaths:
    """The blocked list for one home directory, plus *extra* paths (Cloister's own dirs).

    One is made per load: it also keeps what the search of each bind source (and of its
    folders up to the project) for a git directory found (:mod:`.mounts`), so a file
    naming one folder 40,000 times searches it once, and all the searches together stop
    at :data:`MAX_SEARCHED_PER_LOAD` entries.
    """

    def __init__(self, home: Path, extra: Sequence[Path] = ()) -> None:
        self.home = str(home)
        self.searched: dict[str, str] = {}  # folder → why it is refused ('' if it is not)
        self.git_directories: dict[str, bool] = {}  # folder → whether git would use it
        self._reasons: dict[str, str | None] = {}
        self.search_left = MAX_SEARCHED_PER_LOAD
        entries = [
            _Entry(f"~/{relative}", what, _forms(posixpath.join(self.home, relative)), True)
            for relative, what in _HOME_SECRETS
        ]
        entries += [_Entry(path, what, _forms(path), True) for path, what in _SYSTEM]
        entries += [
            _Entry(str(path), "Cloister's own files", _forms(str(path)), True) for path in extra
        ]
        entries.append(_Entry("~", "your home directory", _forms(self.home), False))
        entries.append(_Entry("/", "the host's whole file system", ("/",), False))
        self._entries = tuple(entries)
        # Each form with the entries that have it, in the list's order (its rank).
        self._forms_ranked = [
            (form, rank) for rank, entry in enumerate(entries) for form in entry.forms
        ]
        self._by_form: dict[str, list[int]] = {}
        for form, rank in self._forms_ranked:
            self._by_form.setdefault(form, []).append(rank)

    def expand(self, source: str) -> str:
        """``~`` and ``~/x`` as the home directory (docker would not; a human means it)."""
        if source == "~" or source.startswith("~/"):
            return self.home + source[1:]
        return source

    def reason(self, source: str) -> str | None:
        """Why a bind mount of the absolute host path *source* is refused, or None.

        The message names the closest blocked path: the one it is, else the most
        specific one it is inside, else the most general one it holds. (Looked up by
        the path and its parents, not compared with every entry: the agent's file may
        hold thousands of mounts; the answer for one source is kept for the load.)
        """
        if source not in self._reasons:
            self._reasons[source] = self._reason(source)
        return self._reasons[source]

    def _reason(self, source: str) -> str | None:
        forms = _forms(self.expand(source))
        exact = [rank for mine in forms for rank in self._by_form.get(mine, ())]
        if exact:
            entry = self._entries[min(exact)]
            if entry.shown == source:  # not "/var/run/docker.sock is /var/run/docker.sock (…)"
                return f"{source} is {entry.what}"
            return f"{source} is {self._describe(min(exact))}"
        inside = [
            (-len(parent), rank)
            for mine in forms
            for parent in _parents(mine)
            for rank in self._by_form.get(parent, ())
            if self._entries[rank].tree
        ]
        if inside:
            return f"{source} is inside {self._describe(min(inside)[1])}"
        held = [
            (len(blocked), rank)
            for mine in forms
            for blocked, rank in self._forms_ranked
            if blocked.startswith(mine.rstrip("/") + "/")
        ]
        if held:
            return f"{source} holds {self._describe(min(held)[1])}"
        return None

    def _describe(self, rank: int) -> str:
        entry = self._entries[rank]
        return f"{entry.shown} ({entry.what})"


def _parents(path: str) -> list[str]:
    """*path*'s strict ancestors, deepest first, ending with "/"."""
    parents = []
    while path not in ("/", ""):
        path = posixpath.dirname(path)
        parents.append(path)
    return parents
