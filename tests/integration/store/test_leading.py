"""The leading edge (``open_nonce``): the add that finds a timeline with nothing stored gives it
its digest and leaves it cooling down; ``settle`` forgets it, ``reclaim`` hands it to
delivery under the same id. The same on the reference model, a single Redis and the cluster."""

from __future__ import annotations

import pytest

from digest_stream.store import DigestStore, TimelinePolicy
from digest_stream.store.base import CANCEL_ALL, FLUSH, NewRecord, leading_id
from digest_stream.store.errors import InvalidArgument
from tests.support.store import StoreFactory

T0 = 1_700_000_000.0
NONCE = "0123456789abcdef01234567"
OTHER = "f" * 32


def rec(timeline: str, record_id: str, offset: int, control: str | None = None) -> NewRecord:
    return NewRecord(timeline, record_id, T0 + offset, b"p-" + record_id.encode(), offset, control)


def test_new_timelines_get_their_digest_in_the_add_and_cool_down(store: DigestStore) -> None:
    result = store.add(
        0, [rec("a", "a1", 0), rec("b", "b1", 1), rec("a", "a2", 2)], T0, open_nonce=NONCE
    )
    assert result.ready == []
    assert [(d.timeline, d.id) for d in result.opened] == [
        ("a", leading_id(NONCE, 1)),
        ("b", leading_id(NONCE, 2)),
    ]
    a = result.opened[0]
    assert [(r.id, r.payload) for r in a.records] == [("a2", b"p-a2"), ("a1", b"p-a1")]
    assert (a.opened_at, a.reason, a.dropped, a.expired) == (T0, "IMMEDIATE", 0, False)
    # Left as the digest's close leaves it: cooling down since the add, nothing pending.
    info = store.inspect(0, "a")
    assert (info.state, info.due, info.last_delivery, info.pending, info.open_digest) == (
        "waiting", T0 + 300, T0, 0, None,
    )  # fmt: skip
    assert info.reason == "COOLDOWN"
    assert store.stats(0).ready == 0


def test_later_records_wait_for_the_cool_down(store: DigestStore) -> None:
    store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE)
    later = store.add(0, [rec("a", "a2", 1)], T0 + 1, open_nonce="1" * 24)
    assert (later.ready, later.opened) == ([], [])
    info = store.inspect(0, "a")
    assert (info.state, info.pending) == ("waiting", 1)
    assert info.due is not None
    assert T0 + 300 <= info.due <= T0 + 1800


def test_settle_forgets_once_and_nothing_is_reclaimed_after(store: DigestStore) -> None:
    ids = [d.id for d in store.add(0, [rec("a", "a1", 0), rec("b", "b1", 1)], T0,
                                   open_nonce=NONCE).opened]  # fmt: skip
    assert store.settle(0, [ids[0]]) == [True]
    assert store.settle(0, [ids[0], ids[1], OTHER]) == [False, True, False]
    assert store.reclaim(0, T0 + 5) == []
    assert store.inspect(0, "a").state == "waiting"


def test_reclaim_makes_the_same_digest_delivery_opens(store: DigestStore) -> None:
    led = store.add(0, [rec("a", "a1", 0), rec("b", "b1", 1)], T0, open_nonce=NONCE).opened
    assert store.reclaim(0, T0 + 2, [led[0].id]) == ["a"]
    info = store.inspect(0, "a")
    assert (info.state, info.open_digest, info.open_records) == ("ready", led[0].id, 1)
    assert store.inspect(0, "b").state == "waiting"  # not asked: still kept
    # Delivery's open returns that very digest (a reopen), its close starts a cool-down.
    again = store.open(0, "a", OTHER, T0 + 3)
    assert (again.id, again.records, again.reason) == (led[0].id, led[0].records, "IMMEDIATE")
    assert store.close(0, "a", led[0].id, T0 + 4)
    assert store.inspect(0, "a").due == T0 + 4 + 300
    assert store.settle(0, [led[0].id]) == [False]  # the publisher's late settle: a no-op
    # Every one kept (the take-over): only b is left.
    assert store.reclaim(0, T0 + 5) == ["b"]
    assert store.reclaim(0, T0 + 6) == []


def test_reclaim_keeps_later_records_pending(store: DigestStore) -> None:
    led = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    store.add(0, [rec("a", "a2", 1)], T0 + 1)
    assert store.reclaim(0, T0 + 2) == ["a"]
    info = store.inspect(0, "a")
    assert (info.state, info.open_digest, info.pending) == ("ready", led.id, 1)
    assert store.close(0, "a", led.id, T0 + 3)
    assert store.inspect(0, "a").state == "waiting"


def test_reclaim_behind_another_open_digest_keeps_the_records(store: DigestStore) -> None:
    led = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    store.add(0, [rec("a", "a2", 1)], T0 + 1)
    store.schedule(0, T0 + 2000)
    store.open(0, "a", OTHER, T0 + 2000)  # the next digest, while the leading one is kept
    assert store.reclaim(0, T0 + 2001, [led.id]) == ["a"]
    info = store.inspect(0, "a")
    assert (info.open_digest, info.pending) == (OTHER, 1)  # a1 waits behind it: not lost
    store.close(0, "a", OTHER, T0 + 2002)
    store.schedule(0, T0 + 5000)
    assert [r.id for r in store.open(0, "a", "e" * 32, T0 + 5000).records] == ["a1"]


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
    assert store.reclaim(0, T0) == []


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


def test_a_replayed_add_leads_nothing(store: DigestStore) -> None:
    first = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE)
    again = store.add(0, [rec("a", "a1", 0)], T0, open_nonce="f" * 24)
    assert (len(first.opened), again.opened, again.skipped) == (1, [], 1)


def test_bad_arguments_are_refused(store: DigestStore) -> None:
    with pytest.raises(InvalidArgument):
        store.add(0, [rec("a", "a1", 0)], T0, open_nonce="xyz")
    assert store.inspect(0, "a").state == "absent"
    with pytest.raises(InvalidArgument):
        store.settle(0, ["nope"])
    with pytest.raises(InvalidArgument):
        store.reclaim(0, T0, ["nope"])
