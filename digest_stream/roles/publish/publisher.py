"""The one component that publishes a digest, whichever role opened it.

A digest is published the same way on both paths, delivery's (opened for a schedule entry)
and the ingest's leading edge (opened by the add itself): built under its timeline's policy
(``build``), produced part by part to the output topic under its stable id, its delivery
reports counted per part, reported once acknowledged (``report``), and closed by the store
at the time its ``next_delivery_at`` was computed from. What a role does with a digest that
failed differs only in who tries again: delivery retries it and dead-letters its entry, the
ingest hands it to delivery with an announcement (the digest stays open, same id).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, Message, Producer

from digest_stream.clock import Clock
from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.publish.build import build, one_part, one_part_of
from digest_stream.roles.publish.compose import head_of, reason
from digest_stream.roles.publish.produce import Pending, produce_batch, produce_parts
from digest_stream.roles.publish.report import Report
from digest_stream.settings import Settings
from digest_stream.store.base import DigestTarget, OpenDigest
from digest_stream.wire import formats
from digest_stream.wire.models import DigestReason, ScheduleReason
from digest_stream.wire.schedule_fields import ScheduleFields


class DigestPublisher:
    """Builds, produces and reports digests on one producer (one role's thread)."""

    def __init__(
        self,
        settings: Settings,
        producer: Producer,
        metrics: Metrics,
        hooks: Hooks,
        clock: Clock,
        role: str,
    ) -> None:
        self._settings = settings
        self._producer = producer
        self._hooks = hooks
        self._queue_full = metrics.producer_queue_full.labels(role=role)
        self.report = Report(metrics, hooks, clock)
        # The output format, chosen once. Avro in schema registry mode: the Digest schema is
        # registered here, at start (a refusal stops the start); each part then gets its
        # 5-byte prefix.
        self._format = output_format(settings)

    def prepare(
        self, entry: ScheduleFields, digest: OpenDigest, closing_at: float, message: Message
    ) -> Pending:
        """The digest delivery opened for ``entry`` (its schedule entry, read from
        ``message``) built for publishing, its close at ``closing_at`` (the time its
        ``next_delivery_at`` is computed from); without parts when it has nothing to publish
        (an empty digest, reported here: closing it retires the timeline)."""
        _, partition, scheduled_at, reason = entry
        return self._prepare(message, partition, scheduled_at, reason, digest, closing_at)

    def prepare_leading(self, partition: int, digest: OpenDigest, closing_at: float) -> Pending:
        """``prepare`` for a digest the ingest's add opened: the fields an announcement of it
        would carry (``IMMEDIATE``, scheduled when opened), its records the ingest's own."""
        scheduled_at = int(digest.opened_at * 1000)
        return self._prepare(
            None, partition, scheduled_at, ScheduleReason.IMMEDIATE, digest, closing_at, True
        )

    def prepare_leading_add(
        self, partition: int, opened: Sequence[OpenDigest], closing_at: float
    ) -> list[Pending]:
        """``prepare_leading`` for every digest one add opened, what they share worked out
        once: their reason, and each distinct due rule's ``next_delivery_at`` (an add's
        digests mostly share one). Hot path: at one event per timeline, this is the publish
        of nearly every digest (docs/benchmarks.md)."""
        if self._hooks:  # hooks see each digest whole: the one path
            return [self.prepare_leading(partition, digest, closing_at) for digest in opened]
        max_bytes, output = self._settings.max_message_bytes, self._format
        immediate = ScheduleReason.IMMEDIATE
        next_at: dict[int, int] = {}  # by id() of the due rule
        reasons: dict[str, DigestReason] = {}  # by the store's reason (an add's: IMMEDIATE)
        items: list[Pending] = []
        for digest in opened:
            rule = digest.due_rule
            stored = None
            if rule.policy.collapse_by is None:
                at = next_at.get(id(rule))
                if at is None:
                    at = next_at[id(rule)] = rule.next_delivery_at(closing_at)
                why = reasons.get(digest.reason)
                if why is None:
                    why = reasons[digest.reason] = reason(immediate, digest)
                stored = one_part_of(head_of(digest, why, at), digest, max_bytes, output, True)
            if stored is None:
                items.append(self.prepare_leading(partition, digest, closing_at))
                continue
            value, headers = stored
            item = Pending(
                None, partition, int(digest.opened_at * 1000), immediate, digest, [value], None,
                closing_at, headers=headers,
            )  # fmt: skip
            items.append(item)
        return items

    def again(self, item: Pending, closing_at: float) -> Pending:
        """``item`` built again for another attempt, its close now at ``closing_at``."""
        return self._prepare(
            item.message, item.partition, item.scheduled_at, item.reason, item.digest, closing_at
        )

    def _prepare(
        self,
        message: Message | None,
        partition: int,
        scheduled_at: int,
        reason: ScheduleReason,
        digest: OpenDigest,
        closing_at: float,
        checked: bool = False,
    ) -> Pending:
        """Both roles' one path. The common digest (no hooks to see it whole) tries the
        format's one-part layout first: a Pending is then the only object it makes.
        ``checked``: its records are the ingest's own bytes, not read back from the store."""
        max_bytes, output = self._settings.max_message_bytes, self._format
        # The policy the store resolved for the open: collapse_by and the due rule are its.
        policy = digest.policy
        if not self._hooks:
            stored = one_part(reason, digest, policy, closing_at, max_bytes, output, checked)
            if stored is not None:
                value, headers = stored
                return Pending(
                    message, partition, scheduled_at, reason, digest, [value], None, closing_at,
                    headers=headers,
                )  # fmt: skip
        built = build(
            reason,
            digest,
            policy,
            now=closing_at,
            max_bytes=max_bytes,
            output=output,
            whole=True,  # the one-part layout was tried (or hooks want it whole)
            checked=checked,
        )
        if built.unreadable:
            self.report.unreadable(digest.timeline, built.unreadable)
        if not built.values:
            self.report.empty(digest)
        return Pending(
            message, partition, scheduled_at, reason, digest, built.values, built.whole,
            closing_at, headers=built.headers,
        )  # fmt: skip

    def produce(self, item: Pending) -> None:
        """Produce every part of ``item`` (a new attempt: its errors and acks start over).
        Each part's delivery report lands in ``item``: an error in ``item.errors``, an
        acknowledgement in ``item.waiting``. A part refused at once (too large, say) fails
        the attempt the same way, and the parts after it are not produced."""
        on_delivery = _attempt(item)
        topic = self._settings.output_topic
        if produce_parts(self._producer, topic, item, self._format.frame, on_delivery):
            self._queue_full.inc()

    def produce_alone(self, item: Pending, timeout: float) -> None:
        """``produce`` with each part in a record batch of its own, acknowledged (or not)
        within ``timeout`` before the next: the broker refuses a batch as a whole, and
        librdkafka fails every message in it with the one refusal (it does not split the
        batch), so only a part refused alone is one that can never go."""
        on_delivery = _attempt(item)
        item.alone = True
        producer = self._producer
        producer.flush(timeout)  # nothing of another digest queued beside its first part
        topic = self._settings.output_topic
        each = functools.partial(producer.flush, timeout)
        if produce_parts(producer, topic, item, self._format.frame, on_delivery, each):
            self._queue_full.inc()

    def produce_many(self, items: Sequence[Pending]) -> None:
        """``produce`` for each of ``items``: those of one part without headers (nearly every
        digest) in one batch call, the others one by one."""
        batch: list[Pending] = []
        for item in items:
            if len(item.parts) == 1 and not item.headers:
                batch.append(item)
            else:
                self.produce(item)
        if not batch:
            return
        reports = [_attempt(item) for item in batch]
        topic = self._settings.output_topic
        for item in produce_batch(self._producer, topic, batch, self._format.frame, reports):
            self.produce(item)  # no room in the queue: one by one, waiting for room

    def produce_counted(
        self, items: Sequence[Pending], on_delivery: Callable[[KafkaError | None, Message], None]
    ) -> int:
        """``produce_many`` with one delivery report callable for every part of ``items``
        (the leading edge counts an add's reports, not each digest's), the digests of one
        part and no headers in one batch call. A part refused at once fails its digest
        (``item.errors``) and sends no report. Returns how many reports to expect."""
        batch: list[Pending] = []
        topic, frame, producer = self._settings.output_topic, self._format.frame, self._producer
        expected = 0
        for item in items:
            if len(item.parts) == 1 and not item.headers:
                batch.append(item)
            else:
                expected += self._produce_counting(item, on_delivery)
        if not batch:
            return expected
        reports = [on_delivery] * len(batch)
        no_room = produce_batch(producer, topic, batch, frame, reports)
        expected += sum(1 for item in batch if not item.errors) - len(no_room)
        for item in no_room:  # one by one, waiting for room
            expected += self._produce_counting(item, on_delivery)
        return expected

    def _produce_counting(
        self, item: Pending, on_delivery: Callable[[KafkaError | None, Message], None]
    ) -> int:
        """Produce ``item``'s parts with ``on_delivery`` as their report; how many went."""
        produced = [0]

        def count() -> None:
            produced[0] += 1

        topic = self._settings.output_topic
        if produce_parts(self._producer, topic, item, self._format.frame, on_delivery, count):
            self._queue_full.inc()
        return produced[0]

    def published(self, items: Sequence[Pending]) -> None:
        """Count acknowledged digests and tell the hooks."""
        self.report.published([item for item in items if item.parts])


def _attempt(item: Pending) -> Callable[[KafkaError | None, Message], None]:
    """Start a new attempt of ``item`` (its errors and acks start over); its parts' delivery
    report, which ignores an earlier attempt's late reports."""
    item.errors.clear()
    item.refused = item.alone = False
    item.waiting = len(item.parts)
    item.attempt += 1
    attempt = item.attempt

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if item.attempt != attempt:
            return  # an earlier attempt's late report: this attempt's parts decide
        if error is not None:
            item.failed(error, str(error))
        else:
            item.waiting -= 1

    return on_delivery


def output_format(settings: Settings) -> formats.DigestFormat:
    """The digest format the settings choose, ready for the output topic."""
    return formats.choose(
        settings.output_format,
        registry_url=settings.schema_registry_url,
        registry_config=settings.schema_registry_config,
        topic=settings.output_topic,
    )


def close_targets(items: Sequence[Pending]) -> list[DigestTarget]:
    """The store's close targets of these digests (partition, timeline, id)."""
    return [(item.partition, item.digest.timeline, item.digest.id) for item in items]
