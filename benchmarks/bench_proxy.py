"""Benchmark: the Cloister proxy against no proxy and tinyproxy, on loopback.

One run starts everything it needs and stops it again: upstream servers on 127.0.0.1
(a separate process running this file with the hidden ``--serve-upstream`` mode, so
they never share a GIL with the client), the Cloister proxy (``python -m
cloister_proxy.main`` with a temporary config dir and tokens), and tinyproxy when it is
on PATH (``apt-get install tinyproxy`` enables that column). Then it measures direct
(no proxy), cloister and tinyproxy. Bulk transfers and latency samples are taken in
rounds that visit every column in turn, so load from other processes that comes and
goes on a shared machine hits all columns alike:

1. download MB/s over ONE tunnel: the upstream streams --bytes on connect
   (``os.sendfile`` from an unlinked file in /dev/shm); the client ``recv_into``s a
   4 MiB buffer. Timed from the start of the TCP connect to the last byte. Bulk runs
   are repeated --repeat times (loopback on a VM is noisy); the median is reported.
2. upload MB/s over one tunnel: the client ``sendall``s a 4 MiB memoryview until
   --bytes, shuts down its write side and waits for the sink's byte count (checked).
   The sink counts until EOF, as the issue describes; a 1 MiB probe first checks that
   the proxy carries the half-close through. A proxy that does not (tinyproxy closes
   both sides when the client's EOF arrives, so the count never comes back) is measured
   with a length-prefixed upload instead (the sink answers after n bytes, the client
   reads the count before closing), and the report says so.
3. connections/s at --concurrency (32) for --duration seconds: each operation is a new
   TCP connection, CONNECT with Proxy-Authorization, the 200, one ``ping`` line and
   its ``pong``, close (direct: connect, ping, pong, close). The load comes from
   --workers processes (this file, hidden ``--load-worker`` mode; default one per
   CPU), each one uvloop event loop driving concurrency/workers connections with
   non-blocking sockets. One event loop per core costs far less CPU per connection
   than blocking threads, which matters on a 2-core machine where the generator, the
   proxy, the upstream and the kernel's loopback TCP all share the CPUs (there, two
   workers gave both proxies higher figures than one). The report shows the CPU used
   by the proxy, the upstream, the generator and the whole machine during the run, so
   a saturated generator or machine is visible rather than silently capping the figure.
4. p50/p99 connect-to-first-byte latency: one client, blocking sockets, --latency-ops
   operations after a warm-up, from the start of the TCP connect to the first byte of
   the upstream's ``pong`` (through a proxy: connect, CONNECT, 200, ping, first byte).
5. (proxies only) RSS of the proxy (VmRSS from /proc, summed over the process and its
   descendants; tinyproxy 1.11 uses threads, so that is one process) before and after
   opening --idle-tunnels tunnels to the ping server, all held open at once. The
   Cloister proxy allows 512 connections per token by default, so the tunnels are
   spread over --tokens cloister tokens (as several cloisters would).

"server CPU" is the proxy's CPU time (user + system, all threads) per second of the
phase, in cores; for the direct column it is the upstream servers'. Before starting, the
machine's background load is sampled for a second; if other processes keep the CPUs
busy, the report says so, since every figure then suffers.

MB/s means 10^6 bytes per second. Everything is cleaned up on exit and on Ctrl-C
(children run in their own process group and die with the benchmark).

    uv run python benchmarks/bench_proxy.py
    uv run python benchmarks/bench_proxy.py --bytes 4G --duration 10 --json
    uv run python benchmarks/bench_proxy.py --no-tinyproxy --workers 1
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, cast

import uvloop

from benchsupport import (
    BenchError,
    Processes,
    cpu_seconds,
    free_port,
    host_busy_seconds,
    open_fds,
    pipe,
    read_line,
    rss_kib,
    wait_listening,
)
from cloister_core.tokens import TokenRecord, write_token_file

PING = b"ping\n"
PONG = b"pong\n"
MB = 1_000_000
MIB = 1 << 20
BULK_BUFFER = 4 * MIB
BLOB_SIZE = 16 * MIB
HALF_CLOSE_PROBE = MIB
READY_TIMEOUT = 20.0
IO_TIMEOUT = 60.0
LATENCY_WARMUP = 200
LATENCY_ROUND = 250  # latency samples per target per round
BUSY_MACHINE = 0.2  # cores of background load worth a warning

TARGETS = {
    "download MB/s": "tunnel throughput >= 60% of direct loopback (tinyproxy ~16%)",
    "connections/s": "cloister >= tinyproxy",
    "added p50 latency": "<= 0.3 ms over direct",
    "RSS, 1000 idle tunnels": "< 150 MiB",
}


# -- the upstream servers (hidden --serve-upstream mode, its own process) ------------------


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    return sock


def _accept_forever(listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def _stream_download(conn: socket.socket, blob: int, total: int) -> None:
    """Send *total* bytes as fast as the kernel goes: sendfile from a tmpfs file."""
    with conn:
        sent = 0
        with contextlib.suppress(OSError):
            while sent < total:
                offset = sent % BLOB_SIZE
                count = os.sendfile(
                    conn.fileno(), blob, offset, min(total - sent, BLOB_SIZE - offset)
                )
                if count == 0:
                    break
                sent += count


def _sink(conn: socket.socket) -> None:
    """Read ``<n>\\n`` or ``*\\n``, then bytes until n (or EOF); reply with the count."""
    with conn, contextlib.suppress(OSError):
        head = b""
        while b"\n" not in head:
            data = conn.recv(64)
            if not data:
                return
            head += data
        line, rest = head.split(b"\n", 1)
        expected = None if line == b"*" else int(line)
        count = len(rest)
        buffer = bytearray(BULK_BUFFER)
        while expected is None or count < expected:
            got = conn.recv_into(buffer)
            if not got:
                break
            count += got
        conn.sendall(b"%d\n" % count)


class _Ping(asyncio.Protocol):
    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        lines = data.count(b"\n")
        if lines and self._transport is not None:
            self._transport.write(PONG * lines)


async def _serve_ping(listener: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Ping, sock=listener, backlog=4096)
    async with server:
        await server.serve_forever()


def serve_upstream(total: int) -> None:
    """Run the three upstream servers until stdin closes or SIGTERM arrives."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us, in order
    shm = Path("/dev/shm")  # noqa: S108 - an unlinked scratch file, never a name
    with tempfile.TemporaryFile(dir=shm if shm.is_dir() else None) as blob:
        blob.write(bytes(range(256)) * (BLOB_SIZE // 256))
        blob.flush()
        download, upload, ping = _listener(), _listener(), _listener()
        fd = blob.fileno()
        threading.Thread(
            target=_accept_forever,
            args=(download, lambda conn: _stream_download(conn, fd, total)),
            daemon=True,
        ).start()
        threading.Thread(target=_accept_forever, args=(upload, _sink), daemon=True).start()
        # The parent holds our stdin; EOF means it is gone, so we go too.
        threading.Thread(target=lambda: (sys.stdin.buffer.read(), os._exit(0)), daemon=True).start()
        ports = {
            "download": download.getsockname()[1],
            "upload": upload.getsockname()[1],
            "ping": ping.getsockname()[1],
        }
        print(json.dumps(ports), flush=True)
        uvloop.run(_serve_ping(ping))


# -- talking through a proxy ------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """How to reach an upstream port: directly, or through a proxy with CONNECT."""

    name: str
    proxy: tuple[str, int] | None
    credentials: tuple[str, ...] = ()

    def address(self, port: int) -> tuple[str, int]:
        return self.proxy if self.proxy is not None else ("127.0.0.1", port)

    def request(self, port: int, index: int = 0) -> bytes:
        """The CONNECT head for *port* (empty when direct); token number *index*."""
        if self.proxy is None:
            return b""
        lines = [f"CONNECT 127.0.0.1:{port} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
        if self.credentials:
            token = self.credentials[index % len(self.credentials)]
            basic = base64.b64encode(f"x:{token}".encode()).decode()
            lines.append(f"Proxy-Authorization: Basic {basic}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _check_status(head: bytes) -> None:
    status = head.split(b"\r\n", 1)[0]
    parts = status.split(b" ", 2)
    if len(parts) < 2 or parts[1] != b"200":
        raise BenchError(f"proxy answered {status.decode(errors='replace')!r}")


def _open(
    route: Route, port: int, index: int = 0, timeout: float = IO_TIMEOUT
) -> tuple[socket.socket, bytes]:
    """A blocking socket to *port* (tunnel established); returns it and early bytes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.connect(route.address(port))
        request = route.request(port, index)
        if not request:
            return sock, b""
        sock.sendall(request)
        buffer = b""
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            data = sock.recv(4096)
            if not data:
                raise BenchError(f"{route.name}: connection closed before the CONNECT answer")
            buffer += data
        _check_status(buffer[:end])
        return sock, buffer[end + 4 :]
    except BaseException:
        sock.close()
        raise


# -- 1. and 2.: bulk throughput ---------------------------------------------------------------


def bulk_download(route: Route, port: int, total: int) -> float:
    """MB/s of one *total*-byte download."""
    buffer = bytearray(BULK_BUFFER)
    started = time.perf_counter()
    sock, early = _open(route, port)
    with sock:
        received = len(early)
        while received < total:
            got = sock.recv_into(buffer)
            if not got:
                raise BenchError(f"{route.name}: download ended after {received} of {total} bytes")
            received += got
        elapsed = time.perf_counter() - started
        if received != total:
            raise BenchError(f"{route.name}: download got {received} bytes, expected {total}")
    return total / elapsed / MB


def _upload(route: Route, port: int, total: int, *, length_prefixed: bool) -> float:
    chunk = memoryview(bytes(range(256)) * (BULK_BUFFER // 256))
    started = time.perf_counter()
    sock, _ = _open(route, port)
    with sock:
        sock.sendall(b"%d\n" % total if length_prefixed else b"*\n")
        remaining = total
        while remaining:
            piece = chunk[: min(remaining, len(chunk))]
            sock.sendall(piece)
            remaining -= len(piece)
        if not length_prefixed:
            sock.shutdown(socket.SHUT_WR)  # the sink counts until EOF
        reply = b""
        while not reply.endswith(b"\n"):
            data = sock.recv(64)
            if not data:
                raise BenchError(f"{route.name}: upload sink's count never arrived")
            reply += data
        elapsed = time.perf_counter() - started
    if int(reply) != total:
        raise BenchError(f"{route.name}: sink counted {int(reply)} bytes, expected {total}")
    return total / elapsed / MB


def half_close_works(route: Route, port: int) -> bool:
    """Does the sink's reply still arrive after the client's SHUT_WR?"""
    try:
        _upload(route, port, HALF_CLOSE_PROBE, length_prefixed=False)
    except (BenchError, OSError):
        return False
    return True


# -- 3.: connections per second (hidden --load-worker mode, own processes) ----------------


class _RefusedError(Exception):
    pass


async def _one_operation(
    loop: asyncio.AbstractEventLoop, address: tuple[str, int], request: bytes
) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, address)
        early = b""
        if request:
            await loop.sock_sendall(sock, request)
            buffer = b""
            while (end := buffer.find(b"\r\n\r\n")) < 0:
                data = await loop.sock_recv(sock, 4096)
                if not data:
                    raise _RefusedError("closed before the CONNECT answer")
                buffer += data
            if buffer[9:12] != b"200":
                raise _RefusedError(buffer.split(b"\r\n", 1)[0].decode(errors="replace"))
            early = buffer[end + 4 :]
        await loop.sock_sendall(sock, PING)
        reply = early
        while len(reply) < len(PONG):
            data = await loop.sock_recv(sock, 64)
            if not data:
                raise _RefusedError("closed before the pong")
            reply += data
    finally:
        sock.close()


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    address = (str(spec["host"]), int(spec["port"]))
    request = base64.b64decode(spec["request"])
    latencies: list[float] = []
    errors: dict[str, int] = {}
    cpu_start = time.process_time()

    clock = time.perf_counter  # uvloop's loop.time() only has millisecond resolution
    begin = clock()
    measure_from = begin + float(spec["warmup"])
    end = measure_from + float(spec["duration"])

    async def client() -> None:
        while clock() < end:
            started = clock()
            try:
                await _one_operation(loop, address, request)
            except (OSError, _RefusedError) as error:
                key = f"{type(error).__name__}: {error}"
                errors[key] = errors.get(key, 0) + 1
                await asyncio.sleep(0.001)
                continue
            finished = clock()
            if measure_from <= finished < end:
                latencies.append(round((finished - started) * 1000, 3))

    await asyncio.gather(*(client() for _ in range(int(spec["connections"]))))
    return {
        "ops": len(latencies),
        "latencies_ms": latencies,
        "errors": errors,
        "cpu_seconds": time.process_time() - cpu_start,
        "wall_seconds": clock() - begin,
    }


def load_worker(spec_json: str) -> None:
    """Print ``ready``, wait for ``go`` on stdin, run the load, write the JSON result
    to the spec's ``out`` file (every latency sample: too much for a pipe line), print
    ``done``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = json.loads(spec_json)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    result = uvloop.run(_load(spec))
    Path(spec["out"]).write_text(json.dumps(result))
    print("done", flush=True)


# -- one target ---------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    download_mbps: float | None = None
    upload_mbps: float | None = None
    upload_half_close: bool | None = None
    conn_per_s: float | None = None
    conn_errors: dict[str, int] = field(default_factory=dict)
    conn_op_p50_ms: float | None = None
    conn_op_p99_ms: float | None = None
    loadgen_cpu: float | None = None
    server_cpu_download: float | None = None
    server_cpu_upload: float | None = None
    server_cpu_conn: float | None = None
    upstream_cpu_conn: float | None = None
    host_cpu_conn: float | None = None
    other_cpu_conn: float | None = None
    download_runs: list[float] = field(default_factory=list)
    upload_runs: list[float] = field(default_factory=list)
    p50_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    rss_before_mib: float | None = None
    rss_after_mib: float | None = None
    rss_closed_mib: float | None = None
    rss_per_tunnel_kib: float | None = None
    fds_per_tunnel: float | None = None
    notes: list[str] = field(default_factory=list)
    log: str = ""


@dataclass
class Setup:
    options: argparse.Namespace
    processes: Processes
    ports: dict[str, int]
    script: Path
    upstream_pid: int
    scratch: Path


def _percentile(sorted_values: list[float], percent: float) -> float:
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def measure_latency(route: Route, port: int, ops: int) -> list[float]:
    """*ops* samples, in ms, from starting the connect to the first byte of the pong."""
    timer = time.perf_counter_ns
    samples: list[float] = []
    for _ in range(ops):
        started = timer()
        sock, early = _open(route, port, timeout=10)
        with sock:
            sock.sendall(PING)
            reply = early or sock.recv(64)
            first = timer()
            while len(reply) < len(PONG):
                data = sock.recv(64)
                if not data:
                    raise BenchError(f"{route.name}: closed before the pong")
                reply += data
        samples.append((first - started) / 1e6)
    return samples


def measure_connections(setup: Setup, route: Route, server_pid: int) -> dict[str, Any]:
    options = setup.options
    workers = max(1, min(options.workers, options.concurrency))
    port = setup.ports["ping"]
    host, target_port = route.address(port)
    children = []
    outputs: list[Path] = []
    try:
        for index in range(workers):
            share = options.concurrency // workers + (index < options.concurrency % workers)
            spec = {
                "host": host,
                "port": target_port,
                "request": base64.b64encode(route.request(port)).decode(),
                "connections": share,
                "warmup": options.warmup,
                "duration": options.duration,
                "out": str(setup.scratch / f"load-{route.name}-{index}.json"),
            }
            outputs.append(Path(spec["out"]))
            children.append(
                setup.processes.start(
                    [sys.executable, str(setup.script), "--load-worker", json.dumps(spec)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
            )
        deadline = time.monotonic() + READY_TIMEOUT
        for child in children:
            read_line(pipe(child.stdout), deadline, "a load worker to start")
        upstream_pid = setup.upstream_pid
        cpu_before = cpu_seconds(server_pid)
        upstream_before = cpu_seconds(upstream_pid)
        host_before = host_busy_seconds()
        wall_before = time.monotonic()
        for child in children:
            stdin = pipe(child.stdin)
            stdin.write(b"go\n")
            stdin.flush()
        deadline = time.monotonic() + options.warmup + options.duration + 30
        results = []
        for child, spec_out in zip(children, outputs, strict=True):
            read_line(pipe(child.stdout), deadline, "a load worker")
            results.append(json.loads(spec_out.read_text()))
        wall = time.monotonic() - wall_before
        cpu = (cpu_seconds(server_pid) - cpu_before) / wall
        upstream_cpu = (cpu_seconds(upstream_pid) - upstream_before) / wall
        host_cpu = (host_busy_seconds() - host_before) / wall
        loadgen_cpu = sum(each["cpu_seconds"] / each["wall_seconds"] for each in results)
        ours = cpu + loadgen_cpu + (upstream_cpu if server_pid != upstream_pid else 0.0)
    finally:
        for child in children:
            setup.processes.stop(child)
    errors: dict[str, int] = {}
    for each in results:
        for key, count in each["errors"].items():
            errors[key] = errors.get(key, 0) + count
    latencies = sorted(value for each in results for value in each["latencies_ms"])
    return {
        "conn_per_s": len(latencies) / options.duration,
        "errors": errors,
        "loadgen_cpu": loadgen_cpu,
        "server_cpu": cpu,
        "upstream_cpu": upstream_cpu if server_pid != upstream_pid else None,
        "host_cpu": host_cpu,
        "other_cpu": max(0.0, host_cpu - ours),
        "op_p50_ms": _percentile(latencies, 50) if latencies else None,
        "op_p99_ms": _percentile(latencies, 99) if latencies else None,
    }


def _settle_fds(pid: int, deadline: float = 3.0) -> None:
    """Wait (polling) until the process's descriptor count holds still for a moment."""
    end = time.monotonic() + deadline
    last, steady = open_fds(pid), 0
    while steady < 5 and time.monotonic() < end:
        time.sleep(0.02)
        now = open_fds(pid)
        steady = steady + 1 if now == last else 0
        last = now


def idle_tunnels(route: Route, port: int, pid: int, count: int) -> dict[str, float]:
    """RSS before/after holding *count* idle tunnels open, and after closing them."""
    _settle_fds(pid)  # connections of earlier tests may still be closing
    before_rss, before_fds = rss_kib(pid), open_fds(pid)
    tunnels: list[socket.socket] = []
    try:
        for index in range(count):
            sock, _ = _open(route, port, index=index, timeout=10)
            tunnels.append(sock)
        # Every 200 has arrived, so the proxy holds both sockets of every tunnel now.
        after_rss, after_fds = rss_kib(pid), open_fds(pid)
    finally:
        for sock in tunnels:
            sock.close()
    deadline = time.monotonic() + 10
    while open_fds(pid) > before_fds + 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    return {
        "rss_before_mib": before_rss / 1024,
        "rss_after_mib": after_rss / 1024,
        "rss_closed_mib": rss_kib(pid) / 1024,
        "rss_per_tunnel_kib": (after_rss - before_rss) / count,
        "fds_per_tunnel": (after_fds - before_fds) / count,
    }


@dataclass
class Target:
    """One column: a route, the process whose CPU and RSS we read, and its results."""

    route: Route
    pid: int  # the proxy; for direct, the upstream servers
    result: Result


def _timed_cpu(pid: int, run: Callable[[], float]) -> tuple[float, float, float]:
    """(run's value, CPU seconds *pid* used meanwhile, wall seconds)."""
    cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
    value = run()
    return value, cpu_seconds(pid) - cpu_before, time.monotonic() - wall_before


def run_bulk(setup: Setup, targets: list[Target]) -> None:
    """Downloads, then uploads: --repeat rounds, each visiting every target in turn."""
    options, ports = setup.options, setup.ports
    for target in targets:
        works = half_close_works(target.route, ports["upload"])
        target.result.upload_half_close = works
        if not works:
            target.result.notes.append(
                "half-close not carried through: after the client's SHUT_WR the"
                " sink's count never arrived; upload measured length-prefixed instead"
            )
    for kind in ("download", "upload"):
        _progress(options)(f"{kind}: {options.bytes / MIB:.0f} MiB x {options.repeat} per target")
        runs: list[list[float]] = [[] for _ in targets]
        cpu = [0.0] * len(targets)
        wall = [0.0] * len(targets)
        for _ in range(options.repeat):
            for index, target in enumerate(targets):
                if kind == "download":
                    run = partial(bulk_download, target.route, ports["download"], options.bytes)
                else:
                    run = partial(
                        _upload,
                        target.route,
                        ports["upload"],
                        options.bytes,
                        length_prefixed=not target.result.upload_half_close,
                    )
                value, used, took = _timed_cpu(target.pid, run)
                runs[index].append(value)
                cpu[index] += used
                wall[index] += took
        for index, target in enumerate(targets):
            result = target.result
            if kind == "download":
                result.download_runs = runs[index]
                result.download_mbps = statistics.median(runs[index])
                result.server_cpu_download = cpu[index] / wall[index]
            else:
                result.upload_runs = runs[index]
                result.upload_mbps = statistics.median(runs[index])
                result.server_cpu_upload = cpu[index] / wall[index]


def run_connections(setup: Setup, targets: list[Target]) -> None:
    options = setup.options
    for target in targets:
        result = target.result
        _progress(options)(
            f"{result.name}: connections/s,"
            f" concurrency {options.concurrency}, {options.duration:g} s"
        )
        load = measure_connections(setup, target.route, target.pid)
        result.conn_per_s = load["conn_per_s"]
        result.conn_errors = load["errors"]
        result.loadgen_cpu = load["loadgen_cpu"]
        result.server_cpu_conn = load["server_cpu"]
        result.upstream_cpu_conn = load["upstream_cpu"]
        result.host_cpu_conn = load["host_cpu"]
        result.other_cpu_conn = load["other_cpu"]
        result.conn_op_p50_ms = load["op_p50_ms"]
        result.conn_op_p99_ms = load["op_p99_ms"]
        if result.conn_errors:
            result.notes.append(f"connection errors under load: {result.conn_errors}")


def run_latency(setup: Setup, targets: list[Target]) -> None:
    """A warm-up per target, then rounds of LATENCY_ROUND samples visiting each in turn."""
    options, port = setup.options, setup.ports["ping"]
    _progress(options)(f"latency: {options.latency_ops} operations per target")
    for target in targets:
        measure_latency(target.route, port, LATENCY_WARMUP)
    samples: list[list[float]] = [[] for _ in targets]
    rounds = max(1, options.latency_ops // LATENCY_ROUND)
    for round_index in range(rounds):
        ops = options.latency_ops // rounds + (round_index < options.latency_ops % rounds)
        for index, target in enumerate(targets):
            samples[index] += measure_latency(target.route, port, ops)
    for index, target in enumerate(targets):
        ordered = sorted(samples[index])
        target.result.p50_ms = _percentile(ordered, 50)
        target.result.p99_ms = _percentile(ordered, 99)
        target.result.mean_ms = sum(ordered) / len(ordered)


def run_idle(setup: Setup, targets: list[Target]) -> None:
    options = setup.options
    for target in targets:
        result = target.result
        if target.route.proxy is None or not options.idle_tunnels:
            continue
        _progress(options)(f"{result.name}: {options.idle_tunnels} idle tunnels")
        idle = idle_tunnels(target.route, setup.ports["ping"], target.pid, options.idle_tunnels)
        result.rss_before_mib = idle["rss_before_mib"]
        result.rss_after_mib = idle["rss_after_mib"]
        result.rss_closed_mib = idle["rss_closed_mib"]
        result.rss_per_tunnel_kib = idle["rss_per_tunnel_kib"]
        result.fds_per_tunnel = idle["fds_per_tunnel"]


def run_all(setup: Setup, targets: list[Target]) -> None:
    """Every measurement for every target.

    Bulk transfers and latency samples are taken in rounds that visit every target in
    turn, so background load that comes and goes (a shared machine) hits all columns
    alike instead of whichever happened to run at the wrong moment. The idle-tunnel
    RSS comes last, from proxies that have already carried the other tests' traffic.
    """
    run_bulk(setup, targets)
    run_connections(setup, targets)
    run_latency(setup, targets)
    run_idle(setup, targets)


# -- the proxies ---------------------------------------------------------------------------------


@contextlib.contextmanager
def cloister_proxy(
    setup: Setup, workdir: Path
) -> Iterator[tuple[Route, subprocess.Popen[bytes], Path]]:
    options = setup.options
    config = workdir / "config"
    data = workdir / "data"
    (config / "tokens").mkdir(parents=True)
    data.mkdir()
    ports = ", ".join(str(port) for port in setup.ports.values())
    (config / "config.yaml").write_text(
        "proxy:\n"
        "  allow:\n"
        f"    - {{domain: 127.0.0.1, ports: [{ports}]}}\n"
        '  allow_private_networks: ["127.0.0.0/8"]\n'
        "  unlisted_domain_behavior: reject\n"
    )
    tokens = []
    for index in range(options.tokens):
        record = TokenRecord.create(
            cloister=f"bench-{index + 1}", project="bench", path=workdir / "project"
        ).bound_to("127.0.0.1")  # the services take a token only from its own address
        write_token_file(config / "tokens", record)
        tokens.append(record.secret)
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "cloister_proxy.main",
        "--config-dir",
        str(config),
        "--data-dir",
        str(data),
        "--listen",
        f"127.0.0.1:{port}",
        "--no-refuse-own-networks",  # the upstreams run on loopback, beside the proxy
    ]
    if options.audit:
        argv += ["--audit-log", str(data / "audit.log")]
    log = workdir / "cloister-proxy.log"
    with log.open("wb") as sink:
        child = setup.processes.start(
            argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wait_listening(port, child, "cloister-proxy", log)
        yield Route("cloister", ("127.0.0.1", port), tuple(tokens)), child, log
    finally:
        setup.processes.stop(child)


@contextlib.contextmanager
def tinyproxy(
    setup: Setup, workdir: Path, binary: str
) -> Iterator[tuple[Route, subprocess.Popen[bytes], Path]]:
    port = free_port()
    conf = workdir / "tinyproxy.conf"
    lines = [
        f"Port {port}",
        "Listen 127.0.0.1",
        "Timeout 600",
        f"MaxClients {max(4096, setup.options.idle_tunnels + 256)}",
        "LogLevel Critical",
        "Allow 127.0.0.1",
        "DisableViaHeader Yes",
        *(f"ConnectPort {each}" for each in setup.ports.values()),
    ]
    conf.write_text("\n".join(lines) + "\n")
    log = workdir / "tinyproxy.log"
    with log.open("wb") as sink:
        child = setup.processes.start(
            [binary, "-d", "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_listening(port, child, "tinyproxy", log)
        yield Route("tinyproxy", ("127.0.0.1", port)), child, log
    finally:
        setup.processes.stop(child)


def _smoke(route: Route, port: int) -> None:
    """One CONNECT + ping before measuring, so a broken set-up fails with a clear message."""
    sock, early = _open(route, port, timeout=10)
    with sock:
        sock.sendall(PING)
        reply = early
        while len(reply) < len(PONG):
            data = sock.recv(64)
            if not data:
                break
            reply += data
    if reply != PONG:
        raise BenchError(f"{route.name}: ping through the tunnel answered {reply!r}")


# -- reporting ----------------------------------------------------------------------------------


def _progress(options: argparse.Namespace) -> Callable[[str], None]:
    def say(message: str) -> None:
        if not options.quiet:
            print(f"  … {message}", file=sys.stderr, flush=True)

    return say


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return part / whole


def derive(results: dict[str, Result], idle_count: int) -> dict[str, Any]:
    direct = results["direct"]
    cloister = results.get("cloister")
    tiny = results.get("tinyproxy")
    derived: dict[str, Any] = {}
    for name, each in (("cloister", cloister), ("tinyproxy", tiny)):
        if each is None:
            continue
        down = _ratio(each.download_mbps, direct.download_mbps)
        up = _ratio(each.upload_mbps, direct.upload_mbps)
        derived[name] = {
            "download_pct_of_direct": None if down is None else 100 * down,
            "upload_pct_of_direct": None if up is None else 100 * up,
            "conn_pct_of_direct": (
                None if (r := _ratio(each.conn_per_s, direct.conn_per_s)) is None else 100 * r
            ),
            "added_p50_ms": (
                None
                if each.p50_ms is None or direct.p50_ms is None
                else each.p50_ms - direct.p50_ms
            ),
            "added_p99_ms": (
                None
                if each.p99_ms is None or direct.p99_ms is None
                else each.p99_ms - direct.p99_ms
            ),
            "idle_rss_total_mib": each.rss_after_mib,
            "idle_rss_delta_mib": (
                None
                if each.rss_after_mib is None or each.rss_before_mib is None
                else each.rss_after_mib - each.rss_before_mib
            ),
        }
    if cloister is not None:
        mine = derived["cloister"]
        conn_vs = _ratio(cloister.conn_per_s, tiny.conn_per_s if tiny else None)
        derived["cloister_conn_vs_tinyproxy"] = conn_vs
        throughput = min(
            value
            for value in (mine["download_pct_of_direct"], mine["upload_pct_of_direct"])
            if value is not None
        )
        derived["targets"] = {
            "download and upload >= 60% of direct": throughput >= 60,
            "conn/s >= tinyproxy": None if conn_vs is None else conn_vs >= 1,
            "added p50 <= 0.3 ms": mine["added_p50_ms"] <= 0.3,
            f"{idle_count} idle tunnels < 150 MiB RSS": (
                None if mine["idle_rss_total_mib"] is None else mine["idle_rss_total_mib"] < 150
            ),
        }
    return derived


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _span(values: list[float]) -> str:
    return f"{min(values):.0f}-{max(values):.0f}" if values else "—"


def print_report(
    options: argparse.Namespace,
    results: dict[str, Result],
    derived: dict[str, Any],
    *,
    skipped: list[str],
    background: float,
    seconds: float,
) -> None:
    names = list(results)
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("download MB/s (1 tunnel)", lambda r: _fmt(r.download_mbps, ",.0f")),
        ("  range", lambda r: _span(r.download_runs)),
        ("  server CPU (cores)", lambda r: _fmt(r.server_cpu_download, ".2f")),
        ("upload MB/s (1 tunnel)", lambda r: _fmt(r.upload_mbps, ",.0f")),
        ("  range", lambda r: _span(r.upload_runs)),
        ("  server CPU (cores)", lambda r: _fmt(r.server_cpu_upload, ".2f")),
        (
            "  half-close carried",
            lambda r: {True: "yes", False: "NO", None: "—"}[r.upload_half_close],
        ),
        (f"connections/s (c={options.concurrency})", lambda r: _fmt(r.conn_per_s, ",.0f")),
        ("  operation p50 ms", lambda r: _fmt(r.conn_op_p50_ms, ".2f")),
        ("  operation p99 ms", lambda r: _fmt(r.conn_op_p99_ms, ".2f")),
        ("  server CPU (cores)", lambda r: _fmt(r.server_cpu_conn, ".2f")),
        ("  upstream CPU (cores)", lambda r: _fmt(r.upstream_cpu_conn, ".2f")),
        ("  load generator CPU (cores)", lambda r: _fmt(r.loadgen_cpu, ".2f")),
        ("  whole machine busy (cores)", lambda r: _fmt(r.host_cpu_conn, ".2f")),
        ("  of which not ours (cores)", lambda r: _fmt(r.other_cpu_conn, ".2f")),
        ("  errors", lambda r: str(sum(r.conn_errors.values()))),
        ("first byte p50 ms", lambda r: _fmt(r.p50_ms, ".3f")),
        ("first byte p99 ms", lambda r: _fmt(r.p99_ms, ".3f")),
        ("first byte mean ms", lambda r: _fmt(r.mean_ms, ".3f")),
        ("RSS before MiB", lambda r: _fmt(r.rss_before_mib, ".1f")),
        (f"RSS with {options.idle_tunnels} idle MiB", lambda r: _fmt(r.rss_after_mib, ".1f")),
        ("  per tunnel KiB", lambda r: _fmt(r.rss_per_tunnel_kib, ".1f")),
        ("  fds per tunnel", lambda r: _fmt(r.fds_per_tunnel, ".2f")),
        ("RSS after closing MiB", lambda r: _fmt(r.rss_closed_mib, ".1f")),
    ]
    print(
        f"{options.bytes / MIB:.0f} MiB bulk transfers (x{options.repeat}),"
        f" {options.concurrency} concurrent connections for {options.duration:g} s"
        f" ({options.workers} load worker(s), uvloop),"
        f" {options.latency_ops} latency samples, {os.cpu_count()} CPUs"
    )
    if background > BUSY_MACHINE:
        print(
            f"WARNING: before starting, other processes kept {background:.2f} of"
            f" {os.cpu_count()} CPUs busy; every figure below is affected"
        )
    print(f"{'':<30}" + "".join(f"{name:>14}" for name in names))
    for label, cell in rows:
        print(f"{label:<30}" + "".join(f"{cell(results[name]):>14}" for name in names))
    for name in skipped:
        print(f"{name}: skipped")
    print()
    for name in ("cloister", "tinyproxy"):
        figures = derived.get(name)
        if figures is None:
            continue
        print(
            f"{name}: download {_fmt(figures['download_pct_of_direct'], '.0f')}% and upload"
            f" {_fmt(figures['upload_pct_of_direct'], '.0f')}% of direct;"
            f" conn/s {_fmt(figures['conn_pct_of_direct'], '.0f')}% of direct;"
            f" added latency p50 {_fmt(figures['added_p50_ms'], '+.3f')} ms,"
            f" p99 {_fmt(figures['added_p99_ms'], '+.3f')} ms;"
            f" {options.idle_tunnels} idle tunnels:"
            f" {_fmt(figures['idle_rss_total_mib'], '.1f')} MiB RSS"
            f" ({_fmt(figures['idle_rss_delta_mib'], '+.1f')} MiB for the tunnels)"
        )
    if derived.get("cloister_conn_vs_tinyproxy") is not None:
        print(f"cloister conn/s vs tinyproxy: {derived['cloister_conn_vs_tinyproxy']:.2f}x")
    if "targets" in derived:
        print("targets (from the issue):")
        for (label, met), wanted in zip(derived["targets"].items(), TARGETS.values(), strict=True):
            mark = {True: "met", False: "MISSED", None: "n/a"}[met]
            print(f"  {mark:<7} {label:<38} (issue: {wanted})")
    for result in results.values():
        for note in result.notes:
            print(f"note: {result.name}: {note}")
        if result.log.strip():
            print(f"{result.name} output:")
            for line in result.log.strip().splitlines():
                print(f"  | {line}")
    print(f"total time {seconds:.1f} s")


# -- main ---------------------------------------------------------------------------------------


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bytes", type=_size, default=1 << 30, help="bulk size (1G, 512M, …)")
    parser.add_argument("--repeat", type=int, default=3, help="bulk runs (median reported)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of conn/s load")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds of load not counted")
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 2, help="load generator processes"
    )
    parser.add_argument("--latency-ops", type=int, default=2000)
    parser.add_argument("--idle-tunnels", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=4, help="cloister tokens to spread over")
    parser.add_argument("--audit", action="store_true", help="let the proxy write an audit log")
    parser.add_argument("--no-tinyproxy", action="store_true", help="skip tinyproxy")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load-worker", metavar="SPEC", help=argparse.SUPPRESS)
    return parser


def _rounded(value: Any) -> Any:
    """*value* with every float rounded to 3 decimals (for the JSON output)."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {key: _rounded(each) for key, each in value.items()}
    if isinstance(value, list):
        return [_rounded(each) for each in value]
    return value


def _interrupt(signum: int, frame: FrameType | None) -> None:
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


def background_load(seconds: float = 1.0) -> float:
    """Cores the machine keeps busy before we start anything (other people's work)."""
    before, wall = host_busy_seconds(), time.monotonic()
    time.sleep(seconds)  # a measurement window, not a wait for readiness
    return (host_busy_seconds() - before) / (time.monotonic() - wall)


def benchmark(options: argparse.Namespace, processes: Processes, workdir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    background = background_load()
    script = Path(__file__).resolve()
    upstream = processes.start(
        [sys.executable, str(script), "--serve-upstream", "--bytes", str(options.bytes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    line = read_line(
        pipe(upstream.stdout), time.monotonic() + READY_TIMEOUT, "the upstream servers"
    )
    ports: dict[str, int] = json.loads(line)
    setup = Setup(options, processes, ports, script, upstream.pid, workdir)

    skipped: list[str] = []
    direct = Route("direct", None)
    targets = [Target(direct, upstream.pid, Result("direct"))]
    logs: dict[str, Path] = {}
    with contextlib.ExitStack() as running:
        route, child, logs["cloister"] = running.enter_context(
            cloister_proxy(setup, workdir / "cloister")
        )
        targets.append(Target(route, child.pid, Result("cloister")))
        binary = shutil.which("tinyproxy")
        if options.no_tinyproxy:
            skipped.append("tinyproxy (--no-tinyproxy)")
        elif binary is None:
            skipped.append("tinyproxy (not on PATH; `apt-get install tinyproxy` enables it)")
        else:
            (workdir / "tinyproxy").mkdir()
            route, child, logs["tinyproxy"] = running.enter_context(
                tinyproxy(setup, workdir / "tinyproxy", binary)
            )
            targets.append(Target(route, child.pid, Result("tinyproxy")))
        for target in targets:
            _smoke(target.route, ports["ping"])
        run_all(setup, targets)
    results = {target.route.name: target.result for target in targets}
    for name, log in logs.items():
        results[name].log = log.read_text(errors="replace")

    processes.stop(upstream)
    derived = derive(results, options.idle_tunnels)
    seconds = time.perf_counter() - started
    if not options.json:
        print_report(
            options, results, derived, skipped=skipped, background=background, seconds=seconds
        )
    return {
        "settings": {
            "bytes": options.bytes,
            "concurrency": options.concurrency,
            "duration_s": options.duration,
            "warmup_s": options.warmup,
            "workers": options.workers,
            "latency_ops": options.latency_ops,
            "idle_tunnels": options.idle_tunnels,
            "tokens": options.tokens,
            "audit": options.audit,
            "cpus": os.cpu_count(),
        },
        "results": {name: vars(result) for name, result in results.items()},
        "derived": derived,
        "skipped": skipped,
        "background_cpu_cores": round(background, 2),
        "seconds": round(seconds, 1),
    }


def main() -> None:
    options = _parser().parse_args()
    if options.serve_upstream:
        serve_upstream(options.bytes)
        return
    if options.load_worker:
        load_worker(options.load_worker)
        return
    processes = Processes()
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        with tempfile.TemporaryDirectory(prefix="cloister-bench-") as scratch:
            try:
                summary = benchmark(options, processes, Path(scratch))
            finally:
                processes.stop_all()
    except KeyboardInterrupt:
        print(
            "interrupted; stopped every process and removed the scratch directory", file=sys.stderr
        )
        raise SystemExit(130) from None
    except (BenchError, OSError) as error:
        print(f"bench_proxy: {type(error).__name__}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    if options.json:
        print(json.dumps(_rounded(summary), indent=2))


if __name__ == "__main__":
    main()
