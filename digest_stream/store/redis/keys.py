"""Redis key names of the store, built from the protocol's suffixes (protocol.KEY_SUFFIXES,
which the Lua's keys.lua reads too).

Every key of input partition ``p`` starts with the hash tag ``{<namespace>:<p>}``,
so all of them live in one Redis Cluster slot and one function call can touch them.
"""

from __future__ import annotations

from digest_stream.store.redis.protocol import KEY_SUFFIXES, TIMELINE_KEYS, Command


def partition_tag(namespace: str, partition: int) -> str:
    """The hash tag shared by every key of one input partition."""
    return f"{{{namespace}:{partition}}}"


# One key each, by name: what tests and tools read a partition's keys with (the store's calls
# take a command's keys from its layout, command_keys).


def waiting_key(tag: str) -> str:
    """Zset of WAITING timelines scored by due time."""
    return key("waiting", tag)


def ready_key(tag: str) -> str:
    """Zset of READY timelines scored by the time they became ready."""
    return key("ready", tag)


def fence_key(tag: str) -> str:
    """The partition's applied-offset fence."""
    return key("fence", tag)


def timeline_key(tag: str, timeline: str) -> str:
    """Record container (inline string or hash) of a timeline's pending records."""
    return key("timeline", tag, timeline)


def digest_key(tag: str, timeline: str) -> str:
    """Record container (inline string or hash) of a timeline's open digest."""
    return key("digest", tag, timeline)


def moved_key(tag: str) -> str:
    """The last schedule call's nonce and reply, kept briefly for a re-send of that call."""
    return key("moved", tag)


def scratch_key(tag: str) -> str:
    """Zset a call may use to sort records and deletes before it returns."""
    return key("scratch", tag)


def key(kind: str, tag: str, timeline: str = "") -> str:
    """The key of ``kind`` (a KEY_SUFFIXES name) for the tag (and the timeline it names)."""
    if kind in TIMELINE_KEYS:
        return f"{tag}:{KEY_SUFFIXES[kind]}:{timeline}"
    return f"{tag}:{KEY_SUFFIXES[kind]}"


def command_keys(command: Command, tag: str, timeline: str = "") -> list[str]:
    """The KEYS ``command`` takes, in its order."""
    return [key(kind, tag, timeline) for kind in command.key_names]
