"""Scenario 5: the cost of a scheduler tick (`store.schedule`) against how many timelines wait.

    python -m bench.tick_bench [--quick]

The WAITING set of one partition is filled directly (ZADD in pipelined chunks: `ds_schedule`
reads only the partition's sets, so timeline containers would change nothing but memory).
Per size, three ticks are timed, each on a fresh copy of the due set:
- `due_1pct`: 1% of the waiting timelines are due;
- `due_1000`: exactly 1,000 are due, whatever the total: equal costs at 100k and 1M show that
  a tick does not scan the total;
- `due_0`: nothing is due, the idle tick.
After each timed tick the moved timelines are put back (ZREM ready, ZADD waiting).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import redis

from bench.common import T0, delete_namespace, machine, stack, summary, unique, write_result
from digest_stream.store import TimelinePolicy
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import partition_tag, ready_key, waiting_key

CHUNK = 10_000


def fill(client: redis.Redis, key: str, total: int, due: int) -> None:
    """`total` members, the first `due` of them due at T0 - 1, the rest an hour later."""
    pipe = client.pipeline(transaction=False)
    for start in range(0, total, CHUNK):
        members = {
            f"timeline-{i:07d}": (T0 - 1 if i < due else T0 + 3600)
            for i in range(start, min(total, start + CHUNK))
        }
        pipe.zadd(key, members)
    pipe.execute()


def time_tick(client: redis.Redis, store: RedisStore, tag: str, due: int, reps: int) -> list[float]:
    """Milliseconds of `reps` ticks that each move the first `due` members."""
    waiting, ready = waiting_key(tag), ready_key(tag)
    times = []
    for _ in range(reps):
        # Make exactly the first `due` members due, the rest not.
        pipe = client.pipeline(transaction=False)
        names = [f"timeline-{i:07d}" for i in range(due)]
        for start in range(0, len(names), CHUNK):
            pipe.zadd(waiting, dict.fromkeys(names[start : start + CHUNK], T0 - 1))
        pipe.execute()
        started = time.perf_counter()
        # A tick drains every due timeline, one bounded slice (store call) at a time.
        moved = 0
        more = True
        while more:
            batch = store.schedule(0, T0)
            moved += len(batch)
            more = batch.more
        times.append((time.perf_counter() - started) * 1000)
        if moved != due:
            raise RuntimeError(f"tick moved {moved} timelines, expected {due}")
        pipe = client.pipeline(transaction=False)
        for start in range(0, len(names), CHUNK):
            chunk = names[start : start + CHUNK]
            pipe.zrem(ready, *chunk)
            pipe.zadd(waiting, dict.fromkeys(chunk, T0 + 3600))
        pipe.execute()
    return times


def measure(client: redis.Redis, total: int, reps: int) -> dict[str, Any]:
    namespace = unique("tick")
    store = RedisStore(client, namespace=namespace, policy=TimelinePolicy())
    tag = partition_tag(namespace, 0)
    try:
        fill(client, waiting_key(tag), total, 0)
        result: dict[str, Any] = {"waiting": total}
        for name, due in (("due_1pct", total // 100), ("due_1000", 1000), ("due_0", 0)):
            times = time_tick(client, store, tag, due, reps)
            result[name] = {"due": due, "ms": summary(times, 3)}
            if due:
                result[name]["us_per_due"] = round(statistics.median(times) * 1000 / due, 2)
        return result
    finally:
        delete_namespace(client, namespace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k and 100k instead of 100k, 1M")
    args = parser.parse_args(argv)
    env = stack()
    client = redis.Redis.from_url(env.redis_url)
    sizes = (10_000, 100_000) if args.quick else (100_000, 1_000_000)
    started = time.perf_counter()
    result: dict[str, Any] = {"machine": machine(env.redis_url), "sizes": {}}
    try:
        for total in sizes:
            print(f"scenario 5: tick cost with {total:,} waiting", flush=True)
            result["sizes"][str(total)] = measure(client, total, 5)
    finally:
        client.close()
    small, large = (result["sizes"][str(s)] for s in sizes)
    result["growth_total_x10"] = {
        name: round(large[name]["ms"]["median"] / small[name]["ms"]["median"], 2)
        for name in ("due_1pct", "due_1000", "due_0")
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    path = write_result("tick", result)
    for total, row in result["sizes"].items():
        print(
            f"{int(total):>9,} waiting: 1% due {row['due_1pct']['ms']['median']} ms "
            f"({row['due_1pct']['us_per_due']} us/due), 1000 due {row['due_1000']['ms']['median']}"
            f" ms, idle {row['due_0']['ms']['median']} ms"
        )
    print(f"x10 waiting -> tick cost x{result['growth_total_x10']}")
    print(f"wrote {path} in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
