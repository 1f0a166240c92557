"""Kafka helpers for tests on the real broker: sending events, reading topics, offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from digest_stream.settings import Settings
from digest_stream.wire import codec, formats
from digest_stream.wire.models import Digest, Event
from digest_stream.wire.partitioner import partition_for as place
from tests.support import unique, wait_until

TopicFactory = Callable[..., str]
"""The `topic_factory` fixture: `make(partitions=1, name=None, **topic_config) -> name`."""


def send_events(
    settings: Settings,
    timelines: str | Sequence[str],
    per_timeline: int = 1,
    *,
    ids: Sequence[str] | None = None,
    headers: Sequence[tuple[str, bytes]] | None = None,
    payload: bytes = b"{}",
) -> list[str]:
    """Send events to the events topic, round-robin over timelines, flushed; their ids in order.

    `ids` default to `per_timeline` fresh ones per timeline; every payload is `payload`.
    Event times rise by 1 ms per event from now, so send order is event-time order.
    """
    names = [timelines] if isinstance(timelines, str) else list(timelines)
    sent = (
        list(ids)
        if ids is not None
        else [uuid.uuid4().hex for _ in range(len(names) * per_timeline)]
    )
    # A raw producer, not EventProducer, because tests also send Kafka headers; it keys and
    # partitions like EventProducer (Java's murmur2), so a timeline stays on one partition.
    producer = Producer(
        {
            "bootstrap.servers": settings.kafka_bootstrap_servers,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
        }
    )
    base = int(time.time() * 1000)
    for i, record_id in enumerate(sent):
        event = Event(id=record_id, timestamp=base + i, payload=payload)
        producer.produce(
            settings.events_topic,
            key=names[i % len(names)].encode(),
            value=codec.encode_event(event),
            headers=list(headers) if headers else None,
        )
    assert producer.flush(30) == 0, "events still queued after 30 s"
    return sent


def committed_offsets(settings: Settings, partitions: Iterable[int]) -> list[int]:
    """The ingest group's committed offsets of these input partitions (negative: none).

    Read by a non-member (OffsetFetch only), so it never joins or disturbs the group.
    """
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": settings.group_id}
    )
    try:
        found = consumer.committed(
            [TopicPartition(settings.events_topic, p) for p in partitions], timeout=10
        )
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def end_offsets(settings: Settings, partitions: Iterable[int]) -> list[int]:
    """The end (high watermark) offsets of these input partitions."""
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": unique("probe")}
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(settings.events_topic, p), timeout=10)[1]
            for p in partitions
        ]
    finally:
        consumer.close()


class Collector:
    """Reads a topic from the beginning with a fresh group and keeps every message."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.messages: list[Message] = []
        # Digests in the format the service writes (plain Avro unless told otherwise).
        self._decode = formats.choose(settings.output_format).decode
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.kafka_bootstrap_servers,
                "group.id": unique("collector"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([topic])

    def poll(self, timeout: float = 0.1) -> None:
        """Fetch whatever arrived."""
        for message in self._consumer.consume(1000, timeout=timeout):
            if message.error() is None:
                self.messages.append(message)

    def observe(self, seconds: float) -> None:
        """Keep reading for a fixed window: for asserting that nothing *else* arrives."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.poll()

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll until condition() holds, or fail naming what was awaited."""

        def check() -> bool:
            self.poll()
            return condition()

        wait_until(check, timeout, what, interval=0)

    @property
    def digests(self) -> list[Digest]:
        """Every digest message decoded, in arrival order."""
        return [self._decode(m.value() or b"") for m in self.messages]

    def record_ids(self) -> set[str]:
        """Every record id seen in any digest."""
        return {r.id for d in self.digests for r in d.records}

    def close(self) -> None:
        """Leave the group."""
        self._consumer.close()


def digest_ids_by_record(digests: list[Digest]) -> dict[str, set[str]]:
    """record id -> the digest ids it appeared in (more than one = a real duplicate)."""
    seen: dict[str, set[str]] = {}
    for digest in digests:
        for record in digest.records:
            seen.setdefault(record.id, set()).add(digest.id)
    return seen


def murmur2_choice(key: bytes, partitions: int) -> int:
    """The partition the default partitioner (murmur2_random) picks."""
    return place("murmur2_random", key, partitions)
