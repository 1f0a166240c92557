"""An ingest role (with its scheduler) on a fake broker and the reference store, for unit tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from digest_stream.clock import Clock, SystemClock
from digest_stream.ops.hooks import NO_HOOKS
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest import ingest_role
from digest_stream.roles.publish import DigestPublisher
from digest_stream.settings import Settings
from digest_stream.store import MemoryStore
from digest_stream.store.base import AddResult
from digest_stream.wire import codec
from digest_stream.wire.models import DigestReason, Event, ScheduleReason
from tests.support.fakes import FakeConsumer, FakeProducer, FakeTopics, message
from tests.support.store_errors import unreachable

EVENTS, SCHEDULE, OUTPUT, DLQ = "events", "schedule", "output", "dlq"


class FlakyStore(MemoryStore):
    """The reference store, unreachable for the first ``failures`` adds."""

    def __init__(self, failures: int, error: Exception | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures
        self.error = error or unreachable()

    def add(self, *args: Any, **kwargs: Any) -> AddResult:
        if self.failures:
            self.failures -= 1
            raise self.error
        return super().add(*args, **kwargs)


class IngestRig:
    """One started ingest role; `send` queues events, `step_until` steps it."""

    def __init__(
        self, store: MemoryStore | None = None, clock: Clock | None = None, **settings: Any
    ) -> None:
        self.settings = Settings(
            events_topic=EVENTS,
            schedule_topic=SCHEDULE,
            output_topic=OUTPUT,
            dlq_topic=DLQ,
            batch_timeout=0.0,
            retry_backoff_initial=0.001,
            retry_backoff_max=0.01,
            **settings,
        )
        self.store = store or MemoryStore(policy=self.settings.policy())
        self.consumer = FakeConsumer(EVENTS)
        self.producer = FakeProducer()
        self.metrics = Metrics()
        self.topics = FakeTopics()
        self.clock = clock or SystemClock()
        producer = self.producer.as_producer()
        # As App wires it: the leading edge publishes through the one publisher.
        publisher = None
        if self.settings.direct_leading_edge:
            publisher = DigestPublisher(
                self.settings, producer, self.metrics, NO_HOOKS, self.clock, "ingest"
            )
        runner, self.ingest = ingest_role(
            self.settings,
            self.store,
            self.clock,
            self.metrics,
            producer,
            consumer=self.consumer.as_consumer(),
            topics=self.topics,
            publisher=publisher,
        )
        runner.start(self.ingest, lambda: False)
        self.offsets = 0

    def send(
        self, key: bytes | None, record_id: str = "r", partition: int = 0, age: float = 0.0
    ) -> None:
        """Queue one event (key None: a keyless message) at the next offset."""
        value = codec.encode_event(
            Event(id=record_id, timestamp=int((time.time() - age) * 1000), payload=b"p")
        )
        self.consumer.queued.append(message(EVENTS, partition, self.offsets, key, value))
        self.offsets += 1

    def step_until(self, condition: Callable[[], bool], steps: int = 20) -> None:
        """Step the role until `condition` holds: `steps` times, then (work on the role's
        helper threads, such as the leading edge's closes, may still be running) for up to
        5 seconds more."""
        deadline = time.monotonic() + 5.0
        taken = 0
        while not condition():
            if taken >= steps:
                assert time.monotonic() < deadline, f"not reached in {taken} steps"
                time.sleep(0.005)
            self.ingest.step()
            taken += 1

    def entries(self) -> list[tuple[str, ScheduleReason]]:
        """The schedule entries produced: (timeline, reason)."""
        decoded = [codec.decode_schedule_entry(v or b"") for _, v in self.producer.on(SCHEDULE)]
        return [(e.timeline, e.reason) for e in decoded]

    def digests(self) -> list[tuple[str, str, DigestReason | None, list[str]]]:
        """The digests produced: (timeline, id, reason, record ids)."""
        out = [codec.decode_digest(v or b"") for _, v in self.producer.on(OUTPUT)]
        return [(d.timeline, d.id, d.reason, [r.id for r in d.records]) for d in out]
