"""Nothing expires while the service is merely down or behind (issue 12, item 2), and what
does expire is reported, never hidden: the stores side."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from digest_stream.store import DigestStore, NewRecord, TimelinePolicy
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import digest_key, partition_tag
from tests.support import new_id
from tests.support.store import RedisClient, expire

T0 = 1_000_000.0
# ttl a few seconds above maximum_delay + maintenance_timeout + maintenance_interval (4 s)
SHORT = TimelinePolicy(minimum_delay=1.0, increment_delay=0.0, maximum_delay=1.0, ttl=6.0)
MAINTENANCE_TIMEOUT = 2.0
MAINTENANCE_INTERVAL = 1.0


def test_expired_timeline_is_reported_by_open(
    store: DigestStore, raw_client: RedisClient | None, namespace: str
) -> None:
    store.add(0, [NewRecord("t", "r1", T0, b"1", 0)], T0)
    expire(store, raw_client, namespace, "t")
    digest = store.open(0, "t", new_id(), T0)
    assert (digest.records, digest.dropped, digest.expired) == ([], 0, True)
    assert store.open(0, "t", new_id(), T0).expired  # a reopen says it again
    assert store.close(0, "t", digest.id, T0)
    assert store.inspect(0, "t").state == "absent"  # an empty digest retires it
    fresh = store.add(0, [NewRecord("t", "r2", T0, b"2", 1)], T0)
    assert fresh.ready == ["t"]
    assert not store.open(0, "t", new_id(), T0).expired


@pytest.mark.parametrize("state", ["ready", "waiting"])
def test_records_added_after_an_expiry_still_report_it(
    store: DigestStore, raw_client: RedisClient | None, namespace: str, state: str
) -> None:
    store.add(0, [NewRecord("t", "r1", T0, b"1", 0)], T0)
    if state == "waiting":
        first = store.open(0, "t", new_id(), T0)
        store.add(0, [NewRecord("t", "r2", T0, b"2", 1)], T0)
        assert store.close(0, "t", first.id, T0)
    expire(store, raw_client, namespace, "t")
    store.add(0, [NewRecord("t", "r3", T0 + 1, b"3", 2)], T0 + 1)
    store.schedule(0, T0 + 10_000)
    digest = store.open(0, "t", new_id(), T0 + 10_000)
    assert ([r.id for r in digest.records], digest.expired) == (["r3"], True)
    assert store.close(0, "t", digest.id, T0 + 10_000)
    store.add(0, [NewRecord("t", "r4", T0 + 2, b"4", 3)], T0 + 2)
    store.schedule(0, T0 + 20_000)
    assert not store.open(0, "t", new_id(), T0 + 20_000).expired


def test_records_added_while_a_digest_is_open_are_not_expired(store: DigestStore) -> None:
    store.add(0, [NewRecord("t", "r1", T0, b"1", 0)], T0)
    digest = store.open(0, "t", new_id(), T0)
    store.add(0, [NewRecord("t", "r2", T0, b"2", 1)], T0)  # no timeline key yet: normal
    assert store.close(0, "t", digest.id, T0)
    store.schedule(0, T0 + 10_000)
    after = store.open(0, "t", new_id(), T0 + 10_000)
    assert ([r.id for r in after.records], after.expired) == (["r2"], False)


def test_an_expired_open_digest_is_noticed_behind_newer_records(
    store: DigestStore, raw_client: RedisClient | None, namespace: str
) -> None:
    store.add(0, [NewRecord("t", "r1", T0, b"1", 0)], T0)
    lost = store.open(0, "t", new_id(), T0)
    store.add(0, [NewRecord("t", "r2", T0 + 1, b"2", 1)], T0 + 1)  # waits behind the digest
    expire(store, raw_client, namespace, "t", digest_only=True)  # the digest outlived its TTL
    digest = store.open(0, "t", new_id(), T0 + 2)
    assert digest.id != lost.id
    assert ([r.id for r in digest.records], digest.expired) == (["r2"], True)
    assert store.close(0, "t", digest.id, T0 + 2)


def test_reopen_restarts_the_digest_ttl(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    store = make_redis_store(TimelinePolicy(minimum_delay=10, maximum_delay=10, ttl=200))
    store.add(0, [NewRecord("t", "r1", T0, b"1", 0)], T0)
    digest = store.open(0, "t", new_id(), T0)
    key = digest_key(partition_tag(namespace, 0), "t")
    client.pexpire(key, 1_000)
    assert store.open(0, "t", new_id(), T0) == digest
    assert int(client.pttl(key)) > 150_000


def test_nothing_expires_while_delivery_is_down_and_maintenance_runs(
    make_redis_store: Callable[..., RedisStore],
) -> None:
    # Delivery is down for longer than ttl: nobody opens "waiting" (READY since its first
    # event), nobody closes "stuck" (its digest was opened, then delivery died). Only the
    # scheduler runs: schedule ticks and maintenance every MAINTENANCE_INTERVAL.
    store = make_redis_store(SHORT)
    store.add(0, [NewRecord("waiting", "w1", time.time(), b"w", 0)], time.time())
    store.add(0, [NewRecord("stuck", "s1", time.time(), b"s", 1)], time.time())
    stuck = store.open(0, "stuck", new_id(), time.time())
    until = time.monotonic() + SHORT.ttl + 3
    while time.monotonic() < until:
        now = time.time()
        store.maintenance(0, now - MAINTENANCE_TIMEOUT, now)
        store.schedule(0, now)
        time.sleep(MAINTENANCE_INTERVAL)  # the maintenance cadence, not a wait for a condition
    now = time.time()
    store.schedule(0, now + SHORT.maximum_delay)
    waiting = store.open(0, "waiting", new_id(), now)
    assert ([r.id for r in waiting.records], waiting.dropped, waiting.expired) == (
        ["w1"],
        0,
        False,
    )
    assert store.open(0, "stuck", new_id(), now) == stuck
