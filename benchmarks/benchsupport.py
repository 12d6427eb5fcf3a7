"""What the command-line benchmarks share: finding executables and summing up timings."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any


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
    """A TCP port free on 127.0.0.1 just now: a service's under test, or the guardian's UI
    port, so that a benchmark's guardian stands beside the user's own (default 9999)."""
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


# -- child processes (the proxy and gateway benchmarks) ---------------------------------------


_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None = None


def _die_with_parent() -> None:
    """In a new child (before exec): SIGTERM it if the benchmark itself dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Processes:
    """Every child process we start; :meth:`stop` ends and reaps them (no zombies).

    Children run in their own process group, so a Ctrl-C reaches only the benchmark,
    which then stops them in order (the proxy is not interrupted mid-measurement), and
    each one gets SIGTERM from the kernel should the benchmark be killed outright.
    """

    def __init__(self) -> None:
        self._children: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        global _prctl  # noqa: PLW0603 - resolved once, in the parent, never after fork
        if _prctl is None and sys.platform == "linux":
            with contextlib.suppress(OSError, AttributeError):
                _prctl = ctypes.CDLL(None, use_errno=True).prctl
        # The benchmark has no threads of its own, so a pre-exec hook is safe here.
        child = subprocess.Popen(
            argv,
            process_group=0,
            preexec_fn=_die_with_parent,  # noqa: PLW1509
            **options,
        )
        self._children.append(child)
        return child

    def stop(self, child: subprocess.Popen[bytes]) -> None:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)  # a profiled child writes its stats first
            except subprocess.TimeoutExpired:
                child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if child in self._children:
            self._children.remove(child)

    def stop_all(self) -> None:
        for child in reversed(list(self._children)):
            self.stop(child)


def read_line(stream: IO[bytes], deadline: float, what: str) -> bytes:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"timed out waiting for {what}")
        ready, _, _ = select.select([stream], [], [], remaining)
        if ready:
            line = stream.readline()
            if not line:
                raise BenchError(f"{what}: the process exited")
            return line


def pipe(stream: IO[bytes] | None) -> IO[bytes]:
    if stream is None:
        raise BenchError("a child process has no pipe")
    return stream


def wait_listening(
    port: int,
    child: subprocess.Popen[bytes],
    what: str,
    log: Path | None = None,
    timeout: float = 20.0,
) -> None:
    """Poll connect() until something accepts on *port*, the child dies, or time is up;
    the end of *log* (the child's output) says why it died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise BenchError(f"{what} exited with {child.returncode}: {log_tail(log)}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise BenchError(f"{what} did not accept connections within {timeout:.0f} s")


def log_tail(log: Path | None, lines: int = 20) -> str:
    if log is None:
        return ""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            for child in (task / "children").read_text().split():
                pids.extend(_descendants(int(child)))
    return pids


def rss_kib(pid: int) -> int:
    """VmRSS of *pid* and its descendants, in KiB."""
    total = 0
    for each in _descendants(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of *pid* and its descendants (all threads)."""
    ticks = 0
    for each in _descendants(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def host_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle (all CPUs, softirq included)."""
    fields = [int(each) for each in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return sum(len(list(Path(f"/proc/{each}/fd").iterdir())) for each in _descendants(pid))
