"""The leading edge (``open_nonce``): the add that finds a timeline with nothing stored opens
its digest in the same call, exactly as ``open`` would, so everything that comes for the
timeline next waits behind that open digest until its close (issue 26: one digest path, one
contract). The same on the reference model, a single Redis and the cluster."""

from __future__ import annotations

import pytest

from digest_stream.settings import MAX_BATCH_SIZE
from digest_stream.store import DigestStore, TimelinePolicy
from digest_stream.store.base import CANCEL, CANCEL_ALL, FLUSH, NewRecord, leading_id
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.policy import DEFAULT_CAPACITY
from tests.support.store import RedisClient, StoreFactory, expire

T0 = 1_700_000_000.0
NONCE = "0123456789abcdef01234567"
OTHER = "f" * 32


def rec(timeline: str, record_id: str, offset: int, control: str | None = None) -> NewRecord:
    return NewRecord(timeline, record_id, T0 + offset, b"p-" + record_id.encode(), offset, control)


def test_new_timelines_get_their_digest_opened_in_the_add(store: DigestStore) -> None:
    result = store.add(
        0, [rec("a", "a1", 0), rec("b", "b1", 1), rec("a", "a2", 2)], T0, open_nonce=NONCE
    )
    assert result.ready == []  # not announced: the caller publishes them
    assert [(d.timeline, d.id) for d in result.opened] == [
        ("a", leading_id(NONCE, 1)),
        ("b", leading_id(NONCE, 2)),
    ]
    a = result.opened[0]
    assert [(r.id, r.payload) for r in a.records] == [("a2", b"p-a2"), ("a1", b"p-a1")]
    assert (a.opened_at, a.reason, a.dropped, a.expired) == (T0, "IMMEDIATE", 0, False)
    # Left exactly as delivery's open leaves a timeline: READY, the digest open.
    info = store.inspect(0, "a")
    assert (info.state, info.open_digest, info.open_records, info.pending) == (
        "ready", a.id, 2, 0,
    )  # fmt: skip
    assert store.stats(0).ready == 2
    # Delivery's open (an announcement of it) returns that very digest.
    again = store.open(0, "a", OTHER, T0 + 1)
    assert (again.id, again.records, again.reason) == (a.id, a.records, "IMMEDIATE")


def test_the_close_starts_the_cool_down_at_its_time(store: DigestStore) -> None:
    led = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    assert store.close_many([(0, "a", led.id)], T0 + 7) == [True]
    info = store.inspect(0, "a")
    assert (info.state, info.due, info.last_delivery, info.pending, info.open_digest) == (
        "cooling", T0 + 7 + 300, T0 + 7, 0, None,
    )  # fmt: skip
    assert info.reason == "COOLDOWN"
    assert store.close_many([(0, "a", led.id)], T0 + 8) == [False]  # idempotent
    # The cool-down ends with nothing to deliver: nothing comes due, no empty digest; the
    # next event leads again.
    assert store.schedule(0, T0 + 307) == []
    assert len(store.add(0, [rec("a", "a2", 1)], T0 + 400, open_nonce="1" * 24).opened) == 1


def test_an_event_in_the_cool_down_is_not_led(store: DigestStore) -> None:
    led = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    assert store.close_many([(0, "a", led.id)], T0 + 7) == [True]
    result = store.add(0, [rec("a", "a2", 1)], T0 + 306.9, open_nonce="1" * 24)
    assert (result.ready, result.opened) == ([], [])
    info = store.inspect(0, "a")
    assert (info.state, info.due, info.pending) == ("waiting", T0 + 307 + 30, 1)


def test_a_digest_named_twice_in_one_close_is_closed_once(store: DigestStore) -> None:
    led = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    assert store.close_many([(0, "a", led.id), (0, "a", led.id)], T0 + 7) == [True, False]
    info = store.inspect(0, "a")
    assert (info.state, info.due, info.last_delivery) == ("cooling", T0 + 7 + 300, T0 + 7)


def test_many_timelines_led_and_closed_in_one_call_each(store: DigestStore) -> None:
    """More timelines than a compact (listpack) sorted set holds: the schedule sets hold
    exactly them, READY after the add, in none while cooling after the close, WAITING once
    a record comes in the cool-down."""
    names = [f"t{i:03}" for i in range(300)]
    result = store.add(0, [rec(name, "r", i) for i, name in enumerate(names)], T0, open_nonce=NONCE)
    assert ([d.timeline for d in result.opened], store.stats(0).ready) == (names, 300)
    targets = [(0, d.timeline, d.id) for d in result.opened]
    assert store.close_many(targets, T0 + 1) == [True] * 300
    stats = store.stats(0)
    assert (stats.ready, stats.waiting, stats.oldest_due) == (0, 0, None)
    assert {store.inspect(0, name).state for name in names} == {"cooling"}
    woken = store.add(0, [rec(name, "s", 300 + i) for i, name in enumerate(names)], T0 + 2)
    assert (woken.ready, woken.opened) == ([], [])
    stats = store.stats(0)
    assert (stats.ready, stats.waiting, stats.oldest_due) == (0, 300, T0 + 1 + 300 + 30)
    assert [t.timeline for t in store.schedule(0, T0 + 331, limit=1000)] == names


def test_records_flushes_and_schedules_wait_behind_the_open_leading_digest(
    store: DigestStore,
) -> None:
    """The reading of issue 26, item 1: while the leading digest D1 is not acknowledged, no
    second digest can be opened, whatever asks for one; its records go out after D1."""
    led = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    later = store.add(0, [rec("a", "a2", 1), rec("a", "-", 2, FLUSH)], T0 + 1)
    assert (later.ready, later.opened) == ([], [])  # nothing announced: a2 waits behind D1
    assert store.schedule(0, T0 + 5000) == []  # no cool-down is running to end
    info = store.inspect(0, "a")
    assert (info.state, info.open_digest, info.pending) == ("ready", led.id, 1)
    # Any announcement (a take-over, maintenance, the publisher's hand-over) reopens D1.
    assert store.open(0, "a", OTHER, T0 + 2).id == led.id
    # The flush is honoured by D1's close: the next digest right after the floor, FLUSHED.
    assert store.close(0, "a", led.id, T0 + 3)
    info = store.inspect(0, "a")
    assert (info.state, info.due, info.reason) == ("waiting", T0 + 4, "FLUSHED")
    store.schedule(0, T0 + 4)
    second = store.open(0, "a", OTHER, T0 + 4)
    assert (second.id, [r.id for r in second.records], second.reason) == (
        OTHER, ["a2"], "FLUSHED",
    )  # fmt: skip


def test_flush_at_reached_behind_the_leading_digest_is_checked_by_its_close(
    make_store: StoreFactory,
) -> None:
    store = make_store(policy=TimelinePolicy(flush_at=2))
    led = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    store.add(0, [rec("a", "a2", 1), rec("a", "a3", 2)], T0 + 1)
    assert store.inspect(0, "a").state == "ready"
    assert store.close(0, "a", led.id, T0 + 2)
    info = store.inspect(0, "a")
    assert (info.due, info.reason) == (T0 + 3, "FLUSH_AT")


def test_a_lost_leading_digest_is_reported_expired_by_the_open(
    store: DigestStore, raw_client: RedisClient | None, namespace: str
) -> None:
    """Issue 26, item 5: a leading digest the store no longer holds (evicted, expired) is
    reported by the open its announcement makes, like any other open digest's loss."""
    store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE)
    expire(store, raw_client, namespace, "a", digest_only=True)
    reopened = store.open(0, "a", OTHER, T0 + 1)
    assert (reopened.id, reopened.records, reopened.expired) == (OTHER, [], True)


def test_only_timelines_with_nothing_stored_lead(make_store: StoreFactory) -> None:
    store = make_store(resolver=lambda t: TimelinePolicy(schedule="0 * * * *") if t == "cal"
                       else TimelinePolicy())  # fmt: skip
    store.add(0, [rec("w", "w1", 0)], T0)  # announced: READY, not led
    store.open(0, "w", "e" * 32, T0)
    store.close(0, "w", "e" * 32, T0)  # now WAITING
    result = store.add(
        0, [rec("w", "w2", 1), rec("cal", "c1", 2), rec("new", "n1", 3)], T0, open_nonce=NONCE
    )
    assert [d.timeline for d in result.opened] == ["new"]
    assert store.inspect(0, "cal").state == "waiting"  # a calendar timeline has no leading edge
    assert store.inspect(0, "w").state == "waiting"


def test_a_batch_holding_controls_announces(store: DigestStore) -> None:
    batch = [
        rec("a", "a1", 0),
        rec("a", "-", 1, CANCEL_ALL),
        rec("b", "b1", 2),
        rec("b", "-", 3, FLUSH),
        rec("b", "b2", 4),
    ]
    result = store.add(0, batch, T0, open_nonce=NONCE)
    assert (result.opened, sorted(result.ready), result.cancelled) == ([], ["a", "b"], 1)
    assert store.inspect(0, "b").open_digest is None


def test_a_timeline_its_capacity_trims_is_announced(make_store: StoreFactory) -> None:
    store = make_store(policy=TimelinePolicy(capacity=1))
    result = store.add(
        0, [rec("a", "a1", 0), rec("a", "a2", 1), rec("b", "b1", 2)], T0, open_nonce=NONCE
    )
    assert ([d.timeline for d in result.opened], result.ready) == (["b"], ["a"])
    assert result.dropped == 1


def test_a_repeated_record_id_is_one_record(store: DigestStore) -> None:
    batch = [rec("a", "x", 0), NewRecord("a", "x", T0 + 1, b"second", 1)]
    led = store.add(0, batch, T0, open_nonce=NONCE).opened[0]
    assert [(r.id, r.payload) for r in led.records] == [("x", b"second")]
    assert store.open(0, "a", OTHER, T0).records == led.records


def test_a_replayed_add_leads_nothing(store: DigestStore) -> None:
    first = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE)
    again = store.add(0, [rec("a", "a1", 0)], T0, open_nonce="f" * 24)
    assert (len(first.opened), again.opened, again.skipped) == (1, [], 1)


def test_bad_arguments_are_refused(store: DigestStore) -> None:
    with pytest.raises(InvalidArgument):
        store.add(0, [rec("a", "a1", 0)], T0, open_nonce="xyz")
    assert store.inspect(0, "a").state == "absent"


def bulk(timeline: str, count: int, first_offset: int) -> list[NewRecord]:
    """``count`` records of one timeline at consecutive offsets, ids and payloads distinct."""
    return [
        NewRecord(timeline, f"{timeline}-{i:05d}", T0 + i / 1000, b"payload %05d" % i, offset)
        for i, offset in enumerate(range(first_offset, first_offset + count))
    ]


@pytest.mark.parametrize(
    ("count", "policy"),
    [
        # a leading digest is its meta and 3 values per record, packed and read 1,000 values
        # at a time: exactly one piece, then one value past it
        (333, TimelinePolicy()),
        (334, TimelinePolicy()),
        (1_334, TimelinePolicy()),  # the first size the Lua's pack refused
        (DEFAULT_CAPACITY, TimelinePolicy()),  # the capacity: the most a first batch leads
        (MAX_BATCH_SIZE, TimelinePolicy(capacity=None)),  # the largest batch, not capped
    ],
    ids=["one-piece", "two-pieces", "past-the-old-limit", "capacity", "largest-batch"],
)
def test_a_large_first_batch_of_one_timeline_leads_one_digest(
    make_store: StoreFactory, count: int, policy: TimelinePolicy
) -> None:
    """Issue 36, item c: a new timeline's first batch of more records than the Lua could
    pack as arguments (1,334) refused the whole add halfway through its writes (the earlier
    timeline written, the fence not), and the replay failed the same way on every instance.
    No step may take arguments or results that grow with a batch or a timeline."""
    store = make_store(policy=policy)
    batch = [rec("before", "b1", 0), *bulk("big", count, 1)]
    result = store.add(0, batch, T0, open_nonce=NONCE)
    assert (result.added, result.skipped, result.dropped, result.fence_after) == (
        count + 1, 0, 0, count,
    )  # fmt: skip
    assert [d.timeline for d in result.opened] == ["before", "big"]
    led = result.opened[1]
    assert len(led.records) == count
    assert led.records[0].id == f"big-{count - 1:05d}"  # newest first
    # The digest stored under its id holds exactly what was published, read back whole.
    info = store.inspect(0, "big")
    assert (info.state, info.open_digest, info.open_records) == ("ready", led.id, count)
    again = store.open(0, "big", OTHER, T0 + 1)
    assert (again.id, again.records) == (led.id, led.records)
    assert store.close(0, "big", led.id, T0 + 2)
    # Records of a second large batch behind the closed digest are a digest of their own.
    later = store.add(0, bulk("big", count, count + 1), T0 + 3, open_nonce="1" * 24)
    assert (later.added, later.opened) == (count, [])
    store.schedule(0, T0 + 3 + 1800)
    assert len(store.open(0, "big", OTHER, T0 + 1803).records) == count


def test_a_cancel_in_a_large_batch_rewrites_the_timeline(store: DigestStore) -> None:
    """The same limit on the paths that rewrite a container whole (a cancel among the
    records: no leading edge, the batch's records read back and written again)."""
    batch = [*bulk("big", MAX_BATCH_SIZE - 1, 0), rec("big", "big-00000", MAX_BATCH_SIZE, CANCEL)]
    result = store.add(0, batch, T0, open_nonce=NONCE)
    assert (result.opened, result.ready, result.cancelled) == ([], ["big"], 1)
    assert len(store.open(0, "big", OTHER, T0).records) == MAX_BATCH_SIZE - 2


def at(timeline: str, record_id: str, offset: int) -> NewRecord:
    """A record at ``offset``, its time and payload from its id."""
    return NewRecord(timeline, record_id, T0 + int(record_id[1:]), record_id.encode(), offset)


@pytest.mark.parametrize(
    ("batch", "applied"),
    [
        ([at("a", "a1", 7), at("a", "a2", 7)], {"a": ["a1"]}),
        ([at("a", "a1", 7), at("b", "b1", 5), at("b", "b2", 8)], {"a": ["a1"], "b": ["b2"]}),
        ([at("a", "a1", 7), at("b", "b1", 7), at("b", "b2", 8)], {"a": ["a1"], "b": ["b2"]}),
    ],
    ids=["one-offset-twice", "an-offset-behind", "another-timeline-at-one-offset"],
)
def test_the_published_leading_digest_is_the_stored_one(
    store: DigestStore, batch: list[NewRecord], applied: dict[str, list[str]]
) -> None:
    """Issue 36, item e: a record at or below an offset the call applied before it is
    skipped (the running fence; the ingest's Kafka offsets never repeat, the store API's
    may), and the digest the add hands back must hold exactly what it stored under that id:
    the add's reply selected the records above the fence found before the call instead."""
    store.add(0, [rec("x", "x1", 3)], T0)  # a fence below the call's offsets
    result = store.add(0, batch, T0, open_nonce=NONCE)
    assert (result.added, result.skipped) == (len(batch) - 1, 1)
    assert {d.timeline: [r.id for r in d.records] for d in result.opened} == applied
    for led in result.opened:
        stored = store.open(0, led.timeline, OTHER, T0 + 1)
        assert (stored.id, stored.records) == (led.id, led.records)


def test_an_open_nonce_is_one_adds(store: DigestStore) -> None:
    """The digests of one add share its nonce (Redis keeps one add's together, and closes
    them as one): another add that would lead under it is refused before anything is
    written; a replay of that very add (every record at or below the fence) is not."""
    first = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE)
    assert [digest.timeline for digest in first.opened] == ["a"]
    with pytest.raises(InvalidArgument, match="open nonce"):
        store.add(0, [rec("b", "b1", 1)], T0, open_nonce=NONCE)
    assert store.inspect(0, "b").state == "absent"
    replay = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE)
    assert (replay.skipped, replay.opened) == (1, [])
    assert store.add(0, [rec("b", "b1", 1)], T0, open_nonce=OTHER[:24]).opened != []
