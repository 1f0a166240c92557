"""Commit: the ingest's offsets, committed only behind what the store applied.

- ``Ledger``: per-partition ownership, expected fences, positions and commits, kept in step: a
  partition that is released or sought forgets its position and its uncommitted mark together,
  so a commit can never name an offset the ledger no longer stands behind;
- ``DeadLetterLane``: the dead letters the check sends, durable before the offset that skips
  their source is committed; a refused one makes its partition read the source again;
- ``Commits``: the commit itself, and the moves of a read position (``seek``) it stands behind.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Message, Producer

from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.runner import Runner

log = logging.getLogger(__name__)

# Bounded so a rebalance handler (which may wait for this) stays inside the group's budget.
FLUSH_TIMEOUT = 10.0


@dataclass(slots=True)
class _Partition:
    expected: int | None = None  # the fence this process left in the store
    position: int | None = None  # next offset to commit (applied through position - 1)
    uncommitted: bool = False
    read: int | None = None  # the last offset taken since the read position was last set
    topic: str | None = None  # the topic id its last batch was stored under


class Ledger:
    """Per-partition bookkeeping of one ingest consumer (role thread only)."""

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}
        # Partitions whose read position moved since the batch in hand was taken, and where to.
        self._moved: dict[int, int] = {}

    # ------------------------------------------------------------------ ownership

    @property
    def owned(self) -> frozenset[int]:
        """Partitions owned right now."""
        return frozenset(self._parts)

    def owns(self, partition: int) -> bool:
        """Whether this partition is owned."""
        return partition in self._parts

    def assign(self, partition: int, start: int, expected: int | None) -> None:
        """A partition is ours from ``start`` on, with the fence its first add must find."""
        self._parts[partition] = _Partition(expected=expected)
        self._moved[partition] = start  # a batch read before it (in an outage) is stale

    def release(self, partitions: set[int]) -> None:
        """Revoked or lost: forget everything about them."""
        for partition in partitions:
            self._parts.pop(partition, None)

    # ------------------------------------------------------------------ fences and positions

    def expected(self, partition: int) -> int | None:
        """The fence the next store call of this partition must find."""
        part = self._parts.get(partition)
        return None if part is None else part.expected

    def expect(self, partition: int, fence: int | None) -> None:
        """Set the fence to expect (after a rewind or state loss)."""
        if partition in self._parts:
            self._parts[partition].expected = fence

    def book(self, partition: int, last: int, fence: int) -> None:
        """Offsets through ``last`` are applied and the store's fence is now ``fence``."""
        part = self._parts.get(partition)
        if part is None:
            return
        part.expected = fence
        part.position = last + 1
        part.uncommitted = True

    def moved(self, partition: int, offset: int) -> None:
        """The read position was moved: nothing applied before it is ours to commit any more."""
        self._moved[partition] = offset
        part = self._parts.get(partition)
        if part is not None:
            part.position = None
            part.uncommitted = False
            part.read = None

    def taken(self, partition: int, first: int, last: int) -> bool:
        """Offsets ``first..last`` were taken; True when the consumer went back by itself.

        Nothing here moved the read position since the last batch, yet it starts at or before
        an offset already taken: the client reset it (auto.offset.reset after "offset out of
        range": the topic was recreated, or its log truncated).
        """
        part = self._parts.get(partition)
        if part is None:
            return False
        rewound = part.read is not None and first <= part.read
        part.read = last
        return rewound

    def topic(self, partition: int) -> str | None:
        """The topic id this partition's last batch was stored under (None: not known)."""
        part = self._parts.get(partition)
        return None if part is None else part.topic

    def stored_under(self, partition: int, topic: str | None) -> None:
        """The partition's batches go to the store under this topic id from now on."""
        part = self._parts.get(partition)
        if part is not None:
            part.topic = topic

    def new_batch(self) -> None:
        """A batch was just taken: moves before it do not make it stale."""
        self._moved.clear()

    def moved_to(self, partition: int) -> int | None:
        """Where this partition's read position moved since the batch was taken, if it did."""
        return self._moved.get(partition)

    # ------------------------------------------------------------------ commits

    def to_commit(self, partitions: set[int] | None = None) -> dict[int, int]:
        """Next-to-read offsets of applied, uncommitted partitions (optionally only these)."""
        return {
            p: part.position
            for p, part in sorted(self._parts.items())
            if part.uncommitted
            and part.position is not None
            and (partitions is None or p in partitions)
        }

    def committed(self, partitions: set[int]) -> None:
        """These partitions' positions were committed."""
        for partition in partitions:
            part = self._parts.get(partition)
            if part is not None:
                part.uncommitted = False


class DeadLetterLane:
    """The dead letters of one ingest: sent by the check, waited for by the commit."""

    def __init__(self, producer: Producer, topic: str, metrics: Metrics, hooks: Hooks) -> None:
        self._producer = producer
        self._dlq = DeadLetters(producer, topic, metrics, hooks=hooks)
        self._unflushed = False

    def send(self, message: Message, reason: str, detail: str) -> None:
        """Dead-letter a message the check refused."""
        self._dlq.send(message, reason, detail)
        self._unflushed = True

    def durable(self) -> bool:
        """Whether every dead letter sent so far is acknowledged (flushing them if needed)."""
        if not self._unflushed:
            return True
        if self._producer.flush(FLUSH_TIMEOUT):
            log.error("dead letters unacknowledged after %.0fs; not committing", FLUSH_TIMEOUT)
            return False
        self._unflushed = False
        return True

    def refused_partitions(self) -> set[int]:
        """Partitions with a refused dead letter (looking does not take them)."""
        return self._dlq.refused_partitions()

    def refused_sources(self, partitions: Iterable[int]) -> dict[int, int]:
        """Take the refused dead letters: the first offset to read again, by partition."""
        wanted = set(partitions)
        first: dict[int, int] = {}
        for _, partition, offset in self._dlq.take_failures():
            if partition in wanted:
                first[partition] = min(offset, first.get(partition, offset))
        return first

    def flush(self) -> None:
        """Wait (bounded) for everything the producer holds to be acknowledged."""
        self._producer.flush(FLUSH_TIMEOUT)


class Commits:
    """Commits what the ledger says was applied, once its dead letters are durable (role
    thread); moves a read position so that the ledger forgets what it no longer stands behind."""

    def __init__(self, runner: Runner, ledger: Ledger, dead_letters: DeadLetterLane) -> None:
        self._runner = runner
        self._ledger = ledger
        self._dead_letters = dead_letters

    def seek(self, partition: int, offset: int) -> None:
        """Move a partition's read position; the ledger forgets what it had not committed."""
        self._runner.seek(partition, offset)
        self._ledger.moved(partition, offset)

    def commit(self, only: set[int] | None, *, sync: bool, in_handler: bool = False) -> None:
        """Commit the applied, uncommitted partitions (``only``: of these)."""
        offsets = self._ledger.to_commit(only)
        if not offsets or not self._dead_letters.durable():
            return
        refusing = self._dead_letters.refused_partitions()
        if refusing and in_handler:
            # Nothing may seek inside a rebalance handler: leave these partitions
            # uncommitted; the role thread (or the next owner) reads the sources again.
            offsets = {p: o for p, o in offsets.items() if p not in refusing}
        elif refusing:
            # Read the refused sources again (the fence skips what was applied since).
            owned = self._ledger.owned
            for partition, offset in self._dead_letters.refused_sources(owned).items():
                self.seek(partition, offset)
            offsets = self._ledger.to_commit(set(offsets))
        if self._runner.commit(offsets, sync=sync):
            self._ledger.committed(set(offsets))
