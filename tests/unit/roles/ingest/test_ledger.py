"""The ingest ledger keeps ownership, fences, positions and commits in step."""

from __future__ import annotations

from digest_stream.roles.ingest.commit import Ledger


def test_booked_partitions_are_committed_once() -> None:
    ledger = Ledger()
    ledger.assign(0, 0, None)
    ledger.assign(1, 5, 4)
    ledger.new_batch()
    ledger.book(0, last=9, fence=9)
    assert ledger.to_commit() == {0: 10}
    assert ledger.expected(0) == 9
    assert ledger.expected(1) == 4
    ledger.committed({0})
    assert ledger.to_commit() == {}


def test_a_seek_forgets_the_uncommitted_position_and_marks_the_batch_stale() -> None:
    ledger = Ledger()
    ledger.assign(0, 0, None)
    ledger.new_batch()
    ledger.book(0, last=9, fence=9)
    ledger.moved(0, 3)
    assert ledger.to_commit() == {}
    assert ledger.moved_to(0) == 3
    ledger.new_batch()
    assert ledger.moved_to(0) is None


def test_an_assignment_makes_an_earlier_batch_stale() -> None:
    ledger = Ledger()
    ledger.new_batch()
    ledger.assign(2, 7, 6)
    assert ledger.moved_to(2) == 7


def test_release_forgets_everything_and_ignores_late_bookings() -> None:
    ledger = Ledger()
    ledger.assign(0, 0, None)
    ledger.book(0, last=4, fence=4)
    ledger.release({0})
    assert ledger.owned == frozenset()
    assert not ledger.owns(0)
    ledger.book(0, last=9, fence=9)  # a late batch of a partition that left
    ledger.expect(0, 3)
    assert ledger.to_commit() == {}
    assert ledger.expected(0) is None


def test_to_commit_can_be_limited_to_some_partitions() -> None:
    ledger = Ledger()
    for p in (0, 1, 2):
        ledger.assign(p, 0, None)
        ledger.book(p, last=p, fence=p)
    assert ledger.to_commit({1, 2}) == {1: 2, 2: 3}


def test_a_batch_at_or_before_what_was_taken_is_a_rewind_unless_we_moved() -> None:
    ledger = Ledger()
    ledger.assign(0, 0, None)
    assert not ledger.taken(0, 0, 9)
    assert not ledger.taken(0, 10, 19)
    assert ledger.taken(0, 0, 4)  # the client went back by itself
    ledger.moved(0, 0)  # our own seek is not a rewind
    assert not ledger.taken(0, 0, 4)
    assert not ledger.taken(1, 0, 4)  # not owned
    ledger.stored_under(0, "id")
    assert ledger.topic(0) == "id"
    assert ledger.topic(1) is None
