"""Delivery role: schedule entry -> open digest -> publish -> broker ack -> close -> commit.

A digest keeps its id from open to close. Anything that fails before close (a crash, a
rebalance, a publish error) leaves it open, and the redelivered entry reopens the same id with
the same records, so downstream sees at most repeats of one id, never a record under two ids.

The next batch's opens overlap this batch's publishing, and this batch's closes the next
one's (overlap.py); this batch's offsets are committed once its closes are done. With no
batch in hand, a batch is closed and committed before step() returns.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from confluent_kafka import Message, Producer, TopicPartition

from digest_stream.clock import Clock
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.delivery.overlap import Batch, Opened, Overlap, Picked
from digest_stream.roles.delivery.partitions import Partitions
from digest_stream.roles.delivery.retries import Retries
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.publish import DigestPublisher, Pending, close_targets
from digest_stream.roles.runner import Runner, highest_offsets
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore, DigestTarget
from digest_stream.store.errors import BackendError, InvalidState, unavailable
from digest_stream.wire import codec
from digest_stream.wire.schedule_fields import decode_schedule_fields

log = logging.getLogger(__name__)

COMMIT_TIMEOUT = 10.0


class Delivery:
    """The delivery role (run by a Runner on the schedule topic)."""

    def __init__(
        self,
        settings: Settings,
        store: DigestStore,
        clock: Clock,
        metrics: Metrics,
        producer: Producer,
        runner: Runner,
        *,
        hooks: Hooks = NO_HOOKS,
        publisher: DigestPublisher | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._producer = producer
        self._runner = runner
        self._dlq = DeadLetters(producer, settings.dlq_topic, metrics, hooks=hooks)
        self._partitions = Partitions()
        # The one publisher (roles.publish); App hands it in, wired to this producer.
        self._publisher = publisher or DigestPublisher(
            settings, producer, metrics, hooks, clock, "delivery"
        )
        self._report = self._publisher.report
        self._overlap = Overlap(
            store, metrics, runner, hooks, lambda positions: self._commit(positions, sync=False)
        )
        self._ahead: Batch | None = None  # the next batch, taken early, its opens under way
        self._retries = Retries(
            settings,
            self._publisher,
            producer,
            self._dlq,
            metrics,
            # a pause for publish retries ends when the broker takes them: not the store's doing
            functools.partial(runner.wait_serving_group, over="the output topic took them"),
            runner.stopping,
            clock.now,
        )

    @property
    def assigned(self) -> frozenset[int]:
        """Schedule partitions this instance delivers right now."""
        return self._partitions.assigned

    def step(self) -> int:
        """Deliver one batch of schedule entries; returns digests published."""
        overlap = self._overlap
        batch, self._ahead = self._ahead, None
        try:
            if batch is None:
                overlap.settle()  # nothing to overlap the last closes with (it is also idle)
                batch = self._take(self._settings.batch_timeout)
                if batch is None:
                    return 0
            opened = overlap.opened(batch)
            # The next batch is taken now (without waiting) and opened while this one goes out.
            self._ahead = self._take(0.0)
            if self._ahead is not None and self._ahead.targets:
                overlap.open_ahead(self._ahead, busy=batch)
            gone = self._partitions.gone(batch.stamp)
            # The partitions revoked or lost since it was taken are the next owner's: their
            # digests stay open for it, under the same ids.
            picked, opened, messages = batch.without(gone, opened)
            # The close's time, taken before encoding: the digests name the next delivery the
            # close will set (one taken after the publish may be past a fire they named).
            closing_at = self._clock.now()
            pending, empty = self._prepare(picked, opened, closing_at)
            published, refused, cut_short = self._retries.publish(pending)
            self._runner.resume()
            self._publisher.published(published)
            overlap.settle()  # the previous batch's closes, then its commit
            # One round trip closes the batch: what was published, what the broker refused
            # for good (dead-lettered: its timeline must not wait behind it) and the empty.
            closed = published + refused
            targets = empty + close_targets(closed)
            # each at the time it was built at (a retry builds it again, later)
            times = [closing_at] * len(empty) + [item.closing_at for item in closed]
            positions = {} if cut_short else highest_offsets(messages)
            overlap.close(targets, positions, times)
            if self._ahead is None:
                overlap.settle()
        except BackendError as exc:
            if not unavailable(exc) or not self._runner.stopping():
                raise
            # Asked to stop while the store is unreachable: a graceful stop, not a failure. The
            # batch is not committed; its entries come back and reopen the same digest ids.
            log.warning(
                "stopping while %s is unreachable; this batch will be redelivered", exc.backend
            )
            return 0
        return len(published)

    def close(self) -> None:
        """Graceful stop: the batch in hand was finished by step(); commit (the runner then
        leaves the group).

        A batch taken ahead is not delivered: its entries are not committed, so they come back
        and reopen the digests it opened, under the same ids."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self._overlap.drop(ahead)
        try:
            self._overlap.settle()
        except BackendError as exc:  # given up (stopping): its entries are redelivered
            log.warning("the last batch was not closed (%s); it will be redelivered", exc)
        self._overlap.shutdown()
        self._producer.flush(COMMIT_TIMEOUT)
        self._commit({}, sync=True)

    # ------------------------------------------------------------------ steps

    def _take(self, timeout: float) -> Batch | None:
        """The next batch of schedule entries (unreadable ones dead-lettered), if any."""
        messages = self._runner.take(timeout)
        if not messages:
            return None
        taken = {p for m in messages if (p := m.partition()) is not None}
        stamp = self._partitions.stamp(taken)
        return Batch.of(messages, self._decode(messages), self._clock.now(), stamp)

    def _decode(self, messages: Sequence[Message]) -> list[Picked]:
        entries: list[Picked] = []
        for message in messages:
            try:
                entry = decode_schedule_fields(message.value() or b"")
            except codec.DecodeError as exc:
                self._dlq.send(message, exc.reason, exc.detail)
                continue
            entries.append((message, entry))
        return entries

    def _prepare(
        self, picked: list[Picked], opened: Opened, now: float
    ) -> tuple[list[Pending], list[DigestTarget]]:
        """The opened digests to publish, and the empty ones (closed without publishing);
        ``now`` is the time they will be closed at."""
        pending: list[Pending] = []
        empty: list[DigestTarget] = []
        for (message, entry), digest in zip(picked, opened, strict=True):
            if isinstance(digest, InvalidState):
                self._report.stale()  # already delivered and closed: nothing to do
                continue
            if digest.expired:
                self._report.expired(entry.timeline)
            item = self._publisher.prepare(entry, digest, now, message)
            if item.parts:
                pending.append(item)
            else:
                empty.append((entry.partition, entry.timeline, digest.id))
        return pending, empty

    def _commit(self, positions: dict[int, int], *, sync: bool) -> None:
        """Remember these next-to-read offsets and commit every assigned partition's."""
        self._runner.commit(self._partitions.advance(positions), sync=sync)

    # ------------------------------------------------------------------ rebalancing

    def on_assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Assignment handler: each partition starts at the group's commit."""
        self._partitions.assign(tp.partition for tp in partitions)
        # Read the commit here and say where each partition starts: a new group's first
        # fetch comes about 100 ms sooner than when librdkafka works it out (kafka.reset_start).
        return self._runner.committed_starts(partitions)

    def on_revoke(self, partitions: list[int]) -> None:
        """Revocation handler: commit what is closed, let go."""
        # A batch closing on the helper thread is committed first if its closes went through
        # (no retry here, inside the consumer's callback); the next owner starts after it.
        self._overlap.settle(retry=False)
        self._runner.commit(self._partitions.positions(partitions), sync=True)
        self._partitions.forget(partitions)

    def on_lost(self, partitions: list[int]) -> None:
        """Loss handler: another member may own them already, so commit nothing."""
        self._partitions.forget(partitions)
