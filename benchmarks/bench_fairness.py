"""How fast another cloister's request reaches the approval hub while one cloister
holds 110 requests for unknown names (issue 19: fair shares of the hub).

Runs the real services as processes on loopback, as the guardian runs them:
``python -m cloister_approval.main`` (the hub) and ``python -m cloister_proxy.main``
(the proxy, asking the hub), with a temporary config dir, two tokens and the hub
secret. Each round: cloister "hog" opens ``--held`` CONNECTs to distinct unknown names
(its share, ``proxy.max_held_per_cloister``, is held, the rest refused at once); then
cloister "quiet" sends one CONNECT, and the time until it is in the hub's pending list
(``GET /api/v1/pending`` with the hub secret, polled every millisecond) is measured.
Also measured: how long the hog's refusals took, and the time from a held client
closing its connection to its item leaving the pending list.

    uv run python benchmarks/bench_fairness.py [--rounds 10] [--held 110] [--share 16]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import httpx

from benchsupport import BenchError, free_port, summary, wait_listening
from cloister_core.tokens import TokenRecord, write_token_file


@contextlib.contextmanager
def service(argv: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[None]:
    with log.open("wb") as sink:
        child = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_listening(port, child, argv[2], log, timeout=30)
        yield
    finally:
        if sys.exc_info()[0] is not None:
            print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def connect(port: int, token: str, host: str) -> socket.socket:
    auth = base64.b64encode(f"cloister:{token}".encode()).decode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n"
        f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode()
    )
    return sock


def status_of(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]) if data else 0


def hosts_pending(hub: httpx.Client) -> set[str]:
    return {item["host"] for item in hub.get("/api/v1/pending").json()["domains"]}


def is_pending(hub: httpx.Client, host: str) -> bool:
    return host in hosts_pending(hub)


def is_gone(hub: httpx.Client, host: str) -> bool:
    return host not in hosts_pending(hub)


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> float:
    """Seconds until ``condition()`` is true, polling every millisecond."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout:
            raise BenchError("timed out")
        time.sleep(0.001)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--held", type=int, default=110)
    parser.add_argument("--share", type=int, default=16)
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as scratch:
        root = Path(scratch)
        config, data = root / "config", root / "data"
        (config / "tokens").mkdir(parents=True)
        data.mkdir()
        (config / "config.yaml").write_text(
            "proxy:\n  allow: []\n  allowed_ports: [443]\n  approval_timeout: 300s\n"
            f"  max_held_per_cloister: {options.share}\n",
            encoding="utf-8",
        )
        hog = TokenRecord.create(cloister="hog", project="hog", path=root, address="127.0.0.1")
        quiet = TokenRecord.create(
            cloister="quiet", project="quiet", path=root, address="127.0.0.1"
        )
        for record in (hog, quiet):
            write_token_file(config / "tokens", record)
        hub_secret, credential = secrets.token_hex(32), secrets.token_hex(32)
        hub_port, proxy_port = free_port(), free_port()
        env = {
            **os.environ,
            "CLOISTER_APPROVAL_HUB_SECRET": hub_secret,
            "CLOISTER_APPROVAL_SERVICE_CREDENTIAL": credential,
            "CLOISTER_PROXY_APPROVAL_CREDENTIAL": credential,
        }
        common = ["--config-dir", str(config), "--data-dir", str(data)]
        hub_argv = [sys.executable, "-m", "cloister_approval.main", *common]
        hub_argv += ["--host", "127.0.0.1", "--port", str(hub_port)]
        proxy_argv = [sys.executable, "-m", "cloister_proxy.main", *common]
        proxy_argv += ["--listen", f"127.0.0.1:{proxy_port}"]
        proxy_argv += ["--approval-url", f"http://127.0.0.1:{hub_port}"]
        appear: list[float] = []
        refusals: list[float] = []
        withdraw: list[float] = []
        with (
            service(hub_argv, env, hub_port, root / "hub.log"),
            service(proxy_argv, env, proxy_port, root / "proxy.log"),
            httpx.Client(
                base_url=f"http://127.0.0.1:{hub_port}",
                headers={"Authorization": f"Bearer {hub_secret}"},
            ) as hub,
        ):
            for round_number in range(options.rounds):
                tag = f"r{round_number}"
                started = time.perf_counter()
                held = [
                    connect(proxy_port, hog.secret, f"{tag}-{n}.unknown.example")
                    for n in range(options.held)
                ]
                wait_for(lambda: len(hosts_pending(hub)) >= options.share)
                # The surplus answers at once: read the refusals (the held stay silent).
                refused = 0
                for sock in held[options.share :]:
                    if status_of(sock) == 429:
                        refused += 1
                refusals.append(time.perf_counter() - started)
                if refused != options.held - options.share:
                    raise BenchError(f"{refused} refused, not {options.held - options.share}")
                mark = f"{tag}-quiet.unknown.example"
                asking = connect(proxy_port, quiet.secret, mark)
                appear.append(wait_for(partial(is_pending, hub, mark)))
                first = f"{tag}-0.unknown.example"
                held[0].close()
                withdraw.append(wait_for(partial(is_gone, hub, first)))
                for sock in (asking, *held):
                    sock.close()
                wait_for(lambda: not hosts_pending(hub))

    def ms(values: list[float]) -> dict[str, float]:
        return {key: round(value * 1000, 2) for key, value in summary(values).items()}

    print(
        json.dumps(
            {
                "held_by_one_cloister": options.held,
                "share": options.share,
                "rounds": options.rounds,
                "other_cloister_in_pending_ms": ms(appear),
                "hog_connects_judged_ms": ms(refusals),
                "closed_client_withdrawn_ms": ms(withdraw),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
