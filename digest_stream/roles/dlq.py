"""Dead letters: bad input goes to the DLQ topic with its reason and source coordinates."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, Message, Producer

from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics

log = logging.getLogger(__name__)

# Header values are bounded so a pathological error text cannot bloat the DLQ.
_MAX_DETAIL = 1000


class DeadLetters:
    """Publishes refused messages to the DLQ topic and counts them by reason."""

    def __init__(
        self, producer: Producer, topic: str, metrics: Metrics, *, hooks: Hooks = NO_HOOKS
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._metrics = metrics
        self._hooks = hooks
        # Sources whose dead letter the broker refused: they must be dead-lettered again.
        self._failed: list[tuple[str, int, int]] = []

    def refused_partitions(self) -> set[int]:
        """Partitions with a refused dead letter not taken yet (looking does not take them)."""
        return {partition for _, partition, _ in self._failed}

    def take_failures(self) -> list[tuple[str, int, int]]:
        """(topic, partition, offset) of dead letters the broker refused since the last call."""
        failed, self._failed = self._failed, []
        return failed

    def send(self, message: Message, reason: str, detail: str = "") -> None:
        """Dead-letter a consumed message as is, with headers naming why and whence."""
        key, value = message.key(), message.value()
        source = (message.topic() or "", message.partition() or 0, message.offset() or 0)
        topic, partition, offset = source
        headers: list[tuple[str, str | bytes | None]] = [
            ("dlq.reason", reason.encode()),
            ("dlq.detail", detail[:_MAX_DETAIL].encode("utf-8", "replace")),
            ("dlq.source.topic", topic.encode()),
            ("dlq.source.partition", str(partition).encode()),
            ("dlq.source.offset", str(offset).encode()),
        ]
        # A key too long for Kafka's own limits would fail the DLQ write too: cut it.
        if isinstance(key, bytes | str) and len(key) > 4096:
            key = key[:4096]

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                log.error("dead letter for %s[%d]@%d was refused: %s", *source, error)
                self._failed.append(source)

        self._producer.produce(
            self._topic, key=key, value=value, headers=headers, on_delivery=on_delivery
        )
        self._metrics.dead_letters.labels(reason=reason).inc()
        if self._hooks:
            self._hooks.on_dead_letter(reason, detail, source)
        log.warning(
            "dead-lettered %s[%d]@%d: %s %s", topic, partition, offset, reason, detail[:200]
        )
