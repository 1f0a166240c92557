"""The delivery steps on the reference store: open, publish, close, commit; and an outage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaError, KafkaException

from digest_stream.clock import ManualClock
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.delivery import Delivery
from digest_stream.roles.runner import Runner
from digest_stream.settings import Settings
from digest_stream.store import MemoryStore, NewRecord
from digest_stream.wire import codec
from digest_stream.wire.models import Event
from tests.support.fakes import FakeConsumer, FakeProducer, message
from tests.unit.roles.delivery.rig import (
    OUTPUT,
    SCHEDULE,
    FlakyStore,
    entry,
    one_each,
    ready,
    rig,
    settings_for,
    started,
)


def test_a_ready_timeline_is_published_closed_and_committed() -> None:
    store = MemoryStore()
    delivery, consumer, producer, metrics = rig(store)
    ready(store, "t1", 3)
    entry(consumer, "t1", 0)
    assert delivery.step() == 1
    ((key, value),) = producer.on(OUTPUT)
    digest = codec.decode_digest(value or b"")
    assert key == b"t1"
    assert [r.id for r in digest.records] == ["r2", "r1", "r0"]
    info = store.inspect(0, "t1")  # closed: cooling down, nothing pending
    assert info is not None
    assert (info.state, info.pending, info.last_delivery) == (
        "cooling",
        0,
        2000.0,
    )
    assert consumer.committed_offsets == {0: 1}
    assert metrics.value("digest_digests_published_total") == 1


def test_a_repeated_entry_of_a_delivered_timeline_is_stale_and_committed() -> None:
    store = MemoryStore()
    delivery, consumer, producer, metrics = rig(store)
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    delivery.step()
    entry(consumer, "t1", 1)
    assert delivery.step() == 0
    assert len(producer.on(OUTPUT)) == 1
    assert metrics.value("digest_stale_entries_total") == 1
    assert consumer.committed_offsets == {0: 2}


def test_a_redis_outage_pauses_and_keeps_polling_like_ingest() -> None:
    store = FlakyStore(failures=3)
    delivery, consumer, producer, metrics = rig(store)
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    assert delivery.step() == 1
    assert consumer.pauses >= 1
    assert consumer.paused == set()
    assert consumer.polls >= 3  # served the group while waiting, never a bare sleep
    assert len(producer.on(OUTPUT)) == 1
    assert metrics.value("digest_redis_errors_total") == 3


def test_a_revoked_partition_is_not_committed_by_a_later_batch() -> None:
    store = MemoryStore()
    delivery, consumer, _, _ = rig(store)
    consumer.revoke([0])
    assert delivery.assigned == frozenset()
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)  # a message of the revoked partition still in hand
    delivery.step()
    assert consumer.committed_offsets == {}


def test_an_assignment_says_where_each_partition_starts() -> None:
    # The commit where there is one, else auto.offset.reset's position ("earliest"), not
    # OFFSET_INVALID: librdkafka would fetch the commit again and look the position up first.
    consumer = FakeConsumer(SCHEDULE, committed_offsets={1: 7})
    settings = Settings(schedule_topic=SCHEDULE, output_topic=OUTPUT, batch_timeout=0.0)
    started(settings, MemoryStore(), consumer, FakeProducer(), partitions=(0, 1))
    assert [(tp.partition, tp.offset) for tp in consumer.assigned] == [
        (0, OFFSET_BEGINNING),
        (1, 7),
    ]


def test_an_assignment_whose_commit_cannot_be_read_is_left_to_the_consumer() -> None:
    store = MemoryStore()
    consumer = FakeConsumer(SCHEDULE, commits_unreadable=True)
    settings = Settings(schedule_topic=SCHEDULE, output_topic=OUTPUT, batch_timeout=0.0)
    producer = FakeProducer()
    delivery = started(settings, store, consumer, producer)
    assert [(tp.partition, tp.offset) for tp in consumer.assigned] == [(0, OFFSET_INVALID)]
    assert delivery.assigned == frozenset({0})
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    assert delivery.step() == 1
    assert [key for key, _ in producer.on(OUTPUT)] == [b"t1"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "truncated"),  # a tombstone
        (b"\x02t\x00\x02", "truncated"),  # cut before the reason
        (b"\x02t\x00\x02\x06", "invalid-avro"),  # a fourth reason
        (b"\x02t\x00\x02\x00\x00", "trailing-bytes"),  # a field this schema lacks
        (b"\x02t\x01\x02\x00", "invalid-value"),  # partition -1
        (b"\x00\x00\x00\x00\x01\x02t\x00\x02\x00\x00", "trailing-bytes"),  # framed
    ],
)
def test_an_unreadable_entry_is_dead_lettered_with_the_codecs_reason(
    value: bytes, reason: str
) -> None:
    with pytest.raises(codec.DecodeError) as refused:
        codec.decode_schedule_entry(value)
    assert refused.value.reason == reason
    store = MemoryStore()
    settings = Settings(
        schedule_topic=SCHEDULE, output_topic=OUTPUT, dlq_topic="dlq", batch_timeout=0.0
    )
    consumer, producer, metrics = FakeConsumer(SCHEDULE), FakeProducer(), Metrics()
    delivery = started(settings, store, consumer, producer, metrics)
    consumer.queued.append(message(SCHEDULE, 0, 0, b"t", value))
    assert delivery.step() == 0
    producer.flush()
    assert producer.on("dlq") == [(b"t", value)]
    assert metrics.value("digest_dead_letters_total", reason=reason) == 1
    assert consumer.committed_offsets == {0: 1}


@dataclass
class RefusingProducer(FakeProducer):
    """Refuses every produce to the output at once, as librdkafka does for a message over its
    limit (MSG_SIZE_TOO_LARGE) or to a topic it found missing (_UNKNOWN_TOPIC)."""

    code: int = KafkaError.MSG_SIZE_TOO_LARGE

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        if topic == OUTPUT:
            raise KafkaException(KafkaError(self.code))
        super().produce(topic, *args, **kwargs)


def test_an_output_the_producer_refuses_for_a_fixable_cause_is_retried_and_stays_open() -> None:
    store = MemoryStore()
    settings = settings_for(dlq_topic="dlq", max_attempts=2)
    consumer, producer = FakeConsumer(SCHEDULE), RefusingProducer(code=KafkaError._UNKNOWN_TOPIC)
    metrics = Metrics()
    delivery = started(settings, store, consumer, producer, metrics)
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    assert delivery.step() == 0  # no exception: the entry is dead-lettered after 2 attempts
    producer.flush()
    (dead,) = producer.on("dlq")
    assert dead[0] == b"t1"
    assert metrics.value("digest_dead_letters_total", reason="publish-failed") == 1
    assert metrics.value("digest_publish_retries_total") == 1
    info = store.inspect(0, "t1")
    assert info is not None
    assert info.open_digest is not None  # still open: nothing dropped


def test_an_output_the_producer_refuses_for_good_is_dead_lettered_and_closed() -> None:
    # Issue 36 b: too large is never retried into fitting; left open, the digest would hold
    # its timeline behind it for ever. Refused at once, as librdkafka does over its limit.
    store = MemoryStore()
    settings = settings_for(dlq_topic="dlq", max_attempts=5)
    consumer, producer, metrics = FakeConsumer(SCHEDULE), RefusingProducer(), Metrics()
    delivery = started(settings, store, consumer, producer, metrics)
    ready(store, "t1", 2)
    entry(consumer, "t1", 0)
    assert delivery.step() == 0  # no exception, and nothing published
    producer.flush()
    (dead,) = producer.on("dlq")
    assert dead[0] == b"t1"
    assert metrics.value("digest_dead_letters_total", reason="publish-refused") == 1
    assert metrics.value("digest_events_dropped_total", reason="refused") == 2
    assert metrics.value("digest_publish_retries_total") == 0  # one attempt: it can never go
    info = store.inspect(0, "t1")
    assert info is not None
    assert (info.open_digest, info.open_records, info.state) == (None, 0, "cooling")
    assert consumer.committed_offsets == {0: 1}


def test_a_digest_refused_with_the_batch_it_was_in_is_tried_alone_before_it_is_given_up() -> None:
    # The broker refuses a record batch as a whole, and librdkafka fails every message of it:
    # t2 came back MSG_SIZE_TOO_LARGE only for t1's size. Alone, t1 is refused again, t2 goes.
    store = MemoryStore()
    settings = settings_for(dlq_topic="dlq", max_attempts=5)
    consumer, producer, metrics = FakeConsumer(SCHEDULE), FakeProducer(), Metrics()
    producer.refuse_next, producer.refuse_with = 3, KafkaError.MSG_SIZE_TOO_LARGE
    delivery = started(settings, store, consumer, producer, metrics)
    one_each(store, ["t1", "t2"])
    entry(consumer, "t1", 0)
    entry(consumer, "t2", 1)
    assert delivery.step() == 1
    producer.flush()
    ((key, _),) = producer.on(OUTPUT)
    assert key == b"t2"
    (dead,) = producer.on("dlq")
    assert dead[0] == b"t1"
    assert [t for t, _, _ in producer.refused] == [OUTPUT] * 3  # the batch, then t1 alone
    assert metrics.value("digest_events_dropped_total", reason="refused") == 1
    assert metrics.value("digest_publish_retries_total") == 0
    assert consumer.committed_offsets == {0: 2}


def test_a_digest_the_broker_refuses_for_good_is_closed_and_the_timeline_goes_on() -> None:
    store = MemoryStore()
    settings = settings_for(dlq_topic="dlq", max_attempts=5, minimum_delay=0.0)
    consumer, producer, metrics = FakeConsumer(SCHEDULE), FakeProducer(), Metrics()
    producer.refuse_next, producer.refuse_with = 2, KafkaError.MSG_SIZE_TOO_LARGE  # and alone
    delivery = started(settings, store, consumer, producer, metrics)
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    assert delivery.step() == 0
    assert metrics.value("digest_dead_letters_total", reason="publish-refused") == 1
    info = store.inspect(0, "t1")
    assert info is not None
    assert info.open_digest is None
    # A later record is the timeline's next digest, not stuck behind the refused one.
    late = codec.encode_event(Event(id="late", timestamp=2_001_000, payload=b"p"))
    store.add(0, [NewRecord("t1", "late", 2001.0, late, 5)], 2001.0)
    assert [due.timeline for due in store.schedule(0, 2500.0)] == ["t1"]
    entry(consumer, "t1", 1)
    assert delivery.step() == 1
    ((_, value),) = producer.on(OUTPUT)
    assert [r.id for r in codec.decode_digest(value or b"").records] == ["late"]


def test_an_expired_timeline_is_counted_and_logged_per_timeline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    delivery, consumer, _, metrics = rig(store)
    ready(store, "t1", 2)
    store.expire(0, "t1")  # the ttl ran out while nobody delivered it
    entry(consumer, "t1", 0)
    delivery.step()
    assert metrics.value("digest_timelines_expired_total") == 1
    assert "timeline t1: records expired" in caplog.text


class SlowBroker(FakeProducer):
    """Acknowledges only after ``delay`` seconds of ``clock`` time: a publish that takes time."""

    def __init__(self, clock: ManualClock, delay: float) -> None:
        super().__init__()
        self.clock, self.delay = clock, delay

    def flush(self, timeout: float = -1) -> int:
        if self.pending:
            self.clock.advance(self.delay)
        return super().flush(timeout)


def test_next_delivery_at_is_the_due_time_the_close_sets_when_a_publish_crosses_a_fire() -> None:
    # Every minute: the batch is taken and encoded at 59.5 s, the broker acknowledges at 60.5 s,
    # past the fire at 60 s (issue 20). The digest must name what the close then does.
    minute = 1_800_000_000.0  # a whole minute
    settings = Settings(
        schedule_topic=SCHEDULE, output_topic=OUTPUT, batch_timeout=0.0, schedule="* * * * *"
    )
    store = MemoryStore(policy=settings.policy())
    ready(store, "t1", 2)
    store.schedule(0, minute)  # its first fire: READY
    clock = ManualClock(minute + 59.5)
    consumer, producer = FakeConsumer(SCHEDULE), SlowBroker(clock, 1.0)
    runner = Runner(settings, "delivery", consumer=consumer.as_consumer())
    delivery = Delivery(settings, store, clock, Metrics(), producer.as_producer(), runner)
    runner.start(delivery, lambda: False)
    consumer.assign([0])
    entry(consumer, "t1", 0)
    assert delivery.step() == 1
    assert clock.now() == minute + 60.5
    ((_, value),) = producer.on(OUTPUT)
    info = store.inspect(0, "t1")
    assert info.state == "waiting"
    assert info.due is not None
    assert codec.decode_digest(value or b"").next_delivery_at == int(info.due * 1000)
    # The fire at 60 s is not skipped: records that came while it was encoded go out then.
    assert info.due == minute + 60


def test_a_pause_for_publish_retries_ends_naming_the_broker_not_redis(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 26: after its publish retries delivery logged "Redis reachable again" though Redis
    was never down; the resume now names what the pause was for."""
    store = MemoryStore()
    delivery, consumer, producer, metrics = rig(store)
    producer.refuse_next = 1
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    with caplog.at_level("INFO", logger="digest_stream.roles.runner"):
        assert delivery.step() == 1
    assert metrics.value("digest_publish_retries_total") == 1
    resumed = [r.getMessage() for r in caplog.records if "partitions resumed" in r.getMessage()]
    assert resumed == ["delivery: the output topic took them; partitions resumed"]


def test_a_digest_retried_after_a_long_refusal_names_a_next_delivery_after_it_goes_out() -> None:
    """Issue 26, item 3 on delivery's path: the first attempt is refused after 120 s of
    broker trouble (past minimum_delay); the retry is built again at its own time, so the
    digest names a next delivery after it goes out, and the close sets exactly that."""
    settings = settings_for(dlq_topic="dlq", minimum_delay=60.0)
    store = MemoryStore(policy=settings.policy())
    ready(store, "t1", 1)
    clock = ManualClock(1_800_000_000.0)
    consumer, producer = FakeConsumer(SCHEDULE), SlowBroker(clock, 120.0)
    producer.refuse_next = 1
    delivery = started(settings, store, consumer, producer, clock=clock)
    entry(consumer, "t1", 0)
    taken_at = clock.now()
    assert delivery.step() == 1
    ((_, value),) = producer.on(OUTPUT)
    digest = codec.decode_digest(value or b"")
    retried_at = taken_at + 120.0  # built again after the refused attempt's 120 s
    assert digest.next_delivery_at == int((retried_at + 60.0) * 1000)
    assert digest.next_delivery_at > int(retried_at * 1000)  # not in the past when sent
    info = store.inspect(0, "t1")
    assert (info.last_delivery, info.due) == (retried_at, retried_at + 60.0)
