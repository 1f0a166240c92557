"""Delivery role: schedule entry -> open digest -> publish -> broker ack -> close -> commit.

A digest keeps its id from open to close. Anything that fails before close (a crash, a
rebalance, a publish error) leaves it open, and the redelivered entry reopens the same id with
the same records, so downstream sees at most repeats of one id, never a record under two ids.

The next batch's opens overlap this batch's publishing: while a batch is produced, acknowledged
and closed, the next one is already taken and its digests opened on a helper thread (Redis
works while the broker does). An open is idempotent, so a crash or a stop with the next batch
opened only leaves digests that its redelivered entries reopen under the same ids. A timeline
of the batch in hand is not opened ahead: it is opened after that batch closed it, as if the
batches ran one after the other (a repeated entry stays stale, not a second publication).

When the next batch is in hand, this batch's closes run on the helper thread too (after the
next batch's opens, before anything opened later) while the next batch is published; this
batch's offsets are committed once its closes are done. With no batch in hand, a batch is
closed and committed before step() returns, as before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import redis
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from digest_stream.clock import Clock
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.compose import compose, next_delivery_at, reason
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.publish import Pending, Publisher, encoded_parts, part_budget
from digest_stream.roles.runner import RoleConsumer, highest_offsets
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore, DigestTarget, OpenDigest
from digest_stream.store.errors import InvalidState, unavailable
from digest_stream.store.policy import TimelinePolicy
from digest_stream.wire import codec, envelope
from digest_stream.wire.digest_bytes import whole_digest
from digest_stream.wire.event_head import decode_event_head
from digest_stream.wire.models import INT_MAX, Record
from digest_stream.wire.schedule_fields import ScheduleFields, decode_schedule_fields

log = logging.getLogger(__name__)

T = TypeVar("T")

COMMIT_TIMEOUT = 10.0
# Bounded so the assignment handler (which reads the commit) stays well inside the group's budget.
COMMITTED_TIMEOUT = 10.0

Opened = list[OpenDigest | InvalidState]


@dataclass
class Batch:
    """Schedule entries taken together, one digest per timeline, and their opens."""

    messages: list[Message]  # everything taken (dead-lettered entries included): the commit
    picked: list[tuple[Message, ScheduleFields]]  # one entry per (partition, timeline)
    targets: list[DigestTarget]  # picked's digests to open, in the same order
    now: float  # the time the opens were asked for
    epochs: dict[int, int]  # each partition's assignment epoch when taken
    opening: Future[Opened] | None = None  # the opens in flight on the helper thread
    ahead: list[int] = field(default_factory=list)  # indexes of targets opened there


@dataclass
class Closing:
    """A published batch's digests closing on the helper thread, and its offsets to commit
    once they are closed."""

    digests: list[tuple[ScheduleFields, OpenDigest]]
    positions: dict[int, int]  # nothing when the batch must not be committed (cut short)
    done: Future[list[bool]] | None
    now: float  # the close's time, the one its digests' next_delivery_at was computed from


def _digest_ids(count: int) -> list[str]:
    """Fresh random digest ids (32 lowercase hex characters each), one urandom call."""
    raw = os.urandom(16 * count).hex()
    return [raw[at : at + 32] for at in range(0, len(raw), 32)]


class Delivery:
    """The delivery consumer (group `digest-stream-delivery` on the schedule topic)."""

    def __init__(
        self,
        settings: Settings,
        store: DigestStore,
        clock: Clock,
        metrics: Metrics,
        producer: Producer,
        *,
        hooks: Hooks = NO_HOOKS,
        consumer: Consumer | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._producer = producer
        self._hooks = hooks
        self._policy = settings.resolver()  # collapse_by and the next delivery time
        self._dlq = DeadLetters(producer, settings.dlq_topic, metrics, hooks=hooks)
        self._kafka = RoleConsumer(
            settings,
            settings.delivery_group_id,
            settings.schedule_topic,
            "delivery",
            consumer=consumer,
            rebalances=metrics.rebalances,
        )
        self._assigned: set[int] = set()
        self._positions: dict[int, int] = {}  # next offset to commit, by assigned partition
        # Bumped when a partition is revoked or lost: a batch taken before that drops its
        # entries of that partition (they are the next owner's).
        self._epochs: dict[int, int] = {}
        self._ahead: Batch | None = None  # the next batch, taken early, its opens under way
        self._closing: Closing | None = None  # the last batch, its closes under way
        # One thread, one store call at a time in the order asked: a later open never passes
        # an earlier close of the same timeline.
        self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delivery-store")
        self._stopping: Callable[[], bool] = lambda: False
        self._publisher = Publisher(
            settings,
            producer,
            self._dlq,
            metrics,
            self._kafka.wait_serving_group,
            self._is_stopping,
        )

    def _is_stopping(self) -> bool:
        return self._stopping()  # start() sets the predicate after construction

    def lag(self) -> dict[int, int]:
        """Consumer lag per assigned schedule partition (local, cheap; for the metrics scrape)."""
        return self._kafka.lag()

    @property
    def assigned(self) -> frozenset[int]:
        """Schedule partitions this instance delivers right now."""
        return frozenset(self._assigned)

    def start(self, stopping: Callable[[], bool]) -> None:
        """Join the delivery group."""
        self._stopping = stopping
        self._kafka.subscribe(
            on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def step(self) -> int:
        """Deliver one batch of schedule entries; returns digests published."""
        batch, self._ahead = self._ahead, None
        try:
            if batch is None:
                self._settle()  # nothing to overlap the last closes with (it is also idle)
                batch = self._take(self._settings.batch_timeout, busy=None)
                if batch is None:
                    return 0
            opened = self._opened(batch)
            # The next batch is taken now (without waiting) and opened while this one goes out.
            self._ahead = self._take(0.0, busy=batch)
            picked, opened, messages = self._still_assigned(batch, opened)
            # The close's time, taken before encoding: the digests name the next delivery the
            # close will set (one taken after the publish may be past a fire they named).
            closing_at = self._clock.now()
            pending, empty = self._prepare(picked, opened, closing_at)
            published, cut_short = self._publisher.publish(pending)
            self._kafka.resume()
            self._published(published)
            self._settle()  # the previous batch's closes, then its commit
            # One round trip closes the batch: what was published and the empty digests.
            digests = empty + [(item.entry, item.digest) for item in published]
            positions = {} if cut_short else highest_offsets(messages)
            self._closing = self._close(digests, positions, closing_at)
            if self._ahead is None:
                self._settle()
        except redis.RedisError as exc:
            if not unavailable(exc) or not self._stopping():
                raise
            # Asked to stop while Redis is unreachable: a graceful stop, not a failure. The
            # batch is not committed; its entries come back and reopen the same digest ids.
            log.warning("stopping while Redis is unreachable; this batch will be redelivered")
            return 0
        return len(published)

    def close(self) -> None:
        """Graceful stop: the batch in hand was finished by step(); commit and leave.

        A batch taken ahead is not delivered: its entries are not committed, so they come back
        and reopen the digests it opened, under the same ids."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.opening is not None:
            ahead.opening.exception()  # let its opens finish: nothing runs on after close
        try:
            self._settle()
        except redis.RedisError as exc:  # given up (stopping): its entries are redelivered
            log.warning("the last batch was not closed (%s); it will be redelivered", exc)
        self._helper.shutdown(wait=True)
        self._producer.flush(COMMIT_TIMEOUT)
        self._commit({}, sync=True)
        self._kafka.close()

    # ------------------------------------------------------------------ steps

    def _take(self, timeout: float, busy: Batch | None) -> Batch | None:
        """The next batch, its opens started on the helper thread when ``busy`` is in hand
        (but for the timelines ``busy`` delivers: those open once it closed them)."""
        messages = self._kafka.take(self._settings.batch_size, timeout)
        if not messages:
            return None
        picked: list[tuple[Message, ScheduleFields]] = []
        seen: set[tuple[int, str]] = set()
        for message, entry in self._decode(messages):
            target = (entry.partition, entry.timeline)
            if target in seen:
                continue  # one digest per timeline per batch; the repeat would reopen it
            seen.add(target)
            picked.append((message, entry))
        ids = _digest_ids(len(picked))
        targets = [(e.partition, e.timeline, i) for (_, e), i in zip(picked, ids, strict=True)]
        taken = {p for m in messages if (p := m.partition()) is not None}
        epochs = {p: self._epochs.get(p, 0) for p in taken}
        batch = Batch(messages, picked, targets, self._clock.now(), epochs)
        if busy is not None and targets:
            mine = {(target[0], target[1]) for target in busy.targets}
            batch.ahead = [i for i, t in enumerate(targets) if (t[0], t[1]) not in mine]
            early = [targets[i] for i in batch.ahead]
            if early:
                batch.opening = self._helper.submit(self._open_early, early, batch.now)
        return batch

    def _open_early(self, targets: list[DigestTarget], now: float) -> Opened:
        """open_many on the helper thread: one attempt; _opened retries a failure."""
        with self._metrics.store_latency.labels(operation="open").time():
            return self._store.open_many(targets, now)

    def _decode(self, messages: Sequence[Message]) -> list[tuple[Message, ScheduleFields]]:
        entries: list[tuple[Message, ScheduleFields]] = []
        for message in messages:
            try:
                entry = decode_schedule_fields(message.value() or b"")
            except codec.DecodeError as exc:
                self._dlq.send(message, exc.reason, exc.detail)
                continue
            entries.append((message, entry))
        return entries

    def _opened(self, batch: Batch) -> Opened:
        """The batch's opened digests, in target order: what the helper thread opened, and the
        rest opened here (all of it again if the helper's call failed: opens are idempotent)."""
        found: dict[int, OpenDigest | InvalidState] = {}
        if batch.opening is not None:
            try:
                found = dict(zip(batch.ahead, batch.opening.result(), strict=True))
            except Exception:  # retried here, serving the group (an outage, say)
                found = {}
            batch.opening = None
        rest = [i for i in range(len(batch.targets)) if i not in found]
        if rest:
            self._settle()  # the last batch's closes first: some of these may be its timelines
            targets = [batch.targets[i] for i in rest]
            # Retried whole while Redis is down: opens are idempotent (a reopen keeps its id).
            opened = self._with_redis(lambda: self._store.open_many(targets, batch.now), "open")
            found.update(zip(rest, opened, strict=True))
        return [found[i] for i in range(len(batch.targets))]

    def _still_assigned(
        self, batch: Batch, opened: Opened
    ) -> tuple[list[tuple[Message, ScheduleFields]], Opened, list[Message]]:
        """The batch without the partitions revoked or lost since it was taken (the next
        owner redelivers those entries; their digests stay open for it, under the same ids)."""
        gone = {p for p, epoch in batch.epochs.items() if self._epochs.get(p, 0) != epoch}
        if not gone:
            return batch.picked, opened, batch.messages
        kept = [
            (item, digest)
            for item, digest in zip(batch.picked, opened, strict=True)
            if item[0].partition() not in gone
        ]
        messages = [m for m in batch.messages if m.partition() not in gone]
        return [item for item, _ in kept], [digest for _, digest in kept], messages

    def _prepare(
        self, picked: list[tuple[Message, ScheduleFields]], opened: Opened, now: float
    ) -> tuple[list[Pending], list[tuple[ScheduleFields, OpenDigest]]]:
        """The opened digests to publish, and the empty ones (closed without publishing);
        ``now`` is the time they will be closed at."""
        pending: list[Pending] = []
        empty: list[tuple[ScheduleFields, OpenDigest]] = []
        for (message, entry), digest in zip(picked, opened, strict=True):
            if isinstance(digest, InvalidState):
                # Already delivered and closed (a repeated or recovered entry): nothing to do.
                self._metrics.stale_entries.inc()
                continue
            if digest.expired:
                # Its earlier records outlived the ttl (leak protection): lost, loudly.
                self._metrics.timelines_expired.inc()
                log.error(
                    "timeline %s: records expired (ttl) before delivery; an unknown number of "
                    "them is lost",
                    entry.timeline,
                )
            policy = self._policy(entry.timeline)
            # Collapsing needs the records' attributes: only the model path has them.
            fast = not self._hooks and policy.collapse_by is None
            item = self._fast(message, entry, digest, policy, now) if fast else None
            if item is None:
                item = self._built(message, entry, digest, policy, now)
            if item is None:
                self._empty(entry, digest)
                empty.append((entry, digest))
                continue
            pending.append(item)
        return pending, empty

    def _fast(
        self,
        message: Message,
        entry: ScheduleFields,
        digest: OpenDigest,
        policy: TimelinePolicy,
        now: float,
    ) -> Pending | None:
        """The common digest: its stored event bytes become its records as they are (no
        models); None when it has no readable record or needs splitting (then _built)."""
        events: list[bytes] = []
        timestamps: list[int] = []
        carried: list[list[tuple[str, bytes]]] = []
        for stored in digest.records:
            try:
                headers, event = envelope.unwrap(stored.payload)
                timestamps.append(decode_event_head(event).timestamp)  # and checks the bytes
            except ValueError:
                return None  # _built logs it and counts it lost
            events.append(event)
            if headers:
                carried.append(headers)
        if not events or digest.dropped > INT_MAX:
            return None  # nothing to publish, or a count the model path refuses loudly
        headers = envelope.digest_headers(carried) if carried else []
        value = whole_digest(
            digest.id,
            digest.timeline,
            events,
            timestamps,
            digest.dropped,
            int(digest.opened_at * 1000),
            reason=reason(entry, digest),
            total=len(digest.records) + digest.dropped,
            next_delivery_at=next_delivery_at(policy, now),
        )
        budget = part_budget(digest.timeline, headers, self._settings.max_message_bytes)
        if len(value) > budget:
            return None  # split into parts by the model path
        return Pending(message, entry, digest, [value], None, headers=headers)

    def _built(
        self,
        message: Message,
        entry: ScheduleFields,
        digest: OpenDigest,
        policy: TimelinePolicy,
        now: float,
    ) -> Pending | None:
        """A digest through the models (hooks, collapse_by, unreadable records, splitting);
        None if empty."""
        carried: list[list[tuple[str, bytes]]] = []
        records = self._records(digest, carried)
        if not records:
            return None
        dropped = digest.dropped + (len(digest.records) - len(records))
        whole = compose(entry, digest, records, dropped, policy, now)
        headers = envelope.digest_headers(carried) if carried else []
        parts, headers = encoded_parts(whole, headers, self._settings.max_message_bytes)
        return Pending(message, entry, digest, parts, whole, headers=headers)

    def _records(self, digest: OpenDigest, carried: list[list[tuple[str, bytes]]]) -> list[Record]:
        records = []
        for stored in digest.records:
            try:
                headers, event = envelope.unwrap(stored.payload)
                records.append(codec.decode_record(event))
                if headers:
                    carried.append(headers)
            except ValueError as exc:  # codec.DecodeError or a damaged header envelope
                # Stored bytes were valid when ingested; corrupt ones count as lost, not fatal.
                log.error(
                    "timeline %s: unreadable stored record %s: %s", digest.timeline, stored.id, exc
                )
        return records

    def _empty(self, entry: ScheduleFields, digest: OpenDigest) -> None:
        """A digest without records publishes nothing; closing it retires the timeline."""
        if digest.dropped:
            log.warning(
                "timeline %s: digest %s lost all %d records (capacity or missing payloads)",
                entry.timeline, digest.id, digest.dropped,
            )  # fmt: skip
            self._metrics.events_dropped.labels(reason="missing_payload").inc(digest.dropped)

    def _published(self, published: list[Pending]) -> None:
        """Count and tell the hooks about digests the broker acknowledged."""
        if not published:
            return
        now = self._clock.now()
        self._metrics.digests_published.inc(len(published))
        self._metrics.digest_parts.inc(sum(len(item.parts) for item in published))
        lateness = {}  # by reason: one labels() lookup per batch, not per digest
        for item in published:
            self._metrics.records_per_digest.observe(len(item.digest.records))
            why = item.entry.reason.value
            if why not in lateness:
                lateness[why] = self._metrics.delivery_lateness.labels(reason=why)
            lateness[why].observe(max(0.0, now - item.entry.scheduled_at / 1000))
            if self._hooks and item.whole is not None:  # with hooks, every digest is built
                self._hooks.on_publish(item.entry.partition, item.whole, item.headers)

    def _close(
        self,
        digests: list[tuple[ScheduleFields, OpenDigest]],
        positions: dict[int, int],
        now: float,
    ) -> Closing:
        """Start closing the batch's digests at ``now`` on the helper thread (behind the opens
        already asked for, so a later open of these timelines finds them closed)."""
        done = None
        if digests:
            targets = [(entry.partition, entry.timeline, digest.id) for entry, digest in digests]
            done = self._helper.submit(self._close_early, targets, now)
        return Closing(digests, positions, done, now)

    def _close_early(self, targets: list[DigestTarget], now: float) -> list[bool]:
        """close_many on the helper thread: one attempt; _settle retries a failure."""
        with self._metrics.store_latency.labels(operation="close").time():
            return self._store.close_many(targets, now)

    def _settle(self, *, retry: bool = True) -> None:
        """Wait for the last batch's closes (retrying a failed call here, serving the group,
        unless ``retry`` is off: then a failure stays pending), then commit its offsets."""
        closing, self._closing = self._closing, None
        if closing is None:
            return
        closed: list[bool] = []  # none asked for: the batch had no digests (done is None)
        if closing.done is not None:
            try:
                closed = closing.done.result()
            except Exception:  # retried here (closes are idempotent: a closed id says False)
                if not retry:
                    self._closing = closing
                    return
                targets = [(e.partition, e.timeline, d.id) for e, d in closing.digests]
                closed = self._with_redis(
                    lambda: self._store.close_many(targets, closing.now), "close"
                )
        if self._hooks:
            for (entry, digest), done in zip(closing.digests, closed, strict=True):
                self._hooks.on_close(entry.partition, entry.timeline, digest.id, done)
        if closing.positions:
            self._commit(closing.positions, sync=False)

    # ------------------------------------------------------------------ plumbing

    def _with_redis(self, call: Callable[[], T], operation: str) -> T:
        """A store call, retried while Redis is unreachable (paused, serving the group)."""

        def timed() -> T:
            with self._metrics.store_latency.labels(operation=operation).time():
                return call()

        return self._kafka.while_redis_down(
            timed, give_up=self._stopping, errors=self._metrics.redis_errors
        )

    def _commit(self, positions: dict[int, int], *, sync: bool) -> None:
        """Remember these next-to-read offsets and commit every assigned partition's."""
        for partition, offset in positions.items():
            if partition in self._assigned:  # a revoked one is the next owner's to commit
                self._positions[partition] = max(self._positions.get(partition, 0), offset)
        self._kafka.commit(self._positions, sync=sync)

    def _on_assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._assigned.update(tp.partition for tp in partitions)
        # Read the commit here and say where each partition starts: a new group's first
        # fetch comes about 100 ms sooner than when librdkafka works it out (runner.reset_start).
        return self._kafka.committed_starts(partitions, COMMITTED_TIMEOUT)

    def _on_revoke(self, partitions: list[int]) -> None:
        # A batch closing on the helper thread is committed first if its closes went through
        # (no retry here, inside the consumer's callback); the next owner starts after it.
        self._settle(retry=False)
        revoked = set(partitions)
        self._kafka.commit({p: o for p, o in self._positions.items() if p in revoked}, sync=True)
        self._forget(revoked)

    def _on_lost(self, partitions: list[int]) -> None:
        self._forget(set(partitions))

    def _forget(self, partitions: set[int]) -> None:
        self._assigned -= partitions
        for partition in partitions:
            self._positions.pop(partition, None)
            self._epochs[partition] = self._epochs.get(partition, 0) + 1
