"""DESIGN.md section 3, row by row, on the model, a single Redis and the Redis Cluster."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from digest_stream.store import (
    AddResult,
    DigestStore,
    DueTimeline,
    Fence,
    InvalidArgument,
    InvalidState,
    NewRecord,
    StoredRecord,
    TimelinePolicy,
)
from digest_stream.store.base import CANCEL, FLUSH
from tests.support import new_id
from tests.support.store import StoreFactory

P = 0  # the partition most tests use
T0 = 1_000_000.0  # a "now" far from zero so subtraction mistakes show


class Feed:
    """Builds records with increasing Kafka offsets, like one partition of the input topic."""

    def __init__(self) -> None:
        self.offset = -1

    def __call__(
        self,
        timeline: str,
        record_id: str = "",
        timestamp: float = T0,
        payload: bytes | None = None,
        control: str | None = None,
    ) -> NewRecord:
        self.offset += 1
        body = payload if payload is not None else f"{timeline}/{record_id}".encode()
        return NewRecord(timeline, record_id, timestamp, body, self.offset, control)


@pytest.fixture
def feed() -> Feed:
    return Feed()


def ids(records: Iterable[StoredRecord]) -> list[str]:
    return [record.id for record in records]


def deliver(store: DigestStore, timeline: str, now: float, partition: int = P) -> list[str]:
    """Open and close a digest of a READY timeline; the record ids it delivered."""
    digest = store.open(partition, timeline, new_id(), now)
    assert store.close(partition, timeline, digest.id, now)
    return ids(digest.records)


# ------------------------------------------------------------------------------ add


def test_first_add_is_immediate_and_second_is_not(store: DigestStore, feed: Feed) -> None:
    first = store.add(P, [feed("t", "1")], T0)
    assert first.ready == ["t"]
    assert (first.added, first.skipped, first.dropped) == (1, 0, 0)
    second = store.add(P, [feed("t", "2")], T0 + 1)
    assert second.ready == []
    assert second.added == 1
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.pending) == ("ready", T0, 2)


def test_add_batch_reports_each_new_timeline_once(store: DigestStore, feed: Feed) -> None:
    result = store.add(P, [feed("b", "1"), feed("a", "1"), feed("b", "2"), feed("c", "1")], T0)
    assert result.ready == ["b", "a", "c"]
    assert result.added == 4


def test_add_to_ready_timeline_leaves_it_untouched(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    store.add(P, [feed("t", "2")], T0 + 50)
    info = store.inspect(P, "t")
    assert (info.state, info.due) == ("ready", T0)
    assert store.schedule(P, T0 + 10_000) == []


def test_same_id_overwrites(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "x", T0, b"old"), feed("t", "y", T0 + 1)], T0)
    result = store.add(P, [feed("t", "x", T0 + 2, b"new")], T0)
    assert result.added == 1
    assert store.inspect(P, "t").pending == 2
    digest = store.open(P, "t", new_id(), T0)
    assert digest.records[0] == StoredRecord("x", T0 + 2, b"new")
    assert ids(digest.records) == ["x", "y"]


def test_empty_batch_changes_nothing(store: DigestStore, feed: Feed) -> None:
    result = store.add(P, [], T0)
    assert (result.ready, result.added, result.fence_before, result.fence_after) == (
        [],
        0,
        None,
        None,
    )
    assert store.stats(P).waiting == store.stats(P).ready == 0


# ------------------------------------------------------------------------------ fence


def test_replayed_offsets_add_nothing(store: DigestStore) -> None:
    batch = [NewRecord("t", f"r{i}", T0 + i, b"p", 10 + i) for i in range(5)]
    first = store.add(P, batch, T0)
    assert (first.added, first.skipped, first.fence_before, first.fence_after) == (5, 0, None, 14)
    replay = store.add(P, batch, T0 + 1)
    assert (replay.added, replay.skipped, replay.ready) == (0, 5, [])
    assert (replay.fence_before, replay.fence_after) == (14, 14)
    overlap = [*batch[3:], NewRecord("t", "r5", T0 + 5, b"p", 15)]
    partial = store.add(P, overlap, T0 + 2)
    assert (partial.added, partial.skipped, partial.fence_after) == (1, 2, 15)
    assert store.inspect(P, "t").pending == 6
    assert store.applied_offset(P) == 15


def test_fence_is_per_partition_and_settable(store: DigestStore) -> None:
    store.add(0, [NewRecord("t", "a", T0, b"", 7)], T0)
    assert store.applied_offset(0) == 7
    assert store.applied_offset(1) is None
    assert store.add(1, [NewRecord("t", "a", T0, b"", 3)], T0).added == 1
    store.set_applied_offset(0, 2)
    again = store.add(0, [NewRecord("t", "b", T0, b"", 3)], T0)
    assert (again.added, again.fence_before, again.fence_after) == (1, 2, 3)
    store.set_applied_offset(0, None)
    assert store.applied_offset(0) is None
    assert store.stats(0).applied_offset is None


def test_duplicate_offsets_in_one_batch_are_skipped(store: DigestStore) -> None:
    batch = [NewRecord("t", "a", T0, b"", 1), NewRecord("t", "b", T0, b"", 1)]
    result = store.add(P, batch, T0)
    assert (result.added, result.skipped) == (1, 1)
    assert store.inspect(P, "t").pending == 1


def test_expected_fence_behind_applies_nothing(store: DigestStore) -> None:
    store.add(P, [NewRecord("t", "a", T0, b"", 10)], T0)
    # Redis lost writes: the caller applied through 20, the store only knows 10.
    lost = store.add(P, [NewRecord("u", "b", T0, b"", 21)], T0, expected_fence=20)
    assert lost == AddResult([], 0, 0, 0, 10, 10)
    assert store.inspect(P, "u").state == "absent"
    # after rewinding to 11 the caller replays and passes the fence it now knows
    replay = store.add(P, [NewRecord("u", "b", T0, b"", 11)], T0, expected_fence=10)
    assert (replay.added, replay.ready, replay.fence_after) == (1, ["u"], 11)
    # a fence ahead of the caller's (another instance got further) is the normal fencing path
    ahead = store.add(P, [NewRecord("u", "c", T0, b"", 11)], T0, expected_fence=5)
    assert (ahead.added, ahead.skipped) == (0, 1)


def test_expected_fence_with_no_fence_at_all_applies_nothing(store: DigestStore) -> None:
    result = store.add(P, [NewRecord("t", "a", T0, b"", 3)], T0, expected_fence=2)
    assert result == AddResult([], 0, 0, 0, None, None)
    assert store.applied_offset(P) is None


def test_through_offset_advances_the_fence(store: DigestStore) -> None:
    # a batch whose messages all went to the DLQ still moves the fence
    empty = store.add(P, [], T0, through_offset=41)
    assert (empty.fence_before, empty.fence_after) == (None, 41)
    some = store.add(P, [NewRecord("t", "a", T0, b"", 42)], T0, through_offset=45)
    assert (some.added, some.fence_after) == (1, 45)
    behind = store.add(P, [], T0, through_offset=30)
    assert behind.fence_after == 45
    with pytest.raises(InvalidArgument):
        store.add(P, [NewRecord("t", "b", T0, b"", 50)], T0, through_offset=49)


OLD_TOPIC, NEW_TOPIC = "eBitKXXjTv20F/VbQ1eQDg", "Hm3OT9uyTEGXLPhrRa0b6Q"


def test_the_fence_records_its_topic_with_the_add(store: DigestStore) -> None:
    first = store.add(P, [NewRecord("t", "a", T0, b"", 19)], T0, topic_id=OLD_TOPIC)
    assert (first.added, first.fence_after, first.fence_topic) == (1, 19, None)
    assert store.fence(P) == Fence(19, OLD_TOPIC)
    # a caller that cannot tell the topic (an old broker) is fenced as before; the id stays
    blind = store.add(P, [NewRecord("t", "b", T0, b"", 20)], T0)
    assert (blind.added, blind.fence_topic) == (1, OLD_TOPIC)
    assert store.fence(P) == Fence(20, OLD_TOPIC)
    assert store.applied_offset(P) == 20


def test_a_fence_of_another_topic_applies_nothing_and_says_whose_it_is(
    store: DigestStore,
) -> None:
    store.add(P, [NewRecord("t", "a", T0, b"", 19)], T0, topic_id=OLD_TOPIC)
    # the topic was deleted and created again: its offsets start at 0, below the old fence
    recreated = store.add(P, [NewRecord("u", "b", T0, b"", 0)], T0, topic_id=NEW_TOPIC)
    assert recreated == AddResult([], 0, 0, 0, 19, 19, OLD_TOPIC)
    assert store.inspect(P, "u").state == "absent"
    assert store.fence(P) == Fence(19, OLD_TOPIC)
    # the caller resets the fence for the new topic: nothing applied yet, then reads it all
    store.set_applied_offset(P, None, topic_id=NEW_TOPIC)
    assert store.fence(P) == Fence(None, NEW_TOPIC)
    assert store.stats(P).applied_offset is None
    again = store.add(P, [NewRecord("u", "b", T0, b"", 0)], T0, topic_id=NEW_TOPIC)
    assert (again.added, again.ready, again.fence_before, again.fence_topic) == (
        1,
        ["u"],
        None,
        NEW_TOPIC,
    )
    assert store.fence(P) == Fence(0, NEW_TOPIC)
    # a zombie still reading the old topic is refused in turn
    stale = store.add(P, [NewRecord("v", "c", T0, b"", 20)], T0, topic_id=OLD_TOPIC)
    assert (stale.added, stale.fence_topic) == (0, NEW_TOPIC)


def test_a_fence_without_a_topic_takes_the_callers(store: DigestStore) -> None:
    # a fence written before topic ids (or by an admin replay) takes the first topic id
    # that comes with an add, even one that applies nothing
    store.set_applied_offset(P, 7)
    assert store.fence(P) == Fence(7, None)
    replay = store.add(P, [NewRecord("t", "a", T0, b"", 7)], T0, topic_id=OLD_TOPIC)
    assert (replay.added, replay.skipped, replay.fence_topic) == (0, 1, None)
    assert store.fence(P) == Fence(7, OLD_TOPIC)
    # an add that finds no fence at all writes both
    store.add(1, [NewRecord("t", "a", T0, b"", 3)], T0, topic_id=NEW_TOPIC)
    assert store.fence(1) == Fence(3, NEW_TOPIC)
    # removing the fence removes its topic too
    store.set_applied_offset(P, None)
    assert store.fence(P) == Fence(None, None)


def test_the_topic_check_comes_before_the_expected_fence(store: DigestStore) -> None:
    store.add(P, [NewRecord("t", "a", T0, b"", 19)], T0, topic_id=OLD_TOPIC)
    result = store.add(
        P, [NewRecord("t", "b", T0, b"", 40)], T0, expected_fence=30, topic_id=NEW_TOPIC
    )
    assert result == AddResult([], 0, 0, 0, 19, 19, OLD_TOPIC)


@pytest.mark.parametrize("bad", ["", "a|b", "x" * 65, 5])
def test_topic_ids_are_checked(store: DigestStore, bad: object) -> None:
    with pytest.raises(InvalidArgument):
        store.add(P, [], T0, through_offset=1, topic_id=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        store.set_applied_offset(P, 1, topic_id=bad)  # type: ignore[arg-type]
    assert store.fence(P) == Fence(None, None)


# ------------------------------------------------------------------------------ schedule


def test_schedule_returns_nothing_until_due(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    store.open(P, "t", new_id(), T0)
    store.add(P, [feed("t", "2")], T0 + 1)  # behind the open digest: it waits after the close
    digest_id = store.inspect(P, "t").open_digest
    assert digest_id is not None
    assert store.close(P, "t", digest_id, T0 + 5)
    due = T0 + 5 + 300
    assert store.inspect(P, "t").due == due
    assert store.schedule(P, T0 + 5) == []
    assert store.schedule(P, due - 0.001) == []
    assert store.schedule(P, due) == [DueTimeline("t", due)]
    assert store.schedule(P, due + 1) == []
    assert store.inspect(P, "t").state == "ready"


def test_schedule_orders_by_due_then_name(store: DigestStore, feed: Feed) -> None:
    for name in ("c", "a", "b"):
        store.add(P, [feed(name, "1")], T0)
        deliver(store, name, T0 if name != "c" else T0 - 10)
        store.add(P, [feed(name, "2")], T0)
    found = store.schedule(P, T0 + 10_000)
    assert [entry.timeline for entry in found] == ["c", "a", "b"]


# ------------------------------------------------------------------------------ delays


def test_increment_delay_moves_due_exactly(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    deliver(store, "t", T0 + 10)
    assert store.inspect(P, "t").due == T0 + 10 + 300
    store.add(P, [feed("t", "2")], T0 + 20)
    assert store.inspect(P, "t").due == T0 + 310 + 30
    store.add(P, [feed("t", "3"), feed("t", "4")], T0 + 21)
    assert store.inspect(P, "t").due == T0 + 310 + 90
    assert store.inspect(P, "t").last_delivery == T0 + 10


def test_maximum_delay_caps_due(make_store: StoreFactory, feed: Feed) -> None:
    policy = TimelinePolicy(minimum_delay=300, increment_delay=500, maximum_delay=1800, ttl=3600)
    store = make_store(policy)
    store.add(P, [feed("t", "1")], T0)
    deliver(store, "t", T0)
    expected = [T0 + 800, T0 + 1300, T0 + 1800, T0 + 1800]
    for index, due in enumerate(expected):
        store.add(P, [feed("t", f"r{index}")], T0 + index)
        assert store.inspect(P, "t").due == due


def test_unknown_last_delivery_uses_earliest_timestamp(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    assert store.maintenance(P, T0 + 1, T0 + 1) == [DueTimeline("t", T0)]
    assert store.inspect(P, "t").last_delivery is None
    store.add(P, [feed("t", "2", timestamp=T0 - 500)], T0 + 2)
    assert store.inspect(P, "t").due == T0 - 500
    store.add(P, [feed("t", "3", timestamp=T0 + 9000)], T0 + 3)
    assert store.inspect(P, "t").due == T0 - 500


def test_close_sets_minimum_delay_and_last_delivery(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    digest = store.open(P, "t", new_id(), T0 + 1)
    assert store.close(P, "t", digest.id, T0 + 2)
    info = store.inspect(P, "t")
    # nothing pending: it cools down in no set, due when the cool-down ends
    assert (info.state, info.due, info.last_delivery) == ("cooling", T0 + 302, T0 + 2)
    assert (info.pending, info.open_digest, info.reason) == (0, None, "COOLDOWN")
    # a record in the cool-down waits for its end, pushed by the increment (30 s)
    assert store.add(P, [feed("t", "2")], T0 + 10).ready == []
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.last_delivery) == ("waiting", T0 + 332, T0 + 2)


def test_a_cooling_timeline_is_in_no_set_and_nothing_comes_due(
    store: DigestStore, feed: Feed
) -> None:
    store.add(P, [feed("t", "1")], T0)
    assert deliver(store, "t", T0) == ["1"]
    stats = store.stats(P)
    assert (stats.waiting, stats.ready, stats.oldest_due) == (0, 0, None)
    # the cool-down ends with nothing to deliver: no schedule move, no empty digest
    assert store.schedule(P, T0 + 10_000) == []
    assert store.inspect(P, "t").state == "cooling"
    # a flush has nothing to deliver either
    assert store.add(P, [feed("t", "flush", control=FLUSH)], T0 + 1).ready == []
    assert store.inspect(P, "t").state == "cooling"


def test_a_record_after_the_cool_down_is_immediate(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    deliver(store, "t", T0)
    # the cool-down ends at T0 + 300 (its end belongs to it no more: due means due)
    assert store.add(P, [feed("t", "2")], T0 + 300).ready == ["t"]
    info = store.inspect(P, "t")
    assert (info.state, info.last_delivery, info.reason) == ("ready", None, "IMMEDIATE")
    digest = store.open(P, "t", new_id(), T0 + 300)
    assert (ids(digest.records), digest.reason, digest.expired) == (["2"], "IMMEDIATE", False)


def test_a_close_after_maintenance_re_announced_it_still_cools_in_no_set(
    store: DigestStore, feed: Feed
) -> None:
    """A digest whose close took longer than maintenance_timeout: maintenance moved its
    timeline back to WAITING (due when it became ready); the close must not leave that stale
    entry, which would announce an empty digest and retire the timeline mid cool-down."""
    store.add(P, [feed("t", "1")], T0)
    digest = store.open(P, "t", new_id(), T0)
    assert [d.timeline for d in store.maintenance(P, T0 + 60, T0 + 60)] == ["t"]
    assert store.inspect(P, "t").state == "waiting"
    assert store.close(P, "t", digest.id, T0 + 61)
    info = store.inspect(P, "t")
    assert (info.state, info.due) == ("cooling", T0 + 61 + 300)
    assert store.stats(P).waiting == 0
    assert store.schedule(P, T0 + 62) == []
    # the cool-down holds: a record in it waits for its end
    assert store.add(P, [feed("t", "2")], T0 + 100).ready == []
    assert store.inspect(P, "t").due == T0 + 361 + 30


def test_a_record_in_the_cool_down_is_delivered_when_it_ends(
    store: DigestStore, feed: Feed
) -> None:
    store.add(P, [feed("t", "1")], T0)
    deliver(store, "t", T0)
    store.add(P, [feed("t", "2"), feed("t", "3")], T0 + 299.5)
    assert store.inspect(P, "t").due == T0 + 300 + 2 * 30
    assert store.schedule(P, T0 + 359) == []
    assert store.schedule(P, T0 + 360) == [DueTimeline("t", T0 + 360)]
    digest = store.open(P, "t", new_id(), T0 + 360)
    assert (ids(digest.records), digest.reason) == (["3", "2"], "COOLDOWN")


def test_per_timeline_policy_through_resolver(make_store: StoreFactory, feed: Feed) -> None:
    fast = TimelinePolicy(minimum_delay=5, increment_delay=1, maximum_delay=10, ttl=60)

    def resolve(timeline: str) -> TimelinePolicy:
        return fast if timeline.startswith("fast:") else TimelinePolicy(capacity=2)

    store = make_store(resolver=resolve)
    batch = [feed("fast:a", str(i)) for i in range(3)] + [feed("slow", str(i)) for i in range(3)]
    result = store.add(P, batch, T0)
    assert result.dropped == 1  # only "slow" has a capacity
    deliver(store, "fast:a", T0)
    deliver(store, "slow", T0)
    assert store.inspect(P, "fast:a").due == T0 + 5
    assert store.inspect(P, "slow").due == T0 + 300


# ------------------------------------------------------------------------------ open / close


def test_digest_is_newest_first(store: DigestStore, feed: Feed) -> None:
    store.add(
        P,
        [
            feed("t", "old", T0 - 30),
            feed("t", "newest", T0),
            feed("t", "mid", T0 - 10),
            # equal timestamps: larger id (bytes) first
            feed("t", "b", T0 - 20),
            feed("t", "a", T0 - 20),
            feed("t", "B", T0 - 20),
            feed("t", "é", T0 - 20),
        ],
        T0,
    )
    digest = store.open(P, "t", new_id(), T0)
    assert ids(digest.records) == ["newest", "mid", "é", "b", "a", "B", "old"]
    assert digest.records[0] == StoredRecord("newest", T0, b"t/newest")
    assert (digest.dropped, digest.opened_at, digest.timeline) == (0, T0, "t")


@pytest.mark.parametrize("capacity", [None, 25])
def test_large_digest_and_trim_order_ties_by_id_bytes(
    make_store: StoreFactory, feed: Feed, capacity: int | None
) -> None:
    # More records than the Lua side sorts itself (it hands them to a scratch sorted set):
    # the order must stay timestamp, then id bytes, in the digest and in capacity trims.
    store = make_store(TimelinePolicy(capacity=capacity))
    names = [f"{chr(0x61 + i % 3)}{i:02d}" for i in range(40)] + ["é", "B", "z"]
    timestamps = {name: T0 - (i % 4) for i, name in enumerate(names)}
    result = store.add(P, [feed("t", name, timestamps[name]) for name in names], T0)
    assert result.dropped == (0 if capacity is None else len(names) - capacity)
    newest_first = sorted(names, key=lambda n: (timestamps[n], n.encode()), reverse=True)
    digest = store.open(P, "t", new_id(), T0)
    assert ids(digest.records) == newest_first[: capacity or len(names)]
    assert store.open(P, "t", new_id(), T0) == digest  # the reopen sorts the same way


def test_open_only_from_ready(store: DigestStore, feed: Feed) -> None:
    with pytest.raises(InvalidState):
        store.open(P, "absent", new_id(), T0)
    store.add(P, [feed("t", "1")], T0)
    deliver(store, "t", T0)
    store.add(P, [feed("t", "2")], T0)
    assert store.inspect(P, "t").state == "waiting"
    with pytest.raises(InvalidState):
        store.open(P, "t", new_id(), T0)


def test_reopen_returns_same_digest(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1", T0), feed("t", "2", T0 + 1)], T0)
    first = store.open(P, "t", new_id(), T0 + 2)
    store.add(P, [feed("t", "3", T0 + 3)], T0 + 3)
    again = store.open(P, "t", new_id(), T0 + 4)
    assert again == first
    info = store.inspect(P, "t")
    assert (info.open_digest, info.open_records, info.pending) == (first.id, 2, 1)
    assert store.close(P, "t", first.id, T0 + 5)
    store.schedule(P, T0 + 305)
    assert deliver(store, "t", T0 + 305) == ["3"]


def test_close_is_idempotent_and_ignores_unknown_ids(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    assert not store.close(P, "t", new_id(), T0)  # nothing open
    digest = store.open(P, "t", new_id(), T0)
    assert not store.close(P, "t", new_id(), T0)  # another id
    assert store.inspect(P, "t").open_digest == digest.id
    assert store.close(P, "t", digest.id, T0 + 1)
    before = store.inspect(P, "t")
    assert not store.close(P, "t", digest.id, T0 + 2)
    assert store.inspect(P, "t") == before


def test_open_many_and_close_many_act_like_one_call_each(store: DigestStore, feed: Feed) -> None:
    # Timelines over several partitions (so over the cluster's nodes), one of them not READY.
    for partition in range(4):
        store.add(partition, [feed(f"t{partition}", "1"), feed(f"t{partition}", "2")], T0)
    store.add(1, [feed("waiting", "1")], T0)
    deliver(store, "waiting", T0, partition=1)  # now cooling: opening it is refused
    targets = [(p, f"t{p}", new_id()) for p in range(4)] + [(1, "waiting", new_id())]
    opened = store.open_many(targets, T0 + 1)
    assert isinstance(opened[4], InvalidState)
    digests = opened[:4]
    assert [ids(d.records) for d in digests if not isinstance(d, InvalidState)] == [["2", "1"]] * 4
    # A retried batch reopens the same digests, whatever new ids it brings.
    again = store.open_many([(p, t, new_id()) for p, t, _ in targets[:4]], T0 + 2)
    assert again == digests
    closing = [(p, f"t{p}", d.id) for p, d in enumerate(digests) if not isinstance(d, InvalidState)]
    assert store.close_many([*closing, (0, "t0", new_id())], T0 + 3) == [True] * 4 + [False]
    assert store.close_many(closing, T0 + 4) == [False] * 4  # already closed
    assert [store.inspect(p, f"t{p}").state for p in range(4)] == ["cooling"] * 4
    assert store.open_many([], T0) == []
    assert store.close_many([], T0) == []


def test_empty_digest_retires_timeline(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    assert deliver(store, "t", T0) == ["1"]
    # a record in the cool-down, cancelled: the timeline waits with nothing pending
    store.add(P, [feed("t", "2"), feed("t", "2", control=CANCEL)], T0 + 1)
    assert store.schedule(P, T0 + 330) == [DueTimeline("t", T0 + 330)]
    digest = store.open(P, "t", new_id(), T0 + 330)
    assert digest.records == []
    assert store.close(P, "t", digest.id, T0 + 330)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.last_delivery, info.pending) == ("absent", None, None, 0)
    assert store.stats(P).waiting == store.stats(P).ready == 0
    # retired: the next event is immediate again
    assert store.add(P, [feed("t", "3")], T0 + 331).ready == ["t"]


def test_full_cycle_batches_what_accumulated(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    assert deliver(store, "t", T0) == ["1"]
    store.add(P, [feed("t", "2", T0 + 1), feed("t", "3", T0 + 2)], T0 + 2)
    store.add(P, [feed("t", "4", T0 + 3)], T0 + 3)
    due = T0 + 300 + 3 * 30
    assert store.schedule(P, due) == [DueTimeline("t", due)]
    assert deliver(store, "t", due) == ["4", "3", "2"]


# ------------------------------------------------------------------------------ capacity


def test_capacity_keeps_newest_and_reports_drops(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(TimelinePolicy(capacity=3))
    first = store.add(P, [feed("t", f"r{i}", T0 + i) for i in range(5)], T0)
    assert (first.added, first.dropped) == (5, 2)
    assert store.inspect(P, "t").dropped == 2
    # an older record arriving late is the one trimmed
    late = store.add(P, [feed("t", "late", T0 - 100)], T0)
    assert late.dropped == 1
    digest = store.open(P, "t", new_id(), T0)
    assert ids(digest.records) == ["r4", "r3", "r2"]
    assert digest.dropped == 3
    assert store.inspect(P, "t").dropped == 0  # counted once, by this digest


# ------------------------------------------------------------------------------ maintenance


def test_maintenance_recovers_unclosed_digest(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("t", "1")], T0)
    lost = store.open(P, "t", new_id(), T0)  # the deliverer crashes: never closed
    assert store.maintenance(P, T0, T0 + 60) == []  # strictly before the deadline
    assert store.maintenance(P, T0 + 30, T0 + 60) == [DueTimeline("t", T0)]
    assert store.inspect(P, "t").state == "waiting"
    with pytest.raises(InvalidState):
        store.open(P, "t", new_id(), T0 + 60)
    store.add(P, [feed("t", "2")], T0 + 61)
    assert store.schedule(P, T0 + 62) == [DueTimeline("t", T0)]
    again = store.open(P, "t", new_id(), T0 + 62)
    assert (again.id, ids(again.records)) == (lost.id, ["1"])
    assert store.close(P, "t", lost.id, T0 + 63)
    store.schedule(P, T0 + 363)
    assert deliver(store, "t", T0 + 363) == ["2"]


def test_maintenance_leaves_recent_ready_alone(store: DigestStore, feed: Feed) -> None:
    store.add(P, [feed("old", "1")], T0)
    store.add(P, [feed("new", "1")], T0 + 100)
    assert store.maintenance(P, T0 + 50, T0 + 100) == [DueTimeline("old", T0)]
    assert store.inspect(P, "new").state == "ready"


# ------------------------------------------------------------------------------ slices


def test_schedule_moves_a_backlog_in_slices(store: DigestStore, feed: Feed) -> None:
    names = [f"t{i}" for i in range(5)]
    for i, name in enumerate(names):
        store.add(P, [feed(name, "1")], T0)
        digest = store.open(P, name, new_id(), T0)
        store.add(P, [feed(name, "2")], T0)  # behind the open digest: it waits after the close
        assert store.close(P, name, digest.id, T0 - 300 + (4 - i))  # due T0 + 4 - i
    first = store.schedule(P, T0 + 10, limit=2)
    assert (first, first.more) == ([DueTimeline("t4", T0), DueTimeline("t3", T0 + 1)], True)
    second = store.schedule(P, T0 + 10, limit=2)
    assert ([d.timeline for d in second], second.more) == (["t2", "t1"], True)
    last = store.schedule(P, T0 + 10, limit=2)
    assert ([d.timeline for d in last], last.more) == (["t0"], False)
    assert store.stats(P).ready == 5
    empty = store.schedule(P, T0 + 10)
    assert (empty, empty.more) == ([], False)


#: Schedule calls' nonces (issue 36, g): a re-sent call carries its first run's.
NONCE, OTHER_NONCE = "a" * 24, "b" * 24


def _waiting(store: DigestStore, feed: Feed, count: int) -> None:
    """Timelines t0..t<count - 1> WAITING, due T0 + 4 - i (records behind a closed digest)."""
    for i in range(count):
        name = f"t{i}"
        store.add(P, [feed(name, "1")], T0)
        digest = store.open(P, name, new_id(), T0)
        store.add(P, [feed(name, "2")], T0)
        assert store.close(P, name, digest.id, T0 - 300 + (4 - i))


def test_a_re_sent_schedule_answers_what_its_first_run_moved(
    store: DigestStore, feed: Feed
) -> None:
    # Issue 36 (g): redis-py re-sends a call whose reply it lost (same arguments); the re-run
    # found the timelines the first run moved already READY and named none, so nobody
    # announced them until maintenance (~330 s). A re-run with the first one's nonce answers
    # that run's reply, and moves nothing more.
    _waiting(store, feed, 3)
    first = store.schedule(P, T0 + 10, limit=2, nonce=NONCE)  # its reply is lost
    again = store.schedule(P, T0 + 10, limit=2, nonce=NONCE)  # the re-send
    assert (again, again.more) == (first, first.more)
    assert (again, again.more) == ([DueTimeline("t2", T0 + 2), DueTimeline("t1", T0 + 3)], True)
    assert (store.stats(P).ready, store.stats(P).waiting) == (2, 1)
    # The next call (a nonce of its own) takes the next slice.
    rest = store.schedule(P, T0 + 10, limit=2, nonce=OTHER_NONCE)
    assert (rest, rest.more) == ([DueTimeline("t0", T0 + 4)], False)
    # Only the partition's last call that moved something is remembered: a late re-send of
    # an older one runs again (and finds nothing due), the last one still answers.
    stale = store.schedule(P, T0 + 10, limit=2, nonce=NONCE)
    assert (stale, stale.more) == ([], False)
    assert store.schedule(P, T0 + 10, limit=2, nonce=OTHER_NONCE) == rest


def test_a_schedule_without_a_nonce_is_not_remembered(store: DigestStore, feed: Feed) -> None:
    _waiting(store, feed, 2)
    assert [d.timeline for d in store.schedule(P, T0 + 10, limit=1)] == ["t1"]
    assert [d.timeline for d in store.schedule(P, T0 + 10, limit=1)] == ["t0"]


@pytest.mark.parametrize("nonce", ["", "a" * 23, "A" * 24, "g" * 24, 7])
def test_a_schedule_nonce_is_checked(store: DigestStore, nonce: object) -> None:
    with pytest.raises(InvalidArgument):
        store.schedule(P, T0, nonce=nonce)  # type: ignore[arg-type]


def test_maintenance_moves_a_backlog_in_slices(store: DigestStore, feed: Feed) -> None:
    for i in range(5):
        store.add(P, [feed(f"t{i}", "1")], T0 + i)
    first = store.maintenance(P, T0 + 3, T0 + 100, limit=2)
    assert (first, first.more) == ([DueTimeline("t0", T0), DueTimeline("t1", T0 + 1)], True)
    rest = store.maintenance(P, T0 + 3, T0 + 100, limit=2)
    assert ([d.timeline for d in rest], rest.more) == (["t2"], False)  # t3, t4 are recent
    assert (store.stats(P).waiting, store.stats(P).ready) == (3, 2)


def test_default_slice_is_a_thousand(store: DigestStore) -> None:
    store.add(P, [NewRecord(f"t{i:04d}", "1", T0, b"", i) for i in range(1_001)], T0)
    first = store.maintenance(P, T0 + 1, T0 + 1)
    assert (len(first), first.more) == (1_000, True)
    assert first[0] == DueTimeline("t0000", T0)
    second = store.maintenance(P, T0 + 1, T0 + 1)
    assert (second, second.more) == ([DueTimeline("t1000", T0)], False)


@pytest.mark.parametrize("limit", [0, -1, 100_001, True, 2.0])
def test_slice_limit_is_checked(store: DigestStore, limit: object) -> None:
    with pytest.raises(InvalidArgument):
        store.schedule(P, T0, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        store.maintenance(P, T0, T0, limit=limit)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ delete


@pytest.mark.parametrize("state", ["ready", "open", "waiting", "recovered", "absent"])
def test_delete_from_every_state(store: DigestStore, feed: Feed, state: str) -> None:
    if state != "absent":
        store.add(P, [feed("t", "1")], T0)
    if state in ("open", "recovered"):
        store.open(P, "t", new_id(), T0)
    if state == "recovered":
        store.maintenance(P, T0 + 1, T0 + 1)
    if state == "waiting":
        deliver(store, "t", T0)
        store.add(P, [feed("t", "2")], T0)
    assert store.delete(P, "t") is (state != "absent")
    info = store.inspect(P, "t")
    assert (info.state, info.pending, info.open_digest, info.last_delivery) == (
        "absent",
        0,
        None,
        None,
    )
    assert store.stats(P).waiting == store.stats(P).ready == 0
    assert not store.delete(P, "t")
    assert store.add(P, [feed("t", "3")], T0 + 1).ready == ["t"]


# ------------------------------------------------------------------------------ scale


def test_ten_thousand_record_digest_comes_back_whole(store: DigestStore) -> None:
    count = 10_000
    records = [
        NewRecord("big", f"r{i:05d}", T0 + i / 1000, i.to_bytes(4, "big") * 8, i)
        for i in range(count)
    ]
    for start in range(0, count, 2_500):
        store.add(P, records[start : start + 2_500], T0)
    digest = store.open(P, "big", new_id(), T0)
    assert len(digest.records) == count
    assert digest.dropped == 0
    assert digest.records[0] == StoredRecord("r09999", T0 + 9.999, (9999).to_bytes(4, "big") * 8)
    assert ids(digest.records) == [f"r{i:05d}" for i in reversed(range(count))]
    assert [r.payload for r in digest.records] == [r.payload for r in reversed(records)]
    assert store.close(P, "big", digest.id, T0)


def test_many_timelines_are_independent(store: DigestStore, feed: Feed) -> None:
    names = [f"tl-{i}" for i in range(40)]
    result = store.add(
        P, [feed(name, f"{name}-{j}", T0 + j) for j in range(3) for name in names], T0
    )
    assert result.ready == names
    for name in names[:20]:  # half get delivered, the other half stay ready
        assert deliver(store, name, T0 + 1) == [f"{name}-2", f"{name}-1", f"{name}-0"]
    store.delete(P, names[20])
    store.add(P, [feed(names[0], "late")], T0 + 2)
    stats = store.stats(P)
    # the delivered ones cool down in no set, but the one a record woke
    assert (stats.waiting, stats.ready) == (1, 19)
    assert stats.oldest_due == T0 + 301 + 30
    assert store.inspect(P, names[0]).due == T0 + 301 + 30
    assert (store.inspect(P, names[1]).state, store.inspect(P, names[1]).due) == (
        "cooling", T0 + 301,
    )  # fmt: skip
    assert store.inspect(P, names[21]).pending == 3
    assert store.inspect(P, names[20]).state == "absent"


def test_partitions_are_independent(store: DigestStore, feed: Feed) -> None:
    store.add(0, [NewRecord("t", "a", T0, b"zero", 5)], T0)
    store.add(1, [NewRecord("t", "a", T0, b"one", 5)], T0)
    store.delete(0, "t")
    assert store.inspect(1, "t").pending == 1
    digest = store.open(1, "t", new_id(), T0)
    assert digest.records[0].payload == b"one"


def test_inspect_and_stats_of_empty_partition(store: DigestStore) -> None:
    info = store.inspect(P, "nothing")
    assert (info.state, info.due, info.pending, info.open_records, info.dropped) == (
        "absent",
        None,
        0,
        0,
        0,
    )
    stats = store.stats(P)
    assert (stats.partition, stats.waiting, stats.ready, stats.oldest_due) == (P, 0, 0, None)
    assert stats.applied_offset is None
