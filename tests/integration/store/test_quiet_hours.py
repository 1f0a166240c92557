"""Quiet hours (issue 39, item 2) through every store's add: a due time inside them waits for
their end, the leading edge's included (held, not led), and a flush passes them. The close's
side is in test_due_rule.py's table; the model's equality on every path in test_stateful.py.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

from digest_stream.store import NewRecord, TimelinePolicy
from digest_stream.store.base import FLUSH
from tests.support.store import Feed, StoreFactory

P = 0
BERLIN = ZoneInfo("Europe/Berlin")
#: 22:30 Berlin, inside quiet hours to 07:00 the next morning.
NIGHT = datetime(2026, 3, 2, 22, 30, tzinfo=BERLIN).timestamp()
MORNING = datetime(2026, 3, 3, 7, 0, tzinfo=BERLIN).timestamp()
QUIET = TimelinePolicy(
    minimum_delay=60,
    increment_delay=10,
    maximum_delay=300,
    quiet_hours="22:00-07:00",
    timezone="Europe/Berlin",
)


def _nonce() -> str:
    return uuid.uuid4().hex[:24]


def test_a_first_event_in_quiet_hours_is_held_and_goes_out_with_the_rest_at_their_end(
    make_store: StoreFactory,
) -> None:
    store, feed = make_store(policy=QUIET), Feed(NIGHT)
    result = store.add(P, [feed("t"), feed("u")], NIGHT, open_nonce=_nonce())
    assert (result.ready, result.opened) == ([], [])  # neither announced nor led
    assert store.add(P, [feed("t")], NIGHT + 3600).ready == []
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.pending, info.reason) == (
        "waiting",
        MORNING,
        2,
        "IMMEDIATE",
    )
    assert store.schedule(P, MORNING - 0.001) == []
    assert sorted(d.timeline for d in store.schedule(P, MORNING)) == ["t", "u"]
    digest = store.open(P, "t", uuid.uuid4().hex, MORNING)
    assert len(digest.records) == 2  # one digest at the window's end
    assert digest.next_due is not None
    assert digest.next_due.next_delivery_at(MORNING) == int((MORNING + 60) * 1000)


def test_out_of_quiet_hours_the_leading_edge_goes_at_once(make_store: StoreFactory) -> None:
    store, feed = make_store(policy=QUIET), Feed(MORNING)
    (digest,) = store.add(P, [feed("t")], MORNING, open_nonce=_nonce()).opened
    assert digest.timeline == "t"
    assert store.add(P, [feed("u")], MORNING).ready == ["u"]


def test_due_times_moved_by_records_stay_out_of_quiet_hours(make_store: StoreFactory) -> None:
    # Closed at 21:58: the cool-down ends at 21:59 (out), a record's increments would move it
    # into the window (22:00:00, at most 22:03 by the cap): held to 07:00. Two timelines, one
    # record each per call: the interleaved append's lane in Redis once each holds a list.
    closed = datetime(2026, 3, 2, 21, 58, tzinfo=BERLIN).timestamp()
    store, feed = make_store(policy=QUIET), Feed(closed - 60)
    names = ["t", "v"]
    opened = store.add(P, [feed(n) for n in names], closed - 60, open_nonce=_nonce()).opened
    store.add(P, [feed(n) for n in names], closed - 30)  # pending behind the open digests
    assert store.close_many([(P, d.timeline, d.id) for d in opened], closed) == [True, True]
    assert store.inspect(P, "t").due == closed + 60
    for n in range(1, 7):  # each record adds 10 s: 21:59:10 ... 22:00:00, the first inside
        store.add(P, [feed(name) for name in names], closed + n)
        if n < 6:
            assert store.inspect(P, "v").due == closed + 60 + 10 * n
    for name in names:
        info = store.inspect(P, name)
        assert (info.state, info.due, info.reason) == ("waiting", MORNING, "COOLDOWN")


def test_a_cooling_timeline_woken_in_quiet_hours_waits_for_their_end(
    make_store: StoreFactory,
) -> None:
    closed = datetime(2026, 3, 2, 21, 59, 30, tzinfo=BERLIN).timestamp()
    store, feed = make_store(policy=QUIET), Feed(closed)
    (digest,) = store.add(P, [feed("t")], closed - 1, open_nonce=_nonce()).opened
    assert store.close(P, "t", digest.id, closed)
    info = store.inspect(P, "t")
    assert (info.state, info.due) == ("cooling", MORNING)  # 22:00:30 is inside
    store.add(P, [feed("t")], closed + 10)
    assert (store.inspect(P, "t").state, store.inspect(P, "t").due) == ("waiting", MORNING)


def test_flush_at_waits_but_a_flush_passes_quiet_hours(make_store: StoreFactory) -> None:
    policy = replace(QUIET, flush_at=2)
    store, feed = make_store(policy=policy), Feed(NIGHT)
    store.add(P, [feed("t"), feed("t"), feed("t")], NIGHT)
    assert store.inspect(P, "t").due == MORNING  # flush_at reached, held all the same
    assert store.add(P, [feed("t", control=FLUSH)], NIGHT + 1).ready == ["t"]
    assert store.inspect(P, "t").reason == "FLUSHED"


def test_a_schedule_fire_in_quiet_hours_waits_for_their_end(make_store: StoreFactory) -> None:
    policy = TimelinePolicy(
        schedule="0 23 * * *", quiet_hours="22:00-07:00", timezone="Europe/Berlin"
    )
    store, feed = make_store(policy=policy), Feed(NIGHT - 3600)
    store.add(P, [feed("t")], NIGHT - 3600)
    info = store.inspect(P, "t")
    assert (info.state, info.due, info.reason) == ("waiting", MORNING, "SCHEDULE")


def test_interleaved_appends_in_quiet_hours_take_the_lanes_as_the_model(
    make_store: StoreFactory,
) -> None:
    # Many timelines of one record each, led (the leading lane) and then appended to while
    # WAITING (the append lane), across the window's start.
    evening = datetime(2026, 3, 2, 21, 59, tzinfo=BERLIN).timestamp()
    store = make_store(policy=QUIET)
    names = [f"t{i}" for i in range(8)]
    offset = 0

    def add(now: float, nonce: str | None = None) -> list[str]:
        nonlocal offset
        records = []
        for name in names:
            records.append(NewRecord(name, uuid.uuid4().hex, now, b"p", offset))
            offset += 1
        result = store.add(P, records, now, open_nonce=nonce)
        return [d.timeline for d in result.opened] + result.ready

    assert sorted(add(evening, _nonce())) == names  # 21:59: led
    digests = [store.open(P, name, uuid.uuid4().hex, evening) for name in names]
    assert store.close_many([(P, d.timeline, d.id) for d in digests], evening + 1) == [True] * 8
    assert add(evening + 2) == []  # cooling: WAITING from 22:00:01, held to 07:00
    assert add(evening + 3) == []
    for name in names:
        assert store.inspect(P, name).due == MORNING
    later = [f"n{i}" for i in range(4)]
    names = later
    assert add(NIGHT, _nonce()) == []  # new timelines in the night: held, not led
    for name in later:
        assert store.inspect(P, name).due == MORNING
