"""A digest on its way out, and producing its parts (keyed by its timeline)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from digest_stream.kafka import produce_waiting_for_room
from digest_stream.store.base import OpenDigest
from digest_stream.wire.models import Digest, ScheduleReason

log = logging.getLogger(__name__)

_KafkaHeaders = list[tuple[str, str | bytes | None]]

#: Refusals of a message as it is, which no retry changes: larger than the topic (or the
#: producer) takes, a record batch too large, a record the broker finds invalid. A digest
#: refused so can never be produced (delivery dead-letters and closes it); every other error
#: (an outage, ACLs, a missing topic) is one an operator can fix, and is retried.
PERMANENT_ERRORS: frozenset[int] = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD}
)


@dataclass(slots=True)
class Pending:
    """One digest on its way out: the one object a digest makes on the publish path (its
    schedule entry's fields are its own, its timeline is its digest's)."""

    message: Message | None  # its schedule entry (None: opened by the ingest's add)
    partition: int
    scheduled_at: int  # its schedule entry's time, milliseconds since the epoch
    reason: ScheduleReason  # why its schedule entry was made
    digest: OpenDigest
    parts: list[bytes]  # each part's encoded message value, in part order
    whole: Digest | None  # the digest before splitting, when built (what hooks see)
    closing_at: float  # when it is closed: the time its next_delivery_at was computed from
    errors: list[str] = field(default_factory=list)  # this attempt's failed parts
    headers: list[tuple[str, bytes]] = field(default_factory=list)  # carried event headers
    waiting: int = 0  # this attempt's parts not acknowledged yet
    attempt: int = 0  # attempts made (produce)
    refused: bool = False  # a part of this attempt was refused for good (PERMANENT_ERRORS)
    alone: bool = False  # this attempt put each part in a record batch of its own

    @property
    def acknowledged(self) -> bool:
        """Every part of this attempt acknowledged, none failed."""
        return self.waiting == 0 and not self.errors

    def failed(self, error: object, text: str) -> None:
        """A part of this attempt failed with ``error`` (a KafkaError, or what a refusal
        raised), said by ``text``."""
        self.errors.append(text)
        if isinstance(error, KafkaError) and error.code() in PERMANENT_ERRORS:
            self.refused = True


def produce_parts(
    producer: Producer,
    topic: str,
    item: Pending,
    frame: Callable[[bytes], bytes],
    on_delivery: Callable[[KafkaError | None, Message], None],
    each: Callable[[], object] | None = None,
) -> bool:
    """Produce a digest's parts (keyed by its timeline, each with the carried headers),
    calling ``each`` after each part; whether it waited for room. A part refused at once (too
    large, say) fails the attempt: its error goes to ``item.errors`` and the parts after it
    are not produced."""
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
            item.failed(
                exc.args[0] if exc.args else None, f"part {number}/{len(item.parts)}: {exc}"
            )
            log.error("digest %s of %s: %s", item.digest.id, item.digest.timeline, item.errors[-1])
            break
        if each is not None:
            each()
    return waited


def produce_batch(
    producer: Producer,
    topic: str,
    items: list[Pending],
    frame: Callable[[bytes], bytes],
    reports: list[Callable[[KafkaError | None, Message], None]],
) -> list[Pending]:
    """Produce digests of one part and no headers in one call (librdkafka's batch produce:
    a third of the cost of a call per message, and it cannot carry headers), each keyed by
    its timeline with its delivery report from ``reports``. Returns the digests it found no
    room for, to be produced one by one (waiting); a part refused otherwise (too large, say)
    fails its digest, as in produce_parts."""
    messages = [
        {"key": item.digest.timeline.encode(), "value": frame(item.parts[0]), "callback": report}
        for item, report in zip(items, reports, strict=True)
    ]
    try:
        if producer.produce_batch(topic, messages) == len(messages):
            return []
    except KafkaException as exc:  # the call as a whole (its topic refused, say): none queued
        for item in items:
            item.failed(exc.args[0] if exc.args else None, f"part 1/1: {exc}")
        log.error("%d digests: %s", len(items), exc)
        return []
    no_room: list[Pending] = []
    for message, item in zip(messages, items, strict=True):
        error = message.get("_error")
        if error is None:
            continue
        if cast(KafkaError, error).code() == KafkaError._QUEUE_FULL:
            no_room.append(item)  # its report never comes: that message was not queued
        else:
            item.failed(error, f"part 1/1: {error}")
            log.error("digest %s of %s: %s", item.digest.id, item.digest.timeline, item.errors[-1])
    return no_room
