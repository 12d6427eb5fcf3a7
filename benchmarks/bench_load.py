"""Benchmark: 20 cloisters on one host, all loading the proxy and the credential gateway at once.

Everything real: a guardian of its own (temporary config and data directories, a free
UI port), --cloisters cloisters of the small ``cloister-slim`` image started one after
another by ``cloister start -d`` (the 1st and the last start are timed), and a fake
upstream served by a child process of this benchmark (uvloop) on the host's address on
Docker's default bridge (``docker0``), which config.yaml allows
(``proxy.allow_private_networks`` and an allow rule for its port): the guardian's own
networks are never an upstream.

The load starts inside the cloisters: ``bench_load_client.pl`` (cloister-slim has perl,
not python3) runs in each through ``docker exec -i``, waits for a wall time common to
all, and prints a JSON line of timings per attempt, which this script sums up.

1. Tunnels: in each cloister, --tunnels connections at once, each --tunnel-rounds
   times in a row, through the cloister's own ``$HTTPS_PROXY`` (its token): a new
   connection to the proxy, ``CONNECT <bridge>:<port>``, ``GET /tunnel`` through the
   tunnel, answered and closed by the upstream. Figures: tunnels/s over all cloisters,
   p50/p99 time to the proxy's 200 and to the upstream's first byte (from the connect).
2. Streams: ``cloister setup claude --method api-key`` stored a key, and
   ``agents.claude.api_base`` is the upstream, so each cloister's ``$ANTHROPIC_BASE_URL``
   is the credential gateway. In each cloister --streams kept-alive connections at once,
   each sending --stream-rounds ``POST /v1/messages`` in a row; the upstream checks the
   real key (401 otherwise) and streams --events SSE events over --stream-ms. Figures:
   requests/s, p50/p99 first byte and full stream (from sending the request).

For each: the service container's memory (RSS of its processes, and its cgroup's charge)
before, at its highest under load (sampled every 100 ms), and --settle seconds after;
and every attempt that failed, by error. Everything made is removed at the end (the
cloisters, the guardian, its networks, the upstream), also on Ctrl-C; the images stay.

    uv run python benchmarks/bench_load.py
    uv run python benchmarks/bench_load.py --cloisters 5 --tunnel-rounds 2 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal

import uvloop

from bench_cli import BUILD_TIMEOUT_SECONDS, Cli, make_repo
from bench_credentials import REAL_KEY, STREAM_HEAD, background_load, sse_events
from benchsupport import (
    BenchError,
    bridge_gateway,
    cgroup_memory,
    container_cgroup,
    executable,
    free_port,
    remove_networks,
)

CLIENT = Path(__file__).with_name("bench_load_client.pl")
Mode = Literal["tunnel", "stream"]
SERVICE: dict[Mode, str] = {"tunnel": "proxy", "stream": "credentials"}
SAMPLE_SECONDS = 0.1
BUSY_MACHINE = 0.2  # cores of background load worth a warning
TUNNEL_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
UNAUTHORIZED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


# -- the upstream (hidden --serve-upstream mode, a process of its own) --------------------------


@dataclass
class Upstream:
    """``GET /tunnel``: "ok", then close; ``POST /v1/messages`` with the real key: the
    SSE stream, one event every *gap* seconds, kept alive."""

    chunks: list[bytes]
    gap: float
    served: Counter[str] = field(default_factory=Counter)

    open: dict[asyncio.StreamWriter, asyncio.Task[None]] = field(default_factory=dict)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.open[writer] = task
        try:
            while await self._exchange(reader, writer):
                pass
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            self.served["broken"] += 1
        finally:
            writer.close()
            self.open.pop(writer, None)

    async def close(self) -> None:
        """Close the idle kept-alive connections, so their handlers end rather than being
        cancelled at the loop's end."""
        tasks = list(self.open.values())
        for writer in list(self.open):
            writer.close()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request and its answer; whether the connection stays open."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as error:
            if error.partial:
                raise
            return False  # closed between requests
        lines = head.split(b"\r\n")
        target = lines[0].split(b" ")[1] if lines[0].count(b" ") >= 2 else b""
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(b":") for line in lines[1:] if line)
        }
        length = int(headers.get(b"content-length", b"0"))
        if length:
            await reader.readexactly(length)
        if target == b"/tunnel":
            self.served["tunnel"] += 1
            writer.write(TUNNEL_ANSWER)
            await writer.drain()
            return False
        if target != b"/v1/messages":
            self.served["unknown"] += 1
            writer.write(NOT_FOUND)
            return False
        if headers.get(b"x-api-key") != REAL_KEY.encode():
            self.served["wrong key"] += 1
            writer.write(UNAUTHORIZED)
            return False
        writer.write(STREAM_HEAD + self.chunks[0])
        await writer.drain()
        for chunk in self.chunks[1:-1]:
            await asyncio.sleep(self.gap)
            writer.write(chunk)
            await writer.drain()
        writer.write(self.chunks[-1])
        await writer.drain()
        self.served["stream"] += 1
        return True


async def _serve(host: str, upstream: Upstream) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(upstream.handle, host, 0, backlog=4096)
    async with server:
        port = server.sockets[0].getsockname()[1]
        print(json.dumps({"port": port}), flush=True)
        await stop.wait()
        await upstream.close()
    print(json.dumps(dict(upstream.served)), flush=True)


def serve_upstream(host: str, events: int, stream_ms: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us, in order
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # thousands of connections
    chunks = [b"%x\r\n%b\r\n" % (len(each), each) for each in sse_events(events)]
    chunks.append(b"0\r\n\r\n")
    gap = stream_ms / 1000 / max(1, events - 1)
    uvloop.run(_serve(host, Upstream(chunks, gap)))


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Run:
    """What the benchmark made, so that the clean-up removes exactly that."""

    options: argparse.Namespace
    root: Path
    cli: Cli
    upstream: subprocess.Popen[bytes] | None = None
    started: list[str] = field(default_factory=list)

    def say(self, message: str) -> None:
        if not self.options.quiet:
            print(f"  … {message}", file=sys.stderr, flush=True)

    def start_upstream(self, host: str) -> int:
        argv = [sys.executable, str(Path(__file__).resolve()), "--serve-upstream", host]
        argv += ["--events", str(self.options.events)]
        argv += ["--stream-ms", str(self.options.stream_ms)]
        self.upstream = subprocess.Popen(argv, stdout=subprocess.PIPE, process_group=0)
        line = _pipe(self.upstream.stdout).readline()
        if not line:
            raise BenchError(f"the upstream exited with {self.upstream.wait()}")
        return int(json.loads(line)["port"])

    def stop_upstream(self) -> dict[str, int]:
        if self.upstream is None:
            return {}
        upstream, self.upstream = self.upstream, None
        if upstream.poll() is None:
            upstream.terminate()
        try:
            out, _ = upstream.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            upstream.kill()
            out, _ = upstream.communicate()
        lines = out.decode(errors="replace").strip().splitlines()
        counts: dict[str, int] = json.loads(lines[-1]) if lines else {}
        return counts

    def write_config(self, host: str, port: int) -> None:
        (self.root / "config").mkdir()
        (self.root / "config" / "config.yaml").write_text(
            f"defaults:\n  image: {self.options.image}\n"
            f"guardian:\n  ui_port: {free_port()}\n"
            "proxy:\n"
            f"  allow:\n    - {{domain: {host}, ports: [{port}]}}\n"
            f'  allow_private_networks: ["{host}/32"]\n'
            "  unlisted_domain_behavior: reject\n"
            f'agents:\n  claude: {{api_base: "http://{host}:{port}"}}\n',
            encoding="utf-8",
        )
        stored = subprocess.run(
            [self.cli.program, "setup", "claude", "--method", "api-key", "--secret-stdin"],
            input=REAL_KEY,
            env=self.cli.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if stored.returncode != 0:
            raise BenchError(f"cloister setup claude: {stored.stdout}{stored.stderr}")

    def start_cloisters(self) -> list[float]:
        self.cli.run("guardian", "start", timeout=BUILD_TIMEOUT_SECONDS)
        seconds = []
        for number in range(self.options.cloisters):
            name = f"load-{secrets.token_hex(3)}-{number}"
            repo = self.root / name
            make_repo(repo)
            self.started.append(name)
            seconds.append(self.cli.run("start", "-d", cwd=repo, timeout=BUILD_TIMEOUT_SECONDS))
            self.say(f"cloister {number + 1} started in {seconds[-1]:.2f}s")
        return seconds

    def cleanup(self) -> None:
        for name in self.started:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.cli.run("stop", name, check=False)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.cli.run("guardian", "stop", check=False)
        containers = [self.cli.container(name) for name in self.started]
        if containers:  # whatever a failed stop left
            subprocess.run(
                [self.cli.docker, "rm", "-f", *containers], capture_output=True, check=False
            )
        remove_networks(self.cli.docker, self.cli.instance.label_filter)
        self.stop_upstream()


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    if stream is None:
        raise BenchError("a child process has no pipe")
    return stream


def load(run: Run, mode: Mode, target: str) -> dict[str, Any]:
    """One phase: every cloister's client at once; its timings and the service's memory."""
    options, cli = run.options, run.cli
    cgroup = container_cgroup(cli.docker, cli.instance.service(SERVICE[mode]))
    before = cgroup_memory(cgroup)
    slots, rounds = (
        (options.tunnels, options.tunnel_rounds)
        if mode == "tunnel"
        else (options.streams, options.stream_rounds)
    )
    start_at = time.time() + 1.0 + 0.1 * len(run.started)  # every exec launched by then
    script = CLIENT.read_bytes()
    outputs = [run.root / f"{mode}-{name}.jsonl" for name in run.started]
    clients = []
    for name, output in zip(run.started, outputs, strict=True):
        argv = [cli.docker, "exec", "-i", cli.container(name), "perl", "-", mode]
        argv += [str(slots), str(rounds), f"{start_at:.6f}", str(options.timeout), target]
        argv += [str(options.events)]
        with output.open("wb") as sink:
            client = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=sink)
        clients.append(client)
        with contextlib.suppress(BrokenPipeError):
            _pipe(client.stdin).write(script)
        _pipe(client.stdin).close()
    run.say(f"{mode}: {len(clients)} cloisters x {slots} at once x {rounds} rounds")
    peak = dict(before)
    deadline = start_at + rounds * options.timeout + 60
    while any(client.poll() is None for client in clients):
        if time.time() > deadline:
            for client in clients:
                client.kill()
            raise BenchError(f"the {mode} clients did not finish")
        sample = cgroup_memory(cgroup)
        peak = {key: max(peak[key], sample[key]) for key in peak}
        time.sleep(SAMPLE_SECONDS)  # the sampling interval
    codes = [client.returncode for client in clients]
    time.sleep(options.settle)  # what the service keeps once the load is gone
    after = cgroup_memory(cgroup)
    records = [
        json.loads(line)
        for output in outputs
        for line in output.read_text(encoding="utf-8").splitlines()
        if line.startswith("{")
    ]
    if any(codes):
        raise BenchError(f"a {mode} client exited with {codes}")
    return summarise(mode, records, slots * rounds * len(clients)) | {
        "memory_mib": {
            "before": _mib(before),
            "peak_under_load": _mib(peak),
            "after": _mib(after),
        }
    }


def _mib(sample: dict[str, int]) -> dict[str, float]:
    return {key: round(value / 2**20, 1) for key, value in sample.items()}


def _percentile(ordered: list[float], percent: float) -> float:
    return ordered[max(1, math.ceil(percent / 100 * len(ordered))) - 1]


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {
        "p50": round(_percentile(ordered, 50) * 1000, 1),
        "p99": round(_percentile(ordered, 99) * 1000, 1),
        "max": round(ordered[-1] * 1000, 1),
    }


def summarise(mode: Mode, records: list[dict[str, Any]], expected: int) -> dict[str, Any]:
    late = max((record["late"] for record in records if "late" in record), default=0.0)
    attempts = [record for record in records if "ok" in record]
    good = [record for record in attempts if record["ok"]]
    failures = Counter(record["err"] for record in attempts if not record["ok"])
    span = 0.0
    if good:
        span = max(record["wall"] + record["full"] for record in good) - min(
            record["wall"] for record in attempts
        )
    figures: dict[str, Any] = {
        "attempts": len(attempts),
        "expected": expected,
        "succeeded": len(good),
        "failed": sum(failures.values()),
        "missing": expected - len(attempts),
        "failures": dict(failures.most_common()),
        "seconds": round(span, 3),
        "per_second": round(len(good) / span, 1) if span else 0.0,
        "latest_client_start_s": round(late, 3),
        "first_byte_ms": _ms([record["first"] for record in good]),
        "full_ms": _ms([record["full"] for record in good]),
    }
    if mode == "tunnel":
        figures["tunnel_open_ms"] = _ms([record["tunnel"] for record in good])
    return figures


# -- reporting ----------------------------------------------------------------------------------


def _latency(label: str, values: dict[str, float]) -> str:
    if not values:
        return f"  {label:<28} —"
    return (
        f"  {label:<28} p50 {values['p50']:8.1f} ms   p99 {values['p99']:8.1f} ms"
        f"   max {values['max']:8.1f} ms"
    )


def _memory(label: str, memory: dict[str, dict[str, float]]) -> str:
    parts = [
        f"{when} {memory[key]['rss']:.1f} MiB"
        for when, key in (
            ("before", "before"),
            ("under load (peak)", "peak_under_load"),
            ("after", "after"),
        )
    ]
    cgroup = " / ".join(
        f"{memory[key]['cgroup']:.1f}" for key in ("before", "peak_under_load", "after")
    )
    return f"  {label} RSS: {', '.join(parts)}  (cgroup charge {cgroup} MiB)"


def _phase(title: str, figures: dict[str, Any], unit: str, service: str) -> None:
    print(title)
    print(
        f"  {figures['succeeded']} of {figures['expected']} {unit} in {figures['seconds']:.2f}s:"
        f" {figures['per_second']:.1f} {unit}/s; failed {figures['failed']},"
        f" missing {figures['missing']}"
    )
    for error, count in figures["failures"].items():
        print(f"    {count} x {error}")
    if "tunnel_open_ms" in figures:
        print(_latency("proxy's 200 (tunnel open)", figures["tunnel_open_ms"]))
        print(_latency("first byte of the upstream", figures["first_byte_ms"]))
        print(_latency("answer complete", figures["full_ms"]))
    else:
        print(_latency("first byte of the stream", figures["first_byte_ms"]))
        print(_latency("full stream", figures["full_ms"]))
    print(_memory(service, figures["memory_mib"]))
    print(f"  the last client began {figures['latest_client_start_s']:.3f}s after the common start")


def report(results: dict[str, Any]) -> None:
    settings = results["settings"]
    count = settings["cloisters"]
    starts = results["start_seconds"]
    print(f"{count} cloisters ({settings['image']}) on one guardian, {results['cpus']} CPUs")
    if results["background_cpu_cores"] > BUSY_MACHINE:
        print(
            f"WARNING: with the cloisters idle, other processes kept"
            f" {results['background_cpu_cores']:.2f} of {results['cpus']} CPUs busy;"
            " every figure below is affected"
        )
    print(
        f"  cloister start -d: start 1 {starts[0]:.2f}s, start {count} {starts[-1]:.2f}s"
        f" (max {max(starts):.2f}s)"
    )
    _phase(
        f"tunnels: {count} x {settings['tunnels']} at once, {settings['tunnel_rounds']} rounds"
        " (CONNECT through each cloister's $HTTPS_PROXY)",
        results["tunnels"],
        "tunnels",
        "proxy",
    )
    _phase(
        f"streams: {count} x {settings['streams']} at once, {settings['stream_rounds']} rounds"
        f" ({settings['events']} SSE events over {settings['stream_ms']:g} ms, credential gateway)",
        results["streams"],
        "requests",
        "credential gateway",
    )
    print(f"  the upstream served: {results['upstream_served']}")
    print(f"total {results['total_seconds']:.1f}s")


# -- main ---------------------------------------------------------------------------------------


def _interrupt(signum: int, frame: FrameType | None) -> None:
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Ctrl-C waits while the clean-up runs (a second one would leave half of it)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def benchmark(options: argparse.Namespace, root: Path) -> dict[str, Any]:
    began = time.perf_counter()
    docker = executable("docker")
    run = Run(options, root, Cli(root, executable("cloister"), docker))
    try:
        host = bridge_gateway(docker)
        port = run.start_upstream(host)
        run.write_config(host, port)
        run.say(f"upstream on {host}:{port}; starting the guardian")
        starts = run.start_cloisters()
        background = background_load()  # others' work on a shared machine skews everything
        tunnels = load(run, "tunnel", f"{host}:{port}")
        streams = load(run, "stream", f"{host}:{port}")
        served = run.stop_upstream()
    finally:
        with uninterrupted():
            run.say("removing the cloisters, the guardian and its networks")
            run.cleanup()
    return {
        "settings": {
            key: getattr(options, key)
            for key in (
                "cloisters",
                "tunnels",
                "tunnel_rounds",
                "streams",
                "stream_rounds",
                "events",
                "stream_ms",
                "image",
            )
        },
        "cpus": os.cpu_count(),
        "background_cpu_cores": round(background, 2),
        "start_seconds": [round(each, 3) for each in starts],
        "tunnels": tunnels,
        "streams": streams,
        "upstream_served": served,
        "total_seconds": round(time.perf_counter() - began, 1),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cloisters", type=int, default=20)
    parser.add_argument("--tunnels", type=int, default=50, help="tunnels at once per cloister")
    parser.add_argument("--tunnel-rounds", type=int, default=10, help="tunnels in a row each")
    parser.add_argument("--streams", type=int, default=50, help="streams at once per cloister")
    parser.add_argument("--stream-rounds", type=int, default=4, help="requests in a row each")
    parser.add_argument("--events", type=int, default=16, help="SSE events per stream (>= 7)")
    parser.add_argument("--stream-ms", type=float, default=300.0, help="how long a stream takes")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per attempt")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before 'after'")
    parser.add_argument("--image", default="cloister-slim:latest")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--serve-upstream", metavar="HOST", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = _parser()
    options = parser.parse_args()
    if options.serve_upstream:
        serve_upstream(options.serve_upstream, options.events, options.stream_ms)
        return
    if options.events < 7 or min(options.cloisters, options.tunnels, options.streams) < 1:
        parser.error("--events must be at least 7, the counts at least 1")
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        with tempfile.TemporaryDirectory(prefix="cloister-bench-load-") as scratch:
            results = benchmark(options, Path(scratch))
    except KeyboardInterrupt:
        print("interrupted; removed what the benchmark made", file=sys.stderr)
        raise SystemExit(130) from None
    except (BenchError, OSError, subprocess.SubprocessError) as error:
        print(f"bench_load: {type(error).__name__}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    if options.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)


if __name__ == "__main__":
    main()
