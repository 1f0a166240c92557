"""Which partition a key goes to: the Java clients' murmur2, as the project's producers use.

The CLI's controls and `EventProducer` key by timeline with librdkafka's `murmur2_random`
(Java's default partitioner for keyed records): ``toPositive(murmur2(key)) % partitions``. The
service needs the same choice to tell where a timeline lived before the events topic grew.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` (Utils.murmur2), as an unsigned 32-bit value."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition a keyed record goes to among ``partitions`` (murmur2, like Java)."""
    # One place for the choice: a shared `partitioner` setting can select another here.
    return (murmur2(key) & 0x7FFFFFFF) % partitions
