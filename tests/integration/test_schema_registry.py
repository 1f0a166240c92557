"""Schema registry mode of the users' side and of registration, on the real broker and registry:
EventProducer's events read by the stock AvroDeserializer, stock-serialized digests read by
DigestReader, and what registering our schemas does (idempotent, refusals in one line)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from digest_stream.client import DigestReader, EventProducer, SchemaRefused, UndecodableDigest
from digest_stream.wire import codec, framing, registry
from digest_stream.wire.models import Digest, Record
from tests.support import free_port, unique
from tests.support.kafka import TopicFactory
from tests.support.registry import client, delete_subjects, register, stock_decode

TIMEOUT = 30.0


@pytest.fixture
def topics(topic_factory: TopicFactory, schema_registry_url: str) -> Iterator[list[str]]:
    """Fresh topics whose `<topic>-value` subjects are deleted afterwards."""
    made: list[str] = []

    def make() -> str:
        made.append(topic_factory(partitions=1))
        return made[-1]

    yield [make(), make()]
    delete_subjects(schema_registry_url, made)


def test_event_producer_writes_what_the_stock_deserializer_reads(
    kafka_bootstrap: str, schema_registry_url: str, topics: list[str]
) -> None:
    topic = topics[0]
    with EventProducer(
        kafka_bootstrap, topic=topic, schema_registry_url=schema_registry_url
    ) as producer:
        sent = producer.send("team:1", "e1", b"payload", timestamp_ms=5, attributes={"k": "v"})
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique("g"),
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    message = None
    deadline = time.monotonic() + TIMEOUT
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
    consumer.close()
    assert message is not None
    assert message.error() is None
    assert message.key() == b"team:1"
    (value,) = stock_decode(schema_registry_url, [message])
    assert value == {"id": "e1", "timestamp": value["timestamp"], "payload": b"payload",
                     "attributes": {"k": "v"}}  # fmt: skip
    assert sent.timestamp == 5
    assert client(schema_registry_url).get_versions(f"{topic}-value") == [1]


def test_digest_reader_reads_stock_serialized_digests_of_an_evolved_schema(
    kafka_bootstrap: str, schema_registry_url: str, topics: list[str]
) -> None:
    topic = topics[0]
    # A newer writer: one more optional field in Digest, with a default.
    tenant = {"name": "tenant", "type": ["null", "string"], "default": None}
    evolved = {**codec.DIGEST_SCHEMA, "fields": [*codec.DIGEST_SCHEMA["fields"], tenant]}
    serializer = AvroSerializer(client(schema_registry_url), json.dumps(evolved))
    record = Record(id="r", timestamp=1, payload=b"x")
    digest = Digest(id="d1", timeline="t", records=[record], start=1, end=1, opened_at=2)
    datum = {**digest.model_dump(), "records": [record.model_dump()], "tenant": "acme"}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(
        topic, key=b"t", value=serializer(datum, SerializationContext(topic, MessageField.VALUE))
    )
    producer.produce(topic, key=b"t", value=codec.encode_digest(digest))  # plain: not framed
    assert producer.flush(TIMEOUT) == 0
    with DigestReader(
        kafka_bootstrap, unique("g"), topic=topic, schema_registry_url=schema_registry_url
    ) as reader:
        got = None
        deadline = time.monotonic() + TIMEOUT
        while got is None and time.monotonic() < deadline:
            got = reader.poll(0.5)
        assert got == digest
        with pytest.raises(UndecodableDigest) as info:
            _poll_until_raised(reader, deadline)
        assert info.value.reason == "not-registry-framed"


def _poll_until_raised(reader: DigestReader, deadline: float) -> None:
    while time.monotonic() < deadline:
        reader.poll(0.5)


def test_registering_our_schema_twice_gives_one_id_and_one_version(
    schema_registry_url: str, topics: list[str]
) -> None:
    reg = registry.connect(schema_registry_url)
    first = registry.register(reg, topics[0], codec.DIGEST_SCHEMA)
    fresh = client(schema_registry_url)  # no client-side cache in the way
    assert int(fresh.register_schema(f"{topics[0]}-value", reg.get_schema(first))) == first
    assert fresh.get_versions(f"{topics[0]}-value") == [1]
    frame = registry.output_frame(schema_registry_url, {}, topics[0], codec.DIGEST_SCHEMA)
    assert frame(b"body") == framing.prefix(first) + b"body"


def test_an_incompatible_subject_refuses_in_one_line(
    schema_registry_url: str, topics: list[str]
) -> None:
    topic = topics[1]
    clash = {"type": "record", "name": "Digest", "namespace": "digest_stream",
             "fields": [{"name": "id", "type": "int"}]}  # fmt: skip
    register(schema_registry_url, topic, clash)
    client(schema_registry_url).set_compatibility(f"{topic}-value", "BACKWARD")
    with pytest.raises(SchemaRefused) as info:
        registry.output_frame(schema_registry_url, {}, topic, codec.DIGEST_SCHEMA)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"the digest_stream.Digest schema is incompatible with subject {topic}-value"
    )


def test_an_unreachable_registry_is_unavailable_not_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(registry.RegistryUnavailable):
        registry.output_frame(url, {}, "t", codec.DIGEST_SCHEMA)
