"""Policy benchmark: the ingest cost of each digest policy against the plain one.

Run with ``python -m bench.policy_bench`` against the Redis named by ``DIGEST_STREAM_REDIS_URL``
(default: the stack's). Prints a summary and writes ``bench/results/policies.json``. Not a
test: it reports, it does not assert.

Three parts, each measured back to back per repetition so the ratios are meaningful:

- ``store_add``: ``RedisStore.add`` throughput (records/s, batches of 500, 20 records per
  timeline, 256-byte payloads) with the plain policy, ``flush_at`` (50: crossed once per
  timeline in the run; 5: crossed by almost every batch), a calendar ``schedule`` and
  ``collapse_by`` (a delivery-side policy: the store call is the plain one). Timelines start
  WAITING (delivered once), where ``flush_at`` does its work.
- ``check``: the per-message ingest check of an ordinary event, and the one prefix test that
  tells control messages apart, which every message pays.
- ``compose``: building a 100-record digest in delivery, plain and with ``collapse_by``.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from bench.common import T0, delete_namespace, stack, summary, write_result
from digest_stream.roles.ingest.check import Rules, check
from digest_stream.roles.publish.compose import compose
from digest_stream.store import NewRecord, TimelinePolicy
from digest_stream.store.base import OpenDigest, StoredRecord
from digest_stream.store.due import next_due
from digest_stream.store.redis import RedisStore
from digest_stream.wire import codec, control
from digest_stream.wire.models import Event, Record, ScheduleReason

REPS = 9
RECORDS = 20_000
BATCH = 500
PER_TIMELINE = 20
PAYLOAD = b"x" * 256
POLICIES: dict[str, TimelinePolicy] = {
    "plain": TimelinePolicy(),
    "flush_at=50": TimelinePolicy(flush_at=50),
    "flush_at=5": TimelinePolicy(flush_at=5),
    "schedule": TimelinePolicy(schedule="0 9 * * *", timezone="Europe/Berlin"),
    "collapse_by": TimelinePolicy(collapse_by="fingerprint"),
}


def _store_add(client: redis.Redis, policy: TimelinePolicy) -> float:
    """Records/s of one run of adds on timelines that start WAITING."""
    namespace = f"bench-pol-{uuid.uuid4().hex[:8]}"
    store = RedisStore(client, namespace=namespace, policy=policy, load_library=False)
    timelines = [f"t{i}" for i in range(RECORDS // PER_TIMELINE)]
    offset = 0
    first = [NewRecord(t, "seed", T0, PAYLOAD, i) for i, t in enumerate(timelines)]
    for start in range(0, len(first), BATCH):
        store.add(0, first[start : start + BATCH], T0)
    offset = len(first)
    ready = [(0, t, uuid.uuid4().hex) for t in timelines if store.inspect(0, t).state == "ready"]
    if ready:
        store.close_many(
            [(p, t, d.id) for (p, t, _), d in zip(ready, store.open_many(ready, T0), strict=True)
             if not isinstance(d, Exception)],
            T0,
        )  # fmt: skip
    records = [
        NewRecord(timelines[i % len(timelines)], f"r{i}", T0 + i, PAYLOAD, offset + i)
        for i in range(RECORDS)
    ]
    started = time.perf_counter()
    for start in range(0, RECORDS, BATCH):
        store.add(0, records[start : start + BATCH], T0 + 1)
    elapsed = time.perf_counter() - started
    delete_namespace(client, namespace)
    return RECORDS / elapsed


def _per_call(action: Callable[[], object], count: int) -> float:
    """Nanoseconds per call."""
    started = time.perf_counter()
    for _ in range(count):
        action()
    return (time.perf_counter() - started) / count * 1e9


def _check_costs() -> dict[str, float]:
    rules = Rules(max_event_bytes=256_000, max_event_age=None, carry_headers=frozenset())
    value = codec.encode_event(Event(id=uuid.uuid4().hex, timestamp=1, payload=PAYLOAD))
    return {
        "check_event_ns": _per_call(lambda: check(b"user:42", value, None, 7, T0, rules), 20_000),
        "control_prefix_test_ns": _per_call(lambda: value.startswith(control.MAGIC), 200_000),
    }


def _compose_costs() -> dict[str, float]:
    records = [
        Record(id=f"r{i}", timestamp=1_000 + i, payload=PAYLOAD,
               attributes={"fingerprint": f"f{i % 10}"})
        for i in reversed(range(100))
    ]  # fmt: skip
    stored = [StoredRecord(r.id, r.timestamp / 1000, r.payload) for r in records]
    opened = OpenDigest(
        "a" * 32, "t", stored, 0, T0, reason="COOLDOWN", next_due=next_due(TimelinePolicy())
    )
    entry = ScheduleReason.SCHEDULED  # the schedule entry's reason: all compose reads of it
    plain, collapsed = POLICIES["plain"], POLICIES["collapse_by"]
    return {
        "plain_us": _per_call(lambda: compose(entry, opened, records, 0, plain, T0), 500) / 1e3,
        "collapse_by_us": _per_call(lambda: compose(entry, opened, records, 0, collapsed, T0), 500)
        / 1e3,
    }


def main() -> None:
    """Run every part and write bench/results/policies.json."""
    url = stack().redis_url
    client = redis.Redis.from_url(url)
    RedisStore(client)  # load the library once
    throughput: dict[str, list[float]] = {name: [] for name in POLICIES}
    names = list(POLICIES)
    for rep in range(REPS):
        # A shared machine drifts: rotate the order so no policy always runs first or last.
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            throughput[name].append(_store_add(client, POLICIES[name]))
    ratios = {
        name: round(
            statistics.median([v / p for v, p in zip(values, throughput["plain"], strict=True)]),
            3,
        )
        for name, values in throughput.items()
    }
    checks = [_check_costs() for _ in range(REPS)]
    composes = [_compose_costs() for _ in range(REPS)]
    result: dict[str, Any] = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        "store_add_records_per_s": {k: summary(v) for k, v in throughput.items()},
        "store_add_vs_plain": ratios,
        "check": {k: summary([c[k] for c in checks], 1) for k in checks[0]},
        "compose_100_records": {k: summary([c[k] for c in composes], 1) for k in composes[0]},
    }
    path = write_result("policies", result)
    for name, values in throughput.items():
        print(f"store add {name:12} {statistics.median(values):>9,.0f} rec/s  x{ratios[name]}")
    for key, value in result["check"].items():
        print(f"check {key:28} {value['median']}")
    for key, value in result["compose_100_records"].items():
        print(f"compose {key:26} {value['median']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
