"""One runner owns each role's consumer: join, batches, commits, rebalances, lag and leaving.

A role is a policy object (``Role``): it takes its batches from the runner, decides what to
commit and when, and says where assigned partitions start and what losing them means; the
runner does everything that touches the consumer's life cycle, the same way for both roles
(arroyo's StreamProcessor is the model). A store outage looks the same in both too: the runner
pauses the role's partitions and keeps polling (so the group keeps it as a member and
rebalances still run), backs off, and resumes when the store answers. Neither role can be evicted
from its group by an outage longer than ``max.poll.interval.ms``, because neither sleeps
without polling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeVar

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)
from prometheus_client import Counter
from tenacity import RetryCallState

from digest_stream.kafka import (
    ClientErrors,
    consumer_config,
    incremental,
    reset_start,
    take_batch,
    usable,
)
from digest_stream.ops.failures import outage_line
from digest_stream.roles.retry import until_store_answers
from digest_stream.settings import Settings, env_name
from digest_stream.store import backend_of

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The roles that consume: ingest (the events topic) and delivery (the schedule topic).
RoleName = Literal["ingest", "delivery"]

# Bounded so an assignment handler (which reads the group's commit) stays well inside the
# group's rebalance budget.
COMMITTED_TIMEOUT = 10.0


class Role(Protocol):
    """What a runner runs: batches taken and committed through the runner, and rebalances."""

    def step(self) -> int:
        """Take and handle one batch (or none); returns how much it got done."""
        ...

    def close(self) -> None:
        """A graceful stop: finish the work in hand and commit it (the runner then leaves)."""
        ...

    def on_assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Partitions given to this member: returns where each starts."""
        ...

    def on_revoke(self, partitions: list[int]) -> None:
        """Partitions taken away in an orderly rebalance: commit what is done, let go."""
        ...

    def on_lost(self, partitions: list[int]) -> None:
        """Partitions lost (another member may own them already): let go, commit nothing."""
        ...


class Runner:
    """One role's consumer: subscription, batches, seeks, commits, lag and the outage pause."""

    def __init__(
        self,
        settings: Settings,
        role: RoleName,
        *,
        consumer: Consumer | None = None,
        rebalances: Counter | None = None,
        errors: ClientErrors | None = None,
    ) -> None:
        self.settings = settings
        self.role = role
        if role == "ingest":
            group_id, self.topic = settings.group_id, settings.events_topic
            self._group = (group_id, env_name("group_id"))
        else:
            group_id, self.topic = settings.delivery_group_id, settings.schedule_topic
            self._group = (group_id, env_name("delivery_group_id"))
        self._rebalances = rebalances
        self._errors = errors
        config = consumer_config(settings, group_id, errors)
        # A user may choose cooperative-sticky (kafka_config); the handlers then assign
        # incrementally, as librdkafka requires.
        self._incremental = incremental(config)
        self.reset_start = reset_start(config)
        # Injectable: broker-free unit tests hand in a fake that records seeks and commits.
        self._consumer: Consumer = consumer or Consumer(config)
        self._paused = False
        # What the resume says ended an outage pause: the store (its backend's name) answers.
        self._store_back = f"{backend_of(settings).label} reachable again"
        self._paused_for = self._store_back  # what the resume says ended the pause
        self._stopping: Callable[[], bool] = lambda: False
        self._closing = False

    # ------------------------------------------------------------------ life cycle

    def start(self, role: Role, stopping: Callable[[], bool]) -> None:
        """Join the group; the role's handlers run inside poll, on the role's thread.

        ``stopping()`` tells long waits (outages, publish retries) to give up.
        """
        self._stopping = stopping

        def assigned(consumer: object, partitions: list[TopicPartition]) -> None:
            if not partitions:
                return
            self._count("assigned", partitions)
            # An assignment that lands while close() leaves the group: nothing will be read,
            # and reading the commit would only time out against a closing consumer.
            starts = [] if self._closing else role.on_assign(partitions)
            if self._incremental:
                self._consumer.incremental_assign(starts)
            else:
                self._consumer.assign(starts)
            if self._paused:
                # Assigned during an outage: stays paused like the rest until it ends.
                self._consumer.pause(starts)
            else:
                # librdkafka keeps a partition's pause through a revocation or loss and the
                # next assignment: one paused by a wait that ended while it was unassigned
                # (a session lost during a broker restart) would never be fetched again.
                self._consumer.resume(starts)

        def revoked(consumer: object, partitions: list[TopicPartition]) -> None:
            self._count("revoked", partitions)
            role.on_revoke(sorted(tp.partition for tp in partitions))

        def lost(consumer: object, partitions: list[TopicPartition]) -> None:
            self._count("lost", partitions)
            role.on_lost(sorted(tp.partition for tp in partitions))

        self._consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def stopping(self) -> bool:
        """A stop was asked for: long retries give up."""
        return self._stopping()

    def close(self, role: Role) -> None:
        """Graceful stop: the role finishes and commits, then the consumer leaves the group."""
        try:
            role.close()
        finally:
            self._closing = True
            self._consumer.close()

    def _count(self, kind: str, partitions: list[TopicPartition]) -> None:
        if self._rebalances is not None and partitions:
            self._rebalances.labels(role=self.role, kind=kind).inc(len(partitions))

    # ------------------------------------------------------------------ batches and offsets

    @property
    def paused(self) -> bool:
        """Fetching is paused for an outage."""
        return self._paused

    def take(self, timeout: float) -> list[Message]:
        """A batch of up to batch_size data messages (kafka.take_batch); errors are logged."""
        batch = take_batch(self._consumer, self.settings.batch_size, timeout)
        return list(usable(batch, self.role, self._errors, self._group))

    def committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The group's committed offsets of these partitions (bounded: COMMITTED_TIMEOUT)."""
        return self._consumer.committed(partitions, timeout=COMMITTED_TIMEOUT)

    def committed_starts(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Where these partitions start when the group's commit decides, said explicitly.

        Each committed offset (with its leader epoch, for librdkafka's check), or where
        auto.offset.reset starts a partition the group never committed (see reset_start:
        left to librdkafka, it would fetch the commit again and look that position up before
        its first fetch). When the commit cannot be read, the partitions as given: librdkafka
        then fetches it itself.
        """
        try:
            found = self.committed(partitions)
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
        """Consumer lag per assigned partition (local, cheap; for the metrics scrape)."""
        return consumer_lag(self._consumer)

    # ------------------------------------------------------------------ outages

    def wait_serving_group(self, seconds: float, over: str | None = None) -> None:
        """Sleep while keeping group membership: pause fetching and poll the consumer.
        ``over``: what the resume will say ended the pause (by default: the store answers)."""
        if not self._paused:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True
            self._paused_for = over or self._store_back
        message = self._consumer.poll(seconds)
        if message is not None and message.error() is None:
            # Fetched before the pause took hold: rewind so it is read again afterwards.
            self.seek(message.partition() or 0, message.offset() or 0)

    def resume(self, why: str | None = None) -> None:
        """End an outage pause (no-op when not paused); ``why``: what ended it (by default,
        what the pause was for being over)."""
        if self._paused:
            self._consumer.resume(self._consumer.assignment())
            self._paused = False
            log.info("%s: %s; partitions resumed", self.role, why or self._paused_for)

    def while_store_down(
        self,
        call: Callable[[], T],
        *,
        give_up: Callable[[], bool] | None = None,
        errors: Counter,
        recovered: Callable[[], None] | None = None,
    ) -> T:
        """Run ``call``, retrying with backoff while the store is unavailable, serving the group.

        Each failed attempt is counted in ``errors`` and logged (the first loudly); after an
        outage ``recovered()`` runs. Raises the last error when ``give_up()`` says so (a stop,
        a partition that left; by default, a stop).
        """

        failed = False

        def down(state: RetryCallState) -> None:
            nonlocal failed
            failed = True
            errors.inc()
            wait = state.next_action.sleep if state.next_action else 0.0
            log.log(
                logging.ERROR if state.attempt_number == 1 else logging.WARNING,
                "%s: %s; partitions paused, nothing committed; retry %d in %.2fs",
                self.role,
                outage_line(state.outcome.exception() if state.outcome else None, self.settings),
                state.attempt_number,
                wait,
            )

        retrying = until_store_answers(
            initial=self.settings.retry_backoff_initial,
            cap=self.settings.retry_backoff_max,
            sleep=self.wait_serving_group,
            give_up=give_up or self.stopping,
            on_retry=down,
        )
        try:
            result = retrying(call)
            if failed and recovered is not None:
                recovered()  # the outage is over: the store may have come back with older state
            return result
        finally:
            self.resume()


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
