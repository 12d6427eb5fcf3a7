"""Typed, frozen models of every file a human or the approval hub writes.

Validation happens here, once: a loaded model is known-good (hosts normalised,
patterns compiled, durations parsed), and every other module takes these values
as given. Unknown keys are errors (``extra="forbid"``) so a typo such as
``alow:`` is reported instead of silently allowing nothing.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cloister_core.config.legacy import translate
from cloister_core.errors import InvalidHostError
from cloister_core.hosts import normalize_host, normalize_pattern, split_host_port
from cloister_core.patterns import Pattern

UnlistedDomainBehavior = Literal["request_approval", "reject"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object) -> timedelta:
    """``90``, ``"90"``, ``"90s"``, ``"5m"``, ``"1h30m"``, ``"250ms"``, ``"30d"`` → timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and _PLAIN_NUMBER.fullmatch(value.strip()):
        seconds = float(value)  # environment variables are strings: "90" is 90 seconds
    elif isinstance(value, str):
        text = value.strip()
        position, seconds = 0, 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != position:
                break
            seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
            position = match.end()
        if not text or position != len(text):
            raise ValueError(
                f"not a duration: {value!r}"
                " (use a number of seconds or e.g. '60s', '5m', '1h30m', '30d')"
            )
    else:
        raise ValueError(f"not a duration: {value!r}")
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {value!r}")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    return f"{seconds:g}s"


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]
Port = Annotated[int, Field(ge=1, le=65535, strict=True)]


def _none_is_empty(value: object) -> object:
    # "allow:" with nothing under it is an empty list to a human.
    return () if value is None else value


EmptyIfNull = BeforeValidator(_none_is_empty)


def _yaml_item(key: str, value: str) -> str:
    """``- key: value`` as a human writes it, quoted when YAML needs quotes."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
        return f"- {key}: {value}"
    quoted = value.replace("'", "''")
    return f"- {key}: '{quoted}'"


def _item_key(value: str, *, command: bool) -> str:
    if command:
        return "pattern"
    return "pattern" if value.startswith("*") else "domain"


def _list_of(what: str, *, command: bool) -> BeforeValidator:
    """``None`` is an empty list; a string is refused with the line to write instead."""

    def check(value: object, info: ValidationInfo) -> object:
        if value is None:
            return ()
        if isinstance(value, str):
            item = _yaml_item(_item_key(value, command=command), value)
            raise ValueError(
                f"expected a list of {what}, got the string {value!r}: write `{item}`"
                f" on its own line below `{info.field_name}:`"
            )
        return value

    return BeforeValidator(check)


def _not_a_bare_string(value: object, *, command: bool) -> object:
    if isinstance(value, str):
        item = _yaml_item(_item_key(value, command=command), value)
        raise ValueError(f"{value!r} is a bare string: write `{item}`")
    return value


def _refuse_url_or_port(value: str, key: str) -> None:
    """Say what to write when a rule's host is a URL or ``host:port``."""
    if "://" in value:
        parts = urlsplit(value)
        host, what = parts.hostname, "is a URL"
        try:
            port = parts.port
        except ValueError:
            port = None
    else:
        if not (value.startswith("[") and "]:" in value) and value.count(":") != 1:
            return  # no port (or an IPv6 literal): normalize_host explains what is wrong
        try:
            host, port = split_host_port(value)
        except InvalidHostError:
            host, port = value.rpartition(":")[0].strip("[]"), None
        what = "has a port" if port is not None else "has a ':'"
    if not host:
        return
    noun = "host name" if key == "domain" else "pattern"
    message = f"{key} {value!r} {what}: write the {noun}: `{host}`"
    message += f"; ports go in `ports:` (`ports: [{port}]`)" if port is not None else ""
    raise ValueError(message)


class Model(BaseModel):
    """Base of every config model: frozen, unknown keys are errors."""

    # Validators built when a model is first validated, not at import: a start validates
    # GlobalConfig and ProjectConfig (which build their fields' models inline), most of
    # the others never on their own (a few milliseconds of every command).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RuleEntry(Model):
    """One allow or deny entry: ``{domain: x}`` or ``{pattern: "*.x"}``, optional ``ports``.

    ``domain`` is an exact host name or an IP literal; ``pattern`` is ``*.suffix`` (the
    apex and one label below) or ``**.suffix`` (any depth). Both are stored normalised.
    ``ports`` replaces ``proxy.allowed_ports`` for this entry; a deny entry without
    ``ports`` denies every port.
    """

    domain: str | None = None
    pattern: str | None = None
    ports: tuple[Port, ...] | None = None

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, value: object) -> object:
        return _not_a_bare_string(value, command=False)

    @field_validator("ports", mode="before")
    @classmethod
    def _ports_list(cls, value: object) -> object:
        if isinstance(value, int | str) and not isinstance(value, bool):
            raise ValueError(f"expected a list of ports, got {value!r}: write `ports: [{value}]`")
        return value

    @field_validator("domain")
    @classmethod
    def _normalise_domain(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _refuse_url_or_port(value, "domain")
        try:
            return normalize_host(value).name
        except InvalidHostError as error:
            raise ValueError(str(error)) from None

    @field_validator("pattern")
    @classmethod
    def _normalise_pattern(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _refuse_url_or_port(value, "pattern")
        try:
            return str(normalize_pattern(value))
        except InvalidHostError as error:
            raise ValueError(str(error)) from None

    @field_validator("ports")
    @classmethod
    def _sorted_unique_ports(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("ports must not be empty; leave it out to use proxy.allowed_ports")
        return tuple(sorted(set(value)))

    @model_validator(mode="after")
    def _exactly_one_target(self) -> Self:
        if (self.domain is None) == (self.pattern is None):
            raise ValueError("each entry needs exactly one of 'domain' or 'pattern'")
        return self

    @property
    def target(self) -> str:
        """The normalised domain or pattern text."""
        return self.domain if self.domain is not None else str(self.pattern)

    @classmethod
    def for_target(cls, target: str, ports: tuple[int, ...] | None = None) -> RuleEntry:
        """An entry for *target*: a pattern if it starts with ``*``, else a domain."""
        if target.startswith("*"):
            return cls(pattern=target, ports=ports)
        return cls(domain=target, ports=ports)


class CommandPattern(Model):
    """A hostexec pattern: an RE2 regular expression the whole canonical command must match."""

    pattern: str

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, value: object) -> object:
        return _not_a_bare_string(value, command=True)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        Pattern(value)  # PatternError, a ValueError, says what RE2 refused
        return value


class ProxyRules(Model):
    """The allow and deny lists shared by every scope."""

    allow: Annotated[tuple[RuleEntry, ...], _list_of("rules", command=False)] = ()
    deny: Annotated[tuple[RuleEntry, ...], _list_of("rules", command=False)] = ()


class ProxyConfig(ProxyRules):
    """``proxy:`` in config.yaml."""

    unlisted_domain_behavior: UnlistedDomainBehavior = "request_approval"
    approval_timeout: Duration = timedelta(seconds=60)
    # Requests of one cloister waiting for a human at once (domains and hostexec
    # commands together): its fair share of the approval UI; more are refused (429).
    max_held_per_cloister: int = Field(default=16, ge=1, le=1000)
    allowed_ports: tuple[Port, ...] = (80, 443)
    allow_private_networks: Annotated[tuple[IPvAnyNetwork, ...], EmptyIfNull] = ()


class CommandRules(Model):
    """The hostexec pattern lists shared by config.yaml and project files."""

    auto_approve: Annotated[tuple[CommandPattern, ...], _list_of("patterns", command=True)] = ()
    manual_approve: Annotated[tuple[CommandPattern, ...], _list_of("patterns", command=True)] = ()


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class HostexecConfig(CommandRules):
    """``hostexec:`` in config.yaml."""

    timeout: Duration = timedelta(seconds=300)
    # Host environment variables passed to approved commands (besides PATH, HOME, USER,
    # LOGNAME, LANG and LC_*); everything else of the host's environment stays out.
    env_passthrough: Annotated[tuple[str, ...], EmptyIfNull] = ()
    # Whether git run by hostexec runs the repository's hooks (off: a hook is code from
    # the project, and hooks in the work tree are the agent's to change).
    git_hooks: bool = False

    @model_validator(mode="before")
    @classmethod
    def _obsolete(cls, data: object) -> object:
        # `git_guard` configured a guard of the human's .git that no longer exists (each
        # cloister has a git directory of its own): accepted, and it does nothing.
        if isinstance(data, dict) and "git_guard" in data:
            return {key: value for key, value in data.items() if key != "git_guard"}
        return data

    @field_validator("env_passthrough")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"not an environment variable name: {name!r}")
        return value


_MEMORY = re.compile(r"[1-9][0-9]*(?:\.[0-9]+)?[bkmg]?", re.IGNORECASE)


class DefaultsConfig(Model):
    """``defaults:``: what a new cloister gets unless ``cloister start`` says otherwise."""

    image: str = "cloister:latest"
    agent: str | None = None  # the command `cloister start` attaches to (default: shell)
    shell: str = "/bin/bash"
    memory: str = "8g"
    cpus: float = Field(default=2.0, gt=0, le=512)
    pids: int = Field(default=1024, ge=16)
    # /dev/shm (Docker's default size); a devcontainer's `--shm-size` wins over it.
    shm_size: str = "64m"
    # A quota on what the container writes outside its mounts, where the engine's
    # storage driver can apply one (`--storage-opt size=`); None: no quota.
    disk: str | None = None

    @field_validator("memory", "shm_size", "disk")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _MEMORY.fullmatch(value):
            raise ValueError(f"not a size: {value!r} (use e.g. '8g', '512m')")
        return value.lower()


class GuardianConfig(Model):
    """``guardian:``: the stack on this machine."""

    ui_port: int = Field(default=9999, ge=1, le=65535)
    # Each cloister gets an internal network of its own, a subnet of this pool.
    network_pool: str = "10.213.0.0/16"
    network_prefix: int = Field(default=27, ge=16, le=29)

    @field_validator("network_pool")
    @classmethod
    def _pool(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as error:
            raise ValueError(
                f"network_pool must be an IPv4 network like 10.213.0.0/16, got {value!r}: {error}"
            ) from None
        return str(network)

    @model_validator(mode="after")
    def _pool_holds_subnets(self) -> Self:
        pool = ipaddress.IPv4Network(self.network_pool)
        if self.network_prefix < pool.prefixlen:
            raise ValueError(
                f"network_prefix /{self.network_prefix} is larger than"
                f" network_pool {self.network_pool!r}"
            )
        return self


class AgentConfig(Model):
    """``agents.<name>:`` what a cloister's agent gets."""

    # Where the credential gateway forwards the agent's API calls (default: the vendor's).
    api_base: str | None = None
    # The agent's own permission prompts off: the cloister is the sandbox.
    skip_permissions: bool = True
    # Extra environment for the agent (not for secrets: `cloister setup` stores those).
    env: dict[str, str] = {}

    @field_validator("api_base")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError(f"api_base must be an http(s) URL without query, got {value!r}")
        return value.rstrip("/") if value else value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"not an environment variable name: {name!r}")
        return value

    # Hosts the agent calls on its own (updates, telemetry), refused without asking when
    # no rule decides them; null: the agent's own list (cloister_core.background).
    background_hosts: tuple[str, ...] | None = None

    @field_validator("background_hosts")
    @classmethod
    def _host_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        try:
            return tuple(dict.fromkeys(normalize_host(item).name for item in value))
        except InvalidHostError as error:
            raise ValueError(f"background_hosts lists host names only: {error}") from None


class AgentsConfig(Model):
    """``agents:``."""

    claude: AgentConfig = AgentConfig()
    codex: AgentConfig = AgentConfig()
    gemini: AgentConfig = AgentConfig()

    def of(self, name: str) -> AgentConfig:
        value = getattr(self, name, None)
        if not isinstance(value, AgentConfig):
            raise ValueError(f"no such agent: {name!r}")
        return value


class DevcontainerConfig(Model):
    """``devcontainer:``: how a project's devcontainer.json is taken."""

    # Feature sources trusted besides ghcr.io/devcontainers/features/: an entry ending
    # in "/" is a prefix, any other one Feature id (in any version).
    trusted_features: Annotated[tuple[str, ...], EmptyIfNull] = ()

    @field_validator("trusted_features")
    @classmethod
    def _references(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            if not entry.strip() or any(char.isspace() for char in entry) or "://" in entry:
                raise ValueError(
                    f"not a Feature id or prefix: {entry!r} (write e.g. 'ghcr.io/my-org/features/')"
                )
        return value


# Work-tree paths whose change runs code on the host when the human merely opens or
# enters the project, or that shape the next cloister: direnv's .envrc, VS Code's
# tasks (run on folder open), the devcontainer (initializeCommand runs on the host),
# Cloister's own .cloister/, husky's hooks. Hook frameworks' configs are kept
# read-only when their hook is installed (Cloister finds that at start).
DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    ".devcontainer",
    ".devcontainer.json",
    ".cloister",
    ".envrc",
    ".vscode/tasks.json",
    ".husky",
)
_GLOB_CHARACTERS = frozenset("*?[")


def _protected_path(value: str) -> str:
    """A plain path relative to the project's root, normalised (``a//b/`` is ``a/b``)."""
    if not value.strip():
        raise ValueError("a protected path must not be empty")
    if "\0" in value or "\\" in value:
        raise ValueError(f"not a path: {value!r} (write it with '/')")
    if value.startswith(("/", "~")):
        raise ValueError(f"{value!r} is absolute: write it relative to the project's root")
    if _GLOB_CHARACTERS & set(value):
        raise ValueError(f"{value!r} is a pattern: list each path (globs are not supported)")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{value!r} leaves the project ('..'): write a path inside it")
    if not parts:
        raise ValueError(f"{value!r} is the whole project: name a path inside it")
    if ".git" in parts:
        raise ValueError(
            f"{value!r} is in a git directory: Cloister keeps what git runs code from"
            " read-only already, and git must write the rest"
        )
    return "/".join(parts)


def _unique_paths(value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(value))


ProtectedPath = Annotated[str, AfterValidator(_protected_path)]
ProtectedPaths = Annotated[tuple[ProtectedPath, ...], EmptyIfNull, AfterValidator(_unique_paths)]


class ProtectConfig(Model):
    """``protect:`` in config.yaml: paths of every project a cloister gets read-only
    (a missing one as an empty stand-in, so the agent cannot create it either)."""

    paths: ProtectedPaths = DEFAULT_PROTECTED_PATHS


class ProjectProtectConfig(Model):
    """``protect:`` in a project's file: ``paths`` added to the global ones, ``except``
    dropped from them."""

    paths: ProtectedPaths = ()
    except_: ProtectedPaths = Field(default=(), alias="except")

    def applied_to(self, paths: tuple[str, ...]) -> tuple[str, ...]:
        """The global *paths* without this project's exceptions, then its own."""
        kept = [path for path in paths if path not in self.except_]
        return tuple(dict.fromkeys([*kept, *self.paths]))


# Characters git refuses in a branch name, and `?`, `[`, a backslash (patterns to the
# guardrails' shell, which matches `*` only: `release/*`).
_BRANCH_REFUSED = re.compile(r"[\x00-\x20\x7f~^:?\[\\]")


def _branch_pattern(value: str) -> str:
    """A branch name or pattern (``release/*``), without a leading ``refs/heads/``."""
    name = value.removeprefix("refs/heads/")
    if (
        not name
        or _BRANCH_REFUSED.search(name)
        or name.startswith(("-", "/", "."))
        or name.endswith(("/", ".", ".lock"))
        or any(part in name for part in ("..", "//", "/.", "@{"))
    ):
        raise ValueError(f"not a branch name: {value!r} (write e.g. 'main' or 'release/*')")
    return name


BranchPattern = Annotated[str, AfterValidator(_branch_pattern)]


class GitGuardrailsConfig(Model):
    """``git_guardrails:``: the ``git`` first on PATH in every cloister refuses skipping
    the hooks, force pushes and deleting a protected branch."""

    enabled: bool = True
    # Branches (or patterns: `release/*`) whose deletion is refused.
    protected_branches: Annotated[tuple[BranchPattern, ...], EmptyIfNull] = ("main", "master")


class ProjectGitGuardrailsConfig(Model):
    """``git_guardrails:`` in a project's file: a key it sets replaces the global one."""

    enabled: bool | None = None
    protected_branches: tuple[BranchPattern, ...] | None = None

    def applied_to(self, base: GitGuardrailsConfig) -> GitGuardrailsConfig:
        enabled = base.enabled if self.enabled is None else self.enabled
        branches = self.protected_branches
        return GitGuardrailsConfig(
            enabled=enabled,
            protected_branches=base.protected_branches if branches is None else branches,
        )


class LogConfig(Model):
    """``log:``: where else the human reads the audit log."""

    # A link made there (``~`` is the home) to the audit log, audit.log in the data
    # directory, at ``cloister guardian start``: the Go implementation's ``log.file``,
    # so a ``tail -f`` of that path keeps working. The services still write in the data
    # directory only (no other host directory is mounted into them).
    file: str | None = None

    @field_validator("file")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\x00" in value):
            raise ValueError(f"log.file must be a file path, got {value!r}")
        return value


class SnapshotsConfig(Model):
    """``snapshots:``: what ``cloister start`` keeps of a repository for ``cloister restore``."""

    enabled: bool = True
    # Per project, newest first; older ones expire (the newest of each cloister never
    # expires by age: it is the undo of that cloister's last session).
    keep: int = Field(default=10, ge=1, le=1000)
    max_age: Duration = timedelta(days=30)
    # Untracked files larger than this are left out of the uncommitted work kept (a
    # dataset or a build output nobody ignored would otherwise be copied at every start).
    untracked_file_limit: str = "10m"

    @field_validator("untracked_file_limit")
    @classmethod
    def _size(cls, value: str) -> str:
        if not _MEMORY.fullmatch(value):
            raise ValueError(f"not a size: {value!r} (use e.g. '10m', '512k')")
        return value.lower()

    @property
    def untracked_file_bytes(self) -> int:
        return parse_size(self.untracked_file_limit)


_SIZE_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(value: str) -> int:
    """``"10m"`` → 10485760 (a size already checked against ``_MEMORY``)."""
    text = value.strip().lower()
    unit = text[-1] if text[-1] in _SIZE_UNITS else "b"
    number = text[:-1] if text[-1] in _SIZE_UNITS else text
    return int(float(number) * _SIZE_UNITS[unit])


class GitConfig(Model):
    """``git:``: how the agent's commits come back from the cloister's own git directory."""

    # The branch the human has checked out fast-forwards to the agent's when it is still
    # where the agent's work began and nothing is staged; false: only refs/cloister/….
    fast_forward: bool = True


class GlobalConfig(Model):
    """``<config>/config.yaml``.

    Keys of the Go implementation's file are read as Cloister's or set aside
    (:mod:`cloister_core.config.legacy`) before validation.
    """

    proxy: ProxyConfig = ProxyConfig()
    hostexec: HostexecConfig = HostexecConfig()
    defaults: DefaultsConfig = DefaultsConfig()
    guardian: GuardianConfig = GuardianConfig()
    agents: AgentsConfig = AgentsConfig()
    devcontainer: DevcontainerConfig = DevcontainerConfig()
    snapshots: SnapshotsConfig = SnapshotsConfig()
    log: LogConfig = LogConfig()
    protect: ProtectConfig = ProtectConfig()
    git_guardrails: GitGuardrailsConfig = GitGuardrailsConfig()
    git: GitConfig = GitConfig()

    @model_validator(mode="before")
    @classmethod
    def _earlier_keys(cls, data: object) -> object:
        return translate(data)[0] if isinstance(data, Mapping) else data


class ProjectConfig(Model):
    """``<config>/projects/<project>.yaml``: additions for one project."""

    root: str | None = None
    remote: str | None = None
    refs: Annotated[tuple[str, ...], EmptyIfNull] = ()
    proxy: ProxyRules = ProxyRules()
    hostexec: CommandRules = CommandRules()
    protect: ProjectProtectConfig = ProjectProtectConfig()
    git_guardrails: ProjectGitGuardrailsConfig = ProjectGitGuardrailsConfig()


class DecisionFile(ProxyRules):
    """``<config>/decisions/global.yaml``, ``decisions/projects/<p>.yaml`` and
    ``decisions/sessions/<cloister>.yaml``.

    Written by the approval hub, readable and editable by humans (comments are kept).
    The domain lists are under ``proxy:``, as in config.yaml (so an entry can be moved
    between the files as it is); ``allow``/``deny`` at the top, as earlier versions
    wrote them, are read too, and both are merged. ``hostexec.auto_approve`` holds the
    commands a human approved for the project or the session (each the exact command,
    anchored).
    """

    hostexec: CommandRules = CommandRules()

    @model_validator(mode="before")
    @classmethod
    def _proxy_section(cls, data: object) -> object:
        if not isinstance(data, Mapping) or "proxy" not in data:
            return data
        proxy = data["proxy"] if data["proxy"] is not None else {}
        if not isinstance(proxy, Mapping):
            raise ValueError(f"proxy: expected a mapping with allow and deny, got {proxy!r}")
        unknown = [str(key) for key in proxy if key not in ("allow", "deny")]
        if unknown:
            raise ValueError(
                f"proxy: a decision file holds only allow and deny there, got {unknown!r}"
            )
        merged = {key: value for key, value in data.items() if key != "proxy"}
        for action in ("allow", "deny"):
            top, nested = data.get(action), proxy.get(action)
            if isinstance(top, list) and isinstance(nested, list):
                merged[action] = [*top, *nested]
            elif nested is not None:
                merged[action] = nested
        return merged

    @staticmethod
    def source_loc(document: Any, loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
        """Where the item at *loc* of the merged lists is written in *document*."""
        if not (isinstance(document, Mapping) and isinstance(document.get("proxy"), Mapping)):
            return loc
        if len(loc) < 2 or loc[0] not in ("allow", "deny") or not isinstance(loc[1], int):
            return loc
        top = document.get(loc[0])
        before = len(top) if isinstance(top, list) else 0
        if loc[1] < before:
            return loc
        return ("proxy", loc[0], loc[1] - before, *loc[2:])
