"""Broker-free stand-ins for the roles' unit tests: a consumer and a producer that record calls.

Only for unit tests of the roles' logic; integration tests use the real broker.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from digest_stream.roles.ingest.topic import TopicId

DeliveryReport = Callable[[KafkaError | None, Message], None]


def message(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
) -> Message:
    """A consumed message as confluent-kafka hands it over."""
    return Message(topic=topic, partition=partition, offset=offset, key=key, value=value)


@dataclass
class FakeConsumer:
    """Delivers queued messages from poll/consume and records seeks, pauses and commits."""

    topic: str
    committed_offsets: dict[int, int] = field(default_factory=dict)
    queued: list[Message] = field(default_factory=list)
    seeks: list[tuple[int, int]] = field(default_factory=list)
    commits: list[dict[int, int]] = field(default_factory=list)
    paused: set[int] = field(default_factory=set)
    pauses: int = 0
    polls: int = 0
    assigned: list[TopicPartition] = field(default_factory=list)
    callbacks: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    commits_unreadable: bool = False  # committed() times out, as with no coordinator

    def as_consumer(self) -> Consumer:
        """This fake, typed as the real thing for the role constructors."""
        return cast(Consumer, self)

    # -- what the tests drive
    def assign(self, partitions: list[int] | list[TopicPartition]) -> None:
        """Tests: run the assignment callback as librdkafka would, inside poll (partition
        numbers). The role: set the whole assignment (TopicPartitions), as Consumer.assign."""
        if partitions and isinstance(partitions[0], TopicPartition):
            self.assigned = [tp for tp in partitions if isinstance(tp, TopicPartition)]
            return
        numbers = [p for p in partitions if isinstance(p, int)]
        self.callbacks["on_assign"](self, [TopicPartition(self.topic, p) for p in numbers])

    def revoke(self, partitions: list[int]) -> None:
        """Run the revocation callback."""
        self.callbacks["on_revoke"](self, [TopicPartition(self.topic, p) for p in partitions])
        self.assigned = [tp for tp in self.assigned if tp.partition not in partitions]

    def lose(self, partitions: list[int]) -> None:
        """Run the loss callback."""
        self.callbacks["on_lost"](self, [TopicPartition(self.topic, p) for p in partitions])
        self.assigned = [tp for tp in self.assigned if tp.partition not in partitions]

    # -- the Consumer surface the roles use
    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def _ready(self) -> list[Message]:
        return [m for m in self.queued if m.partition() not in self.paused]

    def poll(self, timeout: float) -> Message | None:
        self.polls += 1
        ready = self._ready()
        if not ready:
            return None
        self.queued.remove(ready[0])
        return ready[0]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        taken = self._ready()[:num_messages]
        for m in taken:
            self.queued.remove(m)
        return taken

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.commits_unreadable:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [
            TopicPartition(tp.topic, tp.partition, self.committed_offsets.get(tp.partition, -1001))
            for tp in partitions
        ]

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        batch = {tp.partition: tp.offset for tp in offsets}
        self.commits.append(batch)
        self.committed_offsets.update(batch)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += partitions

    def assignment(self) -> list[TopicPartition]:
        return list(self.assigned)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.pauses += 1
        self.paused.update(tp.partition for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused.difference_update(tp.partition for tp in partitions)

    def seek(self, partition: TopicPartition) -> None:
        self.seeks.append((partition.partition, partition.offset))

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return partitions

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = 0, cached: bool = False
    ) -> tuple[int, int]:
        return (0, 0)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeProducer:
    """Keeps produced messages; acknowledges them on poll/flush, or refuses/fills on demand."""

    produced: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)
    pending: list[tuple[DeliveryReport | None, Message]] = field(default_factory=list)
    refuse_next: int = 0  # how many of the next deliveries fail
    refuse_with: int = KafkaError._MSG_TIMED_OUT  # with this error code
    queue_full_next: int = 0  # how many of the next produce calls raise BufferError
    queue_full_raised: int = 0
    hold: bool = False  # acknowledge nothing (as a broker that never answers)
    refused: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)

    def as_producer(self) -> Producer:
        """This fake, typed as the real thing for the role constructors."""
        return cast(Producer, self)

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Any = None,
        on_delivery: DeliveryReport | None = None,
        **_: Any,
    ) -> None:
        if self.queue_full_next:
            self.queue_full_next -= 1
            self.queue_full_raised += 1
            raise BufferError("Local: Queue full")
        self.pending.append((on_delivery, Message(topic=topic, key=key, value=value)))

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], **_: Any) -> int:
        """As librdkafka's batch produce: each message as ``produce`` takes it, one it refuses
        (no room, too large) gets an ``_error`` and no report; returns how many were queued."""
        queued = 0
        for message in messages:
            try:
                self.produce(
                    topic, message.get("value"), message.get("key"),
                    on_delivery=message.get("callback"),
                )  # fmt: skip
            except BufferError:
                message["_error"] = KafkaError(KafkaError._QUEUE_FULL)
            except KafkaException as exc:
                message["_error"] = exc.args[0]
            else:
                queued += 1
        return queued

    def _report(self) -> int:
        if self.hold:
            return 0
        pending, self.pending = self.pending, []
        for callback, msg in pending:
            error = None
            if self.refuse_next:
                self.refuse_next -= 1
                error = KafkaError(self.refuse_with)
                self.refused.append((msg.topic() or "", msg.key(), msg.value()))
            else:
                self.produced.append((msg.topic() or "", msg.key(), msg.value()))
            if callback is not None:
                callback(error, msg)
        return len(pending)

    def poll(self, timeout: float = 0) -> int:
        return self._report()

    def flush(self, timeout: float = -1) -> int:
        self._report()
        return 0

    def on(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        """Acknowledged (key, value) pairs of one topic."""
        return [(k, v) for t, k, v in self.produced if t == topic]


@dataclass
class FakeTopics:
    """The events topic as a broker would describe it: an id (None: cannot tell) and ends."""

    topic_id: str | None = "AAAAAAAAAAAAAAAAAAAAAQ"
    ends: dict[int, int] = field(default_factory=dict)
    refreshes: int = 0
    fresh: bool = True  # False: the broker could not tell now (topic_id is the last seen)
    partitions: int | None = None

    @property
    def topic(self) -> TopicId:
        return TopicId(self.topic_id, self.fresh)

    def refresh(self, partitions: Collection[int]) -> dict[int, int]:
        self.refreshes += 1
        return {p: self.ends[p] for p in partitions if p in self.ends}
