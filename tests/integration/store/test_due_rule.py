"""The due rule held equal (issue 38, item 3): what a digest's close schedules is what the
rule the store attached to it (``OpenDigest.next_due``, store/due.py) says.

The publisher copies ``next_delivery_at`` from that rule at the close time, and the store's
close (the model here, the Lua in Redis) schedules the timeline by its own code: the two
must never drift apart. One table of cases runs through both: each case's timeline is
opened, something (or nothing) arrives while its digest is open, and the digest closes at
CLOSE; the timeline's state, due time and reason (read through ``inspect``, and its due time
again through ``schedule``) are then what ``rule.after(CLOSE, came)`` says, ``came`` being
what arrived while it was open (a flush, an urgent record, or flush_at records). Only the
store's API is used: no keys, so the table holds through any rewrite of the Lua layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from digest_stream.store import DigestStore, TimelinePolicy
from digest_stream.store.base import CANCEL, CANCEL_ALL, FLUSH, OpenDigest
from digest_stream.store.due import NextDue
from digest_stream.store.limits import FLUSH_AT_FLOOR
from digest_stream.vocabulary import DigestReason
from tests.support import new_id
from tests.support.store import Feed, StoreFactory

P = 0
BERLIN = ZoneInfo("Europe/Berlin")
#: Monday 2026-03-02 10:00:00 Berlin time: a minute's and an hour's first second.
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=BERLIN).timestamp()
#: When the digests close: a slow publish, long after the open (T0); less than a second
#: before a minutely schedule's next fire (T0 + 60), so that fire comes sooner than the flush
#: floor; not a round number, so every due time has to keep its double's precision.
CLOSE = T0 + 59.123456789

COOL = TimelinePolicy(minimum_delay=60, increment_delay=10, maximum_delay=120)
#: A cool-down shorter than FLUSH_AT_FLOOR: a flush cannot make it due sooner.
SHORT = TimelinePolicy(minimum_delay=0.5, increment_delay=0, maximum_delay=10)
AT3 = replace(COOL, flush_at=3)
AT1 = replace(COOL, flush_at=1)
SHORT_AT1 = replace(SHORT, flush_at=1)
#: flush_at at capacity: records beyond it are trimmed, what is held still reaches it.
FULL_AT2 = replace(COOL, capacity=2, flush_at=2)
SHORT_AT2 = replace(SHORT, flush_at=2)
#: A cool-down exactly as long as the flush floor: a flush makes it no sooner.
ONE = TimelinePolicy(minimum_delay=FLUSH_AT_FLOOR, increment_delay=0, maximum_delay=10)
#: No cool-down at all: due again at the close itself.
ZERO = TimelinePolicy(minimum_delay=0, increment_delay=0, maximum_delay=0)
DAILY = TimelinePolicy(schedule="0 9 * * *", timezone="Europe/Berlin")
DAILY_AT2 = replace(DAILY, flush_at=2)
#: Fires at T0 + 60: within a second of CLOSE, sooner than the flush floor.
MINUTELY = TimelinePolicy(schedule="* * * * *", timezone="Europe/Berlin")
#: Quiet hours from 10:01 to 10:05 Berlin: the cool-down's end (CLOSE + 60) and the flush
#: floor (CLOSE + 1) fall inside them, the leading edge (T0) before them.
QUIET = replace(COOL, quiet_hours="10:01-10:05", timezone="Europe/Berlin")
QUIET_AT1 = replace(QUIET, flush_at=1)
#: Quiet hours that hold T0 and CLOSE themselves (started by a flush: no leading edge then).
QUIET_NOW = replace(COOL, quiet_hours="09:00-10:30", timezone="Europe/Berlin")
#: A daily fire at 09:00 inside quiet hours to 09:30.
QUIET_DAILY = replace(DAILY, quiet_hours="08:30-09:30")
QUIET_DAILY_AT2 = replace(QUIET_DAILY, flush_at=2)
#: urgent_when set: the ingest marks the records it calls urgent (an URG arrival below).
COOL_U = replace(COOL, urgent_when="severity=critical")
SHORT_U = replace(SHORT, urgent_when="severity=critical")
DAILY_U = replace(DAILY, urgent_when="severity=critical")
AT3_U = replace(AT3, urgent_when="severity=critical")

FLUSHED, FLUSH_AT, URGENT = DigestReason.FLUSHED, DigestReason.FLUSH_AT, DigestReason.URGENT


#: One arrival: a record's id ("" for a fresh one) and its control (None: a record;
#: URGENT_RECORD: a record the ingest called urgent).
Arrival = tuple[str, str | None]
REC: Arrival = ("", None)
URGENT_RECORD = "urgent"
URG: Arrival = ("", URGENT_RECORD)


def _led(store: DigestStore, feed: Feed, timeline: str) -> OpenDigest:
    """A first record whose digest the add opens itself (the ingest's leading edge)."""
    (digest,) = store.add(P, [feed(timeline)], T0, open_nonce=new_id()[:24]).opened
    return digest


def _announced(store: DigestStore, feed: Feed, timeline: str) -> OpenDigest:
    """A first record, announced (no leading edge) and opened by delivery."""
    assert store.add(P, [feed(timeline)], T0).ready == [timeline]
    return store.open(P, timeline, new_id(), T0)


def _flushed(store: DigestStore, feed: Feed, timeline: str) -> OpenDigest:
    """A calendar timeline's record, due now by a flush (a calendar has no leading edge)."""
    assert store.add(P, [feed(timeline), feed(timeline, control=FLUSH)], T0).ready == [timeline]
    return store.open(P, timeline, new_id(), T0)


def _emptied(store: DigestStore, feed: Feed, timeline: str) -> OpenDigest:
    """A READY timeline whose records were all cancelled before its open: an empty digest."""
    assert store.add(P, [feed(timeline)], T0).ready == [timeline]
    assert store.add(P, [feed(timeline, control=CANCEL_ALL)], T0).cancelled == 1
    digest = store.open(P, timeline, new_id(), T0)
    assert digest.records == []
    return digest


Start = Callable[[DigestStore, Feed, str], OpenDigest]


@dataclass(frozen=True)
class Case:
    """One timeline through one close."""

    name: str  # also its timeline's name
    policy: TimelinePolicy
    start: Start  # gets the timeline READY with its digest open, at T0
    while_open: tuple[Arrival, ...]  # what arrives (at T0 + 2) while the digest is open
    #: What of it may make the timeline due sooner (the rule's ``soon``): a flush, an urgent
    #: record, or flush_at pending records; None: none of them.
    came: DigestReason | None
    state: str  # what the close leaves: "waiting", "cooling" or "absent" (retired)


CASES = (
    # a cool-down: nothing arrived while open, the timeline cools in no set
    Case("cool-led-quiet", COOL, _led, (), None, "cooling"),
    Case("cool-quiet", COOL, _announced, (), None, "cooling"),
    Case("short-quiet", SHORT, _led, (), None, "cooling"),
    Case("zero-quiet", ZERO, _led, (), None, "cooling"),
    Case("zero-records", ZERO, _led, (REC,), None, "waiting"),
    Case("zero-flush", ZERO, _led, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    # records arrived while open: they wait for the cool-down
    Case("cool-led-records", COOL, _led, (REC,), None, "waiting"),
    Case("cool-records", COOL, _announced, (REC, REC), None, "waiting"),
    # they arrived and were cancelled: nothing pending, but the cool-down is scheduled
    Case("cool-cancelled", COOL, _led, (REC, ("", CANCEL_ALL)), None, "waiting"),
    # a flush while open: due after the floor, unless the cool-down is shorter; a flush
    # whose records were all cancelled has nothing to flush
    Case("cool-flush", COOL, _led, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case(
        "cool-flush-one-left",
        COOL,
        _led,
        (("x", None), REC, ("", FLUSH), ("x", CANCEL)),
        FLUSHED,
        "waiting",
    ),
    Case("cool-flush-cancelled", COOL, _led, (REC, ("", FLUSH), ("", CANCEL_ALL)), None, "waiting"),
    Case("short-flush", SHORT, _led, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case("one-flush", ONE, _led, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    # a flush with nothing pending is a no-op: nothing arrived
    Case("cool-flush-nothing", COOL, _led, (("", FLUSH),), None, "cooling"),
    # flush_at reached while open, or not; ids that repeat count once, cancelled ones not
    Case("at3-reached", AT3, _led, (REC, REC, REC), FLUSH_AT, "waiting"),
    Case("at3-short-of-it", AT3, _led, (REC, REC), None, "waiting"),
    Case("at3-same-id", AT3, _led, (("a", None), ("a", None), ("b", None)), None, "waiting"),
    Case("at3-cancelled-below", AT3, _led, (("x", None), REC, REC, ("x", CANCEL)), None, "waiting"),
    Case("at3-quiet", AT3, _led, (), None, "cooling"),
    Case("at1-reached", AT1, _led, (REC,), FLUSH_AT, "waiting"),
    Case("full-at2-trimmed", FULL_AT2, _led, (REC, REC, REC), FLUSH_AT, "waiting"),
    Case("at1-quiet", AT1, _led, (), None, "cooling"),
    Case("short-at1-quiet", SHORT_AT1, _led, (), None, "cooling"),
    Case("at3-and-flush", AT3, _led, (REC, REC, REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case("short-at2-reached", SHORT_AT2, _led, (REC, REC), FLUSH_AT, "waiting"),
    # an urgent record while open: due after the floor, unless the cool-down is shorter; a
    # flush's cause stands (the same floor); cancelled, it is as if it never came
    Case("urgent-quiet", COOL_U, _led, (), None, "cooling"),
    Case("urgent-records", COOL_U, _led, (REC, REC), None, "waiting"),
    Case("urgent", COOL_U, _led, (REC, URG), URGENT, "waiting"),
    Case("urgent-announced", COOL_U, _announced, (URG,), URGENT, "waiting"),
    Case("urgent-short", SHORT_U, _led, (URG,), URGENT, "waiting"),
    Case("urgent-cancelled", COOL_U, _led, (URG, ("", CANCEL_ALL)), None, "waiting"),
    Case("urgent-then-flush", COOL_U, _led, (URG, ("", FLUSH)), FLUSHED, "waiting"),
    Case("flush-then-urgent", COOL_U, _led, (REC, ("", FLUSH), URG), FLUSHED, "waiting"),
    Case("urgent-at3", AT3_U, _led, (URG, REC, REC), URGENT, "waiting"),
    Case("urgent-daily", DAILY_U, _flushed, (URG,), URGENT, "waiting"),
    Case("urgent-empty", COOL_U, _emptied, (URG,), URGENT, "waiting"),
    # a calendar: its next fire, even with nothing pending (no cooling), unless sooner
    Case("daily-quiet", DAILY, _flushed, (), None, "waiting"),
    Case("daily-records", DAILY, _flushed, (REC,), None, "waiting"),
    Case("daily-cancelled", DAILY, _flushed, (REC, ("", CANCEL_ALL)), None, "waiting"),
    Case("daily-flush", DAILY, _flushed, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case("minutely-flush", MINUTELY, _flushed, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case("daily-at2-reached", DAILY_AT2, _flushed, (REC, REC), FLUSH_AT, "waiting"),
    Case("daily-at2-quiet", DAILY_AT2, _flushed, (), None, "waiting"),
    # quiet hours: a due time inside them waits for their end; a flush passes them
    Case("quiet-led-quiet", QUIET, _led, (), None, "cooling"),
    Case("quiet-records", QUIET, _led, (REC,), None, "waiting"),
    Case("quiet-flush", QUIET, _led, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case("quiet-at1-reached", QUIET_AT1, _led, (REC,), FLUSH_AT, "waiting"),
    Case("quiet-now-records", QUIET_NOW, _flushed, (REC, REC), None, "waiting"),
    Case("quiet-now-flush", QUIET_NOW, _flushed, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case("quiet-now-quiet", QUIET_NOW, _flushed, (), None, "cooling"),
    Case("quiet-daily-quiet", QUIET_DAILY, _flushed, (), None, "waiting"),
    Case("quiet-daily-at2", QUIET_DAILY_AT2, _flushed, (REC, REC), FLUSH_AT, "waiting"),
    # an empty digest retires the timeline, unless records arrived while it was open
    Case("cool-empty", COOL, _emptied, (), None, "absent"),
    Case("cool-empty-records", COOL, _emptied, (REC,), None, "waiting"),
    Case("cool-empty-flush", COOL, _emptied, (REC, ("", FLUSH)), FLUSHED, "waiting"),
    Case("cool-empty-cancelled", COOL, _emptied, (REC, ("", CANCEL_ALL)), None, "absent"),
    Case("cool-empty-flush-nothing", COOL, _emptied, (("", FLUSH),), None, "absent"),
)
POLICIES = {case.name: case.policy for case in CASES}


def _store(make_store: StoreFactory) -> DigestStore:
    """A store whose timelines (a case's name, and that name with a "/" suffix) each have
    their case's policy."""
    return make_store(resolver=lambda timeline: POLICIES[timeline.partition("/")[0]])


def _open_all(store: DigestStore, feed: Feed, delay: str) -> dict[str, OpenDigest]:
    """Every case's digest open at T0, what arrives while it is open arrived (T0 + 2), and
    the publish ``delay``ed as the service can delay it: the digest as it is closed."""
    opened = {case.name: case.start(store, feed, case.name) for case in CASES}
    for case in CASES:
        if case.while_open:
            arrivals = [
                feed(case.name, rid, urgent=True)
                if control == URGENT_RECORD
                else feed(case.name, rid, control)
                for rid, control in case.while_open
            ]
            store.add(P, arrivals, T0 + 2)
    if delay != "prompt":
        # The publish outlasted the maintenance timeout: maintenance moved each timeline back
        # to WAITING (to re-announce its digest) before the publish's close came.
        moved = store.maintenance(P, CLOSE - 2, CLOSE - 2)
        assert sorted(d.timeline for d in moved) == sorted(opened)
    if delay == "reannounced":
        # ...and the re-announcement reopened each (the same digest), then it was closed.
        due = store.schedule(P, CLOSE - 1)
        assert sorted(d.timeline for d in due) == sorted(opened)
        for name, digest in opened.items():
            again = store.open(P, name, new_id(), CLOSE - 1)
            assert again.id == digest.id
            opened[name] = again
    return opened


def _close_all(store: DigestStore, opened: dict[str, OpenDigest], closing: str) -> None:
    if closing == "many":  # the service's way: delivery and the leading edge batch closes
        targets = [(P, name, digest.id) for name, digest in opened.items()]
        assert store.close_many(targets, CLOSE) == [True] * len(targets)
    else:
        for name, digest in opened.items():
            assert store.close(P, name, digest.id, CLOSE)


def _rule(digest: OpenDigest) -> NextDue:
    assert digest.next_due is not None
    return digest.next_due


@pytest.mark.parametrize("closing", ["one", "many"])
@pytest.mark.parametrize("delay", ["prompt", "maintained", "reannounced"])
def test_each_close_schedules_what_the_digests_due_rule_says(
    make_store: StoreFactory, closing: str, delay: str
) -> None:
    store, feed = _store(make_store), Feed(T0)
    opened = _open_all(store, feed, delay)
    _close_all(store, opened, closing)
    waiting: dict[str, float] = {}
    for case in CASES:
        rule = _rule(opened[case.name])
        # The rule the digest carries is its timeline's policy's: the one the close applies.
        assert rule.policy == case.policy, case.name
        due, cause = rule.after(CLOSE, case.came)
        info = store.inspect(P, case.name)
        if case.state == "absent":
            assert info.state == "absent", case.name
            continue
        found = (info.state, info.due, info.reason, info.last_delivery)
        assert found == (case.state, due, cause, CLOSE), case.name
        # What the digest published as its next delivery (the rule at its close time) is the
        # earliest the close allows, an explicit flush aside (the digest cannot know of it).
        promised = rule.next_delivery_at(CLOSE)
        if case.came != FLUSHED:
            assert promised <= int(due * 1000), case.name
            # nothing can make it due sooner
            if case.policy.flush_at is None and case.policy.urgent_when is None:
                assert promised == int(due * 1000), case.name
        if case.state == "waiting":
            waiting[case.name] = due
    # The same due times, by behaviour: schedule moves each timeline exactly at its due time
    # (not a millisecond before), and never a cooling one.
    for due in sorted(set(waiting.values())):
        assert store.schedule(P, due - 0.001) == [], due
        moved = {d.timeline for d in store.schedule(P, due)}
        assert moved == {name for name, at in waiting.items() if at == due}, due


#: The cases that leave a cool-down to arrive within (a zero one has no inside).
COOLING = [case for case in CASES if case.state == "cooling" and case.policy.minimum_delay > 0]


@pytest.mark.parametrize("case", COOLING, ids=[case.name for case in COOLING])
def test_a_record_within_the_cool_down_waits_from_its_end_and_after_it_goes_at_once(
    make_store: StoreFactory, case: Case
) -> None:
    # A cooling timeline was scheduled by nothing: an add within its cool-down schedules it
    # from the end the rule names (then as any WAITING timeline: increment, flush_at), and a
    # record at its end starts the timeline anew (this one's second timeline, "/late").
    store, feed = _store(make_store), Feed(T0)
    late = f"{case.name}/late"
    digests = {name: case.start(store, feed, name) for name in (case.name, late)}
    assert store.close_many([(P, name, d.id) for name, d in digests.items()], CLOSE) == [True] * 2
    rule, policy = _rule(digests[case.name]), case.policy
    ends = rule.due(CLOSE)
    assert store.inspect(P, late).state == "cooling"

    arrived = CLOSE + 0.25
    store.add(P, [feed(case.name)], arrived)
    # WAITING from the end of the cool-down, one increment for the record (within the cap),
    # held to the end of the quiet hours it falls in...
    due = policy.quiet_until(
        min(ends + policy.increment_delay, CLOSE + policy.maximum_delay), arrived
    )
    reason = "COOLDOWN"
    floor = policy.quiet_until(max(arrived, CLOSE + FLUSH_AT_FLOOR), arrived)
    if policy.flush_at == 1 and floor < due:  # ...or flush_at reached: the floor, if sooner
        due, reason = floor, "FLUSH_AT"
    info = store.inspect(P, case.name)
    assert (info.state, info.due, info.reason) == ("waiting", due, reason)
    # Never sooner than the digest promised; just then when flush_at brings it forward.
    promised = rule.next_delivery_at(CLOSE)
    assert promised <= int(due * 1000)
    if reason == "FLUSH_AT":
        assert promised == int(due * 1000)

    assert store.add(P, [feed(late)], ends).ready == [late]  # immediate: the cool-down is over
