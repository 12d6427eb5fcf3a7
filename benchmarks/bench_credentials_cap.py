"""Benchmark: another cloister's latency through the credential gateway while one
cloister holds --hold slow connections (the issue asks for within 50 ms).

One run starts on 127.0.0.1, each in its own process: an upstream (this file in the
hidden ``--serve-upstream`` mode) that answers each request as soon as its head is in
and then reads its body as it comes, and the credential gateway
(``python -m cloister_proxy.credentials.main``, its defaults: at most 64 connections
per cloister, 60 s for a request body). Two cloisters have tokens: "hog" at 127.0.0.1,
"other" at 127.0.0.2 (a token is good only from its cloister's address).

1. baseline: "other" sends --requests ``POST /claude/v1/messages`` one after another,
   each on a new connection (the dearest case: accept, head, forward, answer), timed
   from connect to the last byte of the answer;
2. "hog" opens --hold connections, each sending a forwarded request's head and one
   byte of a body that never comes (a slow-body POST), and keeps them open;
3. under load: "other" sends the same --requests again.

It prints both latency summaries, the difference of the medians and of the 99th
percentiles, and what became of the hog's connections (held by the gateway, refused
with 429 at once) and how many upstream connections the hog holds.

    uv run python benchmarks/bench_credentials_cap.py
    uv run python benchmarks/bench_credentials_cap.py --hold 300 --requests 500 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchsupport import BenchError, free_port, wait_listening
from cloister_core.credentials import store
from cloister_core.paths import CloisterPaths
from cloister_core.tokens import TokenRecord, write_token_file

HOG, OTHER = "127.0.0.1", "127.0.0.2"
READY_TIMEOUT = 30.0
TIMEOUT = 10.0
BODY = b'{"model":"m","messages":[]}'


# -- the upstream (a process of its own) ------------------------------------------------------


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each request after its head; then read its body (Content-Length) as it comes."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve_upstream(port: int) -> None:
    server = await asyncio.start_server(_answer, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


# -- the run ----------------------------------------------------------------------------------


def _request(token: str) -> bytes:
    return (
        b"POST /claude/v1/messages HTTP/1.1\r\nHost: gateway\r\n"
        + f"x-api-key: {token}\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
        + BODY
    )


def _status(sock: socket.socket) -> int:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise BenchError(f"closed before an answer: {data!r}")
        data += chunk
    return int(data.split(b" ", 2)[1])


def timed_requests(port: int, token: str, count: int) -> list[float]:
    """*count* requests from "other", each on a new connection; milliseconds each."""
    timings: list[float] = []
    request = _request(token)
    for _ in range(count):
        started = time.perf_counter()
        with socket.create_connection(
            ("127.0.0.1", port), timeout=TIMEOUT, source_address=(OTHER, 0)
        ) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(request)
            status = _status(sock)
        timings.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise BenchError(f"the other cloister got {status}")
    return timings


def hold(port: int, token: str, count: int) -> tuple[list[socket.socket], int, int]:
    """*count* slow-body connections from "hog": the open ones, how many were refused
    (429) and how many the gateway closed without an answer."""
    head = (
        b"POST /claude/v1/messages HTTP/1.1\r\nHost: gateway\r\n"
        + f"x-api-key: {token}\r\nContent-Length: 100000\r\n\r\n{{".encode()
    )
    opened: list[socket.socket] = []
    for _ in range(count):
        sock = socket.create_connection(
            ("127.0.0.1", port), timeout=TIMEOUT, source_address=(HOG, 0)
        )
        with contextlib.suppress(OSError):
            sock.sendall(head)
        opened.append(sock)
    time.sleep(1.0)  # the gateway reads every head, forwards or refuses
    held, refused, closed = [], 0, 0
    for sock in opened:
        sock.setblocking(False)
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            held.append(sock)
            continue
        except OSError:
            data = b""
        if b" 429 " in data.split(b"\r\n", 1)[0]:
            refused += 1
        elif not data:
            closed += 1
        else:
            held.append(sock)  # the upstream's early answer; the body is still owed
            continue
        sock.close()
    return held, refused, closed


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pick(percent: float) -> float:
        return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]

    return {"p50": pick(50), "p90": pick(90), "p99": pick(99), "max": ordered[-1]}


def upstream_connections(port: int) -> int:
    """Established connections to the upstream's port (from /proc/net/tcp)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        if local_port == port and fields[3] == "01":  # ESTABLISHED, the upstream's side
            count += 1
    return count


def benchmark(options: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    paths = CloisterPaths(config_dir=scratch / "config", data_dir=scratch / "data")
    paths.config_dir.mkdir()
    upstream_port, gateway_port = free_port(), free_port()
    paths.config_file.write_text(
        'proxy:\n  allow_private_networks: ["127.0.0.0/8"]\n'
        f'agents:\n  claude: {{api_base: "http://127.0.0.1:{upstream_port}"}}\n'
    )
    tokens = {}
    for name, address in (("hog", HOG), ("other", OTHER)):
        record = TokenRecord.create(cloister=name, project=name, path=scratch, address=address)
        write_token_file(paths.tokens_dir, record)
        tokens[name] = record.secret
    store(paths, "claude", "api-key", "sk-ant-bench-real-key")
    children: list[subprocess.Popen[bytes]] = []
    try:
        upstream = subprocess.Popen(
            [sys.executable, __file__, "--serve-upstream", str(upstream_port)],
            stdin=subprocess.DEVNULL,
        )
        children.append(upstream)
        gateway = subprocess.Popen(
            [
                sys.executable, "-m", "cloister_proxy.credentials.main",
                "--config-dir", str(paths.config_dir), "--data-dir", str(paths.data_dir),
                "--listen", f"127.0.0.1:{gateway_port}", "--no-refuse-own-networks",
            ],
            stdin=subprocess.DEVNULL,
            stderr=(scratch / "gateway.log").open("wb"),
        )  # fmt: skip
        children.append(gateway)
        wait_listening(upstream_port, upstream, "the upstream", timeout=READY_TIMEOUT)
        wait_listening(
            gateway_port, gateway, "the gateway", scratch / "gateway.log", timeout=READY_TIMEOUT
        )
        timed_requests(gateway_port, tokens["other"], options.warmup)
        baseline = timed_requests(gateway_port, tokens["other"], options.requests)
        held, refused, closed = hold(gateway_port, tokens["hog"], options.hold)
        try:
            upstream_held = upstream_connections(upstream_port)
            loaded = timed_requests(gateway_port, tokens["other"], options.requests)
        finally:
            for sock in held:
                sock.close()
    finally:
        for child in children:
            child.terminate()
            child.wait(10)
    base, load = _stats(baseline), _stats(loaded)
    return {
        "hold": options.hold,
        "requests": options.requests,
        "hog_held": len(held),
        "hog_refused_429": refused,
        "hog_closed": closed,
        "upstream_connections_during_load": upstream_held,
        "baseline_ms": base,
        "under_load_ms": load,
        "added_p50_ms": load["p50"] - base["p50"],
        "added_p99_ms": load["p99"] - base["p99"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--hold", type=int, default=300, help="slow connections of the hog")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per phase")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve_upstream is not None:
        asyncio.run(_serve_upstream(options.serve_upstream))
        return
    with tempfile.TemporaryDirectory(prefix="bench-cap-") as scratch:
        result = benchmark(options, Path(scratch))
    if options.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"hog: {result['hold']} slow-body connections -> {result['hog_held']} held,"
        f" {result['hog_refused_429']} refused (429), {result['hog_closed']} closed;"
        f" upstream connections while held: {result['upstream_connections_during_load']}"
    )
    print(f"{'other cloister (ms)':<22}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
    for label, key in (("baseline", "baseline_ms"), ("hog holding", "under_load_ms")):
        row = result[key]
        print(f"{label:<22}" + "".join(f"{row[s]:>9.2f}" for s in ("p50", "p90", "p99", "max")))
    print(
        f"added by the hog: p50 {result['added_p50_ms']:+.2f} ms,"
        f" p99 {result['added_p99_ms']:+.2f} ms (the issue: within 50 ms)"
    )


if __name__ == "__main__":
    main()
