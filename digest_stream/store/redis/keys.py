"""Redis key names of the store, built from the protocol's suffixes (protocol.KEY_SUFFIXES,
which the Lua's keys.lua reads too).

Every key of input partition ``p`` starts with the hash tag ``{<namespace>:<p>}``,
so all of them live in one Redis Cluster slot and one function call can touch them.
"""

from __future__ import annotations

from digest_stream.store.redis.protocol import KEY_LAYOUTS, KEY_SUFFIXES, TIMELINE_KEYS, Command

_WAITING = KEY_SUFFIXES["waiting"]
_READY = KEY_SUFFIXES["ready"]
_FENCE = KEY_SUFFIXES["fence"]
_TIMELINE = KEY_SUFFIXES["timeline"]
_DIGEST = KEY_SUFFIXES["digest"]
_SCRATCH = KEY_SUFFIXES["scratch"]


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


def key(kind: str, tag: str, timeline: str = "") -> str:
    """The key of ``kind`` (a KEY_SUFFIXES name) for the tag (and the timeline it names)."""
    if kind in TIMELINE_KEYS:
        return f"{tag}:{KEY_SUFFIXES[kind]}:{timeline}"
    return f"{tag}:{KEY_SUFFIXES[kind]}"


def layout_keys(layout: str, tag: str, timeline: str = "") -> list[str]:
    """The KEYS of a command of ``layout`` (protocol.KEY_LAYOUTS), in their order."""
    return [key(kind, tag, timeline) for kind in KEY_LAYOUTS[layout]]


def command_keys(command: Command, tag: str, timeline: str = "") -> list[str]:
    """The KEYS ``command`` takes, in its order."""
    return layout_keys(command.keys, tag, timeline)


def partition_keys(tag: str) -> list[str]:
    """Partition-level keys, in the order the partition-level functions expect them."""
    return layout_keys("partition", tag)


def timeline_keys(tag: str, timeline: str) -> list[str]:
    """Keys the timeline-level functions expect, in order."""
    return layout_keys("timeline", tag, timeline)
