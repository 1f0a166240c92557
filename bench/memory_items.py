"""What each piece of the seed-style layout costs in Redis memory, one kind of item at a time.

    python -m bench.memory_items

Scenario 4 compares whole layouts; this breaks the seed-style one (bench/store_bench.py) into
its items at one record per timeline, to show what a layout must undercut to cost half of it:
a record key (string with TTL), the timeline's one-member sorted set (with TTL), and one member
of a large schedule set (READY/WAITING, which the store has too). Each is `used_memory` after
minus before creating 20,000 of them, per item, minus the 200-byte payload where there is one.
Uses a namespace of its own on the stack's Redis and removes it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import redis

from bench.common import T0, delete_namespace, stack, unique
from digest_stream.store.redis.keys import partition_tag

ITEMS = 20_000
PAYLOAD = 200
TTL_S = 3600

Add = Callable[[redis.client.Pipeline, str, int, bytes], object]


def record_key(pipe: redis.client.Pipeline, tag: str, i: int, payload: bytes) -> object:
    """The seed-style record: its own string key with a TTL."""
    return pipe.set(f"{tag}:t:timeline-{i:06d}:r:record-{i:08d}", payload, ex=TTL_S)


def timeline_set(pipe: redis.client.Pipeline, tag: str, i: int, payload: bytes) -> object:
    """The seed-style timeline index: a sorted set per timeline, here with one member."""
    key = f"{tag}:t:timeline-{i:06d}"
    pipe.zadd(key, {f"record-{i:08d}": T0 + i})
    return pipe.expire(key, TTL_S)


def schedule_member(pipe: redis.client.Pipeline, tag: str, i: int, payload: bytes) -> object:
    """One timeline's entry in the partition's READY (or WAITING) set: both layouts have it."""
    return pipe.zadd(f"{tag}:r", {f"timeline-{i:06d}": T0 + i})


ITEM_KINDS: tuple[tuple[str, Add, int], ...] = (
    ("record key (string + TTL), beyond the payload", record_key, PAYLOAD),
    ("timeline sorted set (1 member + TTL)", timeline_set, 0),
    ("member of a large schedule set", schedule_member, 0),
)


def per_item(client: redis.Redis, add: Add, payload: bytes) -> float:
    """Bytes of `used_memory` per item for ITEMS items made by `add`, in a fresh namespace."""
    namespace = unique("mem")
    tag = partition_tag(namespace, 0)
    try:
        before = int(client.info("memory")["used_memory"])
        pipe = client.pipeline(transaction=False)
        for i in range(ITEMS):
            add(pipe, tag, i, payload)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        return (int(client.info("memory")["used_memory"]) - before) / ITEMS
    finally:
        delete_namespace(client, namespace)


def main() -> int:
    client = redis.Redis.from_url(stack().redis_url)
    payload = os.urandom(PAYLOAD)
    try:
        total = 0.0
        for label, add, payload_bytes in ITEM_KINDS:
            size = per_item(client, add, payload) - payload_bytes
            total += size
            print(f"{label}: {size:.1f} B")
        print(f"seed-style, 1 record/timeline: {total:.1f} B beyond the payload")
        print(f"half of it (the target): {total / 2:.1f} B")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
