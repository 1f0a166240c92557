"""Ingest role: consume -> decode -> store.add (one call per partition batch) -> commit.

Offsets are committed only after the store call that applied them succeeded. The store's
fence (last applied offset per partition) makes replays harmless, and lets this process
notice when Redis lost writes: the fence it finds is then behind what it applied, and the
partition is rewound to rebuild the lost state from Kafka.

Two batches overlap: while Redis runs one batch's store calls (on a worker thread), this
thread consumes and decodes the next. Everything else (booking results, rewinds, commits,
scheduler ticks, revocation callbacks) stays on the role's thread and waits for the batch in
flight first, so the commit discipline is exactly that of one batch at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    Message,
    Producer,
    TopicPartition,
)
from tenacity import RetryCallState

from digest_stream.clock import Clock
from digest_stream.kafka import commit, consumer_config, consumer_lag, take_batch, usable
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.retry import REDIS_DOWN, until_redis_answers
from digest_stream.roles.scheduler import ScheduleEmitter, Scheduler
from digest_stream.settings import Settings
from digest_stream.store import validate
from digest_stream.store.base import AddResult, DigestStore, InvalidArgument, NewRecord
from digest_stream.wire import codec, envelope
from digest_stream.wire.models import ScheduleReason, validate_timeline

log = logging.getLogger(__name__)

T = TypeVar("T")

# Bounded so a rebalance callback (which runs these) stays well inside the group's budget.
COMMITTED_TIMEOUT = 10.0
COMMIT_TIMEOUT = 10.0


@dataclass
class Prepared:
    """One partition's decoded batch, ready for its store call."""

    partition: int
    records: list[NewRecord]
    first: int  # the batch's first and last offsets (dead letters included)
    last: int
    now: float
    expected: int | None = None  # the fence it was sent with
    result: AddResult | None = None
    error: BaseException | None = None


class Ingest:
    """The ingest consumer; also drives the scheduler for the partitions it owns."""

    def __init__(
        self,
        settings: Settings,
        store: DigestStore,
        clock: Clock,
        metrics: Metrics,
        producer: Producer,
        scheduler: Scheduler | None,
        *,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self._settings = settings
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._producer = producer
        self._scheduler = scheduler
        self._hooks = hooks
        # Header names carried into digests; empty = headers are never looked at.
        self._carry = frozenset(settings.carry_headers)
        self._emitter = ScheduleEmitter(producer, settings.schedule_topic, metrics, hooks=hooks)
        self._dlq = DeadLetters(producer, settings.dlq_topic, metrics, hooks=hooks)
        self._topic = settings.events_topic
        self._consumer = Consumer(consumer_config(settings, settings.group_id))
        self._owned: set[int] = set()
        self._expected: dict[int, int] = {}  # the fence this process left per partition
        self._positions: dict[int, int] = {}  # next offset to commit per partition
        self._uncommitted: set[int] = set()
        self._dead_letters_unflushed = False
        self._paused = False
        self._stopping: Callable[[], bool] = lambda: False
        # One store worker: at most one batch is in flight, so per-partition order holds.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-store")
        self._in_flight: Future[list[Prepared]] | None = None
        self._done: list[Prepared] = []  # stored, not booked yet (kept by a callback)
        # Partitions whose read position moved since the batch in hand was taken, and where to.
        self._moved: dict[int, int] = {}
        self._closing = False

    # ------------------------------------------------------------------ lifecycle

    def start(self, stopping: Callable[[], bool]) -> None:
        """Join the group; stopping() tells long retries to give up."""
        self._stopping = stopping
        self._consumer.subscribe(
            [self._topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    @property
    def owned(self) -> frozenset[int]:
        """Input partitions this instance owns right now."""
        return frozenset(self._owned)

    def lag(self) -> dict[int, int]:
        """Consumer lag per assigned input partition (local, cheap; for the metrics scrape)."""
        return consumer_lag(self._consumer)

    def step(self) -> int:
        """Consume and decode a batch while the previous one is stored; book, commit, tick."""
        # With a batch in flight, take only what is already fetched: waiting here would
        # delay booking (and the immediate digests) of the batch in flight.
        timeout = 0.0 if self._in_flight is not None else self._settings.batch_timeout
        messages = take_batch(self._consumer, self._settings.batch_size, timeout)
        # From here on, a partition whose read position moves (a seek, an assignment) makes
        # its part of this batch stale. Callbacks inside take_batch never seek, and an
        # assignment there comes before the messages it returned.
        self._moved.clear()
        batches = self._prepare(messages) if messages else []
        applied = self._finish()
        if self._scheduler is not None and self._scheduler.due():
            self._scheduler.tick(self._owned)
        self._submit(batches)
        return applied

    def close(self) -> None:
        """Graceful stop: finish the batch in flight, commit, flush outputs, leave the group."""
        try:
            self._finish(sync=True)
            self._worker.shutdown(wait=True)
            self._producer.flush(COMMIT_TIMEOUT)
        finally:
            self._closing = True
            self._consumer.close()

    # ------------------------------------------------------------------ batches

    def _prepare(self, messages: Sequence[Message]) -> list[Prepared]:
        """Decode and check messages, by partition (bad ones are dead-lettered here)."""
        by_partition: dict[int, list[Message]] = {}
        for message in usable(messages, "ingest"):
            by_partition.setdefault(message.partition() or 0, []).append(message)
        now = self._clock.now()
        return [
            Prepared(
                partition,
                [r for r in (self._record(m, now) for m in batch) if r is not None],
                batch[0].offset() or 0,
                batch[-1].offset() or 0,
                now,
            )
            for partition, batch in by_partition.items()
        ]

    def _submit(self, batches: list[Prepared]) -> None:
        """Start the store calls of a batch on the worker (fenced by what is booked now)."""
        kept = []
        for batch in batches:
            if batch.partition not in self._owned:
                continue  # revoked: the new owner reads it from the committed offset
            target = self._moved.get(batch.partition)
            if target is None:
                batch.expected = self._expected.get(batch.partition)
                kept.append(batch)
            elif 0 <= batch.first < target:
                # Moved past part of this batch (a refused dead letter inside it): the
                # batch is dropped, so read it again from its start.
                self._seek(batch.partition, batch.first)
        if kept:
            self._in_flight = self._worker.submit(self._store_all, kept)

    def _store_all(self, batches: list[Prepared]) -> list[Prepared]:
        """Worker thread: one attempt per partition; failures are handled on the role thread."""
        for batch in batches:
            try:
                batch.result = self._timed_call(partial(self._store_add, batch, batch.expected))
            except BaseException as exc:  # handled or re-raised on the role thread
                batch.error = exc
                break  # the partitions after it are stored on the role thread, in order
        return batches

    def _finish(self, *, in_callback: bool = False, sync: bool = False) -> int:
        """Wait for the batch in flight, book its results and commit; returns records added.

        Inside a rebalance callback nothing may poll or seek, so a partition whose call
        failed or found its fence behind is kept for the role thread's next _finish.
        """
        if self._in_flight is not None:
            self._done += self._in_flight.result()
            self._in_flight = None
        batches, self._done = self._done, []
        applied = 0
        for batch in batches:
            if batch.partition not in self._owned:
                continue  # revoked or lost: whoever owns it reads the batch again
            if in_callback and not self._bookable(batch):
                self._done.append(batch)
                continue
            added = self._apply(batch)
            if added is not None:
                applied += added
        if not in_callback:
            self._commit(sorted(self._uncommitted), sync=sync)
        return applied

    @staticmethod
    def _fence_behind(expected: int, result: AddResult) -> bool:
        return result.fence_before is None or result.fence_before < expected

    def _bookable(self, batch: Prepared) -> bool:
        """The call succeeded and needs no rewind: booking it neither polls nor seeks."""
        return batch.result is not None and (
            batch.expected is None or not self._fence_behind(batch.expected, batch.result)
        )

    def _apply(self, batch: Prepared) -> int | None:
        """Book one partition's store call; None when nothing was applied (rewound or gave up)."""
        partition, records, now, last = batch.partition, batch.records, batch.now, batch.last
        expected = batch.expected
        result = batch.result
        if result is None:
            if batch.error is not None and not isinstance(batch.error, REDIS_DOWN):
                raise batch.error
            if batch.error is not None:
                self._metrics.redis_errors.inc()
                log.warning("Redis call failed (%s); retrying", batch.error)
            # Stored here, with the retries that keep serving the group while Redis is down.
            result = self._add(batch, expected)
            if result is None:
                return None
        if expected is not None and self._fence_behind(expected, result):
            if not self._rewind(partition, result.fence_before, expected):
                return None
            result = self._add(batch, None)
            if result is None:
                return None
        self._expected[partition] = result.fence_after if result.fence_after is not None else last
        self._positions[partition] = last + 1
        self._uncommitted.add(partition)
        self._metrics.events_ingested.inc(result.added)
        if result.skipped:
            self._metrics.events_skipped.inc(result.skipped)
        if result.dropped:
            self._metrics.events_dropped.labels(reason="capacity").inc(result.dropped)
        if self._hooks:
            self._hooks.on_add(partition, records, result)
        if result.ready:
            self._emitter.emit(
                partition, ((t, now) for t in result.ready), ScheduleReason.IMMEDIATE
            )
        return result.added

    def _record(self, message: Message, now: float) -> NewRecord | None:
        """Decode and check one message; bad input is dead-lettered, old input dropped."""
        key = message.key()
        if not key:
            self._dead_letter(message, "missing-key", "the Kafka key (timeline) is empty")
            return None
        try:
            timeline = validate_timeline(key.decode("utf-8") if isinstance(key, bytes) else key)
        except (UnicodeDecodeError, ValueError) as exc:
            self._dead_letter(message, "invalid-key", str(exc))
            return None
        value = message.value()
        if not value or not isinstance(value, bytes):
            self._dead_letter(message, "missing-value", "the message has no value")
            return None
        if len(value) > self._settings.max_event_bytes:
            self._dead_letter(
                message,
                "oversize",
                f"value is {len(value)} bytes, over DIGEST_STREAM_MAX_EVENT_BYTES "
                f"({self._settings.max_event_bytes})",
            )
            return None
        try:
            event = codec.decode_event(value)
        except codec.DecodeError as exc:
            self._dead_letter(message, exc.reason, exc.detail)
            return None
        try:
            # The store's own rule: a batch the store would refuse must never be sent to it.
            validate.name(event.id, "record id")
        except InvalidArgument as exc:
            self._dead_letter(message, "invalid-id", str(exc))
            return None
        timestamp = event.timestamp / 1000.0
        max_age = self._settings.max_event_age
        if max_age is not None and now - timestamp > max_age:
            self._metrics.events_dropped.labels(reason="max_age").inc()
            return None
        # The stored payload is the event's own encoding: delivery decodes it into a record.
        return NewRecord(
            timeline=timeline,
            id=event.id,
            timestamp=timestamp,
            payload=envelope.wrap(message.headers(), self._carry, value) if self._carry else value,
            offset=message.offset() or 0,
        )

    def _dead_letter(self, message: Message, reason: str, detail: str) -> None:
        self._dlq.send(message, reason, detail)
        self._dead_letters_unflushed = True

    # ------------------------------------------------------------------ store calls

    def _store_add(self, batch: Prepared, expected: int | None) -> AddResult:
        """The batch's one store call, fenced by `expected`."""
        return self._store.add(
            batch.partition,
            batch.records,
            batch.now,
            expected_fence=expected,
            through_offset=batch.last,
        )

    def _add(self, batch: Prepared, expected: int | None) -> AddResult | None:
        """The store call, retried while Redis is unreachable; None if we had to give up."""
        try:
            return self._retrying(batch.partition, partial(self._store_add, batch, expected))
        except REDIS_DOWN:
            if batch.partition in self._owned:
                # Not applied but read: read it again, so nothing after it is applied first.
                self._seek(batch.partition, batch.first)
            return None

    def _retrying(self, partition: int, call: Callable[[], T]) -> T:
        retrying = until_redis_answers(
            initial=self._settings.retry_backoff_initial,
            cap=self._settings.retry_backoff_max,
            sleep=self._wait_serving_group,
            give_up=lambda: self._stopping() or partition not in self._owned,
            on_retry=self._store_down,
        )
        result: T = retrying(self._timed_call, call)
        if self._paused:
            self._resume()
        return result

    def _timed_call(self, call: Callable[[], T]) -> T:
        with self._metrics.store_latency.labels(operation="add").time():
            return call()

    def _store_down(self, state: RetryCallState) -> None:
        self._metrics.redis_errors.inc()
        wait = state.next_action.sleep if state.next_action else 0.0
        level = logging.ERROR if state.attempt_number == 1 else logging.WARNING
        log.log(
            level,
            "Redis unreachable (%s); partitions paused, nothing committed; retry %d in %.2fs",
            state.outcome.exception() if state.outcome else "?",
            state.attempt_number,
            wait,
        )

    def _wait_serving_group(self, seconds: float) -> None:
        """Sleep while keeping group membership: pause fetching and poll the consumer."""
        if not self._paused:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True
        message = self._consumer.poll(seconds)
        if message is not None and message.error() is None:
            # Fetched before the pause took hold: rewind so it is read again afterwards.
            self._consumer.seek(
                TopicPartition(self._topic, message.partition() or 0, message.offset() or 0)
            )

    def _resume(self) -> None:
        self._consumer.resume(self._consumer.assignment())
        self._paused = False
        log.info("Redis reachable again; partitions resumed")

    # ------------------------------------------------------------------ fencing

    def _rewind(self, partition: int, fence: int | None, expected: int) -> bool:
        """Redis lost writes for this partition: replay from Kafka. True = apply the batch now."""
        if fence is not None:
            self._metrics.replays.labels(cause="fence_behind").inc()
            log.warning(
                "partition %d: Redis lost writes (fence %d, this process applied through %d); "
                "replaying offsets %d..%d from Kafka",
                partition, fence, expected, fence + 1, expected,
            )  # fmt: skip
            self._seek(partition, fence + 1)
            self._expected[partition] = fence
            return False
        self._metrics.replays.labels(cause="state_loss").inc()
        self._expected.pop(partition, None)
        if self._settings.on_state_loss == "replay":
            log.error(
                "partition %d: Redis lost all state of this partition (fence missing; applied "
                "through %d); on_state_loss=replay: replaying from the earliest retained offset",
                partition, expected,
            )  # fmt: skip
            self._seek(partition, OFFSET_BEGINNING)
            return False
        log.error(
            "partition %d: Redis lost all state of this partition (fence missing; applied "
            "through %d); on_state_loss=continue: records before this batch are LOST",
            partition, expected,
        )  # fmt: skip
        return True

    def _seek(self, partition: int, offset: int) -> None:
        self._consumer.seek(TopicPartition(self._topic, partition, offset))
        self._moved[partition] = offset
        self._positions.pop(partition, None)
        self._uncommitted.discard(partition)

    def _starting_offset(self, committed: TopicPartition) -> int:
        """Where to start a newly assigned partition, from its fence and committed offset."""
        partition, offset = committed.partition, committed.offset
        has_commit = offset >= 0
        try:
            fence = self._store.applied_offset(partition)
        except REDIS_DOWN as exc:
            log.error("partition %d: Redis unreachable at assignment (%s)", partition, exc)
            if has_commit and offset > 0:
                # The group committed through offset - 1 only after Redis applied it, so the
                # fence must be at least that: the first add checks it (Redis may have lost
                # writes meanwhile) and rewinds, instead of silently skipping the gap.
                self._expected[partition] = offset - 1
            return offset if has_commit else OFFSET_INVALID
        if fence is None:
            if not has_commit:
                return OFFSET_INVALID  # a new partition: auto.offset.reset decides
            self._metrics.replays.labels(cause="state_loss").inc()
            if self._settings.on_state_loss == "replay":
                log.error(
                    "partition %d: no fence in Redis but committed offset %d: state lost; "
                    "on_state_loss=replay: replaying from the earliest retained offset",
                    partition, offset,
                )  # fmt: skip
                return OFFSET_BEGINNING
            log.error(
                "partition %d: no fence in Redis but committed offset %d: state lost; "
                "on_state_loss=continue: continuing, earlier records are LOST",
                partition, offset,
            )  # fmt: skip
            return offset
        self._expected[partition] = fence
        if has_commit and fence + 1 < offset:
            self._metrics.replays.labels(cause="fence_behind").inc()
            log.warning(
                "partition %d: Redis fence %d is behind the committed offset %d; replaying",
                partition, fence, offset,
            )  # fmt: skip
        return fence + 1 if not has_commit else min(fence + 1, offset)

    # ------------------------------------------------------------------ rebalancing

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not partitions or self._closing:
            # An assignment that lands while close() leaves the group: nothing will be read,
            # and the committed-offset lookup would only time out against a closing consumer.
            return
        committed = consumer.committed(partitions, timeout=COMMITTED_TIMEOUT)
        starts = [
            TopicPartition(tp.topic, tp.partition, self._starting_offset(tp)) for tp in committed
        ]
        consumer.incremental_assign(starts)
        if self._paused:
            consumer.pause(starts)
        self._owned.update(tp.partition for tp in partitions)
        # A batch read before a reassignment (inside an outage's retry polls) is stale.
        self._moved.update((tp.partition, tp.offset) for tp in starts)
        log.info("assigned %s", ", ".join(f"{tp.partition}@{tp.offset}" for tp in starts))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Book the batch in flight, commit what was applied of these partitions, let go.
        revoked = {tp.partition for tp in partitions}
        self._finish(in_callback=True)
        self._commit(sorted(revoked & self._uncommitted), sync=True, in_callback=True)
        self._release(revoked)
        log.info("revoked %s", ", ".join(str(p) for p in sorted(revoked)))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost (not revoked): another member may already own them, so commit nothing.
        lost = {tp.partition for tp in partitions}
        self._release(lost)
        self._finish(in_callback=True)  # no store call of ours may still be running for them
        log.warning("lost %s", ", ".join(str(p) for p in sorted(lost)))

    def _release(self, partitions: set[int]) -> None:
        self._owned -= partitions
        # A batch kept for the role's thread is read again by whoever owns it next (us too,
        # if it comes back in the same rebalance: from the fence and committed offset).
        self._done = [batch for batch in self._done if batch.partition not in partitions]
        for partition in partitions:
            self._expected.pop(partition, None)
            self._positions.pop(partition, None)
            self._uncommitted.discard(partition)

    def _commit(self, partitions: list[int], sync: bool, *, in_callback: bool = False) -> None:
        offsets = [
            TopicPartition(self._topic, p, self._positions[p])
            for p in partitions
            if p in self._positions
        ]
        if not offsets:
            return
        if self._dead_letters_unflushed:
            # A dead letter must be durable before the offset that skips its source is.
            if self._producer.flush(COMMIT_TIMEOUT):
                log.error("dead letters unacknowledged after %.0fs; not committing", COMMIT_TIMEOUT)
                return
            self._dead_letters_unflushed = False
        refusing = self._dlq.refused_partitions()
        if refusing and in_callback:
            # Nothing may seek inside a rebalance callback: leave these partitions
            # uncommitted; the role thread (or the next owner) reads the sources again.
            offsets = [tp for tp in offsets if tp.partition not in refusing]
        elif refusing:
            refused = self._dlq.take_failures()
            # Read the refused sources again (the fence skips what was applied since).
            for partition in sorted(refusing & self._owned):
                self._seek(partition, min(o for _, p, o in refused if p == partition))
            offsets = [tp for tp in offsets if tp.partition in self._positions]
        if commit(self._consumer, offsets, sync):
            self._uncommitted.difference_update(tp.partition for tp in offsets)
