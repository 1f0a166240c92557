"""The service's partition choice agrees with the producers' (librdkafka murmur2_random)."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message, Producer

from digest_stream.partitioner import murmur2, partition_for
from tests.support.kafka import TopicFactory


def test_known_murmur2_values() -> None:
    # Kafka's own test vectors (clients' UtilsTest.testMurmur2), as signed ints there.
    assert murmur2(b"21") == -973932308 & 0xFFFFFFFF
    assert murmur2(b"foobar") == -790332482 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-long-string") == -985981536 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-longer-string") == -1486304829 & 0xFFFFFFFF
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971 & 0xFFFFFFFF


def test_partition_for_matches_the_producer(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=6)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    landed: dict[bytes, int] = {}

    def record(error: KafkaError | None, message: Message) -> None:
        assert error is None
        landed[message.key() or b""] = message.partition() or 0

    keys = [f"timeline-{n}".encode() for n in range(300)] + [b"", b"x", b"\xff\xfe\xfd"]
    for key in keys:
        producer.produce(topic, b"v", key=key, on_delivery=record)
    assert producer.flush(30) == 0
    assert landed == {key: partition_for(key, 6) for key in keys}
