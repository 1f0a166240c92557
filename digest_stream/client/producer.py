"""EventProducer: validated, Avro-encoded events keyed by timeline; delivery failures raised."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

from confluent_kafka import KafkaError, Message, Producer

from digest_stream.client.defaults import EVENTS_TOPIC, PRODUCER_DEFAULTS
from digest_stream.vocabulary import CONTROL_MESSAGES, Argument
from digest_stream.wire import control
from digest_stream.wire.codec import EVENT_SCHEMA, encode_event
from digest_stream.wire.models import Event, validate_timeline
from digest_stream.wire.partitioner import DEFAULT_PARTITIONER, PARTITIONERS, Partitioner
from digest_stream.wire.registry import output_frame

log = logging.getLogger("digest_stream.client")

SEND_QUEUE_TIMEOUT: Final = 30.0
"""Seconds `send` waits for room when librdkafka's local queue is full, then raises BufferError.

A full queue means the broker is slower than the producer or unreachable; waiting a while rides
out a hiccup, raising after that stops the caller from blocking forever on a dead cluster.
"""

_MAX_FAILURES_KEPT: Final = 100
"""Failed deliveries kept for DeliveryError's details (all are counted): bounded memory."""

_LIBRDKAFKA_LOGGER: Final = logging.getLogger("digest_stream.client.librdkafka")
"""Where librdkafka's own log lines go (instead of raw on stderr); override with `logger=`."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _index(partition: int | None) -> int | None:
    if partition is not None and (isinstance(partition, bool) or partition < 0):
        raise ValueError(f"partition must be a partition number (>= 0), got {partition!r}")
    return partition


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
    one partition (and so with one service instance). `partitioner` (librdkafka's name, the
    service's `partitioner` setting) must be the one every producer of the topic uses: the
    service keeps a timeline's state on the partition its events arrive on, and a control
    (`flush`, `cancel`) acts only there. `librdkafka_overrides` are librdkafka
    properties, dotted names included: `EventProducer(servers, **{"linger.ms": 20})`.
    With `schema_registry_url` (and optional client properties `schema_registry_config`), the
    Event schema is registered under `<topic>-value` at construction and events go out in the
    Confluent wire format, as the service expects in schema registry mode.
    Idempotent by default. Not thread-safe; use one per thread.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = EVENTS_TOPIC,
        *,
        schema_registry_url: str | None = None,
        schema_registry_config: Mapping[str, Any] | None = None,
        partitioner: Partitioner = DEFAULT_PARTITIONER,
        **librdkafka_overrides: Any,
    ) -> None:
        if partitioner not in PARTITIONERS:
            # "random" (or a typo) would scatter a timeline's events over partitions.
            raise ValueError(
                f"partitioner must place a key: one of {', '.join(PARTITIONERS)}, "
                f"got {partitioner!r}"
            )
        self._frame = output_frame(
            schema_registry_url, schema_registry_config or {}, topic, EVENT_SCHEMA
        )
        config = {**PRODUCER_DEFAULTS, **librdkafka_overrides}
        config["bootstrap.servers"] = bootstrap_servers
        config["partitioner"] = partitioner
        self.partitioner: Partitioner = partitioner
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
        self._produce(producer, timeline, key, self._frame(encode_event(event)), event.id)
        return event

    def _produce(
        self,
        producer: Producer,
        timeline: str,
        key: bytes,
        value: bytes,
        what: str,
        partition: int | None = None,
    ) -> None:
        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                self._record_failure(DeliveryFailure(timeline, what, str(error)))

        # The Kafka message timestamp stays the produce time (librdkafka's default), not the
        # event time: brokers reject timestamps too far from now (log.message.timestamp.*),
        # and the event time travels in the value.
        deadline = time.monotonic() + SEND_QUEUE_TIMEOUT
        # An explicit partition bypasses the partitioner (librdkafka's -1: let it choose).
        where = -1 if partition is None else partition
        while True:
            try:
                producer.produce(
                    self.topic, value=value, key=key, partition=where, on_delivery=on_delivery
                )
                break
            except BufferError:
                if time.monotonic() >= deadline:
                    raise
                # Serving delivery reports is what frees queue space; this waits on them.
                producer.poll(0.1)
        producer.poll(0)

    def control(
        self,
        op: str,
        timeline: str,
        argument: str | float | None = None,
        *,
        partition: int | None = None,
    ) -> None:
        """Queue the control ``op`` of ``timeline`` (one of ``wire.control.OPERATIONS``, with
        its argument when it takes one: a cancel's record id; a time in seconds since the
        epoch), delivered asynchronously like ``send``.

        It travels on the events topic keyed by the timeline, to the partition this producer's
        partitioner puts the timeline's events on (or to ``partition``, the one holding the
        timeline's state when its events came from a producer partitioning otherwise), so the
        service applies it after every event of that timeline sent there before it.
        """
        message = control.Control(op, argument)
        spec = message.spec  # ValueError: no such op, or not with (or without) an argument
        if not spec.client:
            raise ValueError(f"control {op!r} is not sent by EventProducer")
        if spec.argument is Argument.NAME and not (isinstance(argument, str) and argument):
            raise ValueError(f"{spec.field} must be a non-empty name, got {argument!r}")
        if spec.argument is Argument.TIME and not control.is_argument(spec.argument, argument):
            raise ValueError(f"{spec.field} must be seconds since the epoch, got {argument!r}")
        key = validate_timeline(timeline).encode("utf-8")
        # how a failure names it: "flush", "cancel r-1", "cancel *" (all)
        takes = any(s.argument is not Argument.NONE for s in CONTROL_MESSAGES[op])
        what = f"{op} {'*' if argument is None else argument}" if takes else op
        value = control.encode(message)
        self._produce(self._open_producer(), timeline, key, value, what, _index(partition))

    def cancel(
        self, timeline: str, record_id: str | None = None, *, partition: int | None = None
    ) -> None:
        """Queue a cancel of the timeline's pending records (all, or the one ``record_id``),
        sent as ``control`` sends it. Records already in a digest being delivered are not
        recalled. Delivered asynchronously."""
        if record_id is not None and not record_id:
            raise ValueError("record_id must be a non-empty record id, or None for all")
        self.control("cancel", timeline, record_id, partition=partition)

    def flush_timeline(
        self, timeline: str, timeout: float = 30.0, *, partition: int | None = None
    ) -> None:
        """Queue a flush of ``timeline`` (deliver what is pending now, in order after its
        events sent before), then wait like ``flush``; it goes where ``control`` sends it
        (``partition`` likewise)."""
        self.control("flush", timeline, partition=partition)
        self.flush(timeout)

    def flush(self, timeout: str | float = 30.0, *, partition: int | None = None) -> None:
        """Wait until every queued event is delivered; raise DeliveryError for any that failed,
        TimeoutError when events are still queued after ``timeout`` seconds.

        The Kafka meaning only: a timeline's flush control is ``flush_timeline``. A string
        here is still taken as that timeline (deprecated, with a warning)."""
        if isinstance(timeout, str):
            warnings.warn(
                "EventProducer.flush(timeline) is deprecated: use flush_timeline(timeline)",
                DeprecationWarning,
                stacklevel=2,
            )
            self.flush_timeline(timeout, partition=partition)
            return
        remaining = self._open_producer().flush(timeout)
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
