"""Dead letters: bad input goes to the DLQ topic with its reason and source coordinates."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from digest_stream.kafka import produce_waiting_for_room
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
            if error is None:
                return
            if error.code() == KafkaError.MSG_SIZE_TOO_LARGE and value:
                # The DLQ topic cannot take it whole (it could never): send the coordinates
                # and the reason without the value, so the source stays findable, not lost.
                log.error("dead letter for %s[%d]@%d too large; sent without its value", *source)
                self._metrics.dead_letters_truncated.inc()
                cut = [*headers, ("dlq.value-dropped", str(len(value)).encode())]
                self._produce(key, None, cut, on_delivery)
                return
            log.error("dead letter for %s[%d]@%d was refused: %s", *source, error)
            self._failed.append(source)

        self._produce(key, value, headers, on_delivery)
        self._metrics.dead_letters.labels(reason=reason).inc()
        if self._hooks:
            self._hooks.on_dead_letter(reason, detail, source)
        log.warning(
            "dead-lettered %s[%d]@%d: %s %s", topic, partition, offset, reason, detail[:200]
        )

    def _produce(
        self,
        key: str | bytes | None,
        value: str | bytes | None,
        headers: list[tuple[str, str | bytes | None]],
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:
        try:
            produce_waiting_for_room(
                self._producer, self._topic, key, value, headers=headers, on_delivery=on_delivery
            )
        except KafkaException as exc:
            # Refused before it left (larger than the producer allows): same as a refusal.
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None:
                raise
            on_delivery(error, Message(topic=self._topic))
