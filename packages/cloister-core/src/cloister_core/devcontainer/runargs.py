"""``runArgs``, ``privileged``, ``capAdd`` and ``securityOpt``: an allowlist, with reasons.

``runArgs`` are raw ``docker run`` options, and most of them can undo the cloister's
isolation. Only ``--shm-size`` and ``--hostname`` are kept; ``--init`` is what the
cloister does anyway. Everything else is dropped (or, for a mount of a blocked path,
refused) with the reason; an option this module does not know is dropped as "not
understood" rather than guessed at. Both ``--flag value`` and ``--flag=value`` are
read, and the short forms docker has (``-v``, ``-e``, ``-p``…).

An unknown option followed by an item that is not an option is taken to be that
option's value: both are dropped together, so nothing is kept by mistake either way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cloister_core.devcontainer.blocked import BlockedPaths
from cloister_core.devcontainer.model import Outcome
from cloister_core.devcontainer.mounts import (
    MountParseError,
    parse_mount_string,
    volume_flag_source,
)
from cloister_core.devcontainer.variables import Variables

_SHORT = {
    "-v": "--volume",
    "-e": "--env",
    "-p": "--publish",
    "-P": "--publish-all",
    "-u": "--user",
    "-h": "--hostname",
    "-w": "--workdir",
    "-l": "--label",
    "-m": "--memory",
    "-c": "--cpu-shares",
    "-a": "--attach",
    "-t": "--tty",
    "-i": "--interactive",
    "-d": "--detach",
}
_BOOLEAN = frozenset(
    {
        "--privileged",
        "--init",
        "--rm",
        "--tty",
        "--interactive",
        "--detach",
        "--publish-all",
        "--read-only",
        "--oom-kill-disable",
        "--no-healthcheck",
        "--sig-proxy",
    }
)
_NETWORK = (
    "the cloister's only network is the guardian's internal one; its traffic leaves"
    " through the proxy"
)
_MOUNT = "mounts go in `mounts`, where each is checked"
_LIMITS = "the limits come from `defaults:` in Cloister's config.yaml"
_RUNS = "Cloister decides how the container runs"
_PORTS = "the cloister has no published ports (`cloister port NAME PORT` publishes one)"

# option → (outcome, why)
_OPTIONS: dict[str, tuple[Outcome, str]] = {
    "--privileged": (
        "dropped",
        "gives the container every capability and the host's devices: root on the host",
    ),
    "--cap-add": ("dropped", "adds a capability; the cloister runs with every capability dropped"),
    "--network": ("dropped", _NETWORK),
    "--net": ("dropped", _NETWORK),
    "--network-alias": ("dropped", _NETWORK),
    "--ip": ("dropped", _NETWORK),
    "--link": ("dropped", "links to another container: " + _NETWORK),
    "--add-host": (
        "dropped",
        "names resolve at the proxy, which ignores the container's /etc/hosts; host-gateway"
        " would name the host, which a cloister must not reach",
    ),
    "--dns": ("dropped", "names resolve at the proxy"),
    "--dns-search": ("dropped", "names resolve at the proxy"),
    "--dns-option": ("dropped", "names resolve at the proxy"),
    "--pid": (
        "dropped",
        "shares a process namespace (host: sees and signals the host's processes)",
    ),
    "--ipc": ("dropped", "shares an IPC namespace (host: the host's shared memory)"),
    "--uts": ("dropped", "shares a host name namespace with the host"),
    "--userns": ("dropped", "changes the user namespace (host: turns its remapping off)"),
    "--cgroupns": ("dropped", "shares a cgroup namespace (host: sees the host's cgroups)"),
    "--cgroup-parent": ("dropped", "moves the container out of Docker's cgroup and its limits"),
    "--device": ("dropped", "gives the container a host device"),
    "--device-cgroup-rule": ("dropped", "lets the container open host devices"),
    "--gpus": (
        "dropped",
        "gives the container the host's GPUs and their driver, a large surface; not supported",
    ),
    "--group-add": ("dropped", "adds supplementary groups: a host group's id opens its files"),
    "--sysctl": ("dropped", "changes kernel settings of the container's namespaces"),
    "--runtime": ("dropped", "another runtime than the one Cloister hardens"),
    "--isolation": ("dropped", "another isolation than the one Cloister hardens"),
    "--oom-kill-disable": ("dropped", _LIMITS),
    "--volume": ("dropped", _MOUNT),
    "--mount": ("dropped", _MOUNT),
    "--tmpfs": ("dropped", _MOUNT),
    "--volumes-from": ("dropped", "mounts another container's volumes"),
    "--env": ("dropped", "the environment goes in containerEnv"),
    "--env-file": ("dropped", "reads a file on the host; the environment goes in containerEnv"),
    "--user": ("dropped", "the cloister runs as your uid; a user name goes in remoteUser"),
    "--name": ("dropped", "Cloister names its containers"),
    "--label": ("dropped", "Cloister's labels identify its containers"),
    "--entrypoint": ("dropped", "Cloister runs its own entrypoint"),
    "--restart": ("dropped", _RUNS),
    "--memory": ("dropped", _LIMITS),
    "--memory-swap": ("dropped", _LIMITS),
    "--memory-reservation": ("dropped", _LIMITS),
    "--cpus": ("dropped", _LIMITS),
    "--cpu-shares": ("dropped", _LIMITS),
    "--cpuset-cpus": ("dropped", _LIMITS),
    "--pids-limit": ("dropped", _LIMITS),
    "--ulimit": ("dropped", _LIMITS),
    "--publish": ("ignored", _PORTS),
    "--publish-all": ("ignored", _PORTS),
    "--expose": ("ignored", _PORTS),
    "--cap-drop": ("ignored", "every capability is dropped already"),
    "--init": ("ignored", "the cloister always runs an init"),
    "--rm": ("ignored", _RUNS),
    "--detach": ("ignored", _RUNS),
    "--tty": ("ignored", _RUNS),
    "--interactive": ("ignored", _RUNS),
    "--attach": ("ignored", _RUNS),
    "--workdir": ("ignored", "the cloister starts in the project"),
    "--read-only": ("ignored", _RUNS),
}
_SIZE = re.compile(r"[0-9]+(?:\.[0-9]+)?[bkmg]?b?", re.IGNORECASE)
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_KEPT = {"--shm-size": _SIZE, "--hostname": _HOSTNAME}


@dataclass(frozen=True, slots=True)
class RunArgDecision:
    """One option of ``runArgs`` (with its value, if it took one) and what became of it."""

    index: int  # of its first item in runArgs
    text: str  # as written: "--network host", "--cap-add=SYS_PTRACE"
    outcome: Outcome
    why: str
    kept: tuple[str, ...] = ()  # the argv to pass to docker run, for a kept option


# (key, setting) of --security-opt → why it is dropped; "*" is any other setting.
_SECURITY_OPTS: dict[tuple[str, str], str] = {
    (
        "seccomp",
        "unconfined",
    ): "turns the seccomp filter off: the kernel's whole system call surface",
    ("seccomp", "*"): "replaces Docker's default seccomp profile",
    ("apparmor", "unconfined"): "turns AppArmor confinement off",
    ("apparmor", "*"): "replaces Docker's default AppArmor profile",
    ("label", "*"): "changes the SELinux separation (label=disable turns it off)",
    ("systempaths", "unconfined"): "unmasks the host's /proc and /sys paths",
    ("no-new-privileges", "*"): "lets setuid programs gain privileges",
}


def security_opt(value: str) -> tuple[Outcome, str]:
    """What becomes of one ``--security-opt`` / ``securityOpt`` value."""
    key, _, setting = _split_opt(value)
    key, setting = key.strip().lower(), setting.strip().lower()
    if key == "no-new-privileges" and setting in ("", "true"):
        return "ignored", "no-new-privileges is always on"
    why = _SECURITY_OPTS.get((key, setting)) or _SECURITY_OPTS.get((key, "*"))
    return "dropped", why or "Cloister sets the security options itself"


def _split_opt(value: str) -> tuple[str, str, str]:
    # docker takes both "seccomp=unconfined" and the older "seccomp:unconfined".
    for index, char in enumerate(value):
        if char in "=:":
            return value[:index], char, value[index + 1 :]
    return value, "", ""


def cap_add(value: str) -> tuple[Outcome, str]:
    """What becomes of one ``capAdd`` entry."""
    name = value.strip().upper().removeprefix("CAP_")
    return "dropped", f"adds the capability {name}; the cloister runs with every capability dropped"


def _name_and_value(item: str) -> tuple[str, str | None]:
    """``--flag=value`` → (--flag, value); ``-vX`` → (--volume, X); ``--flag`` → (--flag, None)."""
    if item.startswith("--"):
        name, equals, value = item.partition("=")
        words = name.split()
        if len(words) > 1:  # "--network host" as one item: docker would refuse it too
            return words[0], " ".join(words[1:])
        return name, value if equals else None
    short = item[:2]
    if short not in _SHORT:
        return item, None
    if _SHORT[short] in _BOOLEAN:
        # "-it" is "-i -t"; a cluster with anything but such flags is not understood.
        cluster = [_SHORT.get(f"-{char}", "") for char in item[1:]]
        return (_SHORT[short], None) if all(n in _BOOLEAN for n in cluster) else (item, None)
    return _SHORT[short], item[2:].removeprefix("=") or None


def _mount_decision(
    name: str, value: str, variables: Variables, blocked: BlockedPaths
) -> tuple[Outcome, str]:
    """A -v/--mount: dropped (mounts go through `mounts`), refused if its source is blocked."""
    value = variables.substitute(value).text
    if name == "--mount":
        try:
            fields = parse_mount_string(value)
        except MountParseError:
            fields = {}
        source = fields.get("source") if fields.get("type", "volume") == "bind" else None
    elif name == "--volume":
        source = volume_flag_source(value)
    else:
        source = None
    if source is not None:
        expanded = blocked.expand(source)
        reason = blocked.reason(expanded) if expanded.startswith("/") else None
        if reason is not None:
            return "refused", f"{reason}: no cloister may mount it ({_MOUNT})"
    return _OPTIONS[name]


def _decide(
    name: str, value: str | None, variables: Variables, blocked: BlockedPaths
) -> tuple[Outcome, str, tuple[str, ...]]:
    """(outcome, why, argv kept) for one option and its value."""
    if name in _KEPT:
        if value is not None and _KEPT[name].fullmatch(value):
            return "kept", "harmless", (f"{name}={value}",)
        return "dropped", f"not a valid value for {name}", ()
    if name == "--cap-add":
        return (*cap_add(value or ""), ())
    if name == "--security-opt":
        return (*security_opt(value or ""), ())
    if name in ("--volume", "--mount", "--tmpfs"):
        return (*_mount_decision(name, value or "", variables, blocked), ())
    if name in _OPTIONS:
        return (*_OPTIONS[name], ())
    return "dropped", "not understood", ()


def check_run_args(
    args: Sequence[str], *, variables: Variables, blocked: BlockedPaths
) -> tuple[RunArgDecision, ...]:
    """Decide every option of ``runArgs``; the kept argv is in each decision's ``kept``."""
    decisions: list[RunArgDecision] = []
    index = 0
    while index < len(args):
        start, item = index, args[index]
        index += 1
        if not item.startswith("-") or item in ("-", "--"):
            decisions.append(
                RunArgDecision(start, item, "dropped", "not understood: not an option")
            )
            continue
        name, value = _name_and_value(item)
        takes_next = index < len(args) and not args[index].startswith("-")
        if value is None and name not in _BOOLEAN and takes_next:
            value, index = args[index], index + 1
        outcome, why, kept = _decide(name, value, variables, blocked)
        decisions.append(RunArgDecision(start, " ".join(args[start:index]), outcome, why, kept))
    return tuple(decisions)
