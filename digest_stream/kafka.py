"""librdkafka in one place for every client: its configuration built from the settings, and
the few calls whose semantics need care (taking a batch, producing into a full queue)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)

from digest_stream.settings import Settings

log = logging.getLogger(__name__)

# Large enough to amortise a round trip, small enough to keep a rebalance callback short.
FETCH_MAX_WAIT_MS = 50

#: librdkafka's own lines ("FAIL ... Connect to ... failed") go through Python logging, in the
#: service's format (JSON when configured), instead of raw "%3|...|" lines on stderr. They are
#: handed over while the client is polled, on the polling thread.
LIBRDKAFKA_LOGGER = logging.getLogger("digest_stream.kafka.librdkafka")


#: A consumer group and the setting (or flag) that names it.
GroupOf = tuple[str, str]


class ClientErrors:
    """What librdkafka reported through ``error_cb``: the latest error and when.

    librdkafka retries authentication, TLS and connection failures by itself and tells only
    through this callback (and its log), never through a call's result: readiness reads the
    latest error here, and the start's preflight stops on one that waiting does not cure.
    Called on whichever thread polls the client, so guarded by a lock.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: tuple[KafkaError, float, GroupOf | None] | None = None

    def __call__(self, error: KafkaError, group: GroupOf | None = None) -> None:
        """Record one error (the ``error_cb`` of every client sharing this object); a consumer
        reporting its own errors names its group (and the setting that names it)."""
        with self._lock:
            if error.code() == KafkaError._ALL_BROKERS_DOWN and self._latest is not None:
                # A summary ("1/1 brokers are down") that follows the cause: keep the cause.
                cause, _, group_of = self._latest
                self._latest = (cause, self._clock(), group_of)
                return
            self._latest = (error, self._clock(), group)

    def latest(self, within: float | None = None) -> KafkaError | None:
        """The latest error (reported within the last ``within`` seconds, when given)."""
        found = self.latest_with_group(within)
        return None if found is None else found[0]

    def latest_with_group(
        self, within: float | None = None
    ) -> tuple[KafkaError, GroupOf | None] | None:
        """The latest error and the consumer group it concerns (when its consumer said)."""
        with self._lock:
            if self._latest is None:
                return None
            error, at, group = self._latest
        if within is not None and self._clock() - at > within:
            return None
        return error, group


def _base(settings: Settings, errors: ClientErrors | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap_servers,
        "logger": LIBRDKAFKA_LOGGER,
    }
    if errors is not None:
        config["error_cb"] = errors
    # User-supplied librdkafka properties (SASL, SSL, tuning) win over our defaults.
    return config | dict(settings.kafka_config)


#: Eager rebalancing. With cooperative-sticky and manual commits, librdkafka can leave the
#: member that keeps its partitions committing under a stale generation after a rebalance:
#: every commit fails with ILLEGAL_GENERATION until the next one (confluentinc/librdkafka
#: #4059). Two `digest-stream run` processes over a backlog reproduced it here in 3 of 5
#: runs; eager assignment did not, in 4 of 4. The roles' handlers commit, release and restart
#: partitions from their fences at each rebalance anyway; eager only moves more of them.
EAGER_STRATEGY = "range"

#: How often a consumer refreshes the events topic's metadata (ms). librdkafka's default (300 s)
#: is also how long partitions added to a subscribed topic go unread: the group rebalances onto
#: them only once a member's metadata shows them. An operator who adds partitions to scale out
#: expects them read within seconds. Each refresh is one small Metadata request for the one
#: subscribed topic (sparse refresh), a few per minute per consumer: nothing a broker notices.
METADATA_REFRESH_MS = 10_000


def incremental(config: dict[str, Any]) -> bool:
    """Whether a consumer of this configuration rebalances incrementally (cooperative)."""
    return "cooperative" in str(config.get("partition.assignment.strategy", ""))


def consumer_config(
    settings: Settings, group_id: str, errors: ClientErrors | None = None
) -> dict[str, Any]:
    """A consumer that never auto-commits; eager (range) rebalancing, see EAGER_STRATEGY."""
    config = {
        "group.id": group_id,
        "enable.auto.commit": False,
        # Offsets are stored and committed explicitly, after the work is durable.
        "enable.auto.offset.store": False,
        # Also where a partition added to the topic starts: its events produced before this
        # consumer noticed it (up to METADATA_REFRESH_MS) are read, not skipped.
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": EAGER_STRATEGY,
        "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
        "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
        # A shorter session lets a killed instance's partitions move within seconds.
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1_000,
    }
    return {**config, **_base(settings, errors)}


def producer_config(settings: Settings, errors: ClientErrors | None = None) -> dict[str, Any]:
    """An idempotent producer waiting for all in-sync replicas."""
    config = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.max.bytes": settings.max_message_bytes + 64_000,
        # A batch of messages must fit the topic's max.message.bytes too (the broker checks
        # the whole record batch): an operator who sets it to max_message_bytes must not see
        # batches of parts refused that each fit.
        "batch.size": settings.max_message_bytes,
    }
    return {**config, **_base(settings, errors)}


def admin_config(settings: Settings, errors: ClientErrors | None = None) -> dict[str, Any]:
    """An admin client's configuration: its lookups never create a topic."""
    # An admin client is a producer to librdkafka, whose metadata requests ask the broker to
    # create a topic they name (on a broker with auto.create.topics.enable): a lookup of a
    # missing topic would make it with the broker's defaults, not `topics create`'s.
    return {"allow.auto.create.topics": False, **_base(settings, errors)}


#: auto.offset.reset's values (librdkafka's names and aliases) and the position each names.
_RESET_STARTS = {
    "smallest": OFFSET_BEGINNING,
    "earliest": OFFSET_BEGINNING,
    "beginning": OFFSET_BEGINNING,
    "largest": OFFSET_END,
    "latest": OFFSET_END,
    "end": OFFSET_END,
}


def reset_start(config: dict[str, object]) -> int:
    """Where auto.offset.reset starts a partition without a commit, as an explicit position.

    A handler that already read the group's commit and found none assigns this instead of
    OFFSET_INVALID: librdkafka would fetch the (absent) commit again and then look the reset
    offset up, which delays the first fetch of a new group by about 100 ms. OFFSET_INVALID
    for "error" (or an unknown value): librdkafka then decides.
    """
    return _RESET_STARTS.get(str(config.get("auto.offset.reset", "largest")), OFFSET_INVALID)


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


def usable(
    messages: Sequence[Message],
    role: str,
    report: ClientErrors | None = None,
    group: GroupOf | None = None,
) -> Iterator[Message]:
    """Messages that carry data; fatal errors raise, end-of-partition is skipped, others logged
    (and reported: a group or topic the ACLs refuse comes this way, not through error_cb)."""
    for message in messages:
        error = message.error()
        if error is None:
            yield message
            continue
        if error.fatal():
            raise KafkaException(error)
        if error.code() != KafkaError._PARTITION_EOF:
            # A subscribed topic that does not exist (yet): ops/topics.py names it and
            # `topics create`, at start and then at a slow interval; librdkafka's words only here.
            missing = error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            log.log(
                logging.DEBUG if missing else logging.WARNING, "%s consumer error: %s", role, error
            )
            if report is not None:
                report(error, group)


# How long one wait for room in a full producer queue serves delivery reports.
QUEUE_FULL_POLL = 0.1


def produce_waiting_for_room(
    producer: Producer,
    topic: str,
    key: str | bytes | None,
    value: str | bytes | None,
    *,
    on_delivery: Callable[[KafkaError | None, Message], None],
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> int:
    """Produce one message, waiting (serving delivery reports) while the queue is full.

    Returns how many times it had to wait. librdkafka frees room as the broker acknowledges,
    or as messages time out (their delivery reports then say so), so this always ends.
    """
    waits = 0
    while True:
        try:
            producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
            return waits
        except BufferError:
            waits += 1
            if waits == 1:
                log.warning("producer queue full; waiting for room (topic %s)", topic)
            producer.poll(QUEUE_FULL_POLL)
