"""What every agent module provides, and the file helpers they share.

An agent keeps everything (config, login, sessions) in one *state directory* of the
cloister's home (``/home/cloister/.claude``); Cloister bind-mounts a per-project host
directory there, so sessions survive stop and start. At every start it writes three
kinds of :class:`HomeFile` into that directory, host side:

* :meth:`Agent.copied`: the few settings of the human's own config that are safe and
  useful inside (a model, a theme), picked by an allowlist: never hooks, commands,
  MCP servers, permissions, history, transcripts or credentials;
* :meth:`Agent.login_files`: for the ``existing-login`` method only, the human's login
  (the agent refreshes it in place, so it lives in the writable state directory);
* :meth:`Agent.generated`: the forced values (prompts off, onboarding done, the
  gateway, the rules file).

:meth:`Agent.home_files` merges the three in that order: a JSON or TOML file written
by several is merged key by key, the later winning, so a forced value always beats a
copied one. The variables of :meth:`Agent.environment` point the agent's CLI at the
state directory and, for the ``api-key`` and ``oauth-token`` methods, at the
credential gateway with the cloister's token as its key.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from cloister_core import jsonc
from cloister_core.credentials import GATEWAY_METHODS, Method
from cloister_core.errors import CloisterError

WORK = "/work"  # the project inside every cloister; the agents are told to trust it

# Variables of the cloister itself that agents.<name>.env may not replace, whatever the
# agent (besides every name starting with CLOISTER_): the proxy and the home.
CLOISTER_ENV = frozenset(
    {"HOME", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"}
)


class AgentSetupError(CloisterError):
    """An agent cannot be set up as asked: no login to copy, a reserved variable, …"""


@dataclass(frozen=True, slots=True)
class HomeFile:
    """One file Cloister writes into an agent's state directory.

    *path* is relative to the state directory, ``/``-separated, without ``..``.
    *host_mtime* is set on login files (``existing-login``): the agent refreshes its
    copy in place, so the writer should replace a file already in the state directory
    only when it is older than this (the human logged in again on the host); writing
    the host's older copy over a refreshed one would undo the refresh.
    """

    path: str
    content: bytes
    mode: int = 0o600
    host_mtime: float | None = None

    def __post_init__(self) -> None:
        parts = self.path.split("/")
        if (
            not self.path
            or self.path.startswith("/")
            or "\\" in self.path
            or "\x00" in self.path
            or any(part in ("", ".", "..") for part in parts)
        ):
            raise ValueError(f"not a relative path inside the state directory: {self.path!r}")
        if self.mode & ~0o777:
            raise ValueError(f"not a permission mode: {self.mode:#o}")


class Agent(ABC):
    """One coding agent: how its CLI is started, configured and pointed at the gateway.

    A subclass sets the class attributes and implements the four abstract methods;
    its module makes one instance and :data:`cloister_cli.agents.AGENTS` lists it.
    """

    name: ClassVar[str]  # "claude": a key of cloister_core.credentials.PROVIDERS
    title: ClassVar[str]  # "Claude Code"
    command: ClassVar[str]  # the program `cloister start --agent NAME` attaches to
    version_argv: ClassVar[tuple[str, ...]]
    state_dir: ClassVar[str]  # relative to the home: ".claude"
    rules_file: ClassVar[str]  # relative to the state directory: "CLAUDE.md"
    method_help: ClassVar[Mapping[Method, str]]  # the methods it supports, explained
    # Where its login files go in the state directory: removed there whenever the method
    # is not existing-login (a real credential must not outlive that choice).
    login_paths: ClassVar[tuple[str, ...]]
    # Variables only Cloister sets (the config home, base URLs, keys): refused in `extra`.
    reserved_env: ClassVar[frozenset[str]]

    # -- the process -------------------------------------------------------------------

    def argv(self, *, skip_permissions: bool) -> list[str]:
        """The command line to attach to (an agent whose prompts go off by flag adds it)."""
        del skip_permissions
        return [self.command]

    def config_dir(self, home: str) -> str:
        """The state directory inside the cloister: ``/home/cloister/.claude``."""
        return str(PurePosixPath(home) / self.state_dir)

    def environment(
        self,
        *,
        home: str,
        gateway_url: str,
        token: str,
        method: Method,
        skip_permissions: bool,
        extra: Mapping[str, str],
    ) -> dict[str, str]:
        """The agent's variables; *extra* (``agents.<name>.env``) last, never a reserved one.

        *gateway_url* is the agent's base URL on the credential gateway
        (``http://cloister-guardian-credentials:9997/claude``) and *token* the cloister's token,
        which the agent sends as its key; both are unused for ``existing-login``.
        """
        self.check_method(method)
        if method in GATEWAY_METHODS and not (token and gateway_url):
            raise AgentSetupError(f"the {method} method needs the gateway URL and a token")
        refused = sorted(
            name
            for name in extra
            if name in self.reserved_env or name in CLOISTER_ENV or name.startswith("CLOISTER_")
        )
        if refused:
            why = (
                f"the {self.title} key, base URL and config directory follow `cloister setup"
                f" {self.name}`"
                if refused[0] in self.reserved_env
                else "the cloister's proxy, home and token are the same for every agent"
            )
            raise AgentSetupError(
                f"agents.{self.name}.env may not set {refused[0]!r}: Cloister sets it ({why})"
            )
        variables = self.own_environment(
            home=home,
            gateway_url=gateway_url.rstrip("/"),
            token=token,
            method=method,
            skip_permissions=skip_permissions,
        )
        variables.update(extra)
        return variables

    def check_method(self, method: Method) -> None:
        if method not in self.method_help:
            known = ", ".join(self.method_help)
            raise AgentSetupError(f"{self.title} cannot use the {method} method (one of {known})")

    # -- the state directory -----------------------------------------------------------

    def home_files(
        self,
        *,
        host_home: Path,
        method: Method,
        skip_permissions: bool,
        rules: str,
        gateway_url: str,
    ) -> list[HomeFile]:
        """Everything to write at start: copied, then login (existing-login), then generated."""
        self.check_method(method)
        groups = [self.copied(host_home)]
        if method == "existing-login":
            groups.append(self.login_files(host_home))
        groups.append(
            self.generated(
                method=method,
                skip_permissions=skip_permissions,
                rules=rules,
                gateway_url=gateway_url.rstrip("/"),
            )
        )
        return merge_files(groups)

    @abstractmethod
    def own_environment(
        self, *, home: str, gateway_url: str, token: str, method: Method, skip_permissions: bool
    ) -> dict[str, str]:
        """The agent's own variables (``extra`` is merged by :meth:`environment`)."""

    @abstractmethod
    def generated(
        self, *, method: Method, skip_permissions: bool, rules: str, gateway_url: str
    ) -> list[HomeFile]:
        """The forced files: prompts off (when *skip_permissions*), onboarding done, *rules*."""

    @abstractmethod
    def copied(self, host_home: Path) -> list[HomeFile]:
        """The allowlisted settings of the human's own config under *host_home*."""

    @abstractmethod
    def login_files(self, host_home: Path) -> list[HomeFile]:
        """The human's login files; :class:`AgentSetupError` saying what to do if none."""


# -- reading the human's files -------------------------------------------------------------

Allowed = Mapping[tuple[str, ...], type | tuple[type, ...]]


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON (comments allowed) object in *path*; None when missing or unreadable.

    Copying is a convenience: a settings file that is not there, not a regular file or
    not an object is left out rather than failing the start.
    """
    try:
        if not path.is_file():
            return None
        # Lenient: the agent reads its settings with JavaScript's parser (a key given
        # twice is the last), and so must what copies them.
        data = jsonc.loads(path.read_text(encoding="utf-8"), "lenient")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_toml(path: Path) -> dict[str, Any] | None:
    """The TOML document in *path*; None when missing or unreadable (see above)."""
    try:
        if not path.is_file():
            return None
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def pick(data: Mapping[str, Any], allowed: Allowed) -> dict[str, Any]:
    """Only the *allowed* key paths of *data* whose value has the allowed type.

    An allowlist, not a denylist: a key the agent adds tomorrow (perhaps one that runs
    a command) stays out until someone decides it is safe. ``bool`` is never taken
    for ``int``.
    """
    picked: dict[str, Any] = {}
    for key_path, types in allowed.items():
        value: Any = data
        for key in key_path:
            value = value.get(key) if isinstance(value, dict) else None
        accepted = types if isinstance(types, tuple) else (types,)
        if value is None or not isinstance(value, accepted):
            continue
        if isinstance(value, bool) and bool not in accepted:
            continue
        if isinstance(value, dict) and not all(
            isinstance(item, str | bool | int | float) for item in value.values()
        ):
            continue  # a table of plain values only (Claude's attribution texts)
        target = picked
        for key in key_path[:-1]:
            target = target.setdefault(key, {})
        target[key_path[-1]] = value
    return picked


def login_file(source: Path, target: str, *, how: str) -> HomeFile:
    """*source* as a login file at *target*; :class:`AgentSetupError` with *how* if absent.

    The file must be a JSON object (a login file of these CLIs always is): anything else
    is refused rather than handed to the agent.
    """
    try:
        stat = source.stat()
        content = source.read_bytes() if source.is_file() else None
    except FileNotFoundError:
        content = None
    except OSError as error:
        raise AgentSetupError(f"cannot read the login file {str(source)!r}: {error}") from None
    if content is None:
        raise AgentSetupError(f"no login in {str(source)!r}: {how}")
    try:
        document = json.loads(content)
    except ValueError:
        document = None
    if not isinstance(document, dict) or not document:
        raise AgentSetupError(f"{str(source)!r} is not a login file (not a JSON object): {how}")
    return HomeFile(target, content, 0o600, host_mtime=stat.st_mtime)


# -- writing files ---------------------------------------------------------------------------


def json_file(path: str, document: Mapping[str, Any], mode: int = 0o600) -> HomeFile:
    return HomeFile(path, (json.dumps(document, indent=2, sort_keys=False) + "\n").encode(), mode)


def toml_file(path: str, document: Mapping[str, Any], mode: int = 0o600) -> HomeFile:
    return HomeFile(path, toml_dumps(document).encode(), mode)


def text_file(path: str, text: str, mode: int = 0o644) -> HomeFile:
    return HomeFile(path, text.encode(), mode)


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """*base* with *top* on it: tables merged key by key, anything else replaced by *top*."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(below, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(below, value)
        else:
            merged[key] = value
    return merged


def merge_files(groups: Iterable[Iterable[HomeFile]]) -> list[HomeFile]:
    """One file per path: a later JSON/TOML file merged onto an earlier one, else replacing it."""
    files: dict[str, HomeFile] = {}
    for group in groups:
        for item in group:
            earlier = files.get(item.path)
            files[item.path] = item if earlier is None else _merge(earlier, item)
    return list(files.values())


def _merge(earlier: HomeFile, later: HomeFile) -> HomeFile:
    suffix = PurePosixPath(later.path).suffix
    if suffix == ".json":
        below, top = json.loads(earlier.content), json.loads(later.content)
        if isinstance(below, dict) and isinstance(top, dict):
            merged = json_file(later.path, deep_merge(below, top), later.mode)
            return replace(merged, host_mtime=later.host_mtime)
    elif suffix == ".toml":
        document = deep_merge(
            tomllib.loads(earlier.content.decode()), tomllib.loads(later.content.decode())
        )
        return replace(toml_file(later.path, document, later.mode), host_mtime=later.host_mtime)
    return later


# -- a TOML writer for plain documents ------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(text: str) -> str:
    """A TOML basic string: quote, backslash and control characters escaped."""
    out = []
    for char in text:
        if char in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):  # a table inside an array or value position
        inner = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise ValueError(f"cannot write {type(value).__name__} as TOML: {value!r}")


def toml_dumps(document: Mapping[str, Any]) -> str:
    """*document* as TOML: plain keys first, then one ``[table]`` per nested mapping.

    Enough for the config files written here (strings, booleans, numbers, lists of them
    and nested tables); :func:`tomllib.loads` reads back exactly *document*.
    """
    lines: list[str] = []
    _toml_table(document, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(table: Mapping[str, Any], prefix: tuple[str, ...], lines: list[str]) -> None:
    plain = [(key, value) for key, value in table.items() if not isinstance(value, Mapping)]
    nested = [(key, value) for key, value in table.items() if isinstance(value, Mapping)]
    if prefix and (plain or not nested):
        lines.append("")
        lines.append("[" + ".".join(toml_key(part) for part in prefix) + "]")
    lines.extend(f"{toml_key(key)} = {toml_value(value)}" for key, value in plain)
    for key, value in nested:
        _toml_table(value, (*prefix, key), lines)
