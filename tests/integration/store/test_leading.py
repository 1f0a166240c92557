"""The leading edge opened by the add that finds a timeline quiet (``open_nonce``): the same
on the reference model, a single Redis and the cluster."""

from __future__ import annotations

import pytest

from digest_stream.store import DigestStore, TimelinePolicy
from digest_stream.store.base import CANCEL_ALL, FLUSH, NewRecord, leading_id
from digest_stream.store.errors import InvalidArgument
from tests.support.store import StoreFactory

T0 = 1_700_000_000.0
NONCE = "0123456789abcdef01234567"


def rec(timeline: str, record_id: str, offset: int, control: str | None = None) -> NewRecord:
    return NewRecord(timeline, record_id, T0 + offset, b"p-" + record_id.encode(), offset, control)


def test_new_timelines_open_in_the_add(store: DigestStore) -> None:
    result = store.add(
        0, [rec("a", "a1", 0), rec("b", "b1", 1), rec("a", "a2", 2)], T0, open_nonce=NONCE
    )
    assert result.ready == []
    assert [(d.timeline, d.id) for d in result.opened] == [
        ("a", leading_id(NONCE, 1)),
        ("b", leading_id(NONCE, 2)),
    ]
    a = result.opened[0]
    assert [r.id for r in a.records] == ["a2", "a1"]  # newest first
    assert (a.opened_at, a.reason, a.dropped, a.expired) == (T0, "IMMEDIATE", 0, False)
    info = store.inspect(0, "a")
    assert (info.state, info.open_digest, info.pending) == ("ready", a.id, 0)
    # The open is the one delivery would make: a reopen returns the very same digest.
    again = store.open(0, "a", "f" * 32, T0 + 1)
    assert (again.id, again.records) == (a.id, a.records)


def test_close_starts_the_cool_down_and_later_records_wait(store: DigestStore) -> None:
    opened = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE).opened[0]
    later = store.add(0, [rec("a", "a2", 1)], T0 + 1, open_nonce=NONCE)
    assert (later.ready, later.opened) == ([], [])  # READY with an open digest: pending
    assert store.close(0, "a", opened.id, T0 + 2)
    info = store.inspect(0, "a")
    assert (info.state, info.due, info.pending) == ("waiting", T0 + 2 + 300, 1)


def test_only_quiet_timelines_open(make_store: StoreFactory) -> None:
    store = make_store(resolver=lambda t: TimelinePolicy(schedule="0 * * * *") if t == "cal"
                       else TimelinePolicy())  # fmt: skip
    store.add(0, [rec("w", "w1", 0)], T0)  # announced: READY, not opened
    store.open(0, "w", "e" * 32, T0)
    store.close(0, "w", "e" * 32, T0)  # now WAITING
    result = store.add(
        0, [rec("w", "w2", 1), rec("cal", "c1", 2), rec("new", "n1", 3)], T0, open_nonce=NONCE
    )
    assert [d.timeline for d in result.opened] == ["new"]
    assert store.inspect(0, "cal").state == "waiting"  # a calendar timeline has no leading edge
    assert store.inspect(0, "w").state == "waiting"


def test_controls_of_the_same_batch_apply_before_the_open(store: DigestStore) -> None:
    batch = [
        rec("a", "a1", 0),
        rec("a", "-", 1, CANCEL_ALL),
        rec("b", "b1", 2),
        rec("b", "-", 3, FLUSH),
        rec("b", "b2", 4),
    ]
    result = store.add(0, batch, T0, open_nonce=NONCE)
    by_timeline = {d.timeline: d for d in result.opened}
    assert by_timeline["a"].records == []  # cancelled before it opened: an empty digest
    assert [r.id for r in by_timeline["b"].records] == ["b2", "b1"]
    assert result.cancelled == 1


def test_a_replayed_add_opens_nothing(store: DigestStore) -> None:
    first = store.add(0, [rec("a", "a1", 0)], T0, open_nonce=NONCE)
    again = store.add(0, [rec("a", "a1", 0)], T0, open_nonce="f" * 24)
    assert (len(first.opened), again.opened, again.skipped) == (1, [], 1)


def test_a_bad_nonce_is_refused(store: DigestStore) -> None:
    with pytest.raises(InvalidArgument):
        store.add(0, [rec("a", "a1", 0)], T0, open_nonce="xyz")
    assert store.inspect(0, "a").state == "absent"
