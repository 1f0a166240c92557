"""Redis key names of the store, built in one place (mirrors the helpers in lua/keys.lua).

Every key of input partition ``p`` starts with the hash tag ``{<namespace>:<p>}``,
so all of them live in one Redis Cluster slot and one function call can touch them.
"""

from __future__ import annotations

# One-letter suffixes keep key names (and so memory per key) short.
_WAITING = "w"  # zset: timeline -> due time
_READY = "r"  # zset: timeline -> time it became ready
_FENCE = "o"  # string: last applied Kafka offset of the partition
_TIMELINE = "t"  # record container (inline string or hash: lua/containers.lua): records + meta
_DIGEST = "d"  # record container of the open digest, same encodings
_SCRATCH = "s"  # zset that exists only inside one call: Redis sorts large digests in it


def partition_tag(namespace: str, partition: int) -> str:
    """The hash tag shared by every key of one input partition."""
    return f"{{{namespace}:{partition}}}"


def waiting_key(tag: str) -> str:
    """Zset of WAITING timelines scored by due time."""
    return f"{tag}:{_WAITING}"


def ready_key(tag: str) -> str:
    """Zset of READY timelines scored by the time they became ready."""
    return f"{tag}:{_READY}"


def fence_key(tag: str) -> str:
    """The partition's applied-offset fence."""
    return f"{tag}:{_FENCE}"


def timeline_key(tag: str, timeline: str) -> str:
    """Record container (inline string or hash) of a timeline's pending records."""
    return f"{tag}:{_TIMELINE}:{timeline}"


def digest_key(tag: str, timeline: str) -> str:
    """Record container (inline string or hash) of a timeline's open digest."""
    return f"{tag}:{_DIGEST}:{timeline}"


def scratch_key(tag: str) -> str:
    """Zset a call may use to sort records and deletes before it returns."""
    return f"{tag}:{_SCRATCH}"


def partition_keys(tag: str) -> list[str]:
    """Partition-level keys, in the order the partition-level functions expect them."""
    return [waiting_key(tag), ready_key(tag), fence_key(tag)]


def timeline_keys(tag: str, timeline: str) -> list[str]:
    """Keys the timeline-level functions expect, in order."""
    return [
        timeline_key(tag, timeline),
        digest_key(tag, timeline),
        waiting_key(tag),
        ready_key(tag),
    ]
