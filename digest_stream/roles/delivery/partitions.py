"""The delivery's per-partition state: which schedule partitions it holds, each one's next
offset to commit, and its epoch.

One object keeps the three in step. A partition revoked or
lost forgets its position and moves to a new epoch in the same call, so a batch taken before
that can tell its entries of the partition are the next owner's, and a commit can never name
the partition again until it is assigned anew.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Each partition's epoch when a batch was taken (see Partitions.gone).
Stamp = dict[int, int]


@dataclass(slots=True)
class _Partition:
    assigned: bool = False
    position: int | None = None  # next offset to commit (None: nothing done yet)
    # Bumped when the partition is revoked or lost; kept after that, so a batch taken before
    # can still tell (a partition assigned again keeps counting).
    epoch: int = 0


class Partitions:
    """The schedule partitions of one delivery consumer (role thread only)."""

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}

    @property
    def assigned(self) -> frozenset[int]:
        """Partitions assigned right now."""
        return frozenset(p for p, part in self._parts.items() if part.assigned)

    def assign(self, partitions: Iterable[int]) -> None:
        """These partitions are ours (from their committed offsets)."""
        for partition in partitions:
            self._parts.setdefault(partition, _Partition()).assigned = True

    def forget(self, partitions: Iterable[int]) -> None:
        """Revoked or lost: no position to commit any more, and a new epoch."""
        for partition in partitions:
            part = self._parts.setdefault(partition, _Partition())
            part.assigned = False
            part.position = None
            part.epoch += 1

    def stamp(self, partitions: Iterable[int]) -> Stamp:
        """These partitions' epochs now: what a batch taken now remembers."""
        return {p: self._epoch(p) for p in partitions}

    def gone(self, stamp: Stamp) -> set[int]:
        """Partitions of a stamp revoked or lost since it was taken."""
        return {p for p, epoch in stamp.items() if self._epoch(p) != epoch}

    def advance(self, positions: dict[int, int]) -> dict[int, int]:
        """Remember these next-to-read offsets (of assigned partitions; the others are their
        next owner's to commit); returns every assigned partition's position to commit."""
        for partition, offset in positions.items():
            part = self._parts.get(partition)
            if part is not None and part.assigned:
                part.position = max(part.position or 0, offset)
        return self.positions()

    def positions(self, only: Iterable[int] | None = None) -> dict[int, int]:
        """Next-to-read offsets to commit, by partition (optionally only these)."""
        wanted = None if only is None else set(only)
        return {
            p: part.position
            for p, part in sorted(self._parts.items())
            if part.position is not None and (wanted is None or p in wanted)
        }

    def _epoch(self, partition: int) -> int:
        part = self._parts.get(partition)
        return 0 if part is None else part.epoch
