"""Scenario 1d: the ingest rate in schema registry mode, next to plain mode in the same run.

Used by bench/ingest_bench.py's throughput scenario when the local stack's registry runs
(`digest-stream dev up --registry`, which `make bench` does). The same events as the plain
topic are written in the Confluent framing to two more topics:
- *ingest_sr*: framed with our own Event schema (registered under `<topic>-value`): the body is
  already our encoding, so the ingest strips the prefix and stores it as is;
- *ingest_sr_v2*: framed with an evolved producer schema (one more optional field, fields in
  another order): every event is resolved to our schema and re-encoded before it is stored.
"""

from __future__ import annotations

import io
import os
from typing import Any

import fastavro

from bench.common import Stack, create_topics, produce, unique
from digest_stream.dev.stack import REGISTRY_ENV
from digest_stream.wire import codec, framing, registry

#: The evolved producer schema of the v2 runner.
EVENT_V2: dict[str, Any] = {
    **codec.EVENT_SCHEMA,
    "fields": [
        {"name": "source", "type": ["null", "string"], "default": None},
        *reversed(codec.EVENT_SCHEMA["fields"]),
    ],
}


def registry_url() -> str | None:
    """The local registry's URL, when the stack runs one."""
    return os.environ.get(REGISTRY_ENV) or None


def _as_v2(value: bytes) -> bytes:
    datum = codec._decode_avro(value, codec._EVENT, None)  # plain longs, as the codec reads
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _V2, {**datum, "source": "producer-v2"})
    return out.getvalue()


_V2 = fastavro.parse_schema(codec._without_logical_types(EVENT_V2))


def fill_framed(
    env: Stack, url: str, pairs: list[tuple[bytes, bytes]], evolved: bool
) -> tuple[str, list[str]]:
    """A topic with these events framed under a registered schema; (topic, its subjects)."""
    topic = unique("events-sr")
    create_topics(env.bootstrap, [topic])
    schema = EVENT_V2 if evolved else codec.EVENT_SCHEMA
    head = framing.prefix(registry.register(registry.connect(url), topic, schema))
    produce(env.bootstrap, topic, [(k, head + (_as_v2(v) if evolved else v)) for k, v in pairs])
    return topic, [registry.subject(topic)]


def delete_subjects(url: str, subjects: list[str]) -> None:
    """Remove the bench's subjects (a soft delete first, as the registry requires)."""
    client = registry.connect(url)
    for name in subjects:
        for permanent in (False, True):
            try:
                client.delete_subject(name, permanent=permanent)
            except Exception as exc:  # best effort: the registry is in-memory anyway
                print(f"  could not delete subject {name}: {exc}", flush=True)
