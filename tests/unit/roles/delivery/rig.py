"""A delivery on the broker-free fakes and the reference store, for the delivery's tests."""

from __future__ import annotations

from typing import Any

from digest_stream.clock import ManualClock
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.delivery import Delivery
from digest_stream.roles.runner import Runner
from digest_stream.settings import Settings
from digest_stream.store import MemoryStore, NewRecord
from digest_stream.store.base import OpenDigest
from digest_stream.store.errors import InvalidState
from digest_stream.wire import codec
from digest_stream.wire.models import Event, ScheduleEntry, ScheduleReason
from tests.support.fakes import FakeConsumer, FakeProducer, message
from tests.support.store_errors import unreachable

SCHEDULE, OUTPUT = "schedule", "output"


class FlakyStore(MemoryStore):
    """The reference store, unreachable for the first ``failures`` open_many calls."""

    def __init__(self, failures: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures

    def open_many(self, targets: Any, now: float) -> list[OpenDigest | InvalidState]:
        if self.failures:
            self.failures -= 1
            raise unreachable()
        return super().open_many(targets, now)


def settings_for(**overrides: Any) -> Settings:
    """The rig's settings (its topics, no batch wait, millisecond backoffs), with overrides."""
    return Settings(
        **{
            "schedule_topic": SCHEDULE,
            "output_topic": OUTPUT,
            "batch_timeout": 0.0,
            "retry_backoff_initial": 0.001,
            "retry_backoff_max": 0.01,
            **overrides,
        }
    )


def rig(store: MemoryStore) -> tuple[Delivery, FakeConsumer, FakeProducer, Metrics]:
    settings = settings_for()
    consumer, producer, metrics = FakeConsumer(SCHEDULE), FakeProducer(), Metrics()
    delivery = started(settings, store, consumer, producer, metrics)
    return delivery, consumer, producer, metrics


def started(
    settings: Settings,
    store: MemoryStore,
    consumer: FakeConsumer,
    producer: FakeProducer,
    metrics: Metrics | None = None,
    partitions: tuple[int, ...] = (0,),
    clock: ManualClock | None = None,
) -> Delivery:
    """A started delivery on these fakes, assigned ``partitions``."""
    runner = Runner(settings, "delivery", consumer=consumer.as_consumer())
    delivery = Delivery(
        settings,
        store,
        clock or ManualClock(2000.0),
        metrics or Metrics(),
        producer.as_producer(),
        runner,
    )
    runner.start(delivery, lambda: False)
    consumer.assign(list(partitions))
    return delivery


def ready(store: MemoryStore, timeline: str, n: int) -> None:
    records = [
        NewRecord(
            timeline=timeline,
            id=f"r{i}",
            timestamp=1000.0 + i,
            payload=codec.encode_event(Event(id=f"r{i}", timestamp=1_000_000 + i, payload=b"p")),
            offset=i,
        )
        for i in range(n)
    ]
    store.add(0, records, 1999.0)


def entry(consumer: FakeConsumer, timeline: str, offset: int) -> None:
    entry = ScheduleEntry(
        timeline=timeline, partition=0, scheduled_at=1_999_000, reason=ScheduleReason.IMMEDIATE
    )
    value = codec.encode_schedule_entry(entry)
    consumer.queued.append(message(SCHEDULE, 0, offset, timeline.encode(), value))


def one_each(store: MemoryStore, timelines: list[str], first_offset: int = 0) -> None:
    """One record on each of these timelines (partition 0), from ``first_offset`` on."""
    store.add(
        0,
        [
            NewRecord(
                timeline=timeline,
                id=f"{timeline}-r",
                timestamp=1000.0,
                payload=codec.encode_event(
                    Event(id=f"{timeline}-r", timestamp=1_000_000, payload=b"p")
                ),
                offset=first_offset + i,
            )
            for i, timeline in enumerate(timelines)
        ],
        1999.0,
    )


def queued(store: MemoryStore, consumer: FakeConsumer, timelines: list[str]) -> None:
    """One record on each timeline, and its schedule entry at offsets 0, 1, ..."""
    one_each(store, timelines)
    for offset, timeline in enumerate(timelines):
        entry(consumer, timeline, offset)
