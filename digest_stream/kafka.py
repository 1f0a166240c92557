"""librdkafka configuration built from the settings, in one place for every client."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from digest_stream.settings import Settings

log = logging.getLogger(__name__)

# Large enough to amortise a round trip, small enough to keep a rebalance callback short.
FETCH_MAX_WAIT_MS = 50

#: librdkafka's own lines ("FAIL ... Connect to ... failed") go through Python logging, in the
#: service's format (JSON when configured), instead of raw "%3|...|" lines on stderr. They are
#: handed over while the client is polled, on the polling thread.
LIBRDKAFKA_LOGGER = logging.getLogger("digest_stream.kafka.librdkafka")


def _base(settings: Settings) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap_servers,
        "logger": LIBRDKAFKA_LOGGER,
    }
    # User-supplied librdkafka properties (SASL, SSL, tuning) win over our defaults.
    return config | dict(settings.kafka_config)


def consumer_config(settings: Settings, group_id: str) -> dict[str, Any]:
    """A consumer that never auto-commits and uses cooperative rebalancing."""
    config = {
        "group.id": group_id,
        "enable.auto.commit": False,
        # Offsets are stored and committed explicitly, after the work is durable.
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
        # A shorter session lets a killed instance's partitions move within seconds.
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1_000,
    }
    return {**config, **_base(settings)}


def producer_config(settings: Settings) -> dict[str, Any]:
    """An idempotent producer waiting for all in-sync replicas."""
    config = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.max.bytes": settings.max_message_bytes + 64_000,
    }
    return {**config, **_base(settings)}


def admin_config(settings: Settings) -> dict[str, Any]:
    """An admin client's configuration."""
    return _base(settings)


def commit(consumer: Consumer, offsets: list[TopicPartition], sync: bool) -> bool:
    """Commit next-to-read offsets; False (logged) when the broker refused."""
    if not offsets:
        return True
    try:
        # Two calls, not asynchronous=not sync: the stubs type the two modes separately.
        if sync:
            consumer.commit(offsets=offsets, asynchronous=False)
        else:
            consumer.commit(offsets=offsets, asynchronous=True)
    except KafkaException as exc:
        log.warning("commit of %s failed: %s", offsets, exc)
        return False
    return True


def consumer_lag(consumer: Consumer) -> dict[int, int]:
    """Lag per assigned partition: the cached high watermark minus the next offset to read.

    Local calls only (no broker round trip): the high watermark comes with every fetch
    response, so this is cheap enough to run on every metrics scrape.
    """
    lag: dict[int, int] = {}
    for tp in consumer.position(consumer.assignment()):
        low, high = consumer.get_watermark_offsets(tp, cached=True)
        start = tp.offset if tp.offset >= 0 else low  # nothing consumed yet: from the start
        if high >= 0 and start >= 0:
            lag[tp.partition] = max(0, high - start)
    return lag


def usable(messages: Sequence[Message], role: str) -> Iterator[Message]:
    """Messages that carry data; fatal errors raise, end-of-partition is skipped, others logged."""
    for message in messages:
        error = message.error()
        if error is None:
            yield message
            continue
        if error.fatal():
            raise KafkaException(error)
        if error.code() != KafkaError._PARTITION_EOF:
            log.warning("%s consumer error: %s", role, error)


def take_batch(consumer: Consumer, max_messages: int, timeout: float) -> list[Message]:
    """Wait up to ``timeout`` for the first message, then take only what is already fetched.

    librdkafka's consume(n, timeout) waits until n messages *or* the timeout, so on a quiet
    topic every batch would pay the whole timeout: latency on each hop of the pipeline. Under
    load the local prefetch queue fills batches anyway.
    """
    first = consumer.poll(timeout)
    if first is None:
        return []
    if max_messages <= 1:
        return [first]
    return [first, *consumer.consume(max_messages - 1, timeout=0)]
