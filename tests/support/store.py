"""Store helpers: the types of the store fixtures and raw access to the Redis behind a store."""

from __future__ import annotations

import re
from collections.abc import Callable

import redis
from redis.cluster import RedisCluster

from digest_stream.store import DigestStore, MemoryStore, NewRecord
from digest_stream.store.limits import OPEN_NONCE_LENGTH
from digest_stream.store.redis import library
from digest_stream.store.redis.keys import digest_key, partition_tag, timeline_key
from digest_stream.store.redis.protocol import KEY_SUFFIXES

StoreFactory = Callable[..., DigestStore]
"""The `make_store` fixture: `make(policy=None, resolver=None) -> DigestStore`."""
RedisClient = redis.Redis | RedisCluster
#: Words in the library's command strings that are options, not commands.
COMMAND_OPTIONS = {"COUNT", "KEEPTTL", "LIMIT", "NX", "OR", "PX", "WITHSCORES"}


class Feed:
    """Records (and controls) of one input partition, at increasing offsets, all with the
    event time ``timestamp``."""

    def __init__(self, timestamp: float) -> None:
        self.timestamp = timestamp
        self.offset = -1

    def __call__(
        self,
        timeline: str,
        record_id: str = "",
        control: str | None = None,
        *,
        urgent: bool = False,
    ) -> NewRecord:
        """The next one: a record (its id "" for "r<offset>"; ``urgent``: its timeline's
        urgent_when called it urgent) or, with ``control``, that."""
        self.offset += 1
        record_id = record_id or f"r{self.offset}"
        return NewRecord(
            timeline, record_id, self.timestamp, record_id.encode(), self.offset, control, urgent
        )


def library_commands() -> set[str]:
    """Every command the Lua library can run (lower case): each quoted upper-case word, whether
    it is passed to redis.call directly, through call_chunked or chosen by an expression."""
    return {w.lower() for w in re.findall(r"'([A-Z]+)'", library.SOURCE)} - {
        o.lower() for o in COMMAND_OPTIONS
    }


def tag_keys(client: RedisClient, namespace: str, partition: int) -> set[bytes]:
    """Every key that carries the partition's hash tag (SCAN, on every primary of a cluster)."""
    pattern = f"{partition_tag(namespace, partition)}*"
    # "{" and "}" are literal in Redis glob patterns; only * ? [ ] \ are special.
    return {bytes(key) for key in client.scan_iter(match=pattern, count=1000)}


def raw(
    client: RedisClient, command: str, function: str, call_keys: list[str], *args: object
) -> list[object]:
    """FCALL with no Python-side checks, routed by the first key."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(call_keys[0])
        reply = client.execute_command(
            command, function, len(call_keys), *call_keys, *args, target_nodes=node
        )
    else:
        reply = client.execute_command(command, function, len(call_keys), *call_keys, *args)
    assert isinstance(reply, list)
    return reply


def expire(
    store: DigestStore,
    client: RedisClient | None,
    namespace: str,
    timeline: str,
    *,
    digest_only: bool = False,
) -> None:
    """What a TTL running out (or eviction) does: the timeline's data keys vanish."""
    if isinstance(store, MemoryStore):
        store.expire(0, timeline, digest_only=digest_only)
        return
    assert client is not None
    tag = partition_tag(namespace, 0)
    if not digest_only:
        client.delete(timeline_key(tag, timeline))
    client.delete(digest_key(tag, timeline))
    # a digest in the leading edge's batch form vanishes with its batch (and every other
    # digest of that add: tests that expire one lead one timeline per add)
    for index in ("index", "previous_index"):
        entry = client.hget(f"{tag}:{KEY_SUFFIXES[index]}", timeline)
        if entry is not None:
            nonce = (entry.decode() if isinstance(entry, bytes) else str(entry))[:OPEN_NONCE_LENGTH]
            client.delete(f"{tag}:{KEY_SUFFIXES['batch']}:{nonce}")
