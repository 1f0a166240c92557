"""Snooze (issue 39 item 4), on the model, a single Redis and the Redis Cluster: while a
timeline is snoozed its records go on accumulating (capacity applies, drops counted) and
nothing comes due before the snooze's end; then one digest holds them all."""

from __future__ import annotations

import time

import pytest

from digest_stream.store import DigestStore, DueTimeline, NewRecord, TimelinePolicy
from digest_stream.vocabulary import Control, State
from tests.support import new_id
from tests.support.store import StoreFactory

P = 0
T0 = 1_000_000.0
END = T0 + 1000  # the snooze's end in most tests


class Feed:
    """Records and controls at rising offsets."""

    def __init__(self) -> None:
        self.offset = -1

    def record(self, timeline: str, record_id: str) -> NewRecord:
        self.offset += 1
        return NewRecord(timeline, record_id, T0, b"p", self.offset)

    def control(self, timeline: str, control: Control, argument: str = "control") -> NewRecord:
        self.offset += 1
        return NewRecord(timeline, argument, T0, b"", self.offset, control)

    def snooze(self, timeline: str, until: float) -> NewRecord:
        return self.control(timeline, Control.SNOOZE, repr(until))


@pytest.fixture
def feed() -> Feed:
    return Feed()


def deliver(store: DigestStore, timeline: str, now: float) -> list[str]:
    """Open and close a digest of a READY timeline; the record ids it delivered."""
    digest = store.open(P, timeline, new_id(), now)
    assert store.close(P, timeline, digest.id, now)
    return sorted(record.id for record in digest.records)


def test_a_snoozed_timeline_accumulates_and_goes_out_once_at_the_end(
    store: DigestStore, feed: Feed
) -> None:
    store.add(P, [feed.snooze("t", END)], T0)
    assert store.inspect(P, "t").snoozed_until == END
    first = store.add(P, [feed.record("t", "a")], T0 + 1)
    assert (first.ready, first.opened) == ([], [])  # not immediate: snoozed
    store.add(P, [feed.record("t", "b"), feed.record("t", "c")], T0 + 2)
    info = store.inspect(P, "t")
    assert (info.state, info.pending) == (State.WAITING, 3)
    assert store.schedule(P, END - 1) == []
    assert store.schedule(P, END) == [DueTimeline("t", END)]
    assert deliver(store, "t", END) == ["a", "b", "c"]


def test_a_leading_add_does_not_lead_a_snoozed_timeline(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed.snooze("t", END)], T0)
    result = store.add(
        P, [feed.record("t", "a"), feed.record("u", "b")], T0 + 1, open_nonce="0" * 24
    )
    assert [digest.timeline for digest in result.opened] == ["u"]
    assert result.ready == []
    assert store.inspect(P, "t").state == State.WAITING


def test_a_due_time_before_the_end_waits_for_it(store: DigestStore, feed: Feed) -> None:
    end = T0 + 5000  # after maximum_delay (1800 s) from the last delivery
    store.add(P, [feed.record("t", "a")], T0)
    deliver(store, "t", T0)  # cool-down: due T0 + 300 with the next record
    store.add(P, [feed.record("t", "b"), feed.snooze("t", end)], T0 + 1)
    assert store.inspect(P, "t").due == end
    # an increment, capped at last_delivery + maximum_delay: due before the end
    store.add(P, [feed.record("t", "c")], T0 + 2)
    assert store.inspect(P, "t").due == T0 + 1800
    assert store.schedule(P, T0 + 1800) == []  # came due: held back to the end
    assert store.inspect(P, "t").due == end
    assert store.schedule(P, end) == [DueTimeline("t", end)]
    assert deliver(store, "t", end) == ["b", "c"]


def test_a_ready_timeline_waits_and_a_flush_does_not_pass_the_snooze(
    store: DigestStore, feed: Feed
) -> None:
    made_ready = store.add(P, [feed.record("t", "a"), feed.snooze("t", END)], T0)
    assert made_ready.ready == []  # taken back before it was announced
    info = store.inspect(P, "t")
    assert (info.state, info.due) == (State.WAITING, END)
    assert store.add(P, [feed.control("t", Control.FLUSH)], T0 + 1).ready == []
    assert store.inspect(P, "t").due == END


def test_an_unsnooze_makes_what_the_snooze_held_due_now(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed.snooze("t", END), feed.record("t", "a")], T0)
    store.add(P, [feed.control("t", Control.UNSNOOZE)], T0 + 5)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.snoozed_until) == (State.WAITING, T0 + 5, None)
    assert store.schedule(P, T0 + 5) == [DueTimeline("t", T0 + 5)]
    assert deliver(store, "t", T0 + 5) == ["a"]


def test_a_shorter_snooze_moves_the_end(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed.snooze("t", END), feed.record("t", "a")], T0)
    store.add(P, [feed.snooze("t", T0 + 10)], T0 + 1)
    assert store.inspect(P, "t").due == T0 + 10
    assert store.schedule(P, T0 + 10) == [DueTimeline("t", T0 + 10)]


def test_capacity_applies_while_snoozed_and_drops_are_counted(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(TimelinePolicy(capacity=2))
    store.add(P, [feed.snooze("t", END)], T0)
    result = store.add(P, [feed.record("t", r) for r in ("a", "b", "c")], T0 + 1)
    assert result.dropped == 1
    assert store.inspect(P, "t").pending == 2
    store.schedule(P, END)
    digest = store.open(P, "t", new_id(), END)
    assert (sorted(r.id for r in digest.records), digest.dropped) == (["b", "c"], 1)


def test_an_open_digest_goes_out_and_what_comes_after_waits(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed.record("t", "a")], T0)
    digest = store.open(P, "t", new_id(), T0)
    store.add(P, [feed.snooze("t", END)], T0 + 1)
    assert store.close(P, "t", digest.id, T0 + 2)  # under way: it went out
    # the cool-down ends at T0 + 302, long before the snooze: a record after it waits too
    store.add(P, [feed.record("t", "b")], T0 + 400)
    assert store.inspect(P, "t").state == State.WAITING
    assert store.schedule(P, T0 + 999) == []
    assert store.schedule(P, END) == [DueTimeline("t", END)]


def test_delete_removes_the_snooze(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed.snooze("t", END)], T0)
    assert store.delete(P, "t")
    assert store.inspect(P, "t").snoozed_until is None
    assert store.add(P, [feed.record("t", "a")], T0 + 1).ready == ["t"]


def test_a_snooze_that_has_ended_holds_nothing(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed.snooze("t", T0 + 10)], T0)
    assert store.add(P, [feed.record("t", "a")], T0 + 10).ready == ["t"]
    assert store.inspect(P, "t").snoozed_until is None  # removed where it was read


def test_maintenance_removes_a_snooze_that_has_ended(store: DigestStore, feed: Feed) -> None:
    # Found by the model comparison: Redis's maintenance removed an ended snooze of a timeline
    # with nothing else, the model kept it, so inspect told two stories.
    store.add(P, [feed.snooze("t", T0 + 10)], T0)
    store.maintenance(P, T0 - 60, T0 + 9)
    assert store.inspect(P, "t").snoozed_until == T0 + 10  # not ended yet: kept
    store.maintenance(P, T0 - 60, T0 + 10)
    assert store.inspect(P, "t").snoozed_until is None


def test_a_snooze_longer_than_the_ttl_keeps_what_it_holds(make_store: StoreFactory) -> None:
    # A snoozed timeline may get no event for longer than `ttl`: its state must not expire in
    # Redis before the snooze ends (records lost with no count). The snooze itself extends it
    # (record a, before it), and maintenance keeps extending it while the snooze lasts (record
    # b's add set the container's TTL back to `ttl`). Real time: Redis expires keys by it.
    store = make_store(
        TimelinePolicy(minimum_delay=0.5, increment_delay=0.1, maximum_delay=1.0, ttl=2.0)
    )
    feed, start = Feed(), time.time()
    end = start + 5
    store.add(P, [feed.record("t", "a")], start)
    store.add(P, [feed.snooze("t", end), feed.record("t", "b")], start)
    while time.time() < end:  # past the ttl twice over, with maintenance as the service runs it
        store.maintenance(P, time.time() - 60, time.time())
        time.sleep(0.5)
    info = store.inspect(P, "t")
    assert (info.state, info.pending) == (State.WAITING, 2), info
    now = time.time()
    assert [due.timeline for due in store.schedule(P, now)] == ["t"]
    assert deliver(store, "t", now) == ["a", "b"]
