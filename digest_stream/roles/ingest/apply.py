"""Apply: each partition batch's one store add, fenced, and what it did booked.

- ``StoreWorker``: the thread one partition batch's store call runs on while the next batch is
  checked. At most one list of batches is in flight (one thread), so per-partition order
  holds; it makes one attempt per partition and hands every failure back to the role thread;
- ``Applier`` (role thread, but for ``timed_add``): sends batches to the worker under the fence
  and topic id the ledger holds, and finishes what the attempt left: it retries through a store
  outage (serving the group), acts on a fence found behind (seek and replay, or accept a state
  loss) or found to be another topic's (replace it, as ``on_state_loss`` says), books what was
  applied, counts it, tells the hooks and announces what became READY.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.ops.threads import name_os_thread
from digest_stream.roles.ingest import fence
from digest_stream.roles.ingest.commit import Ledger
from digest_stream.roles.ingest.topic import TopicProbe
from digest_stream.roles.runner import Runner
from digest_stream.roles.scheduler import ScheduleEmitter
from digest_stream.store.base import AddResult, DigestStore, NewRecord, OpenDigest, new_nonce
from digest_stream.store.errors import BackendError, unavailable
from digest_stream.wire.models import ScheduleReason

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """One partition's checked batch, ready for its store call (apply.py fills in the rest)."""

    partition: int
    records: list[NewRecord]
    first: int  # the batch's first and last offsets (dead letters included)
    last: int
    now: float
    expected: int | None = None  # the fence it was sent with
    topic: str | None = None  # the topic id it was sent with (None: not known)
    nonce: str | None = None  # the leading edge: open quiet timelines' digests (lead.py)
    result: AddResult | None = None
    error: BaseException | None = None


class StoreWorker:
    """Runs a list of batches' store calls on one thread; the role thread collects them."""

    def __init__(self, call: Callable[[Batch], AddResult]) -> None:
        self._call = call
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ingest-store", initializer=name_os_thread
        )
        self._in_flight: Future[list[Batch]] | None = None

    @property
    def busy(self) -> bool:
        """A list of batches was submitted and not collected yet."""
        return self._in_flight is not None

    def submit(self, batches: list[Batch]) -> None:
        """Start the store calls of these batches (the previous ones must be collected)."""
        assert self._in_flight is None, "collect() the batch in flight first"
        if batches:
            self._in_flight = self._pool.submit(self._run, batches)

    def collect(self) -> list[Batch]:
        """Wait for the calls in flight and return their batches (empty when none)."""
        if self._in_flight is None:
            return []
        future, self._in_flight = self._in_flight, None
        return future.result()

    def shutdown(self) -> None:
        """Stop the thread once the call in flight is done."""
        self._pool.shutdown(wait=True)

    def _run(self, batches: list[Batch]) -> list[Batch]:
        for batch in batches:
            try:
                batch.result = self._call(batch)
            except BaseException as exc:  # handled or re-raised on the role thread
                batch.error = exc
                break  # the partitions after it are stored on the role thread, in order
        return batches


class Applier:
    """Sends partition batches to the store and books what each add did, for one ingest
    (role thread, except timed_add)."""

    def __init__(
        self,
        store: DigestStore,
        on_state_loss: fence.StateLoss,
        metrics: Metrics,
        runner: Runner,
        ledger: Ledger,
        actions: fence.FenceActions,
        topics: TopicProbe,
        announce: ScheduleEmitter,
        hooks: Hooks,
        now: Callable[[], float],
        went_back: Callable[[Batch], bool],
        opened: Callable[[int, list[OpenDigest]], None] | None = None,
    ) -> None:
        self._store = store
        # Read at each call, retries included: what the add starts (a READY time, an opened
        # digest) starts when the store runs it, not when the batch was read before an outage.
        self._now = now
        self._topics = topics
        self._on_state_loss = on_state_loss
        self._metrics = metrics
        self._runner = runner
        self._ledger = ledger
        self._actions = actions
        self._announce = announce
        self._hooks = hooks
        # Asked when the consumer went back by itself: False when the batch is dropped (read.py).
        self._went_back = went_back
        # The leading edge, when on (lead.py): each add opens quiet timelines' digests under a
        # fresh nonce, and this takes them to publish.
        self._opened = opened
        self._worker = StoreWorker(self.timed_add)

    @property
    def busy(self) -> bool:
        """A list of batches is in the store worker's hands."""
        return self._worker.busy

    def submit(self, batches: list[Batch]) -> None:
        """Start the store calls of a batch on the worker (fenced by what is booked now)."""
        kept, ledger = [], self._ledger
        for batch in batches:
            if not ledger.owns(batch.partition):
                continue  # revoked: the new owner reads it from the committed offset
            target = ledger.moved_to(batch.partition)
            if target is None:
                went_back = ledger.taken(batch.partition, batch.first, batch.last)
                if went_back and not self._went_back(batch):
                    continue  # dropped: the decision moved the read position
                batch.expected = ledger.expected(batch.partition)
                batch.topic = self._topics.topic.value
                if self._opened is not None:
                    batch.nonce = new_nonce()
                ledger.stored_under(batch.partition, batch.topic)
                kept.append(batch)
            elif 0 <= batch.first < target:
                # Moved past part of this batch (a refused dead letter inside it): the
                # batch is dropped, so read it again from its start.
                self._actions.seek(batch.partition, batch.first)
        self._worker.submit(kept)

    def collect(self) -> list[Batch]:
        """Wait for the store calls in flight; their batches, to book (empty when none)."""
        return self._worker.collect()

    def shutdown(self) -> None:
        """Stop the worker once the call in flight is done."""
        self._worker.shutdown()

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
                log.warning("%s call failed (%s); retrying", self._store.label, batch.error)
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
                batch.partition,
                batch.expected,
                result.fence_before,
                self._on_state_loss,
                store=self._store.label,
            )
            if decision is not None:
                self._actions.act(batch.partition, decision)
                if not decision.apply_now:
                    return None
                batch.expected = None
                result = self._add_retrying(batch)
                if result is None:
                    return None
        if fence.applied_unbooked(batch.expected, batch.first, result.fence_before):
            log.warning(
                "partition %d: %s had already applied this batch (offsets %d..%d) through "
                "%d: a store call re-sent after its reply was lost; announcing READY timelines "
                "again",
                batch.partition,
                self._store.label,
                batch.first,
                batch.last,
                result.fence_before,
            )
            self._actions.restored([batch.partition])
        last = batch.last
        self._ledger.book(
            batch.partition, last, result.fence_after if result.fence_after is not None else last
        )
        self._applied(batch.partition, batch.records, result, batch.now)
        return result.added

    def _applied(
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
        if result.opened and self._opened is not None:
            self._opened(partition, result.opened)
        if result.ready:
            self._announce.emit(
                partition, ((t, now) for t in result.ready), ScheduleReason.IMMEDIATE
            )

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
            self._actions.act(batch.partition, decision)
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
                    self._actions.note(decision)  # once per wait
                    noted = True
                if self._runner.stopping() or not self._ledger.owns(batch.partition):
                    if self._ledger.owns(batch.partition):
                        self._actions.seek(batch.partition, batch.first)
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
                give_up=self._actions.gives_up(batch.partition),
                errors=self._metrics.store_errors,
                recovered=self._after_outage,
            )
        except BackendError as exc:
            if not unavailable(exc):
                raise
            if self._ledger.owns(batch.partition):
                # Not applied but read: read it again, so nothing after it is applied first.
                self._actions.seek(batch.partition, batch.first)
            return None

    def _after_outage(self) -> None:
        # The store may have restarted from an older snapshot: its READY timelines may be ones
        # whose announcements were already consumed.
        for partition in sorted(self._ledger.owned):
            self._actions.restored([partition])


def _other_topic(batch: Batch, result: AddResult) -> bool:
    """The store refused the batch: its fence records another topic id than the batch's."""
    return (
        result.fence_topic is not None
        and batch.topic is not None
        and result.fence_topic != batch.topic
    )
