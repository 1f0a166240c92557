"""The users' API on the real broker: EventProducer keys and partitions, DigestReader dedupes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, get_args

import pytest
from confluent_kafka import Consumer, Message, Producer
from pydantic import ValidationError

from digest_stream.client import (
    DeliveryError,
    DigestReader,
    EventProducer,
    UndecodableDigest,
)
from digest_stream.client.reader import _RecentKeys
from digest_stream.wire import control, formats
from digest_stream.wire.codec import decode_event, encode_digest
from digest_stream.wire.formats import FormatName
from digest_stream.wire.models import MAX_TIMELINE_LENGTH, Digest, Event, Record
from digest_stream.wire.partitioner import Partitioner, murmur2, partition_for

T0 = 1_700_000_000_000
TIMEOUT = 30.0  # seconds: generous for a loaded CI machine; every wait polls and ends early


def java_partition(key: bytes, partitions: int) -> int:
    """The partition Java's default partitioner picks for a keyed record."""
    return partition_for("murmur2_random", key, partitions)


def test_murmur2_matches_kafkas_test_vectors() -> None:
    # From Kafka's UtilsTest.testMurmur2 (signed ints there).
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, expected in vectors.items():
        assert murmur2(key) == expected & 0xFFFFFFFF, key


def test_partition_for_places_keys_as_librdkafka_does_for_every_partitioner(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    # confluent-kafka does not expose librdkafka's partitioners: ours must agree with the
    # real thing (issue 20, item 6), for ASCII, UTF-8 and long keys, on an odd partition count.
    partitions = 7
    topic = topic_factory(partitions=partitions)
    keys = [f"user:{i}".encode() for i in range(60)] + ["ünïcödé".encode(), b"x" * 300]
    for partitioner in get_args(Partitioner):
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": partitioner})
        placed: dict[bytes, int] = {}

        def on_delivery(error: object, message: Message, placed: dict[bytes, int] = placed) -> None:
            assert error is None, error
            placed[message.key() or b""] = message.partition() or 0

        for key in keys:
            producer.produce(topic, key=key, value=b"v", on_delivery=on_delivery)
        assert producer.flush(TIMEOUT) == 0
        wrong = [k for k in keys if placed[k] != partition_for(partitioner, k, partitions)]
        assert not wrong, (partitioner, wrong[:3])


def test_controls_go_where_the_producers_partitioner_puts_the_timeline_or_where_told(
    kafka_bootstrap: str, topic_factory: Callable[..., str], raw_consumer: Consumer
) -> None:
    partitions = 4
    topic = topic_factory(partitions=partitions)
    timeline = "user:7"
    crc = partition_for("consistent_random", timeline.encode(), partitions)
    with EventProducer(kafka_bootstrap, topic=topic, partitioner="consistent_random") as producer:
        producer.send(timeline, "e", b"{}")
        producer.cancel(timeline)
        producer.flush_timeline(timeline)
        producer.cancel(timeline, "e", partition=(crc + 1) % partitions)
    raw_consumer.subscribe([topic])
    messages = poll_until(lambda: _message(raw_consumer), lambda got: len(got) >= 4, "4 messages")
    where = {}
    for m in messages:
        value = m.value() or b""
        what = control.decode(value) if value.startswith(control.MAGIC) else "event"
        where[str(what)] = m.partition()
    assert where == {
        "event": crc,
        str(control.Control("cancel")): crc,
        str(control.Control("flush")): crc,
        str(control.Control("cancel", "e")): (crc + 1) % partitions,
    }
    with pytest.raises(ValueError, match="partitioner"):
        EventProducer(kafka_bootstrap, topic=topic, partitioner="random")  # type: ignore[arg-type]


def poll_until(poll: Callable[[], Any], done: Callable[[list[Any]], bool], what: str) -> list[Any]:
    """Collect non-None results of poll() until done(results); fail at the deadline."""
    results: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    while not done(results):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {TIMEOUT}s waiting for {what}; got {len(results)}")
        item = poll()
        if item is not None:
            results.append(item)
    return results


@pytest.fixture
def raw_consumer(kafka_bootstrap: str, group_id: str) -> Iterator[Consumer]:
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    yield consumer
    consumer.close()


def _message(consumer: Consumer) -> Message | None:
    message = consumer.poll(0.5)
    if message is None:
        return None
    assert message.error() is None, message.error()
    return message


# ---------------------------------------------------------------------------------- producer


def test_producer_keys_by_timeline_and_partitions_like_java(
    kafka_bootstrap: str, topic_factory: Callable[..., str], raw_consumer: Consumer
) -> None:
    partitions = 4
    topic = topic_factory(partitions=partitions)
    timelines = [f"user:{i}" for i in range(12)] + ["ünïcödé/timeline", "x" * MAX_TIMELINE_LENGTH]
    sent: list[tuple[str, Event]] = []
    with EventProducer(kafka_bootstrap, topic=topic) as producer:
        for round_ in range(3):
            for timeline in timelines:
                event = producer.send(
                    timeline,
                    f"{timeline[:20]}-{round_}",
                    b'{"round": %d}' % round_,
                    timestamp_ms=T0 + round_,
                    attributes={"round": str(round_)},
                )
                sent.append((timeline, event))
        last = producer.send("user:0", "now", b"")
    sent.append(("user:0", last))
    assert abs(last.timestamp - time.time() * 1000) < 60_000, "event time defaults to now"

    raw_consumer.subscribe([topic])
    messages = poll_until(
        lambda: _message(raw_consumer), lambda got: len(got) >= len(sent), "the produced events"
    )
    assert len(messages) == len(sent)
    by_timeline: dict[str, list[Event]] = {}
    for message in messages:
        key = message.key()
        assert key is not None
        timeline = key.decode("utf-8")
        assert message.partition() == java_partition(key, partitions), timeline
        by_timeline.setdefault(timeline, []).append(decode_event(message.value() or b""))
    expected: dict[str, list[Event]] = {}
    for timeline, event in sent:
        expected.setdefault(timeline, []).append(event)
    # Every event arrived, keyed by its timeline, in send order within the timeline.
    assert by_timeline == expected
    assert len({m.partition() for m in messages}) > 1, "keys should spread over partitions"


def test_producer_validates_before_queueing(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1)
    with EventProducer(kafka_bootstrap, topic=topic) as producer:
        bad_calls: list[dict[str, Any]] = [
            {"timeline": ""},
            {"timeline": "é" * (MAX_TIMELINE_LENGTH // 2 + 1)},
            {"id": ""},
            {"payload": "not bytes"},
            {"timestamp_ms": time.time()},  # seconds as a float: the classic mistake
            {"timestamp_ms": -1},
            {"attributes": {"k": 3}},
        ]
        for bad in bad_calls:
            call: dict[str, Any] = {"timeline": "t", "id": "e", "payload": b"p", **bad}
            with pytest.raises(ValidationError):
                producer.send(**call)
        producer.flush(TIMEOUT)
    with pytest.raises(RuntimeError, match="closed"):
        producer.send("t", "e", b"p")


def test_flush_raises_for_events_the_broker_refused(
    kafka_bootstrap: str, topic_factory: Callable[..., str], raw_consumer: Consumer
) -> None:
    topic = topic_factory(1, **{"max.message.bytes": "2048"})
    producer = EventProducer(kafka_bootstrap, topic=topic)
    producer.send("t", "too-big", b"x" * 10_000)
    with pytest.raises(DeliveryError) as info:
        producer.flush(TIMEOUT)
    assert info.value.count == 1
    assert (info.value.failures[0].timeline, info.value.failures[0].id) == ("t", "too-big")
    assert "too-big" in str(info.value)
    # The failure is reported once; the producer keeps working.
    producer.send("t", "fits", b"x" * 100)
    producer.close(TIMEOUT)
    raw_consumer.subscribe([topic])
    [message] = poll_until(lambda: _message(raw_consumer), lambda got: len(got) >= 1, "'fits'")
    assert decode_event(message.value() or b"").id == "fits"


# ---------------------------------------------------------------------------------- reader


def digest(id: str, part: int = 1, parts: int = 1, timeline: str = "t") -> Digest:
    records = [Record(id=f"{id}-{part}-r{i}", timestamp=T0 - i, payload=b"p") for i in range(3)]
    return Digest.build(
        id=id, timeline=timeline, records=records, opened_at=T0, part=part, parts=parts
    )


def publish(bootstrap: str, topic: str, values: list[Digest | bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        if isinstance(value, Digest):
            producer.produce(topic, encode_digest(value), key=value.timeline.encode())
        else:
            producer.produce(topic, value, key=b"t")
    assert producer.flush(TIMEOUT) == 0


def read(reader: DigestReader, count: int) -> list[Digest]:
    return poll_until(lambda: reader.poll(0.5), lambda got: len(got) >= count, f"{count} digests")


def test_reader_skips_redelivered_digests_and_commits(
    kafka_bootstrap: str, topic_factory: Callable[..., str], group_id: str
) -> None:
    topic = topic_factory(partitions=1)
    a, b1, b2, c = digest("A"), digest("B", 1, 2), digest("B", 2, 2), digest("C")
    # The service re-publishes A whole and B's first part (a retried delivery).
    publish(kafka_bootstrap, topic, [a, b1, b2, a, b1, c])
    with DigestReader(kafka_bootstrap, group_id, topic=topic) as reader:
        assert read(reader, 4) == [a, b1, b2, c]
        assert reader.duplicates_skipped == 2
        # Nothing else is pending: the repeats were skipped, not queued.
        assert reader.poll(0.5) is None

    # A new reader in the same group starts after C: everything yielded was committed.
    d = digest("D")
    publish(kafka_bootstrap, topic, [d])
    with DigestReader(kafka_bootstrap, group_id, topic=topic) as reader:
        assert read(reader, 1) == [d]


def test_reader_leaving_on_an_exception_does_not_commit_the_last_digest(
    kafka_bootstrap: str, topic_factory: Callable[..., str], group_id: str
) -> None:
    topic = topic_factory(partitions=1)
    a, b = digest("A"), digest("B")
    publish(kafka_bootstrap, topic, [a, b])

    def notify_all() -> None:
        with DigestReader(kafka_bootstrap, group_id, topic=topic) as reader:
            for got in reader:
                if got.id == "B":
                    raise KeyError("the notifier failed on B")

    with pytest.raises(KeyError):
        notify_all()
    # A was processed (the loop asked for the next one), B was not: B comes back.
    with DigestReader(kafka_bootstrap, group_id, topic=topic) as reader:
        assert read(reader, 1) == [b]
    # Leaving normally counts the last digest as processed: closing committed B.
    e = digest("E")
    publish(kafka_bootstrap, topic, [e])
    with DigestReader(kafka_bootstrap, group_id, topic=topic) as reader:
        assert read(reader, 1) == [e]


def test_reader_reports_an_undecodable_message_and_goes_on(
    kafka_bootstrap: str, topic_factory: Callable[..., str], group_id: str
) -> None:
    topic = topic_factory(partitions=1)
    good = digest("G")
    publish(kafka_bootstrap, topic, [b"\x02\xff not avro", good])
    with DigestReader(kafka_bootstrap, group_id, topic=topic) as reader:
        deadline = time.monotonic() + TIMEOUT
        error: UndecodableDigest | None = None
        while error is None:
            assert time.monotonic() < deadline, "the bad message never arrived"
            try:
                assert reader.poll(0.5) is None
            except UndecodableDigest as exc:
                error = exc
        assert (error.topic, error.partition, error.offset) == (topic, 0, 0)
        assert error.reason == "invalid-avro"
        assert "output_format" not in str(error)  # bytes of no format: no hint
        assert read(reader, 1) == [good]


def _first_error(reader: DigestReader) -> UndecodableDigest:
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert time.monotonic() < deadline, "the message never arrived"
        try:
            assert reader.poll(0.5) is None
        except UndecodableDigest as exc:
            return exc


@pytest.mark.parametrize(
    ("written", "read_as", "named"), [("json", "avro", "'json'"), ("avro", "json", "'avro'")]
)
def test_a_reader_of_the_other_format_is_told_which_one_to_read_with(
    kafka_bootstrap: str,
    topic_factory: Callable[..., str],
    group_id: str,
    written: FormatName,
    read_as: FormatName,
    named: str,
) -> None:
    topic = topic_factory(partitions=1)
    publish(kafka_bootstrap, topic, [formats.choose(written).encode(digest("W"))])
    with DigestReader(kafka_bootstrap, group_id, topic=topic, output_format=read_as) as reader:
        error = _first_error(reader)
    assert f"output_format={named}" in str(error)


def test_recent_keys_is_a_bounded_lru() -> None:
    keys = _RecentKeys(2)
    assert [keys.seen(k) for k in [("A", 1), ("B", 1), ("A", 1)]] == [False, False, True]
    # A was refreshed, so C evicts B (least recently used), not A (oldest inserted).
    assert keys.seen(("C", 1)) is False
    assert len(keys) == 2
    assert keys.seen(("A", 1)) is True
    assert keys.seen(("B", 1)) is False
    # The part is part of the key.
    assert keys.seen(("B", 2)) is False
    disabled = _RecentKeys(0)
    assert [disabled.seen(("A", 1)) for _ in range(3)] == [False, False, False]
    assert len(disabled) == 0
    with pytest.raises(ValueError, match="dedupe_capacity"):
        _RecentKeys(-1)


def test_flush_with_a_timeline_still_queues_its_flush_and_warns(
    kafka_bootstrap: str, topic_factory: Callable[..., str], raw_consumer: Consumer
) -> None:
    topic = topic_factory(partitions=1)
    with (
        EventProducer(kafka_bootstrap, topic=topic) as producer,
        pytest.warns(DeprecationWarning, match="flush_timeline"),
    ):
        producer.flush("user:8")
    raw_consumer.subscribe([topic])
    messages = poll_until(lambda: _message(raw_consumer), lambda got: len(got) >= 1, "1 message")
    assert [control.decode(m.value() or b"") for m in messages] == [control.Control("flush")]
    assert [m.key() for m in messages] == [b"user:8"]
