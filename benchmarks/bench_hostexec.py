"""Benchmark: the round trip of an auto-approved ``hostexec true``, from inside a cloister.

Sets up the miniature guardian stack of the end-to-end tests
(``tests/executor/docker_support.py``): the gateway, approval and slim images built from
this tree (tags ``:bench``; the engine's layer cache makes a rebuild take seconds), the
executor daemon on the host, cloisternet (internal, ``inhibit_ipv4``) and a control
network, the hub, the gateway, and one cloister. The containers, networks, daemon and
temporary files are removed at the end, also on Ctrl-C; the images stay (cached).

Three figures, each over --count calls after --warmup unmeasured ones, one at a time:

1. **client round trip** (the target, < 50 ms): inside the cloister, a bash loop runs
   ``hostexec true`` and reads ``$EPOCHREALTIME`` (bash 5: no fork) before and after
   each call. So it is what an agent waits for: bash starting the client script, its
   curl to the gateway over cloisternet, the gateway (token, pattern, audit), the
   executor (Unix socket, fork/exec of ``true`` on the host), and the client reading
   the ``text/x-hostexec`` answer (no JSON parser); ``docker exec`` overhead is excluded.
   The time bash, curl and base64 take just to start (each run alone in a loop the
   same way) is shown below it: most of the client's cost when the machine is idle.
2. **server side** (gateway + executor): inside the gateway container, a Python loop
   POSTs the same request to 127.0.0.1:9998 (a new HTTP connection each time, as the
   client makes) and times each answer with ``perf_counter``. The client's own cost is
   (1) minus (2).
3. **executor alone**, two ways: from the host, requests straight to the executor's
   Unix socket (with the stack's secret), timed with ``perf_counter``; and the gateway's
   own measure of its executor call, ``executor_ms`` of its ``hostexec.complete``
   audit lines for the calls of (1).

    uv run python benchmarks/bench_hostexec.py
    uv run python benchmarks/bench_hostexec.py --count 500 --json
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the stack lives with the tests that use it

from tests.executor.docker_support import (  # noqa: E402
    REQUEST_PORT,
    GuardianStack,
    StackError,
    StackOptions,
    build_images,
    run_in,
)

from cloister_executor.protocol import ExecRequest  # noqa: E402

TARGET_MS = 50.0
LABELS = {"org.cloister.test": "benchmarks/bench_hostexec.py"}

# In the cloister: warm-up calls, then one "start end" line (seconds, µs resolution)
# per measured call. Any failure stops the loop with the command's exit code.
CLIENT_LOOP = """
set -u
for ((i = 0; i < WARMUP; i++)); do COMMAND >/dev/null || exit $?; done
for ((i = 0; i < COUNT; i++)); do
  s=$EPOCHREALTIME
  COMMAND >/dev/null || exit $?
  e=$EPOCHREALTIME
  echo "$s $e"
done
"""
# What the client is made of, each started alone in the cloister (where its time goes).
CLIENT_PARTS = {
    "client part: bash starting a script": "bash -c true",
    "client part: curl starting": "curl --version",
    "client part: base64 starting": "base64 --version",
}

# In the gateway container (its Python, standard library only).
SERVER_LOOP = """
import http.client, json, os, sys, time
token = os.environ["BENCH_TOKEN"]
body = json.dumps({"args": ["true"]})
headers = {"Content-Type": "application/json", "X-Cloister-Token": token}
def once():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/request", body=body, headers=headers)
    answer = json.loads(conn.getresponse().read())
    conn.close()
    if answer.get("status") != "auto_approved" or answer.get("exit_code") != 0:
        sys.exit(f"unexpected answer: {answer!r}")
port, warmup, count = (int(value) for value in sys.argv[1:4])
for _ in range(warmup):
    once()
samples = []
for _ in range(count):
    started = time.perf_counter()
    once()
    samples.append((time.perf_counter() - started) * 1000)
print(json.dumps(samples))
"""


def summary(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    return {
        "samples": len(ordered),
        "p50_ms": round(pct(50), 2),
        "p95_ms": round(pct(95), 2),
        "p99_ms": round(pct(99), 2),
        "max_ms": round(ordered[-1], 2),
        "mean_ms": round(statistics.fmean(ordered), 2),
    }


def client_round_trips(
    stack: GuardianStack, warmup: int, count: int, command: str = "hostexec true"
) -> list[float]:
    """*command* timed inside the cloister, one call at a time."""
    if stack.cloister is None:
        raise StackError("the stack is not started")
    script = (
        CLIENT_LOOP.replace("WARMUP", str(warmup))
        .replace("COUNT", str(count))
        .replace("COMMAND", command)
    )
    result = run_in(stack.cloister, ["bash", "-c", script])
    if result.exit_code != 0:
        raise StackError(f"the loop of {command!r} failed: {result}")
    samples = []
    for line in result.out.splitlines():
        start, end = (float(value) for value in line.split())
        samples.append((end - start) * 1000)
    return samples


def server_round_trips(stack: GuardianStack, warmup: int, count: int) -> list[float]:
    if stack.gateway is None:
        raise StackError("the stack is not started")
    result = run_in(
        stack.gateway,
        ["python3", "-c", SERVER_LOOP, str(REQUEST_PORT), str(warmup), str(count)],
        environment={"BENCH_TOKEN": stack.token},
    )
    if result.exit_code != 0:
        raise StackError(f"the server loop failed: {result}")
    samples: list[float] = json.loads(result.out)
    return samples


def executor_round_trips(stack: GuardianStack, warmup: int, count: int) -> list[float]:
    secret = stack.executor.secret_path.read_text(encoding="ascii").strip()
    line = (
        ExecRequest(secret=secret, token=stack.token, argv=("true",), timeout_seconds=30)
        .model_dump_json()
        .encode()
        + b"\n"
    )
    samples = []
    for index in range(warmup + count):
        started = time.perf_counter()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(str(stack.executor.socket_path))
            sock.sendall(line)
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        elapsed = (time.perf_counter() - started) * 1000
        parsed = json.loads(answer)
        if parsed.get("kind") != "result" or parsed.get("exit_code") != 0:
            raise StackError(f"the executor answered {parsed!r}")
        if index >= warmup:
            samples.append(elapsed)
    return samples


def audited_executor_times(stack: GuardianStack, count: int) -> list[float]:
    """``executor_ms`` of the last *count* completions the gateway audited for ``true``."""
    records = stack.gateway_audit()
    durations: list[float] = []
    waiting = False
    for record in records:
        if record.get("event") == "hostexec.request":
            waiting = record.get("argv") == ["true"]
        elif record.get("event") == "hostexec.complete" and waiting:
            durations.append(float(record["executor_ms"]))
            waiting = False
    return durations[-count:]


def run(options: argparse.Namespace) -> dict[str, Any]:
    client = docker.from_env()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-hostexec-") as tmp:
            started = time.monotonic()
            images = build_images(client, Path(tmp) / "contexts", suffix="bench")
            built = time.monotonic() - started
            options_ = StackOptions(labels=LABELS, name_prefix="cloister-bench")
            with GuardianStack(client, images, Path(tmp) / "stack", options_) as stack:
                # The client loop first, so the audit lines it leaves are the last
                # `true` completions before the server loop adds its own.
                client_ms = client_round_trips(stack, options.warmup, options.count)
                audit_ms = audited_executor_times(stack, options.count)
                server_ms = server_round_trips(stack, options.warmup, options.count)
                executor_ms = executor_round_trips(stack, options.warmup, options.count)
                parts_ms = {
                    label: client_round_trips(stack, options.warmup, options.count, command)
                    for label, command in CLIENT_PARTS.items()
                }
    finally:
        client.close()
    phases = {
        "client round trip (in the cloister)": summary(client_ms),
        **{label: summary(samples) for label, samples in parts_ms.items()},
        "gateway + executor (in the gateway)": summary(server_ms),
        "executor alone (host, Unix socket)": summary(executor_ms),
        "executor call (gateway audit)": summary(audit_ms),
    }
    client_figures = phases["client round trip (in the cloister)"]
    return {
        "count": options.count,
        "warmup": options.warmup,
        "target_ms": TARGET_MS,
        "image_build_seconds": round(built, 1),
        "phases": phases,
        "meets_target": {
            key.removesuffix("_ms"): client_figures[key] < TARGET_MS
            for key in ("p50_ms", "p95_ms", "p99_ms", "max_ms")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="measured calls per phase")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured calls first")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()
    if options.count < 1 or options.warmup < 0:
        parser.error("--count must be at least 1 and --warmup at least 0")
    result = run(options)
    if options.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"hostexec true, {options.count} sequential calls per phase"
        f" (after {options.warmup} warm-up), target: client round trip < {TARGET_MS:.0f} ms"
    )
    print(f"{'phase':<40} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8} {'mean':>8}")
    for label, figures in result["phases"].items():
        print(
            f"{label:<40}"
            + "".join(
                f" {figures[key]:>6.1f}ms"
                for key in ("p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms")
            )
        )
    verdicts = ", ".join(
        f"{name} {'OK' if ok else 'MISSES'}" for name, ok in result["meets_target"].items()
    )
    print(f"client round trip against < {TARGET_MS:.0f} ms: {verdicts}")


if __name__ == "__main__":
    main()
