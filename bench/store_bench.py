"""Store benchmark: batched add vs a seed-style baseline, and memory per pending record.

Run with ``python -m bench.store_bench`` (``make bench-store``) against the Redis named by
``DIGEST_STREAM_REDIS_URL`` (default ``redis://127.0.0.1:16379/0``, the stack's, as in the
other benches). Prints a summary and writes ``bench/results/store.json``. Not a test: it
reports, it does not assert.

The baseline follows the layout and access pattern of the Sentry digest backend the
design started from: one script call per record, one string key per record (SETEX)
plus a sorted set per timeline and a ready/waiting schedule. Both run on the same Redis
in the same run, so the ratio is meaningful even where absolute numbers are not.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from bench.common import T0, delete_namespace, stack, summary, write_result
from digest_stream.store import NewRecord, TimelinePolicy
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import partition_tag

REPS = 3
THROUGHPUT_RECORDS = 20_000
BATCH = 500  # records per FCALL, about what one Kafka poll hands the ingest
RECORDS_PER_TIMELINE_THROUGHPUT = 20
MEMORY_RECORDS = 20_000
MEMORY_SHAPES = (1, 10, 1_000)  # records per timeline
PAYLOAD_SIZES = (32, 256)

# A seed-style script written for this benchmark: one call stores one record as its own
# string key with a TTL, indexes it in the timeline's sorted set, and puts a timeline
# that is in neither schedule set into the ready set (the waiting-set delay update is
# included, simplified to use the record time, so the per-call work is comparable).
SEED_STYLE_SCRIPT = """
local waiting, ready, timeline_set, record_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local timeline, record_id, value = ARGV[1], ARGV[2], ARGV[3]
local timestamp, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local increment, maximum = tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('SETEX', record_key, ttl, value)
redis.call('ZADD', timeline_set, timestamp, record_id)
redis.call('EXPIRE', timeline_set, ttl)
if redis.call('ZSCORE', ready, timeline) then
    return 0
end
local due = redis.call('ZSCORE', waiting, timeline)
if not due then
    redis.call('ZADD', ready, timestamp, timeline)
    return 1
end
local updated = math.min(tonumber(due) + increment, timestamp + maximum)
redis.call('ZADD', waiting, updated, timeline)
return 0
"""


class SeedStyle:
    """The baseline layout: a string key per record, a zset per timeline."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.tag = partition_tag(namespace, 0)
        self.script = client.register_script(SEED_STYLE_SCRIPT)

    def call_args(self, record: NewRecord) -> tuple[list[str], list[Any]]:
        timeline_set = f"{self.tag}:t:{record.timeline}"
        keys = [f"{self.tag}:w", f"{self.tag}:r", timeline_set, f"{timeline_set}:r:{record.id}"]
        args = [record.timeline, record.id, record.payload, record.timestamp, 3600, 30, 1800]
        return keys, args

    def add_one_by_one(self, records: list[NewRecord]) -> None:
        for record in records:
            keys, args = self.call_args(record)
            self.script(keys=keys, args=args)

    def add_pipelined(self, records: list[NewRecord]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for record in records:
            keys, args = self.call_args(record)
            self.script(keys=keys, args=args, client=pipe)
        pipe.execute()


def make_records(count: int, per_timeline: int, payload_size: int) -> list[NewRecord]:
    payload = os.urandom(payload_size)
    return [
        NewRecord(
            f"timeline-{i // per_timeline:06d}",
            f"record-{i:08d}",
            T0 + i / 1000,
            payload,
            i,
        )
        for i in range(count)
    ]


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def timed(run: Callable[[], None]) -> float:
    gc.collect()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def throughput(client: redis.Redis, payload_size: int) -> dict[str, Any]:
    records = make_records(THROUGHPUT_RECORDS, RECORDS_PER_TIMELINE_THROUGHPUT, payload_size)
    rates: dict[str, list[float]] = {"batched": [], "seed_style": [], "seed_style_pipelined": []}
    for _ in range(REPS):
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        store = RedisStore(client, namespace=namespace, policy=TimelinePolicy())

        def batched(store: RedisStore = store) -> None:
            for start in range(0, len(records), BATCH):
                store.add(0, records[start : start + BATCH], T0)

        rates["batched"].append(len(records) / timed(batched))
        delete_namespace(client, namespace)

        seed = SeedStyle(client, namespace)

        def one_by_one(seed: SeedStyle = seed) -> None:
            seed.add_one_by_one(records)

        rates["seed_style"].append(len(records) / timed(one_by_one))
        delete_namespace(client, namespace)

        def pipelined(seed: SeedStyle = seed) -> None:
            for start in range(0, len(records), BATCH):
                seed.add_pipelined(records[start : start + BATCH])

        rates["seed_style_pipelined"].append(len(records) / timed(pipelined))
        delete_namespace(client, namespace)
    result: dict[str, Any] = {name: summary(values) for name, values in rates.items()}
    result["speedup_vs_seed_style"] = round(
        statistics.median(rates["batched"]) / statistics.median(rates["seed_style"]), 1
    )
    result["speedup_vs_seed_style_pipelined"] = round(
        statistics.median(rates["batched"]) / statistics.median(rates["seed_style_pipelined"]), 1
    )
    return result


def key_bytes(client: redis.Redis, namespace: str) -> int:
    """Sum of MEMORY USAGE (all samples) over the namespace's keys: blind to other clients."""
    total = 0
    keys = list(client.scan_iter(match=f"{{{namespace}:*", count=5000))
    for start in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[start : start + 1000]:
            pipe.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")
        total += sum(int(size or 0) for size in pipe.execute())
    return total


def memory_per_record(
    client: redis.Redis,
    per_timeline: int,
    payload_size: int,
    layout: str,
    count: int = MEMORY_RECORDS,
    method: str = "used_memory",
) -> float:
    """Bytes per record beyond its payload. method "used_memory": growth of the server's
    used_memory (counts allocator overhead, but also whatever other clients do meanwhile);
    "memory_usage": MEMORY USAGE of the namespace's keys (only ours, robust on a shared Redis)."""
    records = make_records(count, per_timeline, payload_size)
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    if layout == "store":
        store = RedisStore(client, namespace=namespace, policy=TimelinePolicy())
    else:
        seed = SeedStyle(client, namespace)
    before = used_memory(client)
    for start in range(0, len(records), BATCH):
        chunk = records[start : start + BATCH]
        if layout == "store":
            store.add(0, chunk, T0)
        else:
            seed.add_pipelined(chunk)
    grown = used_memory(client) - before
    if method == "memory_usage":
        grown = key_bytes(client, namespace)
    delete_namespace(client, namespace)
    return grown / len(records) - payload_size


def memory(
    client: redis.Redis,
    payload_size: int,
    count: int = MEMORY_RECORDS,
    reps: int = REPS,
    method: str = "used_memory",
) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for per_timeline in MEMORY_SHAPES:
        samples: dict[str, list[float]] = {"store": [], "seed_style": []}
        for _ in range(reps):  # alternate, so drift in the allocator hits both alike
            for layout, values in samples.items():
                values.append(
                    memory_per_record(client, per_timeline, payload_size, layout, count, method)
                )
        ours = statistics.median(samples["store"])
        seed = statistics.median(samples["seed_style"])
        ratios = [a / b for a, b in zip(samples["store"], samples["seed_style"], strict=True)]
        table[str(per_timeline)] = {
            "store_bytes": round(ours, 1),
            "seed_style_bytes": round(seed, 1),
            "ratio": round(ours / seed, 2),
            "ratio_reps": [round(value, 3) for value in ratios],
            "store_reps": [round(value, 1) for value in samples["store"]],
            "seed_style_reps": [round(value, 1) for value in samples["seed_style"]],
        }
    return table


def main() -> int:
    client = redis.Redis.from_url(stack().redis_url)
    started = time.perf_counter()
    info = client.info("server")
    result: dict[str, Any] = {
        "redis_version": info.get("redis_version"),
        "python": platform.python_version(),
        "records": THROUGHPUT_RECORDS,
        "batch": BATCH,
        "records_per_timeline": RECORDS_PER_TIMELINE_THROUGHPUT,
        "throughput_records_per_s": {},
        "memory_per_record_beyond_payload": {},
    }
    for payload_size in PAYLOAD_SIZES:
        result["throughput_records_per_s"][str(payload_size)] = throughput(client, payload_size)
        result["memory_per_record_beyond_payload"][str(payload_size)] = memory(client, payload_size)
    result["seconds"] = round(time.perf_counter() - started, 1)
    path = write_result("store", result)

    print(f"Redis {result['redis_version']}, {THROUGHPUT_RECORDS} records, batch {BATCH}")
    for size, figures in result["throughput_records_per_s"].items():
        print(f"\nadd throughput, payload {size} B (records/s, median [min..max] of {REPS})")
        for name in ("batched", "seed_style", "seed_style_pipelined"):
            row = figures[name]
            print(f"  {name:<22} {row['median']:>9,} [{row['min']:,}..{row['max']:,}]")
        print(
            f"  speedup vs seed-style: {figures['speedup_vs_seed_style']}x "
            f"(vs pipelined seed-style: {figures['speedup_vs_seed_style_pipelined']}x)"
        )
    for size, table in result["memory_per_record_beyond_payload"].items():
        print(f"\nmemory per pending record beyond its {size} B payload (bytes, median of {REPS})")
        print("  records/timeline      store  seed-style  ratio")
        for shape, row in table.items():
            print(
                f"  {shape:>16} {row['store_bytes']:>10} {row['seed_style_bytes']:>11}"
                f" {row['ratio']:>6}"
            )
    print(f"\nwrote {path} in {result['seconds']} s")
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
