"""Each agent's state directory: kept per project on the host, set up at every start.

``<data>/agents/<project>/<agent>/`` is bind-mounted read-write at the agent's state
directory in the cloister (``/home/cloister/.claude``), so sessions and history
survive ``stop`` and ``start`` (``claude --resume``); ``cloister project remove
--volumes`` deletes it. It is a host directory rather than a named volume so that it
belongs to the host user whatever uid the image was built with.

The agent writes there between starts, so the CLI treats it as hostile when it
writes the files of :meth:`Agent.home_files`: every operation walks from the
directory with ``O_NOFOLLOW`` (:mod:`cloister_core.beneath`), files are replaced
whole by a rename, and a JSON or TOML file the agent keeps state in (Claude's
``.claude.json``) is read (bounded, regular files only), and the forced values are
merged onto it. Nothing on the host ever runs or follows what is in there.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from cloister_cli import agents
from cloister_cli.repo.gitmounts import bind
from cloister_core import beneath, stack
from cloister_core.errors import CloisterError
from cloister_core.names import validate_name
from cloister_core.paths import CloisterPaths

if TYPE_CHECKING:
    from docker.types import Mount

    from cloister_cli.agents import Agent, HomeFile
    from cloister_core.config.models import GlobalConfig, ProjectConfig
    from cloister_core.credentials import Method
    from cloister_core.tokens import TokenRecord

MERGE_LIMIT = 16 * 1024 * 1024  # a state file larger than this is replaced, not merged
MAX_DEPTH = 32  # a state file nested deeper than this is replaced, not merged
GIT = ".git"
NOT_SET_UP: Method = "api-key"  # an agent not set up still talks to the gateway, which says so


def agents_dir(paths: CloisterPaths, project: str) -> Path:
    return paths.data_dir / "agents" / validate_name(project, what="project name")


def state_dir(paths: CloisterPaths, project: str, agent: str) -> Path:
    return agents_dir(paths, project) / agent


@dataclass(frozen=True, slots=True)
class AgentPlan:
    """What the agents add to a cloister: variables, state mounts, and what went wrong."""

    environment: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    warnings: tuple[str, ...] = ()


def write_home_file(root: Path, item: HomeFile) -> bool:
    """Write *item* below *root* (no link followed); whether it was written.

    A login file (``host_mtime``) replaces the copy in *root* only when the host's is
    newer: the agent refreshes its copy in place. A JSON or TOML file is merged onto
    the one there (the forced values win), so the agent's own state in it stays.
    """
    relative = item.path
    parent = str(PurePosixPath(relative).parent)
    if parent != ".":
        beneath.make_directories(root, parent)
    existing = beneath.lstat_below(root, relative)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise OSError(f"{root / relative} is a directory")
    if item.host_mtime is not None:
        if (
            existing is not None
            and stat.S_ISREG(existing.st_mode)
            and existing.st_mtime >= item.host_mtime
        ):
            return False
        beneath.replace_file(root, relative, item.content, item.mode)
        return True
    content = item.content
    if existing is not None and stat.S_ISREG(existing.st_mode):
        content = _merged(root, item) or content
    beneath.replace_file(root, relative, content, item.mode)
    return True


def _merged(root: Path, item: HomeFile) -> bytes | None:
    """*item* merged onto the file of the same name in *root*; None to replace it.

    The file there is the agent's: read bounded, parsed, refused when nested deeper
    than a config file ever is, and written back compactly and bounded, so a planted
    file can neither exhaust the host nor break the start.
    """
    suffix = PurePosixPath(item.path).suffix
    if suffix not in (".json", ".toml"):
        return None
    data = beneath.read_regular_bytes(root, item.path, MERGE_LIMIT + 1)
    if data is None or len(data) > MERGE_LIMIT:
        return None
    from cloister_cli.agents.base import deep_merge, toml_file  # noqa: PLC0415 - see disarm

    try:
        if suffix == ".json":
            below: Any = json.loads(data)
            top: Any = json.loads(item.content)
        else:
            below, top = tomllib.loads(data.decode()), tomllib.loads(item.content.decode())
        if not isinstance(below, dict) or not isinstance(top, dict) or _depth(below) > MAX_DEPTH:
            return None
        merged = deep_merge(below, top)
        if suffix == ".json":
            content = (json.dumps(merged, separators=(",", ":")) + "\n").encode()
        else:
            content = toml_file(item.path, merged, item.mode).content
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None  # broken (or a value the TOML writer does not know): the forced file
    return content if len(content) <= MERGE_LIMIT else None


def _depth(value: object, limit: int = MAX_DEPTH + 1) -> int:
    """How deeply *value* nests (counting stops past *limit*), without recursion."""
    deepest = 0
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        node, level = pending.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            pending.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            pending.extend((child, level + 1) for child in node)
    return deepest


def forget_logins(root: Path, agent: Agent) -> list[str]:
    """Remove *agent*'s login files from its state directory; the names removed.

    Run whenever its method is not existing-login: a real credential copied in earlier
    (or one the human logged in with inside) must not outlive that choice.
    """
    removed = []
    for relative in agent.login_paths:
        with contextlib.suppress(OSError):
            if beneath.unlink_regular(root, relative):
                removed.append(relative)
    return removed


def disarm_repositories(root: Path, limit: int = 50_000) -> list[str]:
    """Rename every ``.git`` below *root* to ``.git.disabled-by-cloister``; what was renamed.

    A repository the agent plants in its state directory would run its code (its
    fsmonitor, hooks) in the human's git-aware prompt or editor that opens the
    directory. Walked without following links (nor recursion: the agent nests as deep as
    it likes), at most *limit* entries.
    """
    renamed: list[str] = []
    seen = 0
    for directory, subdirectories, files, fd in beneath.fwalk(root):
        seen += len(subdirectories) + len(files)
        if seen > limit:
            break
        if GIT in subdirectories or GIT in files:
            subdirectories[:] = [name for name in subdirectories if name != GIT]
            relative = Path(directory).relative_to(root)
            target = str(relative / GIT) if relative.parts else GIT
            # Relative to the directory listed: the same one however deep, one step.
            with contextlib.suppress(OSError):
                os.rename(GIT, f"{GIT}.disabled-by-cloister", src_dir_fd=fd, dst_dir_fd=fd)
                renamed.append(target)
    return renamed


def prepare(
    paths: CloisterPaths,
    *,
    record: TokenRecord,
    config: GlobalConfig,
    project_config: ProjectConfig,
    host_home: Path,
    home: str,
    refs: list[str],
    chosen: str | None,
    write: bool = True,
) -> AgentPlan:
    """Set up every agent's state directory for cloister *record*; their variables and mounts.

    An agent whose setup fails (an ``existing-login`` whose login is gone) is left out
    with a warning, unless it is *chosen* (the agent to attach to): then the start fails.
    With *write* False nothing is written (``cloister start --dry-run``): the same
    variables and mounts, the files checked but not made.
    """
    from cloister_core import credentials  # noqa: PLC0415 - see disarm

    environment: dict[str, str] = {}
    mounts: list[Mount] = []
    warnings: list[str] = []
    rules = agents.rules_text(
        cloister=record.cloister,
        project=record.project,
        refs=refs,
        hostexec_auto=[
            rule.pattern
            for rules in (config.hostexec, project_config.hostexec)
            for rule in rules.auto_approve
        ],
        hostexec_manual=[
            rule.pattern
            for rules in (config.hostexec, project_config.hostexec)
            for rule in rules.manual_approve
        ],
    )
    for agent in agents.AGENTS.values():
        try:
            variables, mount = _prepare_one(
                paths,
                agent,
                record,
                config,
                host_home=host_home,
                home=home,
                rules=rules,
                write=write,
            )
        except (agents.AgentSetupError, credentials.CredentialError) as error:
            if agent.name == chosen:
                raise
            warnings.append(f"{agent.title} is not set up in this cloister: {error}")
            continue
        environment |= variables
        mounts.append(mount)
    return AgentPlan(environment, mounts, tuple(warnings))


def _prepare_one(
    paths: CloisterPaths,
    agent: Agent,
    record: TokenRecord,
    config: GlobalConfig,
    *,
    host_home: Path,
    home: str,
    rules: str,
    write: bool = True,
) -> tuple[dict[str, str], Mount]:
    from cloister_core import credentials  # noqa: PLC0415 - see disarm

    settings = config.agents.of(agent.name)
    stored = credentials.load(paths, agent.name)
    method: Method = stored.method if stored is not None else NOT_SET_UP
    gateway_url = stack.credentials_url(credentials.PROVIDERS[agent.name].prefix)
    variables = agent.environment(
        home=home,
        gateway_url=gateway_url,
        token=record.secret,
        method=method,
        skip_permissions=settings.skip_permissions,
        extra=settings.env,
    )
    files = agent.home_files(
        host_home=host_home,
        method=method,
        skip_permissions=settings.skip_permissions,
        rules=rules,
        gateway_url=gateway_url,
    )
    root = state_dir(paths, record.project, agent.name)
    if not write:
        return variables, bind(root, agent.config_dir(home), read_only=False)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    disarm_repositories(root)
    if method != "existing-login":
        forget_logins(root, agent)
    for item in files:
        try:
            write_home_file(root, item)
        except OSError as error:
            raise agents.AgentSetupError(
                f"cannot write {item.path} in {root}: {error.strerror or error}"
                " (something in the agent's state directory is in the way)"
            ) from None
    return variables, bind(root, agent.config_dir(home), read_only=False)


def remove(paths: CloisterPaths, project: str) -> Path | None:
    """Delete the agents' state of *project* (``project remove --volumes``); what was deleted."""
    directory = agents_dir(paths, project)
    if not directory.exists():
        return None
    try:
        make_writable(directory)
        beneath.remove_tree(directory)
    except OSError as error:
        raise CloisterError(f"cannot delete {directory}: {error.strerror or error}") from None
    return directory


def make_writable(directory: Path) -> None:
    """Every directory below *directory* 0700 (the agent may have made some read-only),
    links never followed: nothing of the agent runs while its project is removed."""
    for current, subdirectories, _ in beneath.walk(directory):
        for name in subdirectories:
            path = Path(current) / name
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(path.lstat().st_mode):
                    path.chmod(0o700)


def disarm(paths: CloisterPaths, project: str) -> list[str]:
    """:func:`disarm_repositories` in every agent state directory of *project*.

    Run at every ``cloister stop``, which imports this module: the agents' modules and
    the credentials' models (what setting the directories up needs) are imported by
    the functions that use them, never for this."""
    found = []
    for agent in agents.NAMES:
        root = state_dir(paths, project, agent)
        if root.is_dir() and not root.is_symlink():
            found += [f"{agent}/{path}" for path in disarm_repositories(root)]
    return found


def attach_argv(name: str, config: GlobalConfig) -> list[str]:
    """What ``start --agent NAME`` runs: an agent's own command line, else *name* itself."""
    agent = agents.AGENTS.get(name)
    if agent is None:
        return [name]
    return agent.argv(skip_permissions=config.agents.of(name).skip_permissions)
