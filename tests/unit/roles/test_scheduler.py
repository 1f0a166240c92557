"""The scheduler and its emitter, on the reference store and a recording producer."""

from __future__ import annotations

from digest_stream.clock import ManualClock
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.scheduler import ScheduleEmitter, Scheduler
from digest_stream.settings import Settings
from digest_stream.store import MemoryStore, NewRecord
from digest_stream.wire import codec
from digest_stream.wire.models import ScheduleReason
from tests.support.fakes import FakeProducer

TOPIC = "schedule"


def _setup(**overrides: float) -> tuple[Scheduler, MemoryStore, FakeProducer, ManualClock, Metrics]:
    settings = Settings(schedule_topic=TOPIC, **overrides)  # type: ignore[arg-type]
    store = MemoryStore(policy=settings.policy())
    producer = FakeProducer()
    clock = ManualClock(1000.0)
    metrics = Metrics()
    emitter = ScheduleEmitter(producer.as_producer(), TOPIC, metrics)
    return Scheduler(settings, store, emitter, clock, metrics), store, producer, clock, metrics


def _reasons(producer: FakeProducer) -> list[tuple[str, ScheduleReason]]:
    entries = [codec.decode_schedule_entry(v or b"") for _, v in producer.on(TOPIC)]
    return [(e.timeline, e.reason) for e in entries]


def _ready(store: MemoryStore, clock: ManualClock, timeline: str) -> None:
    record = NewRecord(timeline=timeline, id="r", timestamp=clock.now(), payload=b"p", offset=0)
    assert store.add(0, [record], clock.now()).ready == [timeline]


def test_a_partition_taken_over_has_its_ready_timelines_announced_again() -> None:
    scheduler, store, producer, clock, metrics = _setup()
    _ready(store, clock, "t1")  # READY, but its IMMEDIATE entry died with the old owner
    scheduler.tick({0})
    assert _reasons(producer) == []  # a plain tick does not look at READY timelines
    scheduler.take_over([0])
    assert scheduler.due()
    scheduler.tick({0})
    producer.flush()
    assert _reasons(producer) == [("t1", ScheduleReason.RECOVERED)]
    scheduler.tick({0})  # once only
    producer.flush()
    assert len(_reasons(producer)) == 1
    assert metrics.value("digest_schedule_entries_total", reason="RECOVERED") == 1


def test_a_released_partition_is_not_recovered() -> None:
    scheduler, store, producer, clock, _ = _setup()
    _ready(store, clock, "t1")
    scheduler.take_over([0])
    scheduler.release([0])
    scheduler.tick({0})
    producer.flush()
    assert _reasons(producer) == []


def test_a_refused_entry_is_produced_again_not_dropped() -> None:
    scheduler, _, producer, _, metrics = _setup()
    producer.refuse_next = 1
    scheduler.emitter.emit(0, [("t1", 1000.0)], ScheduleReason.IMMEDIATE)
    producer.flush()  # the broker refuses it
    assert _reasons(producer) == []
    scheduler.tick(set())  # the next tick produces it again
    producer.flush()
    assert _reasons(producer) == [("t1", ScheduleReason.IMMEDIATE)]
    assert metrics.value("digest_schedule_retries_total") == 1


def test_a_full_producer_queue_is_waited_out() -> None:
    scheduler, _, producer, _, metrics = _setup()
    producer.queue_full_next = 3
    scheduler.emitter.emit(0, [("t1", 1000.0)], ScheduleReason.IMMEDIATE)
    producer.flush()
    assert producer.queue_full_raised == 3
    assert _reasons(producer) == [("t1", ScheduleReason.IMMEDIATE)]
    assert metrics.value("digest_producer_queue_full_total", role="scheduler") == 1


def test_due_timelines_are_announced_as_scheduled() -> None:
    scheduler, store, producer, clock, _ = _setup(minimum_delay=10.0)
    _ready(store, clock, "t1")
    digest = store.open(0, "t1", "a" * 32, clock.now())
    store.add(
        0,
        [NewRecord(timeline="t1", id="r2", timestamp=clock.now(), payload=b"p", offset=1)],
        clock.now(),
    )
    store.close(0, "t1", digest.id, clock.now())  # WAITING, due in 10 s
    scheduler.tick({0})
    clock.advance(10.0)
    scheduler.tick({0})
    producer.flush()
    assert _reasons(producer) == [("t1", ScheduleReason.SCHEDULED)]


def test_a_take_over_of_a_backlog_announces_each_ready_timeline_once_in_slices() -> None:
    scheduler, store, producer, clock, _ = _setup()
    names = [f"t{n}" for n in range(2500)]  # more than one store slice (1,000)
    records = [
        NewRecord(timeline=name, id="r", timestamp=clock.now(), payload=b"p", offset=n)
        for n, name in enumerate(names)
    ]
    assert len(store.add(0, records, clock.now()).ready) == 2500
    scheduler.take_over([0])
    scheduler.tick({0})
    producer.flush()
    announced = _reasons(producer)
    assert sorted(t for t, _ in announced) == sorted(names)
    assert {r for _, r in announced} == {ScheduleReason.RECOVERED}


def test_a_wall_clock_step_backwards_does_not_stop_ticks() -> None:
    settings = Settings(schedule_topic=TOPIC, scheduler_interval=0.25)
    store = MemoryStore(policy=settings.policy())
    clock = ManualClock(1_000_000.0)
    elapsed = [0.0]
    scheduler = Scheduler(
        settings,
        store,
        ScheduleEmitter(FakeProducer().as_producer(), TOPIC, Metrics()),
        clock,
        Metrics(),
        timer=lambda: elapsed[0],
    )
    scheduler.tick(set())
    assert not scheduler.due()
    clock.set(1_000_000.0 - 3600)  # NTP steps the wall clock back an hour
    elapsed[0] += 0.25  # a quarter second really passed
    assert scheduler.due()
