"""Booking one partition batch's store call: outage retries, the fence decision, the ledger.

The store worker makes one attempt per batch; this piece, on the role thread, finishes what
the attempt left: it retries through a store outage (serving the group), acts on a fence found
behind (seek and replay, or accept a state loss) or found to be another topic's (replace it,
as ``on_state_loss`` says), books what was applied and counts it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest import fence
from digest_stream.roles.ingest.ledger import Ledger
from digest_stream.roles.ingest.outputs import Outputs
from digest_stream.roles.ingest.topic import TopicProbe
from digest_stream.roles.ingest.worker import Batch
from digest_stream.roles.runner import Runner
from digest_stream.store.base import AddResult, DigestStore
from digest_stream.store.errors import BackendError, unavailable

log = logging.getLogger(__name__)


class Applier:
    """Applies and books partition batches for one ingest (role thread, except timed_add)."""

    def __init__(
        self,
        store: DigestStore,
        on_state_loss: fence.StateLoss,
        metrics: Metrics,
        runner: Runner,
        ledger: Ledger,
        outputs: Outputs,
        topics: TopicProbe,
        restored: Callable[[Iterable[int]], None] = lambda _partitions: None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        # Read at each call, retries included: what the add starts (a READY time, an opened
        # digest) starts when the store runs it, not when the batch was read before an outage.
        self._now = now
        # Told when the store turned out to have lost or rolled back a partition's state: READY
        # timelines restored with it may have had their announcements consumed already.
        self._restored = restored
        self._topics = topics
        self._on_state_loss = on_state_loss
        self._metrics = metrics
        self._runner = runner
        self._ledger = ledger
        self._outputs = outputs

    def timed_add(self, batch: Batch) -> AddResult:
        """The batch's one store call, fenced by the fence it carries (the worker runs this)."""
        batch.now = self._now()
        with self._metrics.store_latency.labels(operation="add").time():
            return self._store.add(
                batch.partition,
                batch.records,
                batch.now,
                expected_fence=batch.expected,
                through_offset=batch.last,
                topic_id=batch.topic,
                open_nonce=batch.nonce,
            )

    @staticmethod
    def bookable(batch: Batch) -> bool:
        """The call succeeded and needs no rewind: booking it neither polls nor seeks."""
        return (
            batch.result is not None
            and not _other_topic(batch, batch.result)
            and (
                batch.expected is None
                or not fence.is_behind(batch.expected, batch.result.fence_before)
            )
        )

    def apply(self, batch: Batch) -> int | None:
        """Book one partition's store call; None when nothing was applied (rewound or gave up)."""
        result = batch.result
        if result is None:
            if batch.error is not None and not unavailable(batch.error):
                raise batch.error
            if batch.error is not None:
                self._metrics.store_errors.inc()
                log.warning("Redis call failed (%s); retrying", batch.error)
            # Stored here, with the retries that keep serving the group while the store is down.
            result = self._add_retrying(batch)
            if result is None:
                return None
        if _other_topic(batch, result):
            result = self._topic_changed(batch, result)
            if result is None:
                return None
        if batch.expected is not None:
            decision = fence.after_add(
                batch.partition, batch.expected, result.fence_before, self._on_state_loss
            )
            if decision is not None:
                self.act(batch.partition, decision)
                if not decision.apply_now:
                    return None
                batch.expected = None
                result = self._add_retrying(batch)
                if result is None:
                    return None
        if fence.applied_unbooked(batch.expected, batch.first, result.fence_before):
            log.warning(
                "partition %d: Redis had already applied this batch (offsets %d..%d) through "
                "%d: a store call re-sent after its reply was lost; announcing READY timelines "
                "again",
                batch.partition,
                batch.first,
                batch.last,
                result.fence_before,
            )
            self._restored([batch.partition])
        last = batch.last
        self._ledger.book(
            batch.partition, last, result.fence_after if result.fence_after is not None else last
        )
        self._outputs.applied(batch.partition, batch.records, result, batch.now)
        return result.added

    def _topic_changed(self, batch: Batch, result: AddResult) -> AddResult | None:
        """The store's fence names another topic id: ask the broker, act, store the batch again.

        Either this process's id was stale (another owner already moved the fence to the
        topic's current id: store again under it) or the fence is the old topic's: a state
        loss for this topic, as ``on_state_loss`` says. While the broker cannot tell which,
        nothing is decided (see _until_told). None when the batch was not applied.
        """
        decision = self._until_told(batch, result)
        if decision is not None and decision.wait:
            return None  # gave up waiting (stopping, or the partition left)
        if decision is not None:
            self.act(batch.partition, decision)
            if not decision.apply_now:
                return None
            batch.expected = None
        batch.topic = self._topics.topic.value
        return self._add_retrying(batch)

    def _until_told(self, batch: Batch, result: AddResult) -> fence.Decision | None:
        """Ask the broker for the topic id until it tells; the fence decision it gives.

        Paused, serving the group (as in a store outage): a reset on the id last seen could
        throw away another owner's work on a recreated topic and replay all of it, and
        applying past the fence without the topic check could skip a new topic's records as
        already applied. Waiting loses nothing. A wait decision back: gave up (read again).
        """
        delay, noted = self._runner.settings.retry_backoff_initial, False
        try:
            while True:
                self._topics.refresh(())
                decision = fence.foreign(
                    batch.partition,
                    self._on_state_loss,
                    fence=result.fence_before,
                    fence_topic=result.fence_topic,
                    topic=self._topics.topic,
                    end=None,
                    resume_at=None,
                )
                if decision is None or not decision.wait:
                    return decision
                if not noted:
                    self.note(decision)  # once per wait
                    noted = True
                if self._runner.stopping() or not self._ledger.owns(batch.partition):
                    if self._ledger.owns(batch.partition):
                        self.seek(batch.partition, batch.first)
                    return decision
                self._runner.wait_serving_group(delay)
                delay = min(2 * delay, self._runner.settings.retry_backoff_max)
        finally:
            self._runner.resume("the topic id is known again")

    def _add_retrying(self, batch: Batch) -> AddResult | None:
        """The store call, retried through a store outage; None if we had to give up."""
        try:
            return self._runner.while_store_down(
                lambda: self.timed_add(batch),
                give_up=lambda: self._runner.stopping() or not self._ledger.owns(batch.partition),
                errors=self._metrics.store_errors,
                recovered=self._after_outage,
            )
        except BackendError as exc:
            if not unavailable(exc):
                raise
            if self._ledger.owns(batch.partition):
                # Not applied but read: read it again, so nothing after it is applied first.
                self.seek(batch.partition, batch.first)
            return None

    def _after_outage(self) -> None:
        # The store may have restarted from an older snapshot: its READY timelines may be ones
        # whose announcements were already consumed.
        for partition in sorted(self._ledger.owned):
            self._restored([partition])

    def note(self, decision: fence.Decision) -> None:
        """Count and log a fence decision."""
        if decision.cause is not None:
            self._metrics.replays.labels(cause=decision.cause).inc()
        if decision.message:
            log.log(decision.level, "%s", decision.message)

    def act(self, partition: int, decision: fence.Decision) -> None:
        """Carry out a fence decision about a running partition: note it, seek if it says so."""
        self.note(decision)
        if decision.cause is not None:
            self._restored([partition])
        if decision.reset:
            self.reset_fence(partition, decision.expected, retry=True)
        if decision.offset is not None:
            self.seek(partition, decision.offset)
        self._ledger.expect(partition, decision.expected)

    def reset_fence(self, partition: int, offset: int | None, *, retry: bool) -> None:
        """Replace a fence of another topic incarnation by one of the current topic.

        ``retry``: wait out a store outage (serving the group); a rebalance handler may not
        poll, so there one attempt is made, and a fence left in place is reported again by
        the partition's first add.
        """
        topic = self._topics.topic.value  # fresh: a reset is decided only on a told id

        def reset() -> None:
            self._store.set_applied_offset(partition, offset, topic_id=topic)

        try:
            if not retry:
                reset()
                return
            self._runner.while_store_down(
                reset,
                give_up=lambda: self._runner.stopping() or not self._ledger.owns(partition),
                errors=self._metrics.store_errors,
            )
        except BackendError as exc:
            if not unavailable(exc):
                raise
            log.error("partition %d: the fence could not be reset (%s)", partition, exc)

    def seek(self, partition: int, offset: int) -> None:
        """Move a partition's read position; the ledger forgets what it had not committed."""
        self._runner.seek(partition, offset)
        self._ledger.moved(partition, offset)


def _other_topic(batch: Batch, result: AddResult) -> bool:
    """The store refused the batch: its fence records another topic id than the batch's."""
    return (
        result.fence_topic is not None
        and batch.topic is not None
        and result.fence_topic != batch.topic
    )
