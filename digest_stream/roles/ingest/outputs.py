"""What the ingest writes besides the store: dead letters and IMMEDIATE announcements.

Both go through one producer. A dead letter must be durable before the offset that skips its
source is committed, and a refused one makes its partition read the source again; this piece
keeps that bookkeeping so the loop only asks "may I commit, and what must be read again?".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from confluent_kafka import Message, Producer

from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.ingest.check import Rejected
from digest_stream.roles.scheduler import ScheduleEmitter
from digest_stream.store.base import AddResult, NewRecord, OpenDigest
from digest_stream.wire.models import ScheduleReason

log = logging.getLogger(__name__)

# Bounded so a rebalance handler (which may wait for this) stays inside the group's budget.
FLUSH_TIMEOUT = 10.0


class Outputs:
    """Dead letters, announcements and the counters of applied batches, for one ingest."""

    def __init__(
        self,
        producer: Producer,
        emitter: ScheduleEmitter,
        dlq_topic: str,
        metrics: Metrics,
        hooks: Hooks,
    ) -> None:
        self._producer = producer
        self._emitter = emitter
        self._metrics = metrics
        self._hooks = hooks
        self._dlq = DeadLetters(producer, dlq_topic, metrics, hooks=hooks)
        self._dead_letters_unflushed = False
        #: Takes the digests an add opened, to publish (the leading edge: leading.py), when on.
        self.opened: Callable[[int, list[OpenDigest]], None] | None = None

    def reject(self, message: Message, rejected: Rejected) -> None:
        """Dead-letter a message the check refused."""
        self._dlq.send(message, rejected.reason, rejected.detail)
        self._dead_letters_unflushed = True

    def too_old(self, count: int) -> None:
        """Count messages dropped for their age."""
        self._metrics.events_dropped.labels(reason="max_age").inc(count)

    def applied(
        self, partition: int, records: list[NewRecord], result: AddResult, now: float
    ) -> None:
        """Count one applied store call, tell the hooks, announce what became READY."""
        self._metrics.events_ingested.inc(result.added)
        if result.skipped:
            self._metrics.events_skipped.inc(result.skipped)
        if result.dropped:
            self._metrics.events_dropped.labels(reason="capacity").inc(result.dropped)
        if result.cancelled:
            self._metrics.events_dropped.labels(reason="cancelled").inc(result.cancelled)
        if self._hooks:
            self._hooks.on_add(partition, records, result)
        if result.opened and self.opened is not None:
            self.opened(partition, result.opened)
        if result.ready:
            self._emitter.emit(
                partition, ((t, now) for t in result.ready), ScheduleReason.IMMEDIATE
            )

    def dead_letters_durable(self) -> bool:
        """Whether every dead letter sent so far is acknowledged (flushing them if needed)."""
        if not self._dead_letters_unflushed:
            return True
        if self._producer.flush(FLUSH_TIMEOUT):
            log.error("dead letters unacknowledged after %.0fs; not committing", FLUSH_TIMEOUT)
            return False
        self._dead_letters_unflushed = False
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
        """Wait (bounded) for everything produced to be acknowledged."""
        self._producer.flush(FLUSH_TIMEOUT)
