"""Which partition of the events topic a timeline's key lands on, per librdkafka partitioner.

The service keeps a timeline's state per input partition, and a control (flush, cancel) acts
only on the partition it is read from; so the producers of events and of controls must agree on
one partitioner. confluent-kafka does not expose librdkafka's partitioner functions in Python:
these are the same hashes, checked against librdkafka itself in tests/integration/test_client.py.
Keys are never empty (a timeline has at least one character), so each ``*_random`` variant
(random only for an empty or missing key) places a timeline like its plain one.
"""

from __future__ import annotations

import zlib
from typing import Final, Literal, get_args

Partitioner = Literal[
    "murmur2_random", "murmur2", "consistent_random", "consistent", "fnv1a_random", "fnv1a"
]
"""librdkafka's `partitioner` values that place a keyed message by its key."""

PARTITIONERS: Final[tuple[str, ...]] = get_args(Partitioner)

DEFAULT_PARTITIONER: Final[Partitioner] = "murmur2_random"
"""The Java clients' choice (and EventProducer's): a timeline lands on the same partition
whether a Java or a Python producer sent it. librdkafka's own default is consistent_random."""

_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's Java murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as unsigned 32 bits."""
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ len(data)) & _MASK
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & _MASK
        k ^= k >> r
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h


def fnv1a(data: bytes) -> int:
    """32-bit FNV-1a, as unsigned 32 bits."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & _MASK
    return h


def partition_for(partitioner: Partitioner, key: bytes, partitions: int) -> int:
    """The partition `partitioner` picks for a message with this (non-empty) key."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    if partitioner.startswith("murmur2"):
        # Positive-masked, as Java's Utils.toPositive: not abs().
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    if partitioner.startswith("consistent"):
        return zlib.crc32(key) % partitions
    if partitioner.startswith("fnv1a"):
        # Sarama's hash partitioner, which librdkafka's fnv1a matches: the absolute value of
        # the signed 32-bit hash.
        signed = fnv1a(key)
        if signed >= 0x80000000:
            signed -= 0x100000000
        return abs(signed) % partitions
    raise ValueError(f"unknown partitioner {partitioner!r}; one of {', '.join(PARTITIONERS)}")
