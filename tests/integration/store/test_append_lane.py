"""The interleaved append's lane (library 32, lua/append_lane.lua): calls whose timelines are
all READY or WAITING with one record each take a path of their own, and every outcome (due
times, counts, flush_at, capacity, the hash move, the fallbacks) is the model's."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

import pytest

from digest_stream.store import DigestStore, MemoryStore, NewRecord, TimelinePolicy
from digest_stream.store.redis import RedisStore
from tests.support.store import RedisClient

T0 = 1_000_000.0
POLICY = TimelinePolicy(
    minimum_delay=10, increment_delay=3, maximum_delay=40, ttl=3600, capacity=6, flush_at=5
)


def both(client: RedisClient, namespace: str, inline_records: int = 32) -> list[DigestStore]:
    """The model and a RedisStore of the same policy."""
    return [
        MemoryStore(policy=POLICY),
        RedisStore(client, namespace=namespace, policy=POLICY, inline_records=inline_records),
    ]


def same(stores: Sequence[DigestStore], names: Sequence[str]) -> None:
    """Every timeline inspects alike in both stores."""
    for name in names:
        model, real = (store.inspect(0, name) for store in stores)
        assert model == real, name


@pytest.mark.parametrize("payload", [b"p", b"x" * 150])
@pytest.mark.parametrize("lead", [False, True])
def test_interleaved_appends_match_the_model(
    client: RedisClient, namespace: str, payload: bytes, lead: bool
) -> None:
    stores = both(client, namespace, inline_records=4)
    names = [f"t{i}" for i in range(6)]
    ids = {name: uuid.uuid4().hex for name in names}
    offset = 0

    def call(
        now: float, round_: int, only: Sequence[str] = names, replayed: Sequence[NewRecord] = ()
    ) -> list[NewRecord]:
        nonlocal offset
        records = list(replayed)
        for name in only:
            records.append(NewRecord(name, f"r{round_}", now, payload, offset))
            offset += 1
        nonce = uuid.uuid4().hex[:24] if lead else None
        results = [store.add(0, records, now, open_nonce=nonce) for store in stores]
        model, real = (dataclasses.replace(result, opened=[]) for result in results)
        assert model == real
        assert [d.timeline for d in results[0].opened] == [d.timeline for d in results[1].opened]
        for digest in results[1].opened:  # acknowledged at once, as the leading edge does
            for store in stores:
                store.close_many([(0, digest.timeline, digest.id)], now)
        return records

    call(T0, 0)  # new timelines: READY (or led and closed: cooling)
    if not lead:
        for store in stores:
            store.open_many([(0, name, ids[name]) for name in names[:3]], T0)
            store.close_many([(0, name, ids[name]) for name in names[:3]], T0)
    same(stores, names)
    # t0-t2 cooling or WAITING, t3-t5 READY (or cooling when led): every call one record each
    for round_ in range(1, 9):
        last = call(T0 + round_, round_)
        same(stores, names)
    # a replay (the last call's first three records again, then new ones for the others): the
    # lane skips those at or below the fence
    result = call(T0 + 9, 9, names[3:], replayed=last[:3])
    assert len(result) == len(names)
    same(stores, names)
    # a call naming one timeline twice leaves the lane: same outcome
    call(T0 + 10, 10, ["t0", "t1", "t0"])
    same(stores, names)
    for store in stores:
        store.schedule(0, T0 + 60)
    for name in names:
        ids[name] = uuid.uuid4().hex
        got = [store.open(0, name, ids[name], T0 + 60) for store in stores]
        assert [r.id for r in got[0].records] == [r.id for r in got[1].records], name
        assert got[0].dropped == got[1].dropped
