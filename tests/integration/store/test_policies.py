"""Digest policies (flush_at, calendar schedules) and control operations (flush, cancel), on the
model, a single Redis and the Redis Cluster (issue 15)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from digest_stream.store import DigestStore, TimelineInfo, TimelinePolicy
from digest_stream.store.base import CANCEL, CANCEL_ALL, FLUSH
from digest_stream.store.errors import InvalidState
from digest_stream.store.limits import FLUSH_AT_FLOOR
from tests.support import new_id
from tests.support.store import Feed, StoreFactory

P = 0
BERLIN = ZoneInfo("Europe/Berlin")
# Monday 2026-03-02 10:00 Berlin time (UTC+1).
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=BERLIN).timestamp()
COOL = TimelinePolicy(minimum_delay=60, increment_delay=10, maximum_delay=120, flush_at=3)
DAILY = TimelinePolicy(schedule="0 9 * * *", timezone="Europe/Berlin")


@pytest.fixture
def feed() -> Feed:
    return Feed(T0)


def deliver(store: DigestStore, timeline: str, now: float) -> tuple[list[str], str]:
    """Open and close the timeline's digest: its record ids (newest first) and its reason."""
    digest = store.open(P, timeline, new_id(), now)
    assert store.close(P, timeline, digest.id, now)
    return [record.id for record in digest.records], digest.reason


def test_flush_at_makes_a_cooling_timeline_due_before_its_cool_down_ends(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    assert store.add(P, [feed("t")], T0).ready == ["t"]
    assert deliver(store, "t", T0) == (["r0"], "IMMEDIATE")
    # In the cool-down (due T0 + 60): two records are not enough...
    store.add(P, [feed("t"), feed("t")], T0 + 5)
    assert store.inspect(P, "t").due == T0 + 60 + 2 * 10  # each pushed it by increment
    assert store.inspect(P, "t").reason == "COOLDOWN"
    # ...the third reaches flush_at: due now, well before the cool-down would end.
    store.add(P, [feed("t")], T0 + 6)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason, info.pending) == ("waiting", T0 + 6, "FLUSH_AT", 3)
    assert [d.timeline for d in store.schedule(P, T0 + 6)] == ["t"]
    ids, reason = deliver(store, "t", T0 + 6)
    assert (ids, reason) == (["r3", "r2", "r1"], "FLUSH_AT")
    assert store.inspect(P, "t").reason == "COOLDOWN"


def test_flush_at_never_comes_sooner_than_its_floor_after_a_delivery(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    store.add(P, [feed("t")], T0)
    deliver(store, "t", T0)
    store.add(P, [feed("t"), feed("t"), feed("t")], T0 + 0.25)  # a burst right after it
    assert store.inspect(P, "t").due == T0 + FLUSH_AT_FLOOR
    assert store.schedule(P, T0 + 0.5) == []
    assert [d.timeline for d in store.schedule(P, T0 + FLUSH_AT_FLOOR)] == ["t"]


def test_a_calendar_timeline_has_no_leading_edge_and_delivers_at_each_fire(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(DAILY)
    nine = datetime(2026, 3, 3, 9, 0, tzinfo=BERLIN).timestamp()
    result = store.add(P, [feed("d"), feed("d")], T0)
    assert result.ready == []  # no immediate digest: a daily summary
    info = store.inspect(P, "d")
    assert (info.state, info.due, info.reason) == ("waiting", nine, "SCHEDULE")
    store.add(P, [feed("d")], T0 + 3600)  # more records do not move a calendar due time
    assert store.inspect(P, "d").due == nine
    assert store.schedule(P, nine - 1) == []
    assert [d.timeline for d in store.schedule(P, nine)] == ["d"]
    assert deliver(store, "d", nine + 0.2) == (["r2", "r1", "r0"], "SCHEDULE")
    # Next fire is the following 09:00 Berlin, not a cool-down after the delivery.
    next_nine = datetime(2026, 3, 4, 9, 0, tzinfo=BERLIN).timestamp()
    assert store.inspect(P, "d").due == next_nine
    # Nothing came meanwhile: the empty digest at that fire retires the timeline.
    assert [d.timeline for d in store.schedule(P, next_nine)] == ["d"]
    assert deliver(store, "d", next_nine) == ([], "SCHEDULE")
    assert store.inspect(P, "d").state == "absent"


def test_a_calendar_due_time_is_never_in_the_past_across_a_fall_back(
    make_store: StoreFactory, feed: Feed
) -> None:
    # Berlin, 2026-10-25: 03:00 -> 02:00, so 02:00-03:00 happens twice. "30 2" fires at the
    # first 02:30 (00:30 UTC); the second pass's 02:10 (01:10 UTC) comes after it (issue 20).
    store = make_store(TimelinePolicy(schedule="30 2 * * *", timezone="Europe/Berlin"))
    first_pass = datetime(2026, 10, 25, 0, 30, tzinfo=UTC).timestamp()
    second_pass = datetime(2026, 10, 25, 1, 10, tzinfo=UTC).timestamp()
    next_day = datetime(2026, 10, 26, 2, 30, tzinfo=BERLIN).timestamp()
    # At add: a first record in the second pass waits for the next day's fire, not a past one.
    store.add(P, [feed("new")], second_pass)
    assert store.inspect(P, "new").due == next_day
    # At close: a digest of the first pass's fire closed in the second pass (a slow publish).
    store.add(P, [feed("d")], first_pass - 3600)
    assert store.inspect(P, "d").due == first_pass
    assert [d.timeline for d in store.schedule(P, first_pass)] == ["d"]
    digest = store.open(P, "d", new_id(), first_pass)
    store.add(P, [feed("d")], second_pass - 60)  # arrives while that digest is open
    assert store.close(P, "d", digest.id, second_pass)
    assert store.inspect(P, "d").due == next_day
    # Nothing is due again before the next day: no digest storm on every tick.
    assert store.schedule(P, second_pass + 1) == []
    assert [d.timeline for d in store.schedule(P, next_day)] == ["d", "new"]


def test_flush_delivers_a_waiting_timeline_now_in_order_with_its_records(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(DAILY)
    result = store.add(P, [feed("d", "a"), feed("d", control=FLUSH), feed("d", "b")], T0)
    # The flush applies after "a" (READY at once, announced like an immediate digest);
    # "b" arrives after it and joins the digest still pending (READY: not opened yet).
    assert result.ready == ["d"]
    assert result.added == 2
    info = store.inspect(P, "d")
    assert (info.state, info.reason, info.pending) == ("ready", "FLUSHED", 2)
    assert deliver(store, "d", T0 + 1) == (["b", "a"], "FLUSHED")


def test_flush_of_a_timeline_without_pending_records_does_nothing(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    assert store.add(P, [feed("t", control=FLUSH)], T0).ready == []
    store.add(P, [feed("t")], T0)
    deliver(store, "t", T0)  # cooling, nothing pending
    assert store.add(P, [feed("t", control=FLUSH)], T0 + 1).ready == []
    assert store.inspect(P, "t").state == "cooling"
    store.add(P, [feed("t", "late"), feed("t", "late", control=CANCEL)], T0 + 2)
    # WAITING in its cool-down, its one record cancelled: nothing pending
    assert store.add(P, [feed("t", control=FLUSH)], T0 + 3).ready == []
    assert store.inspect(P, "t").state == "waiting"


def test_cancel_removes_pending_records_in_order_and_counts_them(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    store.add(P, [feed("t", "first")], T0)
    deliver(store, "t", T0)
    batch = [
        feed("t", "a"),
        feed("t", "b"),
        feed("t", "a", control=CANCEL),  # "a" is gone...
        feed("t", "zz", control=CANCEL),  # ...an unknown id cancels nothing
        feed("t", "c"),
        feed("u", "x"),
        feed("u", control=CANCEL_ALL),  # only u's records, only those before it
        feed("u", "y"),
    ]
    result = store.add(P, batch, T0 + 1)
    assert (result.added, result.cancelled) == (5, 2)
    assert result.ready == ["u"]  # u's first record was immediate; cancel does not undo that
    assert store.inspect(P, "t").pending == 2
    assert store.inspect(P, "u").pending == 1
    assert deliver(store, "u", T0 + 1)[0] == ["y"]
    store.schedule(P, T0 + 200)
    ids, reason = deliver(store, "t", T0 + 200)
    assert (sorted(ids), reason) == (["b", "c"], "COOLDOWN")


def test_controls_are_fenced_like_records(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(COOL)
    first = [feed("t", "a"), feed("t", "b"), feed("t", "a", control=CANCEL), feed("t", "c")]
    result = store.add(P, first, T0, through_offset=5)
    assert (result.added, result.cancelled, result.fence_after) == (3, 1, 5)
    # A replay of the same offsets (a crash before the commit) applies nothing again: the
    # cancel does not remove "a" a second time after its replayed add.
    again = store.add(P, first, T0, expected_fence=5)
    assert (again.added, again.skipped, again.cancelled, again.fence_after) == (0, 3, 0, 5)
    assert store.inspect(P, "t").pending == 2
    # A fence found behind what the caller expects applies nothing, controls included.
    behind = store.add(P, [feed("t", control=CANCEL_ALL)], T0, expected_fence=99)
    assert (behind.cancelled, behind.fence_before, behind.fence_after) == (0, 5, 5)
    assert store.inspect(P, "t").pending == 2


def test_a_control_last_in_a_batch_carries_the_batch_fence(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    result = store.add(P, [feed("t"), feed("t", control=FLUSH)], T0, through_offset=9)
    assert result.fence_after == 9
    assert store.applied_offset(P) == 9


# ---------------------------------------------------------------- issue 20: at the edges


def test_a_flush_while_the_digest_is_open_is_honoured_at_its_close(
    make_store: StoreFactory, feed: Feed
) -> None:
    # Issue 20, item 3: the flush used to be dropped (the timeline is READY with its digest
    # open), so what arrived meanwhile waited the whole cool-down after the close.
    store = make_store(COOL)
    store.add(P, [feed("t")], T0)
    digest = store.open(P, "t", new_id(), T0)
    result = store.add(P, [feed("t", "late"), feed("t", control=FLUSH)], T0 + 1)
    assert result.ready == []  # already READY: nothing to announce now
    info = store.inspect(P, "t")
    assert (info.state, info.pending, info.reason) == ("ready", 1, "FLUSHED")
    assert store.close(P, "t", digest.id, T0 + 2)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason) == ("waiting", T0 + 2 + FLUSH_AT_FLOOR, "FLUSHED")
    assert store.schedule(P, T0 + 2.5) == []
    assert [d.timeline for d in store.schedule(P, T0 + 2 + FLUSH_AT_FLOOR)] == ["t"]
    assert deliver(store, "t", T0 + 3) == (["late"], "FLUSHED")
    # Honoured once: the next close is a plain cool-down again.
    info = store.inspect(P, "t")
    assert (info.due, info.reason) == (T0 + 3 + 60, "COOLDOWN")


def _closed_after(
    store: DigestStore, feed: Feed, batch: list[tuple[str, str | None]]
) -> TimelineInfo:
    """Deliver calendar timeline "d" now (by a flush): ``batch`` (record id, control) arrives
    while its digest is open, then the digest closes; the timeline as the close left it."""
    store.add(P, [feed("d"), feed("d", control=FLUSH)], T0)
    digest = store.open(P, "d", new_id(), T0)
    store.add(P, [feed("d", record_id, control) for record_id, control in batch], T0 + 1)
    assert store.close(P, "d", digest.id, T0 + 2)
    return store.inspect(P, "d")


def test_a_flush_while_open_beats_a_calendar_schedule_at_the_close(
    make_store: StoreFactory, feed: Feed
) -> None:
    info = _closed_after(make_store(DAILY), feed, [("x", None), ("", FLUSH)])
    assert (info.due, info.reason) == (T0 + 2 + FLUSH_AT_FLOOR, "FLUSHED")


def test_a_flush_while_open_covers_only_what_was_pending_then(
    make_store: StoreFactory, feed: Feed
) -> None:
    # Nothing pending behind the open digest: it already holds everything the flush asked for,
    # so a record after the flush waits for the schedule as usual.
    info = _closed_after(make_store(DAILY), feed, [("", FLUSH), ("after", None)])
    nine = datetime(2026, 3, 3, 9, 0, tzinfo=BERLIN).timestamp()
    assert (info.due, info.reason, info.pending) == (nine, "SCHEDULE", 1)


def test_flush_at_is_checked_at_the_close(make_store: StoreFactory, feed: Feed) -> None:
    # Issue 20, item 4: records that reach flush_at while the digest is open (READY: add leaves
    # it alone) make the timeline due right after the floor at the close, not a cool-down later.
    store = make_store(COOL)  # flush_at=3, minimum_delay=60
    store.add(P, [feed("t"), feed("u")], T0)
    t_digest = store.open(P, "t", new_id(), T0)
    u_digest = store.open(P, "u", new_id(), T0)
    store.add(P, [feed("t") for _ in range(5)] + [feed("u"), feed("u")], T0 + 1)
    assert store.close_many([(P, "t", t_digest.id), (P, "u", u_digest.id)], T0 + 2) == [True] * 2
    t_info, u_info = store.inspect(P, "t"), store.inspect(P, "u")
    assert (t_info.due, t_info.reason) == (T0 + 2 + FLUSH_AT_FLOOR, "FLUSH_AT")
    assert (u_info.due, u_info.reason) == (T0 + 2 + 60, "COOLDOWN")  # two: below flush_at
    store.schedule(P, T0 + 3)
    ids, reason = deliver(store, "t", T0 + 3)
    assert (len(ids), reason) == (5, "FLUSH_AT")


def test_flush_at_at_the_close_of_a_calendar_timeline(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(TimelinePolicy(schedule="0 9 * * *", timezone="Europe/Berlin", flush_at=2))
    info = _closed_after(store, feed, [("", None), ("", None)])
    assert (info.due, info.reason) == (T0 + 2 + FLUSH_AT_FLOOR, "FLUSH_AT")


TRIMMED = TimelinePolicy(minimum_delay=60, increment_delay=0, maximum_delay=60, capacity=2)


def _trimmed(store: DigestStore, feed: Feed, timeline: str) -> None:
    """A timeline in its cool-down holding 2 records after 3 were trimmed."""
    store.add(P, [feed(timeline)], T0)
    deliver(store, timeline, T0)
    result = store.add(P, [feed(timeline, f"{timeline}{i}") for i in range(5)], T0 + 1)
    assert result.dropped == 3
    assert store.inspect(P, timeline).dropped == 3


def test_a_cancel_all_resets_the_trimmed_count(make_store: StoreFactory, feed: Feed) -> None:
    # Issue 20, item 9: the trims before a cancel-all stayed in the meta, so the empty digest
    # reported them (and delivery counted them again, as missing payloads) and a later digest
    # counted them in dropped and total.
    store = make_store(TRIMMED)
    _trimmed(store, feed, "t")
    assert store.add(P, [feed("t", control=CANCEL_ALL)], T0 + 2).cancelled == 2
    assert store.inspect(P, "t").dropped == 0
    store.add(P, [feed("t", "g")], T0 + 3)
    store.schedule(P, T0 + 61)
    digest = store.open(P, "t", new_id(), T0 + 61)
    assert ([r.id for r in digest.records], digest.dropped) == (["g"], 0)
    # ...and without a record after the cancel, the empty digest reports no loss either.
    _trimmed(store, feed, "u")
    store.add(P, [feed("u", control=CANCEL_ALL)], T0 + 2)
    store.schedule(P, T0 + 61)
    empty = store.open(P, "u", new_id(), T0 + 61)
    assert (empty.records, empty.dropped) == ([], 0)


def test_a_cancel_of_one_record_keeps_the_trimmed_count_until_nothing_is_left(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(TRIMMED)
    _trimmed(store, feed, "t")  # holds t3, t4
    assert store.add(P, [feed("t", "t4", control=CANCEL)], T0 + 2).cancelled == 1
    assert store.inspect(P, "t").dropped == 3  # t3 still goes out, with the 3 trims before it
    assert store.add(P, [feed("t", "t3", control=CANCEL)], T0 + 2).cancelled == 1
    # Nothing pending is left: no digest will carry the trims, and nothing else may count them.
    assert store.inspect(P, "t").dropped == 0
    store.schedule(P, T0 + 61)
    empty = store.open(P, "t", new_id(), T0 + 61)
    assert (empty.records, empty.dropped) == ([], 0)


# ---------------------------------------------------------------- issue 36 (d): a flush
# whose records are all cancelled has nothing left to flush: the cool-down stands.

#: An add's leading-edge nonce (the issue's digest is a leading one).
NONCE = "0123456789abcdef01234567"
DEFAULT = TimelinePolicy()  # minimum_delay 300, increment_delay 30


#: The names of the orders the test below runs, in its order.
CASES = (
    "cancel-all", "cancel-id", "separate-calls", "record-after", "cancel-first", "flush-first",
    "one-left",
)  # fmt: skip


@pytest.mark.parametrize(
    ("batches", "left", "reason"),
    [
        # the order: the cancel empties the timeline after the flush
        ([[("e2", None), ("", FLUSH), ("", CANCEL_ALL)]], 0, "COOLDOWN"),
        ([[("e2", None), ("", FLUSH), ("e2", CANCEL)]], 0, "COOLDOWN"),
        # each in its own batch (its own store call)
        ([[("e2", None)], [("", FLUSH)], [("", CANCEL_ALL)]], 0, "COOLDOWN"),
        # a record after the cancel was not pending at the flush: it waits the cool-down
        ([[("e2", None), ("", FLUSH), ("", CANCEL_ALL), ("e3", None)]], 1, "COOLDOWN"),
        # the cancel first, or the flush before e2: it finds nothing pending, a no-op already
        ([[("e2", None), ("", CANCEL_ALL), ("", FLUSH)]], 0, "COOLDOWN"),
        ([[("", FLUSH), ("e2", None), ("", CANCEL_ALL)]], 0, "COOLDOWN"),
        # something the flush asked for is left: it is honoured
        ([[("e2", None), ("e3", None), ("", FLUSH), ("e2", CANCEL)]], 1, "FLUSHED"),
    ],
    ids=CASES,
)
def test_a_flush_whose_records_are_cancelled_behind_an_open_digest_keeps_the_cool_down(
    make_store: StoreFactory,
    feed: Feed,
    batches: list[list[tuple[str, str | None]]],
    left: int,
    reason: str,
) -> None:
    # Issue 36 (d): the cancel kept the flush's cause, so the close scheduled an empty digest
    # 1 s later, which retired the timeline: the next event went out IMMEDIATE, ~1 s after
    # the last digest instead of 300 s.
    store = make_store(DEFAULT)
    led = store.add(P, [feed("t", "e1")], T0, open_nonce=NONCE).opened[0]
    for batch in batches:
        store.add(P, [feed("t", record_id, control) for record_id, control in batch], T0 + 1)
    assert store.close_many([(P, "t", led.id)], T0 + 2) == [True]
    info = store.inspect(P, "t")
    due = T0 + 2 + (FLUSH_AT_FLOOR if reason == "FLUSHED" else 300)
    assert (info.state, info.due, info.reason, info.pending) == ("waiting", due, reason, left)
    due_soon = [d.timeline for d in store.schedule(P, T0 + 3)]
    assert due_soon == ([] if reason == "COOLDOWN" else ["t"])
    # An event soon after is not immediate: it waits for the cool-down (or the flush's digest).
    later = store.add(P, [feed("t", "e4")], T0 + 4, open_nonce="1" * 24)
    assert (later.ready, later.opened) == ([], [])


def _delivered_then(store: DigestStore, feed: Feed) -> None:
    """Timeline "t" delivered at T0 (its cool-down runs to T0 + 300), "e2" pending since."""
    store.add(P, [feed("t", "e1")], T0)
    deliver(store, "t", T0)
    store.add(P, [feed("t", "e2")], T0 + 1)


def test_a_cancel_that_empties_a_flushed_waiting_timeline_puts_its_cool_down_back(
    make_store: StoreFactory, feed: Feed
) -> None:
    # The flush honoured by the close (due 1 s after it), then every record cancelled: the
    # timeline was left due with nothing to deliver, and that empty digest retired it.
    store = make_store(DEFAULT)
    led = store.add(P, [feed("t", "e1")], T0, open_nonce=NONCE).opened[0]
    store.add(P, [feed("t", "e2"), feed("t", control=FLUSH)], T0 + 1)
    assert store.close_many([(P, "t", led.id)], T0 + 2) == [True]
    assert (store.inspect(P, "t").due, store.inspect(P, "t").reason) == (T0 + 3, "FLUSHED")
    assert store.add(P, [feed("t", control=CANCEL_ALL)], T0 + 2.5).cancelled == 1
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason, info.pending) == ("waiting", T0 + 302, "COOLDOWN", 0)
    assert store.schedule(P, T0 + 3) == []
    assert store.add(P, [feed("t", "e3")], T0 + 4, open_nonce="1" * 24).opened == []


def test_a_flush_and_a_cancel_in_one_batch_leave_a_cooling_timeline_waiting(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(DEFAULT)
    _delivered_then(store, feed)
    result = store.add(P, [feed("t", control=FLUSH), feed("t", control=CANCEL_ALL)], T0 + 2)
    assert (result.ready, result.cancelled) == ([], 1)  # nothing to announce any more
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason, info.pending) == ("waiting", T0 + 300, "COOLDOWN", 0)


def test_a_cancel_after_the_flush_was_announced_takes_the_timeline_back(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(DEFAULT)
    _delivered_then(store, feed)
    assert store.add(P, [feed("t", control=FLUSH)], T0 + 2).ready == ["t"]
    assert store.add(P, [feed("t", control=CANCEL_ALL)], T0 + 3).cancelled == 1
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason) == ("waiting", T0 + 300, "COOLDOWN")
    # The flush's announcement finds the timeline no longer READY: a stale entry.
    with pytest.raises(InvalidState):
        store.open(P, "t", new_id(), T0 + 3)


def test_a_cancel_that_empties_a_flush_at_timeline_puts_its_cool_down_back(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)  # flush_at 3, minimum_delay 60
    store.add(P, [feed("t")], T0)
    deliver(store, "t", T0)
    store.add(P, [feed("t"), feed("t"), feed("t")], T0 + 5)
    assert store.inspect(P, "t").reason == "FLUSH_AT"
    store.add(P, [feed("t", control=CANCEL_ALL)], T0 + 6)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason) == ("waiting", T0 + 60, "COOLDOWN")


def test_a_cancel_that_empties_a_flushed_calendar_timeline_waits_for_the_next_fire(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(DAILY)
    assert store.add(P, [feed("d"), feed("d", control=FLUSH)], T0).ready == ["d"]
    store.add(P, [feed("d", control=CANCEL_ALL)], T0 + 1)
    nine = datetime(2026, 3, 3, 9, 0, tzinfo=BERLIN).timestamp()
    info = store.inspect(P, "d")
    assert (info.state, info.due, info.reason) == ("waiting", nine, "SCHEDULE")
