"""What every role does with its Kafka consumer: join, take batches, commit, and ride out outages.

Ingest and delivery share this one piece, so a Redis outage looks the same in both: the role
pauses its partitions and keeps polling (so the group keeps it as a member and rebalances still
run), backs off, and resumes when Redis answers. Neither role can be evicted from its group by an
outage longer than ``max.poll.interval.ms``, because neither sleeps without polling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from prometheus_client import Counter
from tenacity import RetryCallState

from digest_stream.kafka import consumer_config, incremental
from digest_stream.roles.retry import until_redis_answers
from digest_stream.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A rebalance handler of a role: the partition numbers given, taken away or lost.
Handler = Callable[[list[int]], None]


class RoleConsumer:
    """One role's consumer: subscription, batches, seeks, commits, lag and the outage pause."""

    def __init__(
        self,
        settings: Settings,
        group_id: str,
        topic: str,
        role: str,
        *,
        consumer: Consumer | None = None,
        rebalances: Counter | None = None,
    ) -> None:
        self.settings = settings
        self._rebalances = rebalances
        self.topic = topic
        self.role = role
        config = consumer_config(settings, group_id)
        # A user may choose cooperative-sticky (kafka_config); the handlers then assign
        # incrementally, as librdkafka requires.
        self._incremental = incremental(config)
        self.reset_start = reset_start(config)
        # Injectable: broker-free unit tests hand in a fake that records seeks and commits.
        self._consumer: Consumer = consumer or Consumer(config)
        self._paused = False

    @property
    def paused(self) -> bool:
        """Fetching is paused for an outage."""
        return self._paused

    def subscribe(
        self,
        *,
        on_assign: Callable[[list[TopicPartition]], list[TopicPartition]] | None = None,
        on_revoke: Handler,
        on_lost: Handler,
    ) -> None:
        """Join the group; the role's handlers run inside poll, on the role's thread.

        ``on_assign`` returns the start positions to assign (None: the committed offsets).
        """

        def assigned(consumer: object, partitions: list[TopicPartition]) -> None:
            if not partitions:
                return
            self._count("assigned", partitions)
            starts = on_assign(partitions) if on_assign is not None else partitions
            if self._incremental:
                self._consumer.incremental_assign(starts)
            else:
                self._consumer.assign(starts)
            if self._paused:
                # Assigned during an outage: stays paused like the rest until it ends.
                self._consumer.pause(starts)

        def revoked(consumer: object, partitions: list[TopicPartition]) -> None:
            self._count("revoked", partitions)
            on_revoke(sorted(tp.partition for tp in partitions))

        def lost(consumer: object, partitions: list[TopicPartition]) -> None:
            self._count("lost", partitions)
            on_lost(sorted(tp.partition for tp in partitions))

        self._consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def _count(self, kind: str, partitions: list[TopicPartition]) -> None:
        if self._rebalances is not None and partitions:
            self._rebalances.labels(role=self.role, kind=kind).inc(len(partitions))

    def take(self, max_messages: int, timeout: float) -> list[Message]:
        """A batch of data messages (see kafka.take_batch); consumer errors are logged."""
        return list(usable(take_batch(self._consumer, max_messages, timeout), self.role))

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        """The group's committed offsets of these partitions."""
        return self._consumer.committed(partitions, timeout=timeout)

    def committed_starts(
        self, partitions: list[TopicPartition], timeout: float
    ) -> list[TopicPartition]:
        """Where these partitions start when the group's commit decides, said explicitly.

        Each committed offset (with its leader epoch, for librdkafka's check), or where
        auto.offset.reset starts a partition the group never committed (see reset_start:
        left to librdkafka, it would fetch the commit again and look that position up before
        its first fetch). When the commit cannot be read, the partitions as given: librdkafka
        then fetches it itself, as before.
        """
        try:
            found = self.committed(partitions, timeout)
        except KafkaException as exc:
            log.warning(
                "%s: committed offsets unreadable at assignment (%s); the consumer looks them up",
                self.role,
                exc,
            )
            return partitions
        starts = []
        for tp in found:
            if tp.error is None and tp.offset >= 0:
                starts.append(tp)
            elif tp.error is None and tp.offset == OFFSET_INVALID:
                starts.append(TopicPartition(tp.topic, tp.partition, self.reset_start))
            else:
                starts.append(TopicPartition(tp.topic, tp.partition))  # librdkafka decides
        return starts

    def seek(self, partition: int, offset: int) -> None:
        """Move the read position of one assigned partition."""
        self._consumer.seek(TopicPartition(self.topic, partition, offset))

    def commit(self, offsets: dict[int, int], *, sync: bool) -> bool:
        """Commit next-to-read offsets by partition; False (logged) when the broker refused."""
        tps = [TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())]
        return commit(self._consumer, tps, sync)

    def lag(self) -> dict[int, int]:
        """Consumer lag per assigned partition (local calls only)."""
        return consumer_lag(self._consumer)

    def close(self) -> None:
        """Leave the group."""
        self._consumer.close()

    # ------------------------------------------------------------------ outages

    def wait_serving_group(self, seconds: float) -> None:
        """Sleep while keeping group membership: pause fetching and poll the consumer."""
        if not self._paused:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True
        message = self._consumer.poll(seconds)
        if message is not None and message.error() is None:
            # Fetched before the pause took hold: rewind so it is read again afterwards.
            self.seek(message.partition() or 0, message.offset() or 0)

    def resume(self, why: str = "Redis reachable again") -> None:
        """End an outage pause (no-op when not paused)."""
        if self._paused:
            self._consumer.resume(self._consumer.assignment())
            self._paused = False
            log.info("%s: %s; partitions resumed", self.role, why)

    def while_redis_down(
        self,
        call: Callable[[], T],
        *,
        give_up: Callable[[], bool],
        errors: Counter,
        recovered: Callable[[], None] | None = None,
    ) -> T:
        """Run ``call``, retrying with backoff while Redis is unreachable, serving the group.

        Each failed attempt is counted in ``errors`` and logged (the first loudly); after an
        outage ``recovered()`` runs. Raises the last error when ``give_up()`` says so (a stop,
        a partition that left).
        """

        failed = False

        def down(state: RetryCallState) -> None:
            nonlocal failed
            failed = True
            errors.inc()
            wait = state.next_action.sleep if state.next_action else 0.0
            log.log(
                logging.ERROR if state.attempt_number == 1 else logging.WARNING,
                "%s: Redis unreachable or refusing (%s); partitions paused, nothing committed; "
                "retry %d in %.2fs",
                self.role,
                state.outcome.exception() if state.outcome else "?",
                state.attempt_number,
                wait,
            )

        retrying = until_redis_answers(
            initial=self.settings.retry_backoff_initial,
            cap=self.settings.retry_backoff_max,
            sleep=self.wait_serving_group,
            give_up=give_up,
            on_retry=down,
        )
        try:
            result = retrying(call)
            if failed and recovered is not None:
                recovered()  # the outage is over: Redis may have come back with older state
            return result
        finally:
            self.resume()


def partitions_of(messages: Iterable[Message]) -> dict[int, list[Message]]:
    """Messages grouped by partition, in arrival order."""
    by_partition: dict[int, list[Message]] = {}
    for message in messages:
        by_partition.setdefault(message.partition() or 0, []).append(message)
    return by_partition


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
    for "error" (or an unknown value): librdkafka then decides, as before.
    """
    return _RESET_STARTS.get(str(config.get("auto.offset.reset", "largest")), OFFSET_INVALID)


def highest_offsets(messages: Sequence[Message]) -> dict[int, int]:
    """The next offset to read after these messages, by partition."""
    positions: dict[int, int] = {}
    for message in messages:
        partition, offset = message.partition(), message.offset()
        if partition is not None and offset is not None and offset >= 0:
            positions[partition] = max(positions.get(partition, 0), offset + 1)
    return positions


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
