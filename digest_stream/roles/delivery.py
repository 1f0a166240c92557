"""Delivery role: schedule entry -> open digest -> publish -> broker ack -> close -> commit.

A digest keeps its id from open to close. Anything that fails before close (a crash, a
rebalance, a publish error) leaves it open, and the redelivered entry reopens the same id with
the same records, so downstream sees at most repeats of one id, never a record under two ids.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from digest_stream.clock import Clock
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.retry import REDIS_DOWN, backoff_delay
from digest_stream.roles.runner import RoleConsumer, highest_offsets
from digest_stream.roles.scheduler import produce_waiting_for_room
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore, DigestTarget, InvalidState, OpenDigest
from digest_stream.wire import codec, envelope
from digest_stream.wire.models import Digest, Record, ScheduleEntry

log = logging.getLogger(__name__)

T = TypeVar("T")
_KafkaHeaders = list[tuple[str, str | bytes | None]]

# How long one publish attempt may wait for broker acknowledgements.
PUBLISH_TIMEOUT = 30.0
COMMIT_TIMEOUT = 10.0


@dataclass
class _Pending:
    """One digest on its way out."""

    message: Message
    entry: ScheduleEntry
    digest: OpenDigest
    parts: list[Digest]
    whole: Digest  # the digest before splitting (what hooks see)
    errors: list[str] = field(default_factory=list)
    headers: list[tuple[str, bytes]] = field(default_factory=list)  # carried event headers


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
        self._dlq = DeadLetters(producer, settings.dlq_topic, metrics, hooks=hooks)
        self._kafka = RoleConsumer(
            settings,
            settings.delivery_group_id,
            settings.schedule_topic,
            "delivery",
            consumer=consumer,
        )
        self._assigned: set[int] = set()
        self._positions: dict[int, int] = {}  # next offset to commit, by assigned partition
        self._stopping: Callable[[], bool] = lambda: False

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
        messages = self._kafka.take(self._settings.batch_size, self._settings.batch_timeout)
        if not messages:
            return 0
        entries = self._decode(messages)
        try:
            pending, empty = self._open(entries)
            published, cut_short = self._publish(pending)
            # One round trip closes the batch: what was published and the empty digests.
            self._close(empty + [(item.entry, item.digest) for item in published])
        except REDIS_DOWN:
            if not self._stopping():
                raise
            # Asked to stop while Redis is unreachable: a graceful stop, not a failure. The
            # batch is not committed; its entries come back and reopen the same digest ids.
            log.warning("stopping while Redis is unreachable; this batch will be redelivered")
            return 0
        if not cut_short:
            self._commit(highest_offsets(messages), sync=False)
        return len(published)

    def close(self) -> None:
        """Graceful stop: the batch in hand was finished by step(); commit and leave."""
        self._producer.flush(COMMIT_TIMEOUT)
        self._commit({}, sync=True)
        self._kafka.close()

    # ------------------------------------------------------------------ steps

    def _decode(self, messages: Sequence[Message]) -> list[tuple[Message, ScheduleEntry]]:
        entries: list[tuple[Message, ScheduleEntry]] = []
        for message in messages:
            try:
                entry = codec.decode_schedule_entry(message.value() or b"")
            except codec.DecodeError as exc:
                self._dlq.send(message, exc.reason, exc.detail)
                continue
            entries.append((message, entry))
        return entries

    def _open(
        self, entries: list[tuple[Message, ScheduleEntry]]
    ) -> tuple[list[_Pending], list[tuple[ScheduleEntry, OpenDigest]]]:
        """Open the batch's digests in one round trip; returns them and the empty ones."""
        picked: list[tuple[Message, ScheduleEntry]] = []
        targets: list[DigestTarget] = []
        seen: set[tuple[int, str]] = set()
        for message, entry in entries:
            target = (entry.partition, entry.timeline)
            if target in seen:
                continue  # one digest per timeline per batch; the repeat would reopen it
            seen.add(target)
            picked.append((message, entry))
            targets.append((entry.partition, entry.timeline, uuid.uuid4().hex))
        if not targets:
            return [], []
        now = self._clock.now()
        # Retried whole while Redis is down: opens are idempotent (a reopen keeps its id).
        opened = self._with_redis(lambda: self._store.open_many(targets, now), "open")
        pending: list[_Pending] = []
        empty: list[tuple[ScheduleEntry, OpenDigest]] = []
        for (message, entry), digest in zip(picked, opened, strict=True):
            if isinstance(digest, InvalidState):
                # Already delivered and closed (a repeated or recovered entry): nothing to do.
                self._metrics.stale_entries.inc()
                continue
            carried: list[list[tuple[str, bytes]]] = []
            records = self._records(digest, carried)
            if not records:
                self._empty(entry, digest)
                empty.append((entry, digest))
                continue
            whole = Digest.build(
                id=digest.id,
                timeline=digest.timeline,
                records=records,
                opened_at=int(digest.opened_at * 1000),
                dropped=digest.dropped + (len(digest.records) - len(records)),
            )
            parts = codec.split_digest(whole, self._settings.max_message_bytes)
            headers = envelope.digest_headers(carried) if carried else []
            pending.append(_Pending(message, entry, digest, parts, whole, headers=headers))
        return pending, empty

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

    def _empty(self, entry: ScheduleEntry, digest: OpenDigest) -> None:
        """A digest without records publishes nothing; closing it retires the timeline."""
        if digest.dropped:
            log.warning(
                "timeline %s: digest %s lost all %d records (capacity or missing payloads)",
                entry.timeline, digest.id, digest.dropped,
            )  # fmt: skip
            self._metrics.events_dropped.labels(reason="missing_payload").inc(digest.dropped)

    def _publish(self, pending: list[_Pending]) -> tuple[list[_Pending], bool]:
        """Publish every part and wait for acks, retrying failures with capped backoff.

        Returns what the broker acknowledged, and whether a stop request cut retries short
        (then the batch must not be committed: its entries are redelivered after restart).
        """
        settings = self._settings
        published: list[_Pending] = []
        todo = pending
        attempt = 0
        while todo:
            attempt += 1
            for item in todo:
                item.errors.clear()
                for part in item.parts:
                    if produce_waiting_for_room(
                        self._producer,
                        settings.output_topic,
                        part.timeline.encode(),
                        codec.encode_digest(part),
                        headers=cast(_KafkaHeaders, item.headers) or None,
                        on_delivery=_collect(item.errors),
                    ):
                        self._metrics.producer_queue_full.labels(role="delivery").inc()
            unacked = self._producer.flush(PUBLISH_TIMEOUT)
            if unacked:
                # Which ones is unknown: retry them all (a repeat carries the same digest id).
                log.warning("%d messages unacknowledged after %.0fs", unacked, PUBLISH_TIMEOUT)
            published += [item for item in todo if not item.errors and not unacked]
            todo = [item for item in todo if item.errors or unacked]
            if not todo:
                break
            if self._stopping():
                return published, True
            if attempt >= settings.max_attempts:
                for item in todo:
                    self._give_up(item)
                break
            self._metrics.publish_retries.inc(len(todo))
            delay = backoff_delay(
                attempt, settings.retry_backoff_initial, settings.retry_backoff_max
            )
            log.warning(
                "publishing %d digests failed (%s); attempt %d of %d in %.2fs",
                len(todo), (todo[0].errors or ["no ack"])[0], attempt + 1,
                settings.max_attempts, delay,
            )  # fmt: skip
            self._kafka.wait_serving_group(delay)
        self._kafka.resume()
        now = self._clock.now()
        for item in published:
            self._metrics.digests_published.inc()
            self._metrics.digest_parts.inc(len(item.parts))
            self._metrics.records_per_digest.observe(len(item.digest.records))
            self._metrics.delivery_lateness.observe(max(0.0, now - item.entry.scheduled_at / 1000))
            if self._hooks:
                self._hooks.on_publish(item.entry.partition, item.whole, item.headers)
        return published, False

    def _give_up(self, item: _Pending) -> None:
        # The digest stays open and its timeline READY: maintenance reschedules it later.
        self._dlq.send(
            item.message,
            "publish-failed",
            f"digest {item.digest.id} of {item.entry.timeline}: "
            f"{self._settings.max_attempts} attempts failed: {'; '.join(item.errors[:3])}",
        )

    def _close(self, digests: list[tuple[ScheduleEntry, OpenDigest]]) -> None:
        if not digests:
            return
        targets = [(entry.partition, entry.timeline, digest.id) for entry, digest in digests]
        closed = self._with_redis(
            lambda: self._store.close_many(targets, self._clock.now()), "close"
        )
        if self._hooks:
            for (entry, digest), done in zip(digests, closed, strict=True):
                self._hooks.on_close(entry.partition, entry.timeline, digest.id, done)

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
        return partitions

    def _on_revoke(self, partitions: list[int]) -> None:
        revoked = set(partitions)
        self._kafka.commit({p: o for p, o in self._positions.items() if p in revoked}, sync=True)
        self._forget(revoked)

    def _on_lost(self, partitions: list[int]) -> None:
        self._forget(set(partitions))

    def _forget(self, partitions: set[int]) -> None:
        self._assigned -= partitions
        for partition in partitions:
            self._positions.pop(partition, None)


def _collect(errors: list[str]) -> Callable[[KafkaError | None, Message], None]:
    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(str(error))

    return on_delivery
