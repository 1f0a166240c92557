"""Bounded work per store call: no single FCALL may hold Redis for long (issue 12, item 6)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from digest_stream.store import NewRecord, TimelinePolicy
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import partition_tag, scratch_key
from tests.support.store import RedisClient

T0 = 1_000_000.0
RECORDS = 20_000
ID_BYTES = 1_000
#: How much longer the open of ids sharing a long prefix may take than the open of as many
#: ids of the same length that differ at their first bytes, in the same run. The shape once
#: took 35 s inside Redis (a Lua comparator walking the shared prefix), about 100 times the
#: other; a ratio, not a time, so that a busy host slows both alike (speed figures belong to
#: the benchmarks, not the tests).
SLOWER_AT_MOST = 3.0


def _bulk(store: RedisStore, timeline: str, id_of: Callable[[int], str], offset: int) -> None:
    """A bulk import: RECORDS records on one timeline, equal timestamps, at offsets from
    ``offset`` on."""
    for start in range(0, RECORDS, 1_000):
        batch = [
            NewRecord(timeline, id_of(i), T0, b"p", offset + i) for i in range(start, start + 1_000)
        ]
        store.add(0, batch, T0)


def _open_seconds(store: RedisStore, timeline: str, id_of: Callable[[int], str]) -> float:
    """The wall time of the timeline's open, its records checked (ties: larger id first)."""
    started = time.perf_counter()
    digest = store.open(0, timeline, uuid.uuid4().hex, T0)
    seconds = time.perf_counter() - started
    assert len(digest.records) == RECORDS
    assert [digest.records[0].id, digest.records[-1].id] == [id_of(RECORDS - 1), id_of(0)]
    assert store.open(0, timeline, uuid.uuid4().hex, T0).id == digest.id  # a reopen: the same
    assert store.close(0, timeline, digest.id, T0)
    return seconds


def test_open_of_a_huge_timeline_with_long_shared_prefix_ids_is_not_slower(
    make_redis_store: Callable[..., RedisStore],
) -> None:
    # 20,000 records of 1,000-byte ids on one timeline, against the same bytes with ids that
    # differ early, each shape twice, alternated, the best of each compared.
    prefix = "x" * (ID_BYTES - 10)
    shapes: dict[str, Callable[[int], str]] = {
        "shared": lambda i: f"{prefix}{i:010d}",
        "distinct": lambda i: f"{i:010d}{prefix}",
    }
    store = make_redis_store(TimelinePolicy(capacity=None))
    best = dict.fromkeys(shapes, float("inf"))
    offset = 0
    for attempt in range(2):
        for shape, id_of in shapes.items():
            timeline = f"{shape}-{attempt}"
            _bulk(store, timeline, id_of, offset)
            offset += RECORDS
            best[shape] = min(best[shape], _open_seconds(store, timeline, id_of))
    print(f"open of {RECORDS} records: shared prefix {best['shared']:.3f} s, "
          f"distinct {best['distinct']:.3f} s")  # fmt: skip
    assert best["shared"] < SLOWER_AT_MOST * best["distinct"], best


@pytest.mark.parametrize("inline_records", [0, 16])
def test_no_scratch_key_is_left_behind(
    make_redis_store: Callable[..., RedisStore],
    client: RedisClient,
    namespace: str,
    inline_records: int,
) -> None:
    store = make_redis_store(TimelinePolicy(capacity=30), inline_records=inline_records)
    store.add(0, [NewRecord("t", f"r{i}", T0, b"p", i) for i in range(50)], T0)
    store.open(0, "t", uuid.uuid4().hex, T0)
    assert client.exists(scratch_key(partition_tag(namespace, 0))) == 0


def test_default_capacity_bounds_a_timeline() -> None:
    assert TimelinePolicy().capacity == 10_000
