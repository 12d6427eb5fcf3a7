"""Benchmark: policy decisions against a large rule set.

Builds N rules (default 10,000) spread over the four file scopes, like a long-lived
installation with many approvals: exact allows, ``*.``/``**.`` patterns, denies and a
few port-restricted entries. Then measures ``Policy.decide`` for several kinds of
host, both from the raw string (normalisation included, what the proxy does per
request) and from an already-normalised ``Host``.

Timing: calls are made in batches of --batch; each batch gives one per-call mean,
and the figure reported is the median over batches (robust to scheduler noise).

    uv run python benchmarks/bench_policy.py
    uv run python benchmarks/bench_policy.py --rules 100000 --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from cloister_core.config.models import ProxyRules, RuleEntry
from cloister_core.hosts import normalize_host
from cloister_core.rules import Policy, RuleSource, Scope, build_policy

SCOPES: tuple[Scope, ...] = ("global", "project", "global-decisions", "project-decisions")


def word(rng: random.Random, length: int = 8) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length))


def build(count: int, seed: int) -> tuple[Policy, dict[str, str]]:
    rng = random.Random(seed)
    per_scope: dict[Scope, tuple[list[RuleEntry], list[RuleEntry]]] = {
        scope: ([], []) for scope in SCOPES
    }
    tlds = ["com", "org", "net", "io", "dev"]
    for index in range(count):
        scope = SCOPES[index % len(SCOPES)]
        allow, deny = per_scope[scope]
        base = f"{word(rng)}.{rng.choice(tlds)}"
        kind = index % 10
        if kind < 6:
            allow.append(RuleEntry(domain=f"{word(rng, 5)}.{base}"))
        elif kind < 8:
            allow.append(RuleEntry(pattern=f"*.{base}"))
        elif kind == 8:
            allow.append(RuleEntry(pattern=f"**.{base}", ports=(443, 8443)))
        else:
            deny.append(RuleEntry(pattern=f"**.{base}") if index % 20 else RuleEntry(domain=base))
    # Known targets for the measured hosts.
    probe_allow, probe_deny = per_scope["project-decisions"]
    probe_allow += [
        RuleEntry(domain="api.exact-hit.com"),
        RuleEntry(pattern="*.one-level.com"),
        RuleEntry(pattern="**.any-depth.com"),
    ]
    probe_deny.append(RuleEntry(pattern="*.denied.com"))
    policy = build_policy(
        [
            (
                RuleSource(scope, Path(f"/config/{scope}.yaml")),
                ProxyRules(allow=tuple(a), deny=tuple(d)),
            )
            for scope, (a, d) in per_scope.items()
        ]
    )
    hosts = {
        "exact allow": "api.exact-hit.com",
        "*. pattern allow": "www.one-level.com",
        "**. pattern allow (5 labels)": "a.b.c.any-depth.com",
        "deny": "x.denied.com",
        "unlisted (5 labels)": "a.b.c.unknown-host.com",
        "mixed case + trailing dot": "API.Exact-Hit.COM.",
        "IP literal": "192.0.2.44",
    }
    return policy, hosts


def median_ns(call: Callable[[], object], batch: int, batches: int) -> float:
    timer = time.perf_counter_ns
    means = []
    for _ in range(batches):
        start = timer()
        for _ in range(batch):
            call()
        means.append((timer() - start) / batch)
    return statistics.median(means)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()

    started = time.perf_counter()
    policy, hosts = build(options.rules, options.seed)
    compile_seconds = time.perf_counter() - started

    results: list[dict[str, Any]] = []
    raw_medians: list[float] = []
    normalized_medians: list[float] = []
    for label, text in hosts.items():
        normalized = normalize_host(text)
        verdict = policy.decide(text, 443)
        raw = median_ns(partial(policy.decide, text, 443), options.batch, options.batches)
        pre = median_ns(partial(policy.decide, normalized, 443), options.batch, options.batches)
        raw_medians.append(raw / 1000)
        normalized_medians.append(pre / 1000)
        results.append(
            {
                "case": label,
                "verdict": verdict.reason,
                "raw_us": raw / 1000,
                "normalized_us": pre / 1000,
            }
        )

    summary = {
        "rules": len(policy),
        "build_seconds": round(compile_seconds, 3),
        "median_raw_us": statistics.median(raw_medians),
        "median_normalized_us": statistics.median(normalized_medians),
        "cases": results,
    }
    if options.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{summary['rules']} rules, built (validated + compiled) in {compile_seconds:.2f} s")
    print(f"{'case':<32} {'verdict':<10} {'from str':>10} {'from Host':>10}")
    for row in results:
        raw_us, normalized_us = row["raw_us"], row["normalized_us"]
        print(f"{row['case']:<32} {row['verdict']:<10} {raw_us:>8.2f}µs {normalized_us:>8.2f}µs")
    print(
        f"median decision: {summary['median_raw_us']:.2f} µs from a raw host string,"
        f" {summary['median_normalized_us']:.2f} µs from a normalised Host (target < 5 µs)"
    )


if __name__ == "__main__":
    main()
