"""Publishing a batch of digests: every part acknowledged, or retried, or dead-lettered.

Parts come sized for the broker (parts.py). A part the producer still refuses at once (too
large, say) fails that digest's attempt instead of the role, so no output can make delivery
exit; after ``max_attempts`` the schedule entry goes to the DLQ with the reason and the digest
stays open for maintenance to try again (its records are never dropped here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from digest_stream.kafka import produce_waiting_for_room
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.retry import backoff_delay
from digest_stream.settings import Settings
from digest_stream.store.base import OpenDigest
from digest_stream.wire import codec, registry
from digest_stream.wire.models import Digest
from digest_stream.wire.schedule_fields import ScheduleFields

log = logging.getLogger(__name__)

_KafkaHeaders = list[tuple[str, str | bytes | None]]

# How long one publish attempt may wait for broker acknowledgements.
PUBLISH_TIMEOUT = 30.0


@dataclass
class Pending:
    """One digest on its way out."""

    message: Message | None  # None: a leading edge the ingest publishes (no schedule entry)
    entry: ScheduleFields
    digest: OpenDigest
    parts: list[bytes]  # each part's encoded message value, in part order
    whole: Digest | None  # the digest before splitting, when built (what hooks see)
    errors: list[str] = field(default_factory=list)
    headers: list[tuple[str, bytes]] = field(default_factory=list)  # carried event headers


class Publisher:
    """Produces digests' parts and waits for acknowledgements, retrying with backoff."""

    def __init__(
        self,
        settings: Settings,
        producer: Producer,
        dlq: DeadLetters,
        metrics: Metrics,
        wait: Callable[[float], None],
        stopping: Callable[[], bool],
    ) -> None:
        self._settings = settings
        self._producer = producer
        self._dlq = dlq
        self._metrics = metrics
        self._wait = wait  # the role's wait that keeps serving its group
        self._stopping = stopping
        # Schema registry mode: the Digest schema is registered here, at start (a refusal
        # stops the start); each part then gets its 5-byte prefix. Plain mode: unchanged.
        self._frame = registry.output_frame(
            settings.schema_registry_url,
            settings.schema_registry_config,
            settings.output_topic,
            codec.DIGEST_SCHEMA,
        )

    def publish(self, pending: list[Pending]) -> tuple[list[Pending], bool]:
        """Publish every part and wait for acks, retrying failures with capped backoff.

        Returns what the broker acknowledged, and whether a stop request cut retries short
        (then the batch must not be committed: its entries are redelivered after restart).
        """
        settings = self._settings
        published: list[Pending] = []
        todo = pending
        attempt = 0
        while todo:
            attempt += 1
            for item in todo:
                self._produce(item)
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
            self._wait(delay)
        return published, False

    def _produce(self, item: Pending) -> None:
        item.errors.clear()
        waited = produce_parts(
            self._producer, self._settings.output_topic, item, self._frame, _collect(item.errors)
        )
        if waited:
            self._metrics.producer_queue_full.labels(role="delivery").inc()

    def _give_up(self, item: Pending) -> None:
        # The digest stays open and its timeline READY: maintenance reschedules it later.
        assert item.message is not None, "delivery publishes what its entries opened"
        self._dlq.send(
            item.message,
            "publish-failed",
            f"digest {item.digest.id} of {item.entry.timeline}: "
            f"{self._settings.max_attempts} attempts failed: {'; '.join(item.errors[:3])}",
        )


def produce_parts(
    producer: Producer,
    topic: str,
    item: Pending,
    frame: Callable[[bytes], bytes],
    on_delivery: Callable[[KafkaError | None, Message], None],
) -> bool:
    """Produce a digest's parts (keyed by its timeline, each with the carried headers);
    whether it waited for room. A part refused at once (too large, say) fails the attempt:
    its error goes to ``item.errors`` and the parts after it are not produced."""
    key = item.digest.timeline.encode()
    waited = False
    for number, part in enumerate(item.parts, 1):
        try:
            waited = (
                bool(
                    produce_waiting_for_room(
                        producer,
                        topic,
                        key,
                        frame(part),
                        headers=cast(_KafkaHeaders, item.headers) or None,
                        on_delivery=on_delivery,
                    )
                )
                or waited
            )
        except KafkaException as exc:
            item.errors.append(f"part {number}/{len(item.parts)}: {exc}")
            log.error("digest %s of %s: %s", item.digest.id, item.digest.timeline, item.errors[-1])
            break
    return waited


def _collect(errors: list[str]) -> Callable[[KafkaError | None, Message], None]:
    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(str(error))

    return on_delivery
