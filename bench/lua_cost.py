"""Server-side cost of `ds_add` per record, by batch shape (Redis's own clock, no client time).

    python -m bench.lua_cost [--rounds N]

Redis counts the microseconds it spends in each command (`INFO commandstats`); the difference
of the FCALL counter around one `store.add` is the Lua's time for that batch, round trip and
client excluded. Shapes: 1,000 records on 1,000 timelines per call (the ingest benchmark's
shape: every record touches a timeline of its own), repeated so each timeline grows by one
record per round; and 1,000 records on 50 timelines (20 per timeline per call). Prints ms per
1,000 records for each round. Uses its own namespace on the stack's Redis and removes it.
"""

from __future__ import annotations

import argparse
import os
import sys

import redis

from bench.common import T0, delete_namespace, stack, unique
from digest_stream.store import NewRecord, RedisStore

RECORDS = 1_000


def fcall_usec(client: redis.Redis) -> int:
    """Microseconds Redis has spent in FCALL since its stats were last reset."""
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return int(stats.get("usec", 0))


def shape(client: redis.Redis, timelines: int, rounds: int) -> list[float]:
    """ms of Redis time per call of 1,000 records over `timelines`, one figure per round."""
    namespace = unique("lua")
    store = RedisStore(client, namespace=namespace)
    payload = os.urandom(200)
    offset, costs = 0, []
    try:
        for _ in range(rounds):
            batch = [
                NewRecord(f"tl-{i % timelines}", f"r-{offset + i}", T0, payload, offset + i)
                for i in range(RECORDS)
            ]
            offset += RECORDS
            before = fcall_usec(client)
            store.add(0, batch, T0)
            costs.append((fcall_usec(client) - before) / 1000)
    finally:
        delete_namespace(client, namespace)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(stack().redis_url)
    try:
        for label, timelines in (("1,000 timelines x 1", 1_000), ("50 timelines x 20", 50)):
            costs = shape(client, timelines, args.rounds)
            print(f"{label}: " + " ".join(f"{c:.1f}" for c in costs) + " ms per 1,000 records")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
