"""Urgent records (issue 39, item 3): a record the ingest found urgent (its timeline's
``urgent_when``) makes its timeline due at once, through the cool-down and a calendar, never
sooner than the floor after the last digest; on the model, a single Redis and the Redis
Cluster, through every path of the add (the tables, the append lane's timelines, the leading
edge, a batch with controls)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from digest_stream.store import DigestStore, TimelinePolicy
from digest_stream.store.base import CANCEL_ALL, FLUSH, NewRecord
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.limits import FLUSH_AT_FLOOR
from tests.support import new_id
from tests.support.store import Feed, StoreFactory

P = 0
BERLIN = ZoneInfo("Europe/Berlin")
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=BERLIN).timestamp()
COOL = TimelinePolicy(
    minimum_delay=60, increment_delay=10, maximum_delay=120, urgent_when="severity=critical"
)
DAILY = replace(COOL, schedule="0 9 * * *", timezone="Europe/Berlin")


@pytest.fixture
def feed() -> Feed:
    return Feed(T0)


def deliver(store: DigestStore, timeline: str, now: float) -> tuple[list[str], str]:
    """Open and close the timeline's digest: its record ids (sorted: a Feed's records share
    one event time) and its reason."""
    digest = store.open(P, timeline, new_id(), now)
    assert store.close(P, timeline, digest.id, now)
    return sorted(record.id for record in digest.records), digest.reason


def _cooling_with_pending(store: DigestStore, feed: Feed, timeline: str) -> None:
    """A timeline delivered at T0 holding two records in its cool-down (due T0 + 80)."""
    assert store.add(P, [feed(timeline, "first")], T0).ready == [timeline]
    deliver(store, timeline, T0)
    store.add(P, [feed(timeline, "a"), feed(timeline, "b")], T0 + 5)
    assert store.inspect(P, timeline).due == T0 + 60 + 2 * 10


def test_an_urgent_record_in_the_cool_down_is_due_at_once_with_what_is_pending(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    _cooling_with_pending(store, feed, "t")
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 7)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason, info.pending) == ("waiting", T0 + 7, "URGENT", 3)
    assert [d.timeline for d in store.schedule(P, T0 + 7)] == ["t"]
    assert deliver(store, "t", T0 + 7) == (["a", "alarm", "b"], "URGENT")
    # The cool-down starts again from the urgent digest.
    store.add(P, [feed("t", "later")], T0 + 8)
    info = store.inspect(P, "t")
    assert (info.due, info.reason, info.last_delivery) == (T0 + 7 + 60 + 10, "COOLDOWN", T0 + 7)


def test_a_burst_of_urgent_records_is_one_digest_per_floor(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    store.add(P, [feed("t", "first", urgent=True)], T0)
    assert deliver(store, "t", T0) == (["first"], "IMMEDIATE")  # a quiet timeline's own
    # Urgent records right after a digest: due at the floor, all of them together...
    for i, at in enumerate((T0 + 0.1, T0 + 0.2, T0 + 0.5)):
        store.add(P, [feed("t", f"u{i}", urgent=True)], at)
        info = store.inspect(P, "t")
        assert (info.due, info.reason) == (T0 + FLUSH_AT_FLOOR, "URGENT")
    assert store.schedule(P, T0 + FLUSH_AT_FLOOR - 0.001) == []
    assert [d.timeline for d in store.schedule(P, T0 + FLUSH_AT_FLOOR)] == ["t"]
    assert deliver(store, "t", T0 + 1.2) == (["u0", "u1", "u2"], "URGENT")
    # ...and the next burst waits for the floor after that digest.
    store.add(P, [feed("t", "v", urgent=True)], T0 + 1.3)
    assert store.inspect(P, "t").due == T0 + 1.2 + FLUSH_AT_FLOOR


def test_records_after_an_urgent_one_do_not_push_it_out(
    make_store: StoreFactory, feed: Feed
) -> None:
    # The floor holds the due time an urgent record set: an ordinary record after it (one per
    # timeline of a call of several: the append lane; several of one timeline: the tables)
    # adds its increment to nothing.
    store = make_store(COOL)
    for name in ("t", "u"):
        store.add(P, [feed(name, "first")], T0)
        deliver(store, name, T0)
        store.add(P, [feed(name, "a")], T0 + 0.2)
    store.add(P, [feed("t", "alarm", urgent=True), feed("u", "alarm", urgent=True)], T0 + 0.3)
    store.add(P, [feed("t", "b"), feed("u", "b")], T0 + 0.4)
    store.add(P, [feed("t", "c"), feed("t", "d")], T0 + 0.5)
    for name in ("t", "u"):
        info = store.inspect(P, name)
        assert (info.due, info.reason) == (T0 + FLUSH_AT_FLOOR, "URGENT"), name
    # Past the floor, not delivered yet (a slow scheduler): still due, at the latest record.
    store.add(P, [feed("t", "e"), feed("u", "e")], T0 + 3)
    for name in ("t", "u"):
        assert store.inspect(P, name).due == T0 + 3, name


def test_an_urgent_record_wakes_a_cooling_timeline(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(COOL)
    store.add(P, [feed("t", "first")], T0)
    deliver(store, "t", T0)
    assert store.inspect(P, "t").state == "cooling"
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 30)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason) == ("waiting", T0 + 30, "URGENT")


def test_an_urgent_record_behind_an_open_digest_is_due_at_the_floor_after_its_close(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    store.add(P, [feed("t", "first")], T0)
    digest = store.open(P, "t", new_id(), T0)
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 1)
    assert store.close(P, "t", digest.id, T0 + 2)
    info = store.inspect(P, "t")
    assert (info.due, info.reason) == (T0 + 2 + FLUSH_AT_FLOOR, "URGENT")
    store.schedule(P, T0 + 3)
    assert deliver(store, "t", T0 + 3) == (["alarm"], "URGENT")


def test_a_ready_timeline_not_opened_yet_takes_the_urgent_record_as_it_is(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = make_store(COOL)
    store.add(P, [feed("t", "first")], T0)  # READY, announced, not opened
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 1)
    assert store.inspect(P, "t").reason == "IMMEDIATE"
    assert deliver(store, "t", T0 + 1) == (["alarm", "first"], "IMMEDIATE")


def test_an_urgent_record_goes_through_a_calendar(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(DAILY)
    store.add(P, [feed("t", "a")], T0)
    assert store.inspect(P, "t").reason == "SCHEDULE"
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 5)
    info = store.inspect(P, "t")
    assert (info.due, info.reason) == (T0 + 5, "URGENT")
    store.schedule(P, T0 + 5)
    assert deliver(store, "t", T0 + 5) == (["a", "alarm"], "URGENT")
    # Back to the calendar: the next ordinary record waits for the fire.
    store.add(P, [feed("t", "b")], T0 + 6)
    nine = datetime(2026, 3, 3, 9, 0, tzinfo=BERLIN).timestamp()
    assert (store.inspect(P, "t").due, store.inspect(P, "t").reason) == (nine, "SCHEDULE")


def test_a_new_timelines_urgent_record_is_led_as_any_first_record(
    make_store: StoreFactory, feed: Feed
) -> None:
    # A quiet timeline's first record goes out at once anyway: the leading edge's IMMEDIATE
    # digest, the urgent record among the call's others (the tables path, not the lead lane).
    store = make_store(COOL)
    _cooling_with_pending(store, feed, "old")
    result = store.add(
        P,
        [feed("new", "x", urgent=True), feed("new", "y"), feed("old", "alarm", urgent=True)],
        T0 + 7,
        open_nonce=new_id()[:24],
    )
    (led,) = result.opened
    assert (led.timeline, sorted(r.id for r in led.records), led.reason) == (
        "new",
        ["x", "y"],
        "IMMEDIATE",
    )
    assert result.ready == []
    assert (store.inspect(P, "old").due, store.inspect(P, "old").reason) == (T0 + 7, "URGENT")
    assert store.close_leading(result.opened[0].id[:24], [(P, "new", led.id)], T0 + 8) == [True]
    store.add(P, [feed("new", "z", urgent=True)], T0 + 8.5)
    assert store.inspect(P, "new").due == T0 + 8 + FLUSH_AT_FLOOR


def test_urgent_records_among_controls(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(COOL)
    _cooling_with_pending(store, feed, "t")
    _cooling_with_pending(store, feed, "u")
    store.add(
        P,
        [feed("t", "alarm", urgent=True), feed("u", control=FLUSH), feed("u", "c", urgent=True)],
        T0 + 7,
    )
    assert (store.inspect(P, "t").due, store.inspect(P, "t").reason) == (T0 + 7, "URGENT")
    assert (store.inspect(P, "u").state, store.inspect(P, "u").reason) == ("ready", "FLUSHED")


def test_a_cancel_that_empties_an_urgent_timeline_puts_its_cool_down_back(
    make_store: StoreFactory, feed: Feed
) -> None:
    # Urgent asks for the records pending: a cancel that leaves none takes it back (as a
    # flush's), so urgent-then-cancel never cuts a cool-down short.
    store = make_store(COOL)
    store.add(P, [feed("t", "first")], T0)
    deliver(store, "t", T0)
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 5)
    assert store.add(P, [feed("t", control=CANCEL_ALL)], T0 + 6).cancelled == 1
    info = store.inspect(P, "t")
    assert (info.due, info.reason) == (T0 + 60, "COOLDOWN")


def test_a_replayed_urgent_record_does_nothing(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(COOL)
    _cooling_with_pending(store, feed, "t")
    record = feed("t", "alarm", urgent=True)
    store.add(P, [record], T0 + 7)
    store.schedule(P, T0 + 7)
    deliver(store, "t", T0 + 7)
    store.add(P, [feed("t", "later")], T0 + 8)
    due = store.inspect(P, "t").due
    assert store.add(P, [record], T0 + 9).skipped == 1
    assert (store.inspect(P, "t").due, store.inspect(P, "t").reason) == (due, "COOLDOWN")


def test_a_non_bool_urgent_refuses_the_batch(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(COOL)
    bad = NewRecord("t", "x", T0, b"", 0, None, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="urgent must be a bool"):
        store.add(P, [feed("t"), bad], T0)
    assert store.inspect(P, "t").state == "absent"


#: Quiet hours holding T0 (10:00 Berlin) until 11:00.
QUIET = replace(COOL, quiet_hours="09:00-11:00", timezone="Europe/Berlin")
QUIET_END = datetime(2026, 3, 2, 11, 0, tzinfo=BERLIN).timestamp()


def test_an_urgent_record_passes_quiet_hours(make_store: StoreFactory, feed: Feed) -> None:
    # A plain first record inside quiet hours waits for their end; an urgent one after it
    # makes the timeline due at once, with it, reason URGENT; and an urgent first record of
    # another timeline is due at once too (no leading edge under quiet hours: WAITING, now).
    store = make_store(QUIET)
    assert store.add(P, [feed("t", "plain")], T0).ready == []
    info = store.inspect(P, "t")
    assert (info.state, info.due) == ("waiting", QUIET_END)
    store.add(P, [feed("t", "alarm", urgent=True), feed("u", "alarm", urgent=True)], T0 + 5)
    for name in ("t", "u"):
        info = store.inspect(P, name)
        assert (info.state, info.due, info.reason) == ("waiting", T0 + 5, "URGENT"), name
    assert sorted(d.timeline for d in store.schedule(P, T0 + 5)) == ["t", "u"]
    assert deliver(store, "t", T0 + 5) == (["alarm", "plain"], "URGENT")
    # After it, a plain record's cool-down end (T0 + 75) falls in the quiet hours: held.
    store.add(P, [feed("t", "later")], T0 + 10)
    assert store.inspect(P, "t").due == QUIET_END


def test_flush_at_held_by_quiet_hours_yields_to_an_urgent_record(
    make_store: StoreFactory, feed: Feed
) -> None:
    # Both early rules in one batch: flush_at's due time is held to the quiet hours' end,
    # the urgent record's is not, so the earlier (URGENT, now) wins.
    store = make_store(replace(QUIET, flush_at=2))
    store.add(P, [feed("t", "a")], T0)
    store.add(P, [feed("t", "b"), feed("t", "alarm", urgent=True)], T0 + 5)
    info = store.inspect(P, "t")
    assert (info.due, info.reason) == (T0 + 5, "URGENT")


def test_an_urgent_record_does_not_pass_a_snooze(make_store: StoreFactory, feed: Feed) -> None:
    store = make_store(COOL)
    end = T0 + 500
    store.add(P, [feed("t", repr(end), "snooze")], T0)
    assert store.add(P, [feed("t", "alarm", urgent=True)], T0 + 1).ready == []
    assert store.schedule(P, T0 + 1) == []  # the snooze holds it back
    assert store.schedule(P, end - 1) == []
    assert [d.timeline for d in store.schedule(P, end)] == ["t"]
    assert deliver(store, "t", end)[0] == ["alarm"]


PASSING = replace(COOL, urgent_passes_snooze=True)


def _delivered(store: DigestStore, feed: Feed) -> DigestStore:
    """The store with timeline t delivered at T0 (cooling: its cool-down ends at T0 + 60)."""
    assert store.add(P, [feed("t", "first")], T0).ready == ["t"]
    deliver(store, "t", T0)
    return store


def test_with_urgent_passes_snooze_an_urgent_record_goes_out_and_the_snooze_holds_the_rest(
    make_store: StoreFactory, feed: Feed
) -> None:
    store, end = _delivered(make_store(PASSING), feed), T0 + 500
    store.add(P, [feed("t", repr(end), "snooze"), feed("t", "quiet")], T0 + 1)
    assert store.schedule(P, T0 + 100) == []  # a plain record: its cool-down ended, held
    assert store.add(P, [feed("t", "alarm", urgent=True)], T0 + 101).ready == []
    assert [d.timeline for d in store.schedule(P, T0 + 101)] == ["t"]  # passes the snooze
    assert deliver(store, "t", T0 + 101) == (["alarm", "quiet"], "URGENT")  # what is pending
    assert store.inspect(P, "t").snoozed_until == end  # the snooze goes on
    store.add(P, [feed("t", "later")], T0 + 102)
    assert store.schedule(P, T0 + 300) == []  # past its cool-down: the snooze holds it
    assert [d.timeline for d in store.schedule(P, end)] == ["t"]
    assert deliver(store, "t", end)[0] == ["later"]


def test_an_urgent_record_passing_a_snooze_keeps_the_reason_the_digest_has(
    make_store: StoreFactory, feed: Feed
) -> None:
    # Never delivered: its first record's leading edge, held by the snooze, is already due;
    # the urgent record lets it out, and it stays what it is, the timeline's first digest.
    store = make_store(PASSING)
    store.add(P, [feed("t", repr(T0 + 500), "snooze"), feed("t", "quiet")], T0)
    assert store.schedule(P, T0 + 1) == []
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 2)
    assert [d.timeline for d in store.schedule(P, T0 + 2)] == ["t"]
    assert deliver(store, "t", T0 + 2) == (["alarm", "quiet"], "IMMEDIATE")


def test_with_urgent_passes_snooze_a_first_urgent_record_passes_too(
    make_store: StoreFactory, feed: Feed
) -> None:
    # absent and snoozed: the add makes it WAITING until the end, the urgent record due now
    store = make_store(PASSING)
    store.add(P, [feed("t", repr(T0 + 500), "snooze")], T0)
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 1)
    assert [d.timeline for d in store.schedule(P, T0 + 1)] == ["t"]
    assert deliver(store, "t", T0 + 1) == (["alarm"], "URGENT")


def test_a_snooze_after_an_urgent_record_holds_it_even_when_urgent_passes_snooze(
    make_store: StoreFactory, feed: Feed
) -> None:
    # The recipient's latest word wins: a snooze set after the urgent record (before the
    # schedule saw it) holds it, as a snooze holds everything pending.
    store = make_store(PASSING)
    store.add(P, [feed("t", repr(T0 + 500), "snooze")], T0)
    store.add(P, [feed("t", "alarm", urgent=True)], T0 + 1)
    store.add(P, [feed("t", repr(T0 + 900), "snooze")], T0 + 1)
    assert store.schedule(P, T0 + 1) == []
    assert store.schedule(P, T0 + 899) == []
    assert [d.timeline for d in store.schedule(P, T0 + 900)] == ["t"]


def test_urgent_passes_snooze_lets_nothing_through_without_an_urgent_record(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = _delivered(make_store(PASSING), feed)
    store.add(P, [feed("t", repr(T0 + 500), "snooze"), feed("t", "a")], T0 + 1)
    assert store.schedule(P, T0 + 200) == []  # its cool-down ended: held all the same
    assert [d.timeline for d in store.schedule(P, T0 + 500)] == ["t"]


def test_a_cancel_that_leaves_nothing_pending_takes_the_pass_back(
    make_store: StoreFactory, feed: Feed
) -> None:
    store = _delivered(make_store(PASSING), feed)
    store.add(P, [feed("t", repr(T0 + 500), "snooze"), feed("t", "alarm", urgent=True)], T0 + 1)
    store.add(P, [feed("t", "control", CANCEL_ALL), feed("t", "plain")], T0 + 2)
    assert store.schedule(P, T0 + 200) == []  # its cool-down ended; nothing urgent passes
    assert [d.timeline for d in store.schedule(P, T0 + 500)] == ["t"]
    assert deliver(store, "t", T0 + 500)[0] == ["plain"]
