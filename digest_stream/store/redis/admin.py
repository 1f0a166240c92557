"""The inspect, admin and fence calls of RedisStore (read-only ones use FCALL_RO)."""

from __future__ import annotations

import dataclasses

from digest_stream.store import validate
from digest_stream.store.base import Fence, PartitionStats, TimelineInfo
from digest_stream.store.redis import protocol, replies, routing
from digest_stream.store.redis.calls import RedisCalls
from digest_stream.store.redis.replies import integer


class RedisAdmin:
    """``delete``, ``inspect``, ``stats``, ``server_time`` and the fence of ``RedisStore``."""

    def __init__(self, calls: RedisCalls) -> None:
        self.calls = calls

    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        tag = self.calls.tag(partition)
        validate.name(timeline, "timeline")
        return integer(self.calls.call(protocol.DS_DELETE, tag, [timeline], timeline)) == 1

    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """Describe one timeline (read-only)."""
        tag = self.calls.tag(partition)
        validate.name(timeline, "timeline")
        reply = self.calls.call(protocol.DS_INSPECT, tag, [timeline], timeline)
        info = replies.timeline_info(timeline, reply)
        if info.state == "cooling" and info.last_delivery is not None:
            # due when the cool-down ends: the policy's, which the library is not told
            delay = self.calls.timeline_policy(timeline).minimum_delay
            return dataclasses.replace(info, due=info.last_delivery + delay)
        return info

    def stats(self, partition: int) -> PartitionStats:
        """Count WAITING and READY timelines of a partition (read-only)."""
        reply = self.calls.call(protocol.DS_STATS, self.calls.tag(partition), [])
        return replies.partition_stats(partition, reply)

    def server_time(self) -> float:
        """Redis's own clock (TIME on the first primary), in seconds since the epoch."""
        (node, *_) = routing.primaries(self.calls.client)
        reply: object = routing.on_node(self.calls.client, node, "TIME")
        # redis-py parses TIME into a (seconds, microseconds) tuple.
        if not isinstance(reply, list | tuple) or len(reply) != 2:
            raise TypeError(f"unexpected TIME reply {reply!r}")
        seconds, micros = (int(part) for part in reply)
        return seconds + micros / 1e6

    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        return self.fence(partition).offset

    def fence(self, partition: int) -> Fence:
        """The partition's fence with the topic id it belongs to."""
        return replies.fence(self.calls.call(protocol.DS_FENCE_GET, self.calls.tag(partition), []))

    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """Write exactly this fence (a new topic, admin replays); both None remove it."""
        tag = self.calls.tag(partition)
        value = "" if offset is None else str(validate.offset(offset))
        topic = validate.topic_id(topic_id) or ""
        args = protocol.DS_FENCE_SET.arguments(offset=value, topic_id=topic)
        self.calls.call(protocol.DS_FENCE_SET, tag, args)
