"""Benchmark: a streamed Messages call through the credential gateway, the proxy, and direct.

The requirement (the credential gateway's issue): "The credential gateway adds at most
1 ms p50 to a streamed request compared with going to the same upstream through the
proxy". One run starts everything it needs on 127.0.0.1 and stops it again:

* an upstream (a separate process running this file in the hidden ``--serve-upstream``
  mode, one uvloop event loop, so it never shares a GIL with the client) that answers
  ``POST /v1/messages`` as the Anthropic Messages API does with ``stream: true``:
  ``200``, ``text/event-stream``, chunked, --events server-sent events (message_start,
  content_block_start, ping, text deltas, content_block_stop, message_delta,
  message_stop), each chunk written as soon as the previous one is, no sleeps. It
  checks the ``x-api-key`` of every request against the stored credential (401
  otherwise), so a gateway that did not swap the key in would fail the run;
* the Cloister proxy (``python -m cloister_proxy.main``) and the credential gateway
  (``python -m cloister_proxy.credentials.main``), each in its own process, sharing a
  temporary config dir (config.yaml: ``allow_private_networks: ["127.0.0.0/8"]``, an
  allow rule for 127.0.0.1 on the upstream's port, ``agents.claude.api_base`` the
  upstream), one token file, and a stored ``api-key`` credential for claude.

Then one client (blocking sockets, TCP_NODELAY, one kept-alive connection per path,
the same code for all three) sends the same request head and JSON body by three paths:

1. direct: ``POST /v1/messages`` to the upstream, ``x-api-key: <the real key>``;
2. proxy: ``POST http://127.0.0.1:<port>/v1/messages`` (absolute form, plain HTTP, so
   the proxy sees the request: the path a plain-HTTP call of an agent takes) with
   ``Proxy-Authorization: Basic cloister:<token>`` and the real key, as an agent that
   holds the key itself would send it;
3. gateway: ``POST /claude/v1/messages`` to the gateway with ``x-api-key: <token>``
   (what an agent whose base URL is the gateway sends).

Each request is timed from just before the request is sent to the receipt of the
first complete event ("first event") and of the stream's last byte, the chunked body's
terminator ("full"); every body is checked against what the upstream sent. After a
--warmup per path, --requests samples per path are taken in rounds of
--round requests that visit every path in turn (the order rotating), so load from
other processes that comes and goes on a shared machine hits all paths alike.
"server CPU" is the CPU time (user + system) of the proxy or gateway process per
request (for direct, the upstream's).

    uv run python benchmarks/bench_credentials.py
    uv run python benchmarks/bench_credentials.py --requests 5000 --json
    uv run python benchmarks/bench_credentials.py --profile /tmp/prof   # cProfile both

With ``--profile DIR`` the proxy and the gateway run under cProfile (their figures are
then inflated; use it to see where the time goes, not for the numbers): the stats go
to ``DIR/proxy.prof`` and ``DIR/gateway.prof`` and the top functions are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import math
import os
import pstats
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
    pipe,
    read_line,
    wait_listening,
)
from cloister_core.credentials import store
from cloister_core.paths import CloisterPaths
from cloister_core.tokens import TokenRecord, write_token_file

REAL_KEY = "sk-ant-api03-bench-0123456789abcdefghijklmnopqrstuvwxyz-0123456789ABCDEF"
PATH = "/v1/messages"
RECV_SIZE = 256 * 1024
READY_TIMEOUT = 20.0
IO_TIMEOUT = 10.0
BUSY_MACHINE = 0.2  # cores of background load worth a warning
TARGET_MS = 1.0  # the issue: at most 1 ms p50 over the proxy
FIXED_EVENTS = 6  # every stream's events besides the text deltas

REQUEST_BODY = json.dumps(
    {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "stream": True,
        "system": "You are a helpful assistant working in a software project.",
        "messages": [
            {
                "role": "user",
                "content": "Summarise what the function parse_request_head in http1.py does.",
            }
        ],
    },
    separators=(",", ":"),
).encode()


# -- the stream the upstream sends ----------------------------------------------------------


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_events(count: int) -> list[bytes]:
    """*count* events shaped like a streamed Anthropic Messages answer."""
    deltas = max(1, count - FIXED_EVENTS)
    words = ("The", "function", "reads", "one", "request", "head", "and", "checks", "it")
    message: dict[str, Any] = {
        "id": "msg_01BenchBenchBenchBenchBench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 42, "output_tokens": 1},
    }
    return [
        _event("message_start", {"type": "message_start", "message": message}),
        _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        _event("ping", {"type": "ping"}),
        *(
            _event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": f" {words[index % len(words)]}"},
                },
            )
            for index in range(deltas)
        ),
        _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": deltas + 1},
            },
        ),
        _event("message_stop", {"type": "message_stop"}),
    ]


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Connection: keep-alive\r\n"
    b"Cache-Control: no-cache\r\n"
    b"request-id: req_01BenchBenchBenchBenchBench\r\n"
    b"anthropic-ratelimit-requests-remaining: 3999\r\n"
    b"\r\n"
)


def _plain(status: str, message: str) -> bytes:
    body = json.dumps({"type": "error", "error": {"type": "bench", "message": message}}).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


# -- the upstream (hidden --serve-upstream mode, its own process) ---------------------------


class _Messages(asyncio.Protocol):
    """HTTP/1.1 keep-alive; ``POST /v1/messages`` with the right key gets the stream."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._body_left: int | None = None  # None: reading a head
        self._answer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            left = self._body_left
            if left is None:
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self._buffer[:end])
                del self._buffer[: end + 4]
                left = self._begin(head)
            taken = min(left, len(self._buffer))
            del self._buffer[:taken]
            left -= taken
            if left:
                self._body_left = left
                return
            self._body_left = None
            self._respond()

    def _begin(self, head: bytes) -> int:
        """Decide the answer to a request; returns its body's length (to skip)."""
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if method != "POST" or target != PATH:
            self._answer = _plain("404 Not Found", f"no {method} {target} here")
        elif fields.get("x-api-key") != REAL_KEY:
            self._answer = _plain("401 Unauthorized", "x-api-key is not the stored credential")
        else:
            self._answer = b""
        return int(fields.get("content-length", "0"))

    def _respond(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._answer:
            transport.write(self._answer)
            return
        transport.write(STREAM_HEAD)
        for chunk in self._chunks:  # one write per event: each leaves at once
            transport.write(chunk)


async def _serve_messages(listener: socket.socket, chunks: list[bytes]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Messages(chunks), sock=listener, backlog=4096)
    async with server:
        await server.serve_forever()


def serve_upstream(events: int) -> None:
    """Serve the Messages endpoint until stdin closes or SIGTERM arrives."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us, in order
    chunks = [b"%x\r\n%b\r\n" % (len(each), each) for each in sse_events(events)]
    chunks.append(b"0\r\n\r\n")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    # The parent holds our stdin; EOF means it is gone, so we go too.
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), os._exit(0)), daemon=True).start()
    print(json.dumps({"port": listener.getsockname()[1]}), flush=True)
    uvloop.run(_serve_messages(listener, chunks))


# -- the client ---------------------------------------------------------------------------------


class ChunkedStream:
    """Decodes a chunked body fed in pieces; notes when the first event is complete."""

    __slots__ = ("_raw", "body", "done", "first_event", "leftover")

    def __init__(self) -> None:
        self._raw = bytearray()
        self.body = bytearray()
        self.done = False
        self.first_event = False
        self.leftover = b""

    def feed(self, data: bytes | bytearray) -> None:
        raw = self._raw
        raw += data
        position = 0
        while True:
            line_end = raw.find(b"\r\n", position)
            if line_end < 0:
                break
            size = int(bytes(raw[position:line_end]).split(b";", 1)[0], 16)
            if size == 0:  # the last chunk; no trailers expected, so CRLF follows
                if len(raw) < line_end + 4:
                    break
                if raw[line_end + 2 : line_end + 4] != b"\r\n":
                    raise BenchError("trailer fields after the last chunk")
                self.done = True
                position = line_end + 4
                break
            start = line_end + 2
            if len(raw) < start + size + 2:
                break
            if raw[start + size : start + size + 2] != b"\r\n":
                raise BenchError("chunk data is not followed by CRLF")
            self.body += raw[start : start + size]
            position = start + size + 2
        del raw[:position]
        if self.done:
            self.leftover = bytes(raw)
        if not self.first_event and b"\n\n" in self.body:
            self.first_event = True


@dataclass(frozen=True)
class Route:
    """How to reach the Messages endpoint: where to connect and the request to send."""

    name: str
    address: tuple[str, int]
    request: bytes


def build_request(target: str, host: str, extra: list[tuple[str, str]], key: str) -> bytes:
    """The request head and body, as an SDK sends a streamed Messages call."""
    fields = [
        ("Host", host),
        *extra,
        ("Accept", "application/json"),
        ("Content-Type", "application/json"),
        ("User-Agent", "Anthropic/Python 0.69.0"),
        ("x-api-key", key),
        ("anthropic-version", "2023-06-01"),
        ("X-Stainless-Lang", "python"),
        ("X-Stainless-Retry-Count", "0"),
        ("Content-Length", str(len(REQUEST_BODY))),
    ]
    head = f"POST {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields) + "\r\n"
    return head.encode("latin-1") + REQUEST_BODY


class StreamClient:
    """One kept-alive connection to a path; :meth:`exchange` times one streamed request."""

    def __init__(self, path: Route, expected: bytes) -> None:
        self.path = path
        self.expected = expected
        self.reconnects = -1  # the first connect is not a reconnect
        self._sock: socket.socket | None = None
        self._early = b""

    def _connect(self) -> socket.socket:
        self.close()
        sock = socket.create_connection(self.path.address, timeout=IO_TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._early = sock, b""
        self.reconnects += 1
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _fail(self, message: str) -> BenchError:
        self.close()
        return BenchError(f"{self.path.name}: {message}")

    def exchange(self) -> tuple[float, float]:
        """(ms to the first complete event, ms to the stream's last byte)."""
        sock = self._sock or self._connect()
        timer = time.perf_counter_ns
        started = timer()
        sock.sendall(self.path.request)
        data = self._early
        while (end := data.find(b"\r\n\r\n")) < 0:
            more = sock.recv(RECV_SIZE)
            if not more:
                raise self._fail(f"connection closed before the response head ({data!r})")
            data += more
        head = data[: end + 4].lower()
        if not head.startswith(b"http/1.1 200 "):
            raise self._fail(f"answered {data[:600].decode(errors='replace')!r}")
        if b"\r\ntransfer-encoding: chunked\r\n" not in head:
            raise self._fail(f"the answer is not chunked: {head.decode(errors='replace')!r}")
        stream = ChunkedStream()
        stream.feed(data[end + 4 :])
        now = timer()
        first = now if stream.first_event else 0
        while not stream.done:
            more = sock.recv(RECV_SIZE)
            now = timer()
            if not more:
                raise self._fail("connection closed mid-stream")
            stream.feed(more)
            if not first and stream.first_event:
                first = now
        if stream.body != self.expected:
            raise self._fail("the stream differs from what the upstream sent")
        self._early = stream.leftover
        if b"\r\nconnection: close\r\n" in head:
            self.close()  # the next request reconnects (counted, and reported)
        return (first - started) / 1e6, (now - started) / 1e6


def background_load(seconds: float = 1.0) -> float:
    """Cores the machine keeps busy before we start anything (other people's work)."""
    before, wall = host_busy_seconds(), time.monotonic()
    time.sleep(seconds)  # a measurement window, not a wait for readiness
    return (host_busy_seconds() - before) / (time.monotonic() - wall)


# -- set-up: files, the proxy, the gateway -----------------------------------------------------


@dataclass
class Setup:
    options: argparse.Namespace
    processes: Processes
    scratch: Path
    upstream_port: int
    paths: CloisterPaths = field(init=False)
    token: str = field(init=False)

    def __post_init__(self) -> None:
        config, data = self.scratch / "config", self.scratch / "data"
        (config / "tokens").mkdir(parents=True)
        data.mkdir()
        self.paths = CloisterPaths(config_dir=config, data_dir=data)
        port = self.upstream_port
        self.paths.config_file.write_text(
            "proxy:\n"
            "  allow:\n"
            f"    - {{domain: 127.0.0.1, ports: [{port}]}}\n"
            '  allow_private_networks: ["127.0.0.0/8"]\n'
            "  unlisted_domain_behavior: reject\n"
            "agents:\n"
            f'  claude: {{api_base: "http://127.0.0.1:{port}"}}\n'
        )
        record = TokenRecord.create(
            cloister="bench", project="bench", path=self.scratch / "p", address="127.0.0.1"
        )
        write_token_file(self.paths.tokens_dir, record)
        self.token = record.secret
        store(self.paths, "claude", "api-key", REAL_KEY)


@contextlib.contextmanager
def service(
    setup: Setup, name: str, module: str
) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """``python -m <module>`` on a free port, with the bench's config and data dirs."""
    options, port = setup.options, free_port()
    argv = [sys.executable]
    if options.profile is not None:
        argv += ["-m", "cProfile", "-o", str(options.profile / f"{name}.prof")]
    argv += [
        "-m",
        module,
        "--config-dir",
        str(setup.paths.config_dir),
        "--data-dir",
        str(setup.paths.data_dir),
        "--listen",
        f"127.0.0.1:{port}",
        "--no-refuse-own-networks",  # the fake vendor runs on loopback, beside them
    ]
    if options.audit:
        argv += ["--audit-log", str(setup.scratch / f"audit-{name}.log")]
    log = setup.scratch / f"{name}.log"
    with log.open("wb") as sink:
        child = setup.processes.start(
            argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wait_listening(port, child, name, log)
        yield child, port, log
    finally:
        setup.processes.stop(child)


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    first_ms: list[float] = field(default_factory=list)
    full_ms: list[float] = field(default_factory=list)
    server_cpu_s: float = 0.0
    reconnects: int = 0
    log: str = ""

    def summary(self) -> dict[str, Any]:
        first, full = sorted(self.first_ms), sorted(self.full_ms)
        return {
            "requests": len(full),
            "first_event_ms": _stats(first),
            "full_ms": _stats(full),
            "server_cpu_us_per_request": 1e6 * self.server_cpu_s / len(full) if full else None,
            "reconnects": self.reconnects,
        }


@dataclass
class Target:
    """One column: a path, the process whose CPU we read, and its samples."""

    client: StreamClient
    pid: int  # the proxy or the gateway; for direct, the upstream
    result: Result


def _percentile(sorted_values: list[float], percent: float) -> float:
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _stats(ordered: list[float]) -> dict[str, float]:
    return {
        "p50": _percentile(ordered, 50),
        "p90": _percentile(ordered, 90),
        "p99": _percentile(ordered, 99),
        "mean": sum(ordered) / len(ordered),
    }


def run_rounds(options: argparse.Namespace, targets: list[Target]) -> None:
    """A warm-up per path, then rounds visiting every path in turn (order rotating)."""
    say = _progress(options)
    say(f"warm-up: {options.warmup} requests per path")
    for target in targets:
        for _ in range(options.warmup):
            target.client.exchange()
    say(f"measuring: {options.requests} requests per path, rounds of {options.round}")
    rounds = max(1, math.ceil(options.requests / options.round))
    for round_index in range(rounds):
        count = options.requests // rounds + (round_index < options.requests % rounds)
        shift = round_index % len(targets)
        for target in targets[shift:] + targets[:shift]:
            client, result = target.client, target.result
            cpu_before = cpu_seconds(target.pid)
            for _ in range(count):
                first, full = client.exchange()
                result.first_ms.append(first)
                result.full_ms.append(full)
            result.server_cpu_s += cpu_seconds(target.pid) - cpu_before
    for target in targets:
        target.result.reconnects = target.client.reconnects


# -- reporting ----------------------------------------------------------------------------------


def _progress(options: argparse.Namespace) -> Callable[[str], None]:
    def say(message: str) -> None:
        if not options.quiet:
            print(f"  … {message}", file=sys.stderr, flush=True)

    return say


def derive(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def added(kind: str, stat: str, over: str, path: str) -> float:
        return float(summaries[path][kind][stat] - summaries[over][kind][stat])

    gateway_over_proxy = added("full_ms", "p50", "proxy", "gateway")
    return {
        "gateway_minus_proxy_p50_ms": gateway_over_proxy,
        "gateway_minus_proxy_first_event_p50_ms": added(
            "first_event_ms", "p50", "proxy", "gateway"
        ),
        "gateway_minus_proxy_p99_ms": added("full_ms", "p99", "proxy", "gateway"),
        "proxy_minus_direct_p50_ms": added("full_ms", "p50", "direct", "proxy"),
        "gateway_minus_direct_p50_ms": added("full_ms", "p50", "direct", "gateway"),
        "targets": {
            f"gateway adds <= {TARGET_MS:g} ms p50 over the proxy": gateway_over_proxy <= TARGET_MS
        },
    }


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _latency_cell(kind: str, stat: str) -> Callable[[dict[str, Any]], str]:
    return lambda summary: _fmt(summary[kind][stat], ".3f")


def print_report(
    options: argparse.Namespace,
    results: dict[str, Result],
    summaries: dict[str, dict[str, Any]],
    derived: dict[str, Any],
    *,
    background: float,
    seconds: float,
) -> None:
    names = list(summaries)
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = []
    for kind, label in (("first_event_ms", "first event"), ("full_ms", "full stream")):
        for stat in ("p50", "p90", "p99", "mean"):
            rows.append((f"{label} {stat} ms", _latency_cell(kind, stat)))
    rows += [
        ("server CPU µs/request", lambda s: _fmt(s["server_cpu_us_per_request"], ".0f")),
        ("reconnects", lambda s: str(s["reconnects"])),
    ]
    print(
        f"{options.requests} streamed requests per path ({options.events} SSE events,"
        f" {len(REQUEST_BODY)}-byte body; warm-up {options.warmup}, rounds of {options.round}),"
        f" one kept-alive connection each, {os.cpu_count()} CPUs"
        + (", PROFILED (cProfile): figures inflated" if options.profile else "")
    )
    if background > BUSY_MACHINE:
        print(
            f"WARNING: before starting, other processes kept {background:.2f} of"
            f" {os.cpu_count()} CPUs busy; every figure below is affected"
        )
    print(f"{'':<24}" + "".join(f"{name:>12}" for name in names))
    for label, cell in rows:
        print(f"{label:<24}" + "".join(f"{cell(summaries[name]):>12}" for name in names))
    print()
    print(
        f"proxy over direct: {derived['proxy_minus_direct_p50_ms']:+.3f} ms p50;"
        f" gateway over direct: {derived['gateway_minus_direct_p50_ms']:+.3f} ms p50"
    )
    print(
        f"gateway minus proxy: p50 {derived['gateway_minus_proxy_p50_ms']:+.3f} ms (full stream),"
        f" {derived['gateway_minus_proxy_first_event_p50_ms']:+.3f} ms (first event);"
        f" p99 {derived['gateway_minus_proxy_p99_ms']:+.3f} ms"
    )
    print("targets (from the issue):")
    for label, met in derived["targets"].items():
        print(f"  {'met' if met else 'MISSED':<7} {label}")
    for result in results.values():
        if result.log.strip():
            print(f"{result.name} output:")
            for line in result.log.strip().splitlines():
                print(f"  | {line}")
    print(f"total time {seconds:.1f} s")


def print_profiles(directory: Path, top: int = 25) -> None:
    for name in ("proxy", "gateway"):
        path = directory / f"{name}.prof"
        if not path.exists():
            print(f"{name}: no profile written", file=sys.stderr)
            continue
        out = io.StringIO()
        stats = pstats.Stats(str(path), stream=out)
        stats.strip_dirs().sort_stats("tottime").print_stats(top)
        print(f"== {name} ({path}), by own time ==\n{out.getvalue()}", file=sys.stderr)


# -- main ---------------------------------------------------------------------------------------


def benchmark(options: argparse.Namespace, processes: Processes, scratch: Path) -> dict[str, Any]:
    started = time.perf_counter()
    background = background_load()
    script = Path(__file__).resolve()
    upstream = processes.start(
        [sys.executable, str(script), "--serve-upstream", "--events", str(options.events)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    line = read_line(pipe(upstream.stdout), time.monotonic() + READY_TIMEOUT, "the upstream")
    upstream_port = int(json.loads(line)["port"])
    setup = Setup(options, processes, scratch, upstream_port)
    expected = b"".join(sse_events(options.events))
    token = setup.token
    basic = base64.b64encode(f"cloister:{token}".encode()).decode()
    authority = f"127.0.0.1:{upstream_port}"
    with (
        service(setup, "proxy", "cloister_proxy.main") as (proxy, proxy_port, proxy_log),
        service(setup, "gateway", "cloister_proxy.credentials.main") as (
            gateway,
            gateway_port,
            gateway_log,
        ),
    ):
        paths = [
            (
                Route(
                    "direct",
                    ("127.0.0.1", upstream_port),
                    build_request(PATH, authority, [], REAL_KEY),
                ),
                upstream.pid,
            ),
            (
                Route(
                    "proxy",
                    ("127.0.0.1", proxy_port),
                    build_request(
                        f"http://{authority}{PATH}",
                        authority,
                        [("Proxy-Authorization", f"Basic {basic}")],
                        REAL_KEY,
                    ),
                ),
                proxy.pid,
            ),
            (
                Route(
                    "gateway",
                    ("127.0.0.1", gateway_port),
                    build_request(f"/claude{PATH}", f"127.0.0.1:{gateway_port}", [], token),
                ),
                gateway.pid,
            ),
        ]
        targets = [
            Target(StreamClient(path, expected), pid, Result(path.name)) for path, pid in paths
        ]
        try:
            for target in targets:
                target.client.exchange()  # a broken set-up fails here, clearly
            run_rounds(options, targets)
        finally:
            for target in targets:
                target.client.close()
    results = {target.result.name: target.result for target in targets}
    results["proxy"].log = proxy_log.read_text(errors="replace")
    results["gateway"].log = gateway_log.read_text(errors="replace")
    processes.stop(upstream)
    summaries = {name: result.summary() for name, result in results.items()}
    derived = derive(summaries)
    seconds = time.perf_counter() - started
    if not options.json:
        print_report(options, results, summaries, derived, background=background, seconds=seconds)
    if options.profile is not None:
        print_profiles(options.profile)
    return {
        "settings": {
            "requests": options.requests,
            "warmup": options.warmup,
            "round": options.round,
            "events": options.events,
            "request_body_bytes": len(REQUEST_BODY),
            "stream_bytes": len(expected),
            "audit": options.audit,
            "profiled": options.profile is not None,
            "cpus": os.cpu_count(),
        },
        "results": summaries,
        "derived": derived,
        "background_cpu_cores": round(background, 2),
        "seconds": round(seconds, 1),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="measured requests per path")
    parser.add_argument("--warmup", type=int, default=200, help="requests per path not counted")
    parser.add_argument("--round", type=int, default=250, help="requests per path per round")
    parser.add_argument(
        "--events", type=int, default=16, help=f"SSE events per stream (>= {FIXED_EVENTS + 1})"
    )
    parser.add_argument("--audit", action="store_true", help="let both services write audit logs")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="run the proxy and gateway under cProfile"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
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


def main() -> None:
    parser = _parser()
    options = parser.parse_args()
    if options.events <= FIXED_EVENTS:
        parser.error(f"--events must be at least {FIXED_EVENTS + 1}")
    if options.requests < 1 or options.round < 1 or options.warmup < 0:
        parser.error("--requests and --round must be positive, --warmup not negative")
    if options.serve_upstream:
        serve_upstream(options.events)
        return
    if options.profile is not None:
        options.profile = options.profile.resolve()
        options.profile.mkdir(parents=True, exist_ok=True)
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
        print(f"bench_credentials: {type(error).__name__}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    if options.json:
        print(json.dumps(_rounded(summary), indent=2))


if __name__ == "__main__":
    main()
