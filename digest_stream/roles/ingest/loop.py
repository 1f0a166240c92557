"""Ingest role: consume -> check -> store.add (one call per partition batch) -> commit.

Offsets are committed only after the store call that applied them succeeded. The store's fence
(last applied offset per partition) makes replays harmless, and lets this process notice when
the store lost writes (see fence.py). Two batches overlap: while the store worker runs one batch's
store calls, this thread consumes and decodes the next. Everything else (booking, rewinds,
commits, scheduler ticks, rebalance handlers) stays on the role's thread and waits for the batch
in flight first, so the commit discipline is exactly that of one batch at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from digest_stream.clock import Clock
from digest_stream.kafka import ClientErrors
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest.check import Rejected, check
from digest_stream.roles.ingest.outputs import FLUSH_TIMEOUT
from digest_stream.roles.ingest.schemas import SchemaFetcher
from digest_stream.roles.ingest.topic import TopicProbe
from digest_stream.roles.ingest.wiring import IngestParts, ingest_parts
from digest_stream.roles.ingest.worker import Batch
from digest_stream.roles.publish import DigestPublisher
from digest_stream.roles.runner import Runner, partitions_of
from digest_stream.roles.scheduler import ScheduleEmitter, Scheduler
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore, NewRecord

log = logging.getLogger(__name__)


class Ingest:
    """The ingest role (run by a Runner); also drives the scheduler for the partitions it owns."""

    def __init__(
        self, settings: Settings, scheduler: Scheduler, runner: Runner, parts: IngestParts
    ) -> None:
        self._settings = settings
        self._scheduler = scheduler
        self._runner = runner
        self._clock = parts.clock
        self._rules = parts.rules
        self._outputs = parts.outputs
        self._ledger = parts.ledger
        self._topics = parts.topics
        self._placement = parts.placement
        self._applier = parts.applier
        self._schemas = parts.schemas
        self._starts = parts.starts
        self._moved = parts.moved
        self._worker = parts.worker
        self._leading = parts.leading
        self._done: list[Batch] = []  # stored, not booked yet (kept by a rebalance handler)

    # ------------------------------------------------------------------ lifecycle

    @property
    def owned(self) -> frozenset[int]:
        """Input partitions this instance owns right now."""
        return self._ledger.owned

    @property
    def leading_in_flight(self) -> int:
        """Leading-edge digests produced and not closed yet (0 when that path is off)."""
        return 0 if self._leading is None else self._leading.in_flight

    def step(self) -> int:
        """Consume and decode a batch while the previous one is stored; book, commit, tick."""
        # With a batch in flight, take only what is already fetched: waiting here would
        # delay booking (and the immediate digests) of the batch in flight.
        timeout = 0.0 if self._worker.busy else self._settings.batch_timeout
        messages = self._runner.take(timeout)
        # From here on, a partition whose read position moves (a seek, an assignment) makes
        # its part of this batch stale. Handlers inside take never seek, and an assignment
        # there comes before the messages it returned.
        self._ledger.new_batch()
        if messages and self._schemas is not None:
            messages = self._with_schemas(self._schemas, messages)
        batches = self._prepare(messages) if messages else []
        applied = self._finish()
        if self._scheduler.due():
            if self._leading is not None and self._scheduler.taking_over:
                # The take-over announces every READY timeline, those of this process's
                # open leading digests too: publish and close those first (the worker is
                # idle), or delivery would publish them again (after an outage, a fence
                # decision, an assignment).
                self._leading.finish(wait=FLUSH_TIMEOUT)
            self._scheduler.tick(self._ledger.owned)
        for batch in batches:  # the worker is idle here: its store calls and these don't mix
            self._moved.check(batch.partition, batch.records)
        self._submit(batches)
        if self._leading is not None:
            # While the store runs that add: build and produce what the last one opened, and
            # close what the broker acknowledged.
            self._leading.finish()
        return applied

    def close(self) -> None:
        """Graceful stop: finish the batch in flight, commit, flush (the runner then leaves)."""
        self._finish(sync=True)
        self._worker.shutdown()
        self._outputs.flush()
        if self._leading is not None:
            self._leading.finish(wait=FLUSH_TIMEOUT)
            self._leading.close()

    # ------------------------------------------------------------------ batches

    def _prepare(self, messages: list[Message]) -> list[Batch]:
        """Check messages, by partition (bad ones are dead-lettered here)."""
        now = self._clock.now()
        rules = self._rules
        carry = bool(rules.carry_headers)  # headers are read only when some are carried
        batches = []
        too_old = 0  # counted once per batch: a backlog past max_event_age is all too old
        for partition, batch in partitions_of(messages).items():
            self._placement.sample(partition, batch, now)
            records: list[NewRecord] = []
            for message in batch:
                outcome = check(
                    message.key(), message.value(), message.headers() if carry else None,
                    message.offset() or 0, now, rules,
                )  # fmt: skip
                if type(outcome) is NewRecord:  # the hot path: one type test per message
                    records.append(outcome)
                elif isinstance(outcome, Rejected):
                    self._outputs.reject(message, outcome)
                else:
                    too_old += 1
            batches.append(Batch(partition, records, batch[0].offset() or 0,
                                 batch[-1].offset() or 0, now))  # fmt: skip
        if too_old:
            self._outputs.too_old(too_old)
        return batches

    def _with_schemas(self, fetcher: SchemaFetcher, messages: list[Message]) -> list[Message]:
        """Registry mode: fetch the batch's writer schemas first, waiting out an outage."""
        if not fetcher.ready(messages):
            return []  # stopping; rewound
        # A rebalance during an outage wait: messages of partitions given away or moved are
        # read again by their owner, so they are neither checked nor dead-lettered here.
        ledger = self._ledger
        return [
            m for m in messages
            if ledger.owns(m.partition() or 0) and ledger.moved_to(m.partition() or 0) is None
        ]  # fmt: skip

    def _submit(self, batches: list[Batch]) -> None:
        """Start the store calls of a batch on the worker (fenced by what is booked now)."""
        kept = []
        for batch in batches:
            if not self._ledger.owns(batch.partition):
                continue  # revoked: the new owner reads it from the committed offset
            target = self._ledger.moved_to(batch.partition)
            if target is None:
                went_back = self._ledger.taken(batch.partition, batch.first, batch.last)
                if went_back and not self._starts.went_back(batch):
                    continue  # dropped: the decision moved the read position
                batch.expected = self._ledger.expected(batch.partition)
                batch.topic = self._starts.topic_id
                if self._leading is not None:
                    batch.nonce = self._leading.nonce()
                self._ledger.stored_under(batch.partition, batch.topic)
                kept.append(batch)
            elif 0 <= batch.first < target:
                # Moved past part of this batch (a refused dead letter inside it): the
                # batch is dropped, so read it again from its start.
                self._applier.seek(batch.partition, batch.first)
        self._worker.submit(kept)

    def _finish(self, *, in_handler: bool = False, sync: bool = False) -> int:
        """Wait for the batch in flight, book its results and commit; returns records added.

        Inside a rebalance handler nothing may poll or seek, so a partition whose call failed
        or found its fence behind is kept for the role thread's next _finish.
        """
        batches, self._done = self._done + self._worker.collect(), []
        applied = 0
        for batch in batches:
            if not self._ledger.owns(batch.partition):
                continue  # revoked or lost: whoever owns it reads the batch again
            if in_handler and not self._applier.bookable(batch):
                self._done.append(batch)
                continue
            added = self._applier.apply(batch)
            if added is not None:
                applied += added
        if not in_handler:
            self._commit(None, sync=sync)
        return applied

    # ------------------------------------------------------------------ fences and offsets

    def _commit(self, only: set[int] | None, *, sync: bool, in_handler: bool = False) -> None:
        offsets = self._ledger.to_commit(only)
        if not offsets or not self._outputs.dead_letters_durable():
            return
        refusing = self._outputs.refused_partitions()
        if refusing and in_handler:
            # Nothing may seek inside a rebalance handler: leave these partitions
            # uncommitted; the role thread (or the next owner) reads the sources again.
            offsets = {p: o for p, o in offsets.items() if p not in refusing}
        elif refusing:
            # Read the refused sources again (the fence skips what was applied since).
            for partition, offset in self._outputs.refused_sources(self._ledger.owned).items():
                self._applier.seek(partition, offset)
            offsets = self._ledger.to_commit(set(offsets))
        if self._runner.commit(offsets, sync=sync):
            self._ledger.committed(set(offsets))

    # ------------------------------------------------------------------ rebalancing

    def on_assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Assignment handler: each partition starts where its fence and commit say."""
        starts = self._starts.assigned(partitions)
        # A growth of the events topic triggers this rebalance; the probe just read the count.
        self._moved.counted(self._topics.partitions)
        self._scheduler.take_over(tp.partition for tp in starts)
        log.info("assigned %s", ", ".join(f"{tp.partition}@{tp.offset}" for tp in starts))
        return starts

    def on_revoke(self, partitions: list[int]) -> None:
        """Revocation handler: book the batch in flight, commit these partitions, let go."""
        revoked = set(partitions)
        self._finish(in_handler=True)
        if self._leading is not None:
            # What was acknowledged is closed by id (safe whoever owns it next); no retries
            # in a handler, and the rest is closed, or handed over, when its report comes.
            self._leading.finish(retry=False)
        self._commit(revoked, sync=True, in_handler=True)
        self._release(revoked)
        log.info("revoked %s", ", ".join(str(p) for p in sorted(revoked)))

    def on_lost(self, partitions: list[int]) -> None:
        """Loss handler: another member may already own them, so commit nothing."""
        lost = set(partitions)
        self._release(lost)
        self._finish(in_handler=True)  # no store call of ours may still be running for them
        log.warning("lost %s", ", ".join(str(p) for p in sorted(lost)))

    def _release(self, partitions: set[int]) -> None:
        self._ledger.release(partitions)
        self._scheduler.release(partitions)
        # A batch kept for the role's thread is read again by whoever owns it next (us too,
        # if it comes back in the same rebalance: from the fence and committed offset).
        self._done = [batch for batch in self._done if batch.partition not in partitions]


def ingest_role(
    settings: Settings,
    store: DigestStore,
    clock: Clock,
    metrics: Metrics,
    producer: Producer,
    *,
    hooks: Hooks = NO_HOOKS,
    frame: Callable[[bytes], bytes] | None = None,
    consumer: Consumer | None = None,
    topics: TopicProbe | None = None,
    publisher: DigestPublisher | None = None,
    kafka_errors: ClientErrors | None = None,
) -> tuple[Runner, Ingest]:
    """The ingest role with its scheduler (announcing through ``frame``), and its runner;
    ``publisher``: the leading edge is on and publishes through it."""
    emitter = ScheduleEmitter(producer, settings.schedule_topic, metrics, hooks=hooks, frame=frame)
    scheduler = Scheduler(settings, store, emitter, clock, metrics)
    runner = Runner(
        settings, "ingest", consumer=consumer, rebalances=metrics.rebalances, errors=kafka_errors
    )
    parts = ingest_parts(
        settings, store, clock, metrics, producer, scheduler, runner,
        hooks=hooks, topics=topics, publisher=publisher,
    )  # fmt: skip
    return runner, Ingest(settings, scheduler, runner, parts)
