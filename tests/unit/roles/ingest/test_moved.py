"""Timelines split by a grown events topic are counted, with the model store."""

from __future__ import annotations

import logging

import pytest

from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest.topic import (
    CHECKS_PER_BATCH,
    HASHES_PER_BATCH,
    MIN_WATCH,
    MovedTimelines,
)
from digest_stream.store import MemoryStore
from digest_stream.store.base import NewRecord
from tests.support.kafka import murmur2_choice

T0 = 1_700_000_000.0


def _moving(count: int, old: int, new: int) -> list[str]:
    """Timelines whose partition differs between `old` and `new` partitions."""
    names = (f"t{n}" for n in range(10_000))
    return [t for t in names if murmur2_choice(t.encode(), old) != murmur2_choice(t.encode(), new)][
        :count
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _rig() -> tuple[MemoryStore, Metrics, Clock, MovedTimelines]:
    store, metrics, clock = MemoryStore(), Metrics(), Clock()
    return (
        store,
        metrics,
        clock,
        MovedTimelines(store, metrics, "events", 120.0, murmur2_choice, clock),
    )


def _on_new(timeline: str, partitions: int, offset: int = 0) -> tuple[int, list[NewRecord]]:
    return murmur2_choice(timeline.encode(), partitions), [
        NewRecord(timeline, f"{timeline}-{offset}", T0, b"", offset)
    ]


def test_a_timeline_whose_old_partition_holds_state_is_counted_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, metrics, _, moved = _rig()
    held, gone = _moving(2, 2, 6)
    store.add(murmur2_choice(held.encode(), 2), [NewRecord(held, "a", T0, b"", 0)], T0)
    moved.counted(2)
    with caplog.at_level(logging.INFO, logger="digest_stream.roles.ingest.topic"):
        moved.counted(6)
        for timeline in (held, gone, held):
            moved.check(*_on_new(timeline, 6))
    assert metrics.value("digest_timelines_moved_total") == 1  # not `gone`: no state left
    assert any("grew from 2 to 6 partitions" in r.getMessage() for r in caplog.records)
    assert any(f"timeline '{held}' moved from partition" in r.getMessage() for r in caplog.records)


def test_nothing_is_looked_up_without_a_growth_or_after_the_watch() -> None:
    store, metrics, clock, moved = _rig()
    (timeline,) = _moving(1, 2, 4)
    store.add(murmur2_choice(timeline.encode(), 2), [NewRecord(timeline, "a", T0, b"", 0)], T0)
    moved.counted(4)  # the first count seen: no growth known
    moved.check(*_on_new(timeline, 4))
    moved.counted(4)
    moved.check(*_on_new(timeline, 4))
    assert metrics.value("digest_timelines_moved_total") == 0
    moved.counted(8)  # grew 4 -> 8, then the watch ends
    clock.now += max(120.0, MIN_WATCH) + 1
    moved.check(*_on_new(timeline, 8))
    assert metrics.value("digest_timelines_moved_total") == 0


def test_the_look_ups_per_batch_are_bounded() -> None:
    store, metrics, _, moved = _rig()
    many = [t for t in _moving(400, 1, 2) if murmur2_choice(t.encode(), 2) == 1][
        : 3 * CHECKS_PER_BATCH
    ]
    for n, timeline in enumerate(many):
        store.add(0, [NewRecord(timeline, "a", T0, b"", n)], T0)
    moved.counted(1)
    moved.counted(2)
    batch = [NewRecord(t, "b", T0, b"", n) for n, t in enumerate(many)]
    moved.check(1, batch)
    assert metrics.value("digest_timelines_moved_total") == CHECKS_PER_BATCH
    moved.check(1, batch)
    moved.check(1, batch)
    assert metrics.value("digest_timelines_moved_total") == len(many)


def test_the_keys_hashed_per_batch_are_bounded() -> None:
    # a batch of new timelines that did not move: each costs a hash, never a look-up
    store, metrics, _, _ = _rig()
    hashed: list[bytes] = []

    def place(key: bytes, partitions: int) -> int:
        hashed.append(key)
        return 0

    moved = MovedTimelines(store, metrics, "events", 120.0, place, Clock())
    moved.counted(1)
    moved.counted(2)
    batch = [NewRecord(f"n{n}", "a", T0, b"", n) for n in range(3 * HASHES_PER_BATCH)]
    moved.check(0, batch)
    assert len(hashed) == HASHES_PER_BATCH
    moved.check(0, batch)  # the next batch goes on where this one stopped, each key once
    assert len(hashed) == 2 * HASHES_PER_BATCH
    assert len(set(hashed)) == len(hashed)
