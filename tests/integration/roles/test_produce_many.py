"""Producing many digests in one batch call (``DigestPublisher.produce_many``), on the real
broker: keys and partitions as one produce per digest gives, headers kept (such a digest goes
on its own: the batch call cannot carry them), a queue with no room for all of them, and a
digest the producer refuses at once."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer

from digest_stream.clock import SystemClock
from digest_stream.kafka import producer_config
from digest_stream.ops.hooks import NO_HOOKS
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.publish import DigestPublisher, Pending
from digest_stream.settings import Settings
from digest_stream.store.base import OpenDigest, StoredRecord
from digest_stream.store.due import next_due
from digest_stream.wire import codec, envelope
from digest_stream.wire.models import Event
from tests.support import unique, wait_until
from tests.support.kafka import Collector, TopicFactory


def _digests(count: int, payload: bytes = b"p", headers: bool = False) -> list[OpenDigest]:
    rule = next_due(Settings().policy())
    now = time.time()
    out = []
    millis = int(now * 1000)
    traced = frozenset({"trace"})
    for n in range(count):
        event = codec.encode_event(Event(id=f"r{n}", timestamp=millis, payload=payload))
        stored = envelope.wrap([("trace", f"t{n}")], traced, event) if headers else event
        record = StoredRecord(f"r{n}", millis / 1000, stored)
        out.append(OpenDigest(uuid.uuid4().hex, unique("tl"), [record], 0, now, next_due=rule))
    return out


def _publisher(
    kafka_bootstrap: str, output: str, **producer: object
) -> tuple[Settings, DigestPublisher, Producer, Metrics]:
    """The ingest's publisher to ``output``, its producer configured with ``producer`` too."""
    settings = Settings(kafka_bootstrap_servers=kafka_bootstrap, output_topic=output)
    kafka = Producer({**producer_config(settings), **producer})
    metrics = Metrics()
    publisher = DigestPublisher(settings, kafka, metrics, NO_HOOKS, SystemClock(), "ingest")
    return settings, publisher, kafka, metrics


def _leading(publisher: DigestPublisher, digests: list[OpenDigest]) -> list[Pending]:
    """Each digest prepared as the ingest's leading edge does, all closing now."""
    now = time.time()
    return [publisher.prepare_leading(0, digest, now) for digest in digests]


def _acknowledged(kafka: Producer, items: list[Pending]) -> None:
    def settled() -> bool:
        kafka.poll(0.1)
        return all(item.acknowledged or item.errors for item in items)

    wait_until(settled, 30, "every digest acknowledged or refused")


def _landed(settings: Settings, output: str, count: int) -> list[str]:
    """The ids of the digests on ``output`` once ``count`` landed and a second more passed
    (so one that went out twice, or one refused, would show)."""
    out = Collector(settings, output)
    try:
        out.wait_for(lambda: len(out.messages) >= count, 30, f"{count} digests")
        out.observe(1.0)
        return sorted(digest.id for digest in out.digests)
    finally:
        out.close()


def test_a_batch_lands_keyed_by_timeline_with_headers_kept(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    output = topic_factory(partitions=3)
    settings, publisher, kafka, _ = _publisher(kafka_bootstrap, output)
    plain = _leading(publisher, _digests(20))
    traced = _leading(publisher, _digests(2, headers=True))
    items = plain[:10] + traced + plain[10:]
    publisher.produce_many(items)
    _acknowledged(kafka, items)
    assert all(item.acknowledged for item in items)
    # Where one produce per digest puts each key: the producer's own partitioner.
    placed: dict[bytes | None, int | None] = {}
    single = Producer(producer_config(settings))
    for item in items:
        single.produce(
            output,
            key=item.digest.timeline.encode(),
            value=b"",
            on_delivery=lambda _e, m: placed.__setitem__(m.key(), m.partition()),
        )
    assert single.flush(30) == 0
    out = Collector(settings, output)
    try:
        out.wait_for(lambda: len(out.messages) >= 2 * len(items), 30, "every digest and probe")
        digests = [m for m in out.messages if m.value()]
        assert len(digests) == len(items)
        assert {m.key(): m.partition() for m in digests} == placed
        by_key = {m.key(): m for m in digests}
        for item in traced:
            landed = by_key[item.digest.timeline.encode()]
            (record,) = codec.decode_digest(landed.value() or b"").records
            assert landed.headers() == [("trace", f"t{record.id[1:]}".encode())]
        for item in plain:
            assert by_key[item.digest.timeline.encode()].headers() is None
    finally:
        out.close()


def test_digests_the_queue_has_no_room_for_wait_for_room_and_all_land(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    output = topic_factory(partitions=1)
    # Room for 3 messages: the batch call queues 3 of 12, the rest go one by one as acks free
    # room (linger keeps the first ones queued while the call runs).
    settings, publisher, kafka, metrics = _publisher(
        kafka_bootstrap, output, **{"queue.buffering.max.messages": 3, "linger.ms": 200}
    )
    items = _leading(publisher, _digests(12))
    publisher.produce_many(items)
    _acknowledged(kafka, items)
    assert all(item.acknowledged for item in items)
    assert metrics.value("digest_producer_queue_full_total", role="ingest") >= 1
    assert _landed(settings, output, 12) == sorted(item.digest.id for item in items)


def test_a_digest_the_producer_refuses_fails_alone(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    output = topic_factory(partitions=1)
    # One part (the service's limit is generous) that the producer's own limit refuses.
    settings, publisher, kafka, _ = _publisher(
        kafka_bootstrap, output, **{"message.max.bytes": 4_000}
    )
    small = _leading(publisher, _digests(3))
    (large,) = _leading(publisher, _digests(1, payload=b"x" * 8_000))
    items = [small[0], large, *small[1:]]
    publisher.produce_many(items)
    _acknowledged(kafka, items)
    assert large.errors
    assert "part 1/1" in large.errors[0]
    assert all(item.acknowledged for item in small)
    assert _landed(settings, output, 3) == sorted(item.digest.id for item in small)
