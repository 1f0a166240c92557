"""Client-side cost of `RedisStore.add` per record, by batch shape, with no Redis call.

    python -m bench.add_packing [--rounds N]

Two parts, in microseconds per record: building ds_add's arguments (`store.add` with the
client replaced by a recorder that keeps the command), and redis-py packing them into one
command (`Connection.pack_command`, what every real call pays before the bytes leave).
Same shapes as `bench.lua_cost`: 1,000 records per call on 1,000, 50 and 1 timelines. Prints
median [min..max] over the rounds. Needs a Redis only to load the library at construction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import cast

import redis

from bench.common import T0, stack, unique
from bench.lua_cost import RECORDS, SHAPES
from digest_stream.store import NewRecord
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.replies import Reply


class Recorder:
    """Stands in for the client once the library is loaded: keeps the command `store.add`
    hands to redis-py (through the store's own RedisCalls.fcall and routing) instead of sending
    it."""

    sent: tuple[object, ...] = ()

    def execute_command(self, *args: object) -> Reply:
        """Keep the command; answer as ds_add would for a batch of fresh records."""
        self.sent = args
        return [[], RECORDS, 0, 0, None, str(RECORDS - 1).encode(), None]


def spread(values: list[float]) -> str:
    """median [min..max] of seconds per call, as us per record."""
    scale = 1e6 / RECORDS
    return (
        f"{statistics.median(values) * scale:.2f} "
        f"[{min(values) * scale:.2f}..{max(values) * scale:.2f}]"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(stack().redis_url)
    store = RedisStore(client, namespace=unique("pack"))
    recorder = Recorder()
    store.calls.client = cast(redis.Redis, recorder)  # the client the store calls through
    connection = client.connection_pool.get_connection()
    payload = os.urandom(200)
    try:
        for label, timelines in SHAPES:
            batch = [
                NewRecord(f"tl-{i % timelines}", f"r-{i}", T0 + 0.001 * (i // 50), payload, i)
                for i in range(RECORDS)
            ]
            build: list[float] = []
            pack: list[float] = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                store.add(0, batch, T0)
                build.append(time.perf_counter() - started)
                started = time.perf_counter()
                connection.pack_command(*recorder.sent)
                pack.append(time.perf_counter() - started)
            print(
                f"{label}: building arguments {spread(build)} us per record, "
                f"redis-py packing {spread(pack)} us per record"
            )
    finally:
        client.connection_pool.release(connection)
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
