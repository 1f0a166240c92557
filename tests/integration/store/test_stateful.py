"""Random operations on RedisStore and the MemoryStore model must be indistinguishable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import ClassVar, TypeVar

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from digest_stream.clock import ManualClock
from digest_stream.store import (
    DigestStore,
    DueBatch,
    DueTimeline,
    Fence,
    MemoryStore,
    NewRecord,
    OpenDigest,
    PartitionStats,
    StoreError,
    TimelineInfo,
    TimelinePolicy,
)
from digest_stream.store.base import CANCEL, CANCEL_ALL, FLUSH, AddResult
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import partition_tag
from digest_stream.vocabulary import Control
from tests.support import new_id, unique

T = TypeVar("T")


def _sliced(batch: DueBatch) -> tuple[list[DueTimeline], bool]:
    """A slice and its ``more`` flag (DueBatch equality alone compares only the list)."""
    return list(batch), batch.more


PARTITIONS = [0, 1]
# "a" timelines have a small capacity so trimming happens often (and they stay inline),
# "c" ones trim past the inline limit (as hashes), "b" ones are unbounded, "f" ones flush at
# a count, "s" ones follow a calendar schedule (every minute, Berlin time) with a flush_at,
# "d" ones fire daily at 02:30 Berlin (inside the hour the fall-back change repeats) and "h"
# ones hourly at :15 (fires on both sides of the fold); "q" ones have quiet hours that open
# five minutes after the start and end after the fold, "w" ones quiet hours the machine starts
# in (their leading edge held, their due times moved to the windows' ends).
TIMELINES = ["a1", "a2", "b1", "c1", "f1", "s1", "d1", "h1", "q1", "w1"]
RECORD_IDS = ["r0", "r1", "r2", "r3", "r4", "r5", "é"]
# Delays are small against maximum_delay so that one or two adds reach the cap.
CAPPED = TimelinePolicy(minimum_delay=10, increment_delay=8, maximum_delay=20, ttl=3600, capacity=3)
UNBOUNDED = TimelinePolicy(minimum_delay=5, increment_delay=4, maximum_delay=12, ttl=3600)


TRIMMED_HASH = TimelinePolicy(
    minimum_delay=10, increment_delay=8, maximum_delay=20, ttl=3600, capacity=5
)


# (urgent records pass a snooze on these timelines, and on the quiet ones)
FLUSH_AT = TimelinePolicy(
    minimum_delay=10,
    increment_delay=8,
    maximum_delay=20,
    ttl=3600,
    capacity=4,
    flush_at=2,
    urgent_passes_snooze=True,
)
CALENDAR = TimelinePolicy(
    ttl=3600, capacity=6, flush_at=4, schedule="* * * * *", timezone="Europe/Berlin"
)


DAILY_IN_FOLD = TimelinePolicy(
    ttl=3600, capacity=6, flush_at=3, schedule="30 2 * * *", timezone="Europe/Berlin"
)
HOURLY = TimelinePolicy(ttl=3600, capacity=8, schedule="15 * * * *", timezone="Europe/Berlin")
QUIET = replace(FLUSH_AT, quiet_hours="02:45-03:05", timezone="Europe/Berlin")
QUIET_AT_START = TimelinePolicy(
    minimum_delay=60, ttl=3600, quiet_hours="02:30-02:50", timezone="Europe/Berlin"
)
# The machine's clock starts 20 minutes before Berlin's fall-back change (2026-10-25 01:00
# UTC, 03:00 CEST -> 02:00 CET), and its longer steps cross it: the calendar timelines'
# fires, closes and flushes around the repeated hour are compared like everything else.
START = datetime(2026, 10, 25, 0, 40, tzinfo=UTC).timestamp()


def resolve(timeline: str) -> TimelinePolicy:
    policies = {
        "a": CAPPED, "c": TRIMMED_HASH, "f": FLUSH_AT, "s": CALENDAR, "d": DAILY_IN_FOLD,
        "h": HOURLY, "q": QUIET, "w": QUIET_AT_START,
    }  # fmt: skip
    return policies.get(timeline[0], UNBOUNDED)


def stats_of(store: DigestStore, partition: int) -> PartitionStats:
    return store.stats(partition)


def fence_of(store: DigestStore, partition: int) -> Fence:
    return store.fence(partition)


def inspect_of(store: DigestStore, partition: int, timeline: str) -> TimelineInfo:
    return store.inspect(partition, timeline)


partitions = st.sampled_from(PARTITIONS)
#: Topic incarnations (Kafka topic ids, base64) and "not known".
topics = st.sampled_from([None, "AAAAAAAAAAAAAAAAAAAAAQ", "eBitKXXjTv20F/VbQ1eQDg"])
timelines = st.sampled_from(TIMELINES)
entries = st.lists(
    st.tuples(
        timelines,
        st.sampled_from(RECORD_IDS),
        # few distinct values around the start: timestamp ties happen
        st.integers(-10, 10).map(lambda offset: START + offset),
        st.binary(max_size=6),
        # mostly records; sometimes a control operation at that place in the batch
        st.sampled_from([None, None, None, None, None, FLUSH, CANCEL, CANCEL_ALL]),
        # sometimes a record the ingest called urgent (a control's mark is ignored)
        st.sampled_from([False, False, False, True]),
    ),
    max_size=6,
)


class StoreComparison(RuleBasedStateMachine):
    """Drives both stores with the same operations and the same manual clock."""

    client: ClassVar[redis.Redis]
    #: Records an inline container holds before it becomes a hash (RedisStore.inline_records).
    inline_records: ClassVar[int] = 3

    def __init__(self) -> None:
        super().__init__()
        self.namespace = unique("sm")
        self.clock = ManualClock(START)
        self.model = MemoryStore(resolver=resolve)
        # A tiny inline limit so timelines cross from the inline to the hash form often; a
        # larger one so inline containers get many appends (repeated ids superseding earlier
        # entries, counted as entries until a rewrite) before a limit sends them to a rewrite.
        self.real = RedisStore(
            self.client,
            namespace=self.namespace,
            resolver=resolve,
            load_library=False,
            inline_records=self.inline_records,
        )
        self.next_offset = dict.fromkeys(PARTITIONS, 0)
        self.opened: list[tuple[int, str, str]] = []
        # each leading add's nonce and the digests it opened (close_leading closes them)
        self.leading: list[tuple[str, list[tuple[int, str, str]]]] = []

    def both(self, operation: Callable[[DigestStore], T]) -> T | type[StoreError]:
        """Run on both stores; results (or error types) must match."""
        outcomes: list[T | type[StoreError]] = []
        for store in (self.model, self.real):
            try:
                outcomes.append(operation(store))
            except StoreError as error:
                outcomes.append(type(error))
        assert outcomes[0] == outcomes[1], outcomes
        return outcomes[0]

    @rule(
        partition=partitions,
        batch=entries,
        replay=st.integers(0, 4),
        # mostly no expectation; sometimes one the store may be behind of
        expected=st.integers(-120, 40).map(lambda x: None if x < 0 else x),
        extra=st.none() | st.integers(0, 3),
        topic=topics,
        lead=st.booleans(),
    )
    def add(
        self,
        partition: int,
        batch: list[tuple[str, str, float, bytes, str | None, bool]],
        replay: int,
        expected: int | None,
        extra: int | None,
        topic: str | None,
        lead: bool,
    ) -> None:
        # replay > 0 re-sends offsets already applied, as after a crash before the commit;
        # extra > 0 stands for trailing messages that went to the DLQ (through_offset)
        first = max(0, self.next_offset[partition] - replay)
        records = [
            NewRecord(timeline, record_id, timestamp, payload, first + i, control, urgent)
            for i, (timeline, record_id, timestamp, payload, control, urgent) in enumerate(batch)
        ]
        through = None if extra is None else first + len(records) - 1 + extra
        if through is not None and through < 0:
            through = None
        last = first + len(records) if through is None else through + 1
        self.next_offset[partition] = max(self.next_offset[partition], last)
        now = self.clock.now()
        nonce = new_id()[:24] if lead else None  # the leading edge: the same nonce on both
        result = self.both(
            lambda store: store.add(
                partition,
                records,
                now,
                expected_fence=expected,
                through_offset=through,
                topic_id=topic,
                open_nonce=nonce,
            )
        )
        if isinstance(result, AddResult):
            # open digests like any other: closed (acknowledged) or reopened by the rules below
            self.opened += [(partition, digest.timeline, digest.id) for digest in result.opened]
            if nonce is not None and result.opened:
                led = [(partition, digest.timeline, digest.id) for digest in result.opened]
                self.leading.append((nonce, led))

    def _feed(
        self, partition: int, items: list[tuple[str, str, str | None]], urgent: int = -1
    ) -> None:
        """Add (timeline, id, control) items at the partition's next offsets, on both stores
        (item ``urgent`` an urgent record)."""
        first = self.next_offset[partition]
        now = self.clock.now()
        records = [
            NewRecord(timeline, record_id, now, record_id.encode(), first + i, control, i == urgent)
            for i, (timeline, record_id, control) in enumerate(items)
        ]
        self.next_offset[partition] = first + len(records)
        self.both(lambda store: store.add(partition, records, now))

    @rule(
        pick=st.integers(0, 4),
        timeline=timelines,
        partition=partitions,
        # a snooze's length from now; None: an unsnooze
        seconds=st.sampled_from([None, 0.0, 1.0, 5.0, 30.0, 600.0, 4000.0]),
    )
    def snooze(self, pick: int, timeline: str, partition: int, seconds: float | None) -> None:
        # Issue 39 item 4: held against adds, the schedule, flushes and closes; as control,
        # mostly at a timeline with a digest opened lately (an open digest goes out).
        if pick < len(self.opened):
            partition, timeline, _ = self.opened[-1 - pick]
        if seconds is None:
            self._feed(partition, [(timeline, "control", Control.UNSNOOZE)])
        else:
            until = repr(self.clock.now() + seconds)
            self._feed(partition, [(timeline, until, Control.SNOOZE)])

    @rule(
        pick=st.integers(0, 4),
        timeline=timelines,
        partition=partitions,
        operation=st.sampled_from([FLUSH, CANCEL, CANCEL_ALL]),
        record_id=st.sampled_from(RECORD_IDS),
    )
    def control(
        self, pick: int, timeline: str, partition: int, operation: str, record_id: str
    ) -> None:
        # Mostly aimed at a timeline with a digest opened lately: a flush or cancel while the
        # digest is open is the edge (issue 20, items 3 and 9).
        if pick < len(self.opened):
            partition, timeline, _ = self.opened[-1 - pick]
        self._feed(partition, [(timeline, record_id, operation)])

    @rule(
        pick=st.integers(0, 4),
        timeline=timelines,
        other=timelines,
        partition=partitions,
        after=st.integers(0, 2),
        delivered=st.booleans(),
    )
    def urgent(
        self, pick: int, timeline: str, other: str, partition: int, after: int, delivered: bool
    ) -> None:
        """An urgent record, mostly to a timeline with a digest opened lately, or one just
        delivered (in its cool-down), then ordinary ones in later adds, each with a record of
        another timeline (one each: the append lane when both are scheduled): the floor
        holds the due time the urgent record set (issue 39, item 3)."""
        if pick < len(self.opened):
            partition, timeline, _ = self.opened[-1 - pick]
        if delivered:
            self.deliver(partition, timeline)
        self._feed(partition, [(timeline, "urgent", None)], urgent=0)
        for i in range(after):
            items: list[tuple[str, str, str | None]] = [(timeline, RECORD_IDS[i], None)]
            if other != timeline:
                items.append((other, RECORD_IDS[i], None))
            self._feed(partition, items)

    @rule(
        partition=partitions,
        timeline=timelines,
        count=st.integers(0, 5),
        flush=st.sampled_from([None, "before", "after"]),
        cancel=st.sampled_from([None, CANCEL, CANCEL_ALL]),
        wait=st.sampled_from([0.0, 0.5, 2.0]),
        urgent=st.integers(-1, 5),
    )
    def while_open(
        self,
        partition: int,
        timeline: str,
        count: int,
        flush: str | None,
        cancel: str | None,
        wait: float,
        urgent: int,
    ) -> None:
        """Open a digest, let records (and controls) arrive meanwhile (item ``urgent`` an
        urgent record, when it is one), close it: flush_at, a flush and an urgent record are
        checked at the close (issue 20, items 3 and 4; issue 39, item 3)."""
        self.open(partition, timeline)
        if not self.opened or self.opened[-1][:2] != (partition, timeline):
            return  # not READY: nothing opened
        items: list[tuple[str, str, str | None]] = [
            (timeline, RECORD_IDS[i], None) for i in range(count)
        ]
        if cancel is not None:
            items.insert(count // 2, (timeline, RECORD_IDS[0], cancel))
        if flush is not None:
            items.insert(0 if flush == "before" else len(items), (timeline, "flush", FLUSH))
        self._feed(partition, items, urgent)
        self.clock.advance(wait)
        self.close(0, timeline, partition)

    # 600 s and 1200 s steps: a run crosses the DST fold (START) and fires of the hourly
    # and daily schedules
    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.0, 10.0, 25.0, 60.0, 600.0, 1200.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(partition=partitions, limit=st.sampled_from([1, 2, 1_000]))
    def schedule(self, partition: int, limit: int) -> None:
        now = self.clock.now()
        self.both(lambda store: _sliced(store.schedule(partition, now, limit=limit)))

    @rule(
        partition=partitions,
        lag=st.sampled_from([0.0, 1.0, 5.0, 20.0]),
        limit=st.sampled_from([1, 2, 1_000]),
    )
    def maintenance(self, partition: int, lag: float, limit: int) -> None:
        now = self.clock.now()
        deadline = max(0.0, now - lag)
        self.both(lambda store: _sliced(store.maintenance(partition, deadline, now, limit=limit)))

    @rule(partition=partitions, timeline=timelines)
    def open(self, partition: int, timeline: str) -> None:
        digest_id = new_id()
        now = self.clock.now()
        result = self.both(lambda store: store.open(partition, timeline, digest_id, now))
        if not isinstance(result, type):
            self.opened.append((partition, timeline, result.id))

    @rule(partition=partitions, timeline=timelines)
    def deliver(self, partition: int, timeline: str) -> None:
        # open + close at once, the common path: it puts timelines into WAITING
        self.open(partition, timeline)
        if self.opened and self.opened[-1][:2] == (partition, timeline):
            self.close(0, timeline, partition)

    @rule(pick=st.integers(0, 6), timeline=timelines, partition=partitions)
    def close(self, pick: int, timeline: str, partition: int) -> None:
        if pick < len(self.opened):
            partition, timeline, digest_id = self.opened[-1 - pick]
        else:
            digest_id = new_id()  # an id nobody opened
        now = self.clock.now()
        self.both(lambda store: store.close(partition, timeline, digest_id, now))

    @rule(picks=st.lists(st.tuples(partitions, timelines), min_size=1, max_size=5))
    def open_many(self, picks: list[tuple[int, str]]) -> None:
        # several partitions and repeated timelines in one batch, as delivery sends them
        targets = [(partition, timeline, new_id()) for partition, timeline in picks]
        now = self.clock.now()
        results = self.both(
            lambda store: [
                item if isinstance(item, OpenDigest) else type(item)
                for item in store.open_many(targets, now)
            ]
        )
        if isinstance(results, list):
            for (partition, timeline, _), item in zip(targets, results, strict=True):
                if isinstance(item, OpenDigest):
                    self.opened.append((partition, timeline, item.id))

    @rule(picks=st.lists(st.integers(0, 8), min_size=1, max_size=5))
    def close_many(self, picks: list[int]) -> None:
        targets = [
            self.opened[-1 - pick] if pick < len(self.opened) else (0, TIMELINES[0], new_id())
            for pick in picks
        ]
        now = self.clock.now()
        self.both(lambda store: store.close_many(targets, now))

    @rule(pick=st.integers(0, 3), keep=st.lists(st.booleans(), min_size=8, max_size=8))
    def close_leading(self, pick: int, keep: list[bool]) -> None:
        """The leading edge's close: one add's acknowledged digests (all, or some: the rest
        failed), whatever the other rules did to them since (Redis's batch form settled)."""
        if not self.leading:
            return
        nonce, led = self.leading[-1 - pick % len(self.leading)]
        targets = [target for i, target in enumerate(led) if keep[i % len(keep)]]
        if not targets:
            return
        now = self.clock.now()
        self.both(lambda store: store.close_leading(nonce, targets, now))

    @rule(partition=partitions, timeline=timelines)
    def delete(self, partition: int, timeline: str) -> None:
        self.both(lambda store: store.delete(partition, timeline))

    @rule(partition=partitions, offset=st.none() | st.integers(0, 40), topic=topics)
    def set_fence(self, partition: int, offset: int | None, topic: str | None) -> None:
        self.both(lambda store: store.set_applied_offset(partition, offset, topic_id=topic))
        if offset is not None:
            self.next_offset[partition] = offset + 1

    @invariant()
    def same_view(self) -> None:
        for partition in PARTITIONS:
            self.both(partial(stats_of, partition=partition))
            self.both(partial(fence_of, partition=partition))
            for timeline in TIMELINES:
                self.both(partial(inspect_of, partition=partition, timeline=timeline))

    def teardown(self) -> None:
        for partition in PARTITIONS:
            pattern = f"{partition_tag(self.namespace, partition)}*"
            for key in self.client.scan_iter(match=pattern, count=1000):
                self.client.delete(key)


# Shrinking a failure replays many Redis-backed runs; give it room to finish and report.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("inline_records", [3, 16])
def test_redis_store_matches_model(redis_client: redis.Redis, inline_records: int) -> None:
    RedisStore(redis_client)  # load the library once; each machine then only checks it
    StoreComparison.client = redis_client
    StoreComparison.inline_records = inline_records
    run_state_machine_as_test(
        StoreComparison,
        settings=settings(
            max_examples=150,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
