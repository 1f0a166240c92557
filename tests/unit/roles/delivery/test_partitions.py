"""The delivery's per-partition state: assignment, positions to commit, epochs."""

from __future__ import annotations

from digest_stream.roles.delivery.partitions import Partitions


def test_positions_only_move_forward_and_cover_every_assigned_partition() -> None:
    parts = Partitions()
    parts.assign([0, 1])
    assert parts.advance({0: 5}) == {0: 5}
    assert parts.advance({1: 3, 0: 4}) == {0: 5, 1: 3}  # 0 does not go back
    assert parts.positions([1]) == {1: 3}
    assert parts.assigned == frozenset({0, 1})


def test_a_partition_not_assigned_is_never_committed() -> None:
    parts = Partitions()
    parts.assign([0])
    assert parts.advance({0: 2, 7: 9}) == {0: 2}  # 7 is another member's


def test_a_forgotten_partition_loses_its_position_and_stales_earlier_stamps() -> None:
    parts = Partitions()
    parts.assign([0, 1])
    parts.advance({0: 5, 1: 5})
    before = parts.stamp([0, 1])
    parts.forget([1])
    assert parts.gone(before) == {1}
    assert parts.positions() == {0: 5}
    assert parts.assigned == frozenset({0})
    parts.assign([1])  # back again: a batch taken before it left is still stale
    assert parts.gone(before) == {1}
    assert parts.gone(parts.stamp([0, 1])) == set()
    assert parts.positions() == {0: 5}  # nothing of 1 until a batch of it is done


def test_a_stamp_of_a_partition_never_seen_holds_until_it_is_forgotten() -> None:
    parts = Partitions()
    stamp = parts.stamp([3])
    assert parts.gone(stamp) == set()
    parts.forget([3])
    assert parts.gone(stamp) == {3}
