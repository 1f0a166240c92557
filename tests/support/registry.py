"""Schema Registry helpers: confluent-kafka's stock serde on the real registry, with nothing of
this project's code between (what a team's own producers and consumers run)."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Message, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from digest_stream.wire.codec import EVENT_SCHEMA


def event_schema_v2(extra_field: str = "source") -> dict[str, Any]:
    """A compatible evolution of the Event schema: one more optional field, with a default,
    and the fields in another order (a producer's v2)."""
    fields = list(reversed(EVENT_SCHEMA["fields"]))
    fields.insert(1, {"name": extra_field, "type": ["null", "string"], "default": None})
    return {**EVENT_SCHEMA, "fields": fields}


def client(url: str) -> SchemaRegistryClient:
    """A stock registry client with only the URL."""
    return SchemaRegistryClient({"url": url})


def stock_serializer(url: str, schema: Mapping[str, Any]) -> AvroSerializer:
    """confluent-kafka's AvroSerializer (auto-registers under `<topic>-value`)."""
    serializer: AvroSerializer = AvroSerializer(client(url), json.dumps(schema))
    return serializer


def send_stock_events(
    bootstrap: str,
    topic: str,
    serializer: AvroSerializer,
    timelines: str | Sequence[str],
    per_timeline: int = 1,
    extra: dict[str, Any] | None = None,
) -> list[str]:
    """Events serialized by the stock AvroSerializer, keyed by timeline; their ids in order."""
    names = [timelines] if isinstance(timelines, str) else list(timelines)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    context = SerializationContext(topic, MessageField.VALUE)
    base = int(time.time() * 1000)
    ids = [uuid.uuid4().hex for _ in range(len(names) * per_timeline)]
    for i, record_id in enumerate(ids):
        datum = {"id": record_id, "timestamp": base + i, "payload": b"{}", "attributes": {}}
        value = serializer({**datum, **(extra or {})}, context)
        producer.produce(topic, key=names[i % len(names)].encode(), value=value)
    assert producer.flush(30) == 0, "events still queued after 30 s"
    return ids


def stock_decode(url: str, messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Values read by the stock AvroDeserializer given only the registry URL."""
    deserializer = AvroDeserializer(client(url))
    decoded = []
    for message in messages:
        context = SerializationContext(message.topic() or "", MessageField.VALUE)
        decoded.append(deserializer(message.value(), context))
    return decoded


def delete_subjects(url: str, topics: Iterable[str]) -> None:
    """Remove `<topic>-value` subjects for good (the registry needs a soft delete first)."""
    registry = client(url)
    for topic in topics:
        for permanent in (False, True):
            with contextlib.suppress(Exception):
                registry.delete_subject(f"{topic}-value", permanent=permanent)


def register(url: str, topic: str, schema: dict[str, Any]) -> int:
    """Register a schema under `<topic>-value` with the stock client; its id."""
    return int(client(url).register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO")))
