"""The users' side of digest-stream: produce events, read digests.

`EventProducer` validates, encodes and keys events by timeline, so producers cannot get the
partitioning wrong. `DigestReader` yields decoded digests and skips a (digest id, part) it has
already yielded, so a notifier gets effectively-once delivery without writing that itself.
See docs/client.md.
"""

from __future__ import annotations

from digest_stream.client.defaults import EVENTS_TOPIC, OUTPUT_TOPIC
from digest_stream.client.producer import (
    SEND_QUEUE_TIMEOUT,
    DeliveryError,
    DeliveryFailure,
    EventProducer,
)
from digest_stream.client.reader import DigestReader, UndecodableDigest
from digest_stream.wire.registry import RegistryUnavailable, SchemaRefused

__all__ = [
    "EVENTS_TOPIC",
    "OUTPUT_TOPIC",
    "SEND_QUEUE_TIMEOUT",
    "DeliveryError",
    "DeliveryFailure",
    "DigestReader",
    "EventProducer",
    "RegistryUnavailable",
    "SchemaRefused",
    "UndecodableDigest",
]
