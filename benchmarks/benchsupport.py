"""What the command-line benchmarks share: finding executables and summing up timings."""

from __future__ import annotations

import json
import shutil
import socket
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


class BenchError(RuntimeError):
    """A command the benchmark relies on failed."""


def executable(name: str) -> str:
    """*name* from the running environment's bin directory, else from PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise BenchError(f"no {name!r} on PATH (run through `uv run`)")
    return found


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, 90th percentile, min and max of *values*."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, max(0, round(0.9 * len(ordered)) - 1))]
    return {
        "median": statistics.median(ordered),
        "p90": p90,
        "min": ordered[0],
        "max": ordered[-1],
    }


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now: the guardian's UI port, so that a
    benchmark's guardian stands beside the user's own (default 9999) and others."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def remove_networks(docker: str, label_filter: str) -> None:
    """The networks a benchmark's guardian instance left (`guardian stop` keeps its own
    three, so that a later start finds them): Docker's address pools are finite."""
    left = subprocess.run(
        [docker, "network", "ls", "-q", "--filter", f"label={label_filter}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if left:
        subprocess.run([docker, "network", "rm", *left], capture_output=True, check=False)


def bridge_gateway(docker: str) -> str:
    """The host's address on Docker's default bridge (``docker0``, e.g. 172.17.0.1): where
    a benchmark serves a fake upstream that the guardian's containers can reach, and that
    is none of the guardian's own networks."""
    inspected = subprocess.run(
        [docker, "network", "inspect", "bridge", "-f", "{{json .IPAM.Config}}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if inspected.returncode != 0:
        raise BenchError(f"docker network inspect bridge: {inspected.stderr.strip()!r}")
    for pool in json.loads(inspected.stdout) or []:
        if pool.get("Gateway") and ":" not in pool["Gateway"]:
            return str(pool["Gateway"])
    raise BenchError(f"Docker's default bridge has no IPv4 gateway: {inspected.stdout!r}")


def container_cgroup(docker: str, container: str) -> Path:
    """The memory cgroup directory of *container* (cgroup v1 or v2), read from /proc."""
    inspected = subprocess.run(
        [docker, "inspect", "-f", "{{.State.Pid}}", container],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if inspected.returncode != 0 or not inspected.stdout.strip().isdigit():
        raise BenchError(f"docker inspect {container}: {inspected.stderr.strip()!r}")
    pid = inspected.stdout.strip()
    for line in Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8").splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.lstrip("/")
    raise BenchError(f"no memory cgroup for {container} (pid {pid})")


def cgroup_memory(cgroup: Path) -> dict[str, int]:
    """Bytes: ``rss``, the resident sets of the cgroup's processes summed (VmRSS, from
    /proc), and ``cgroup``, what the kernel charges the cgroup (page cache and socket
    buffers included)."""
    rss = 0
    for pid in (cgroup / "cgroup.procs").read_text(encoding="utf-8").split():
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        except OSError:
            continue  # gone meanwhile
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
    usage = cgroup / "memory.current"
    if not usage.exists():
        usage = cgroup / "memory.usage_in_bytes"
    return {"rss": rss, "cgroup": int(usage.read_text(encoding="utf-8"))}
