"""The users' side of digest-stream: produce events, read digests.

`EventProducer` validates, encodes and keys events by timeline, so producers cannot get the
partitioning wrong. `DigestReader` yields decoded digests and skips a (digest id, part) it has
already yielded, so a notifier gets effectively-once delivery without writing that itself.
See docs/client.md.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from digest_stream.wire.codec import DecodeError, decode_digest, encode_event
from digest_stream.wire.models import Digest, Event, validate_timeline

log = logging.getLogger(__name__)

EVENTS_TOPIC: Final = "digests.events"
OUTPUT_TOPIC: Final = "digests.output"

SEND_QUEUE_TIMEOUT: Final = 30.0
"""Seconds `send` waits for room when librdkafka's local queue is full, then raises BufferError.

A full queue means the broker is slower than the producer or unreachable; waiting a while rides
out a hiccup, raising after that stops the caller from blocking forever on a dead cluster.
"""

_MAX_FAILURES_KEPT: Final = 100
"""Failed deliveries kept for DeliveryError's details (all are counted): bounded memory."""

_LIBRDKAFKA_LOGGER: Final = logging.getLogger("digest_stream.client.librdkafka")
"""Where librdkafka's own log lines go (instead of raw on stderr); override with `logger=`."""

_PRODUCER_DEFAULTS: Final[Mapping[str, Any]] = {
    # Idempotence (which implies acks=all): broker-side retries can neither duplicate nor
    # reorder a timeline's events, and an acknowledged event survives a broker failure.
    "enable.idempotence": True,
    "acks": "all",
    # The Java clients' partitioner: the same timeline lands on the same partition whichever
    # client produced it. The service keeps a timeline's state per input partition, so events of
    # one timeline spread over two partitions would become two timelines. librdkafka's own
    # default (consistent_random, CRC32) disagrees with Java for the same key.
    "partitioner": "murmur2_random",
    "client.id": "digest-stream-event-producer",
    "logger": _LIBRDKAFKA_LOGGER,
}

_CONSUMER_DEFAULTS: Final[Mapping[str, Any]] = {
    # At-least-once: an offset is stored only once the caller is done with the digest (it asks
    # for the next one, commits or closes), and only stored offsets are committed, by
    # librdkafka's periodic auto-commit, on rebalance and on close.
    "enable.auto.commit": True,
    "enable.auto.offset.store": False,
    # A new group starts from the oldest retained digest: nothing published before the first
    # start is lost. Override with "latest" to skip history.
    "auto.offset.reset": "earliest",
    # Rebalances move only the partitions that change owner; the others keep flowing.
    "partition.assignment.strategy": "cooperative-sticky",
    "client.id": "digest-stream-digest-reader",
    "logger": _LIBRDKAFKA_LOGGER,
}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class DeliveryFailure:
    """One event the broker did not accept."""

    timeline: str
    id: str
    error: str


class DeliveryError(Exception):
    """Events that were not delivered (raised by EventProducer.flush and close)."""

    def __init__(self, topic: str, failures: list[DeliveryFailure], count: int) -> None:
        message = f"{count} event(s) not delivered to {topic}"
        if failures:
            first = failures[0]
            message += f"; first: timeline {first.timeline!r} id {first.id!r}: {first.error}"
        super().__init__(message)
        self.topic = topic
        self.failures = failures
        """The first failures (at most 100)."""
        self.count = count
        """How many events failed in all."""


class EventProducer:
    """Produce events to the input topic: validated, Avro-encoded, keyed by timeline.

    The Kafka key is the timeline in UTF-8, which is what places all events of a timeline on
    one partition (and so with one service instance). `librdkafka_overrides` are librdkafka
    properties, dotted names included: `EventProducer(servers, **{"linger.ms": 20})`.
    Idempotent by default. Not thread-safe; use one per thread.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = EVENTS_TOPIC,
        **librdkafka_overrides: Any,
    ) -> None:
        config = {**_PRODUCER_DEFAULTS, **librdkafka_overrides}
        config["bootstrap.servers"] = bootstrap_servers
        self.topic = topic
        self._producer: Producer | None = Producer(config)
        self._failures: list[DeliveryFailure] = []
        self._failure_count = 0

    def send(
        self,
        timeline: str,
        id: str,
        payload: bytes,
        timestamp_ms: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> Event:
        """Queue one event for timeline (event time defaults to now); returns the event sent.

        Raises pydantic.ValidationError (a ValueError) for invalid input, before anything is
        queued. Delivery is asynchronous: failures are raised by `flush`.
        """
        producer = self._open_producer()
        key = validate_timeline(timeline).encode("utf-8")
        event = Event(
            id=id,
            timestamp=_now_ms() if timestamp_ms is None else timestamp_ms,
            payload=payload,
            attributes=dict(attributes or {}),
        )
        value = encode_event(event)

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                self._record_failure(DeliveryFailure(timeline, event.id, str(error)))

        # The Kafka message timestamp stays the produce time (librdkafka's default), not the
        # event time: brokers reject timestamps too far from now (log.message.timestamp.*),
        # and the event time travels in the value.
        deadline = time.monotonic() + SEND_QUEUE_TIMEOUT
        while True:
            try:
                producer.produce(self.topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:
                if time.monotonic() >= deadline:
                    raise
                # Serving delivery reports is what frees queue space; this waits on them.
                producer.poll(0.1)
        producer.poll(0)
        return event

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued event is delivered; raise DeliveryError for any that failed.

        Raises TimeoutError when events are still queued after timeout seconds.
        """
        producer = self._open_producer()
        remaining = producer.flush(timeout)
        self._raise_failures()
        if remaining:
            raise TimeoutError(
                f"{remaining} event(s) still queued for {self.topic} after {timeout}s"
            )

    def close(self, timeout: float = 30.0) -> None:
        """Flush (raising like `flush`), then release the producer."""
        if self._producer is None:
            return
        try:
            self.flush(timeout)
        finally:
            self._producer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        # Already failing: still try to deliver what was queued, but do not replace the
        # caller's exception with a delivery error.
        try:
            self.close()
        except (DeliveryError, TimeoutError) as error:
            log.error("while handling %s: %s", exc_type.__name__, error)

    def _open_producer(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("EventProducer is closed")
        return self._producer

    def _record_failure(self, failure: DeliveryFailure) -> None:
        self._failure_count += 1
        if len(self._failures) < _MAX_FAILURES_KEPT:
            self._failures.append(failure)

    def _raise_failures(self) -> None:
        if not self._failure_count:
            return
        error = DeliveryError(self.topic, self._failures, self._failure_count)
        # Report each failure once: a later flush only speaks of later failures.
        self._failures, self._failure_count = [], 0
        raise error


class UndecodableDigest(DecodeError):
    """A message on the digest topic that is not a valid Digest, with its coordinates.

    Raised by DigestReader.poll. Polling again continues after it (and its offset is committed
    with the next one), so catching this and going on skips the message.
    """

    def __init__(self, error: DecodeError, topic: str, partition: int, offset: int) -> None:
        super().__init__(error.reason, f"{topic}[{partition}]@{offset}: {error.detail}")
        self.topic = topic
        self.partition = partition
        self.offset = offset


class _RecentKeys:
    """A bounded LRU set: remembers the most recently seen `capacity` keys."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"dedupe_capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._keys: OrderedDict[tuple[str, int], None] = OrderedDict()

    def seen(self, key: tuple[str, int]) -> bool:
        """Return whether key was seen recently, and remember it as the most recent."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        if self.capacity:
            self._keys[key] = None
            if len(self._keys) > self.capacity:
                self._keys.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self._keys)


class DigestReader:
    """Read digests from the output topic as decoded `Digest` models, skipping repeats.

    Delivery is at-least-once: a digest's offset is committed only after the caller is done with
    it, i.e. asks for the next one (`poll`, the next loop iteration), calls `commit`, or closes
    the reader without an exception. The service re-publishes a digest with the same id when a
    delivery is retried; the reader skips a (digest id, part) it already yielded, remembering
    the last `dedupe_capacity` of them (LRU: bounded memory; 0 disables). Together: effectively
    once, within one reader's lifetime. A restarted reader re-reads at most what was not
    committed yet, so downstream that must never see a repeat still dedupes by `Digest.id`.

    `librdkafka_overrides` are librdkafka consumer properties (dotted names, via `**{...}`).
    Not thread-safe: poll and close from one thread.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        topic: str = OUTPUT_TOPIC,
        dedupe_capacity: int = 100_000,
        **librdkafka_overrides: Any,
    ) -> None:
        self._recent = _RecentKeys(dedupe_capacity)
        config = {**_CONSUMER_DEFAULTS, **librdkafka_overrides}
        config["bootstrap.servers"] = bootstrap_servers
        config["group.id"] = group_id
        self.topic = topic
        self._consumer = Consumer(config)
        self._consumer.subscribe([topic])
        # The message last handed to the caller: its offset is stored once they are done.
        self._pending: Message | None = None
        self._closed = False
        self.duplicates_skipped = 0
        """Messages skipped because their (digest id, part) was yielded before."""

    def poll(self, timeout: float = 1.0) -> Digest | None:
        """The next digest not yielded before, or None if none arrives within timeout seconds.

        Marks the previously returned digest as processed. Raises UndecodableDigest for a
        message that is not a valid Digest (polling again continues after it).
        """
        self._check_open()
        self._release_pending()
        deadline = time.monotonic() + timeout
        while True:
            message = self._consumer.poll(max(0.0, deadline - time.monotonic()))
            if message is None:
                return None
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                # Transient (a broker restarting, the topic not created yet): librdkafka
                # recovers by itself; report and go on.
                log.warning("digest reader on %s: %s", self.topic, error)
            else:
                digest = self._decode(message)
                if not self._recent.seen((digest.id, digest.part)):
                    self._pending = message
                    return digest
                self.duplicates_skipped += 1
                self._store(message)
            if time.monotonic() >= deadline:
                return None

    def __iter__(self) -> Iterator[Digest]:
        """Yield digests until the reader is closed (break out of the loop, then close)."""
        while not self._closed:
            digest = self.poll(1.0)
            if digest is not None:
                yield digest

    def commit(self) -> None:
        """Mark the digest returned last as processed and commit synchronously."""
        self._check_open()
        self._release_pending()
        self._commit()

    def close(self, *, commit: bool = True) -> None:
        """Leave the group; with commit, the digest returned last counts as processed."""
        if self._closed:
            return
        self._closed = True
        try:
            if commit:
                self._release_pending()
                self._commit()
        except KafkaException as error:
            # A failed final commit means re-reading a few digests after restart, which
            # at-least-once allows; it must not stop the close.
            log.warning("digest reader on %s: final commit failed: %s", self.topic, error)
        finally:
            self._pending = None
            self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Leaving on an exception: the last digest was probably not handled; let it come back.
        self.close(commit=exc_type is None)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("DigestReader is closed")

    def _decode(self, message: Message) -> Digest:
        try:
            return decode_digest(message.value() or b"")
        except DecodeError as error:
            # Pending like a good message: if the caller goes on, its offset gets committed.
            self._pending = message
            raise UndecodableDigest(
                error,
                message.topic() or self.topic,
                _int(message.partition()),
                _int(message.offset()),
            ) from error

    def _release_pending(self) -> None:
        if self._pending is not None:
            message, self._pending = self._pending, None
            self._store(message)

    def _store(self, message: Message) -> None:
        try:
            self._consumer.store_offsets(message=message)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in (
                KafkaError._STATE,
                KafkaError._UNKNOWN_PARTITION,
            ):
                # The partition was revoked meanwhile: its new owner re-reads from the last
                # commit (at-least-once), nothing to store here any more.
                log.info("digest reader: offset of a revoked partition not stored: %s", error)
                return
            raise

    def _commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET:
                return  # nothing stored since the last commit
            raise


def _int(value: int | None) -> int:
    return -1 if value is None else value


__all__ = [
    "EVENTS_TOPIC",
    "OUTPUT_TOPIC",
    "SEND_QUEUE_TIMEOUT",
    "DeliveryError",
    "DeliveryFailure",
    "DigestReader",
    "EventProducer",
    "UndecodableDigest",
]
