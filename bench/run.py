"""The benchmark suite: `make bench` (everything) and `make bench-quick` (scenarios 1, 2, 4, 7, 8).

    python -m bench.run [--quick]

Full: writes bench/results/{ingest,latency,memory,tick,catchup}.json, regenerates the table
between the markers in docs/benchmarks.md and redraws its headline chart
(docs/images/benchmarks-headline.svg, bench/chart.py). Quick: fewer events, repetitions and
seconds (under three minutes, plus the Kafka Streams peer's runs), writes
bench/results/*_quick.json, leaves the docs alone, and prints the headline ratios on its last
lines, digest-stream / Kafka Streams last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import redis

from bench import catchup_bench, chart, ingest_bench, latency_bench, report, tick_bench
from bench.common import RESULTS_DIR, machine, stack, write_result
from bench.store_bench import memory

MEMORY_PAYLOAD = 200


def run_memory(quick: bool) -> dict[str, Any]:
    """Scenario 4: Redis bytes per pending record beyond its payload, vs the seed-style layout."""
    env = stack()
    client = redis.Redis.from_url(env.redis_url)
    count, reps = (5_000, 3) if quick else (20_000, 5)
    print(f"scenario 4: memory per pending record, {count:,} records x {reps} reps", flush=True)
    try:
        # The server's used_memory growth: real allocations (jemalloc size classes, the
        # expires dict of keys with a TTL), but shared with every other client of this Redis.
        table = memory(client, MEMORY_PAYLOAD, count, reps, "used_memory")
        # MEMORY USAGE of our own keys: deterministic and blind to other clients, but an
        # estimate that leaves out the per-key TTL entry (which favours the seed-style layout).
        check = memory(client, MEMORY_PAYLOAD, count, 1, "memory_usage")
    finally:
        client.close()
    result = {
        "machine": machine(env.redis_url),
        "records": count,
        "reps": reps,
        "payload_bytes": MEMORY_PAYLOAD,
        "method": "growth of INFO used_memory",
        "per_timeline": table,
        "memory_usage_check": {k: v["ratio"] for k, v in check.items()},
        "target_ratio": 0.5,
    }
    write_result("memory_quick" if quick else "memory", result)
    return result


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    return data


def headline(quick: bool) -> list[str]:
    """The ratio lines printed last."""
    suffix = "_quick" if quick else ""
    lines = []
    throughput = load(f"ingest{suffix}")["throughput"]
    for key, label, target in (
        ("ingest_vs_raw", "ingest / raw consume+decode", ">= 0.60"),
        ("ingest_vs_seed", "ingest / seed-style store", ">= 5"),
        ("ingest_vs_quix", "ingest / Quix Streams", "> 1"),
    ):
        if key in throughput:
            r = throughput[key]
            lines.append(f"{label:<34} {r['median']:>7} [{r['min']}..{r['max']}]  target {target}")
    immediate = load(f"latency{suffix}")["immediate"]
    lines.append(
        f"{'immediate latency p50 / p99 (ms)':<34} {immediate['p50_ms']:>7} / {immediate['p99_ms']}"
        f"  target p99 < {immediate['target_p99_ms']}"
        f"  ({immediate['delivered']} of {immediate['probes']} delivered)"
    )
    catchup = load(f"catchup{suffix}")
    lines += catchup_bench.headline(catchup)
    for shape, row in load(f"memory{suffix}")["per_timeline"].items():
        lines.append(
            f"{f'memory/record vs seed, {shape}/timeline':<34} {row['ratio']:>7} "
            f"[{min(row['ratio_reps'])}..{max(row['ratio_reps'])}]  target <= 0.5"
        )
    return lines + catchup_bench.kstreams_headline(catchup)  # last: the Kafka Streams peer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    quick = ["--quick"] if args.quick else []
    if args.quick:
        ingest_bench.main([*quick, "--only", "throughput"])
        latency_bench.main([*quick, "--only", "immediate"])
        catchup_bench.main([*quick, "--only", "catchup,delivery"])
    else:
        ingest_bench.main([])
        latency_bench.main([])
        tick_bench.main([])
        catchup_bench.main([])
    run_memory(args.quick)
    if not args.quick:
        path = report.write()
        print(f"regenerated {path}")
        drawn = chart.write()  # the headline chart the doc shows, from the same results
        print(f"drew {drawn}" if drawn else "no catch-up or ingest results: chart left as it was")
    print(f"\nbench{'-quick' if args.quick else ''} took {time.perf_counter() - started:.0f} s")
    print("ratios: median [min..max] over repetitions, each rep measured back to back")
    for line in headline(args.quick):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
