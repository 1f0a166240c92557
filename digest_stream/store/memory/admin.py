"""The inspect, admin and fence calls of the reference model, and its expiry aid."""

from __future__ import annotations

from digest_stream.store import validate
from digest_stream.store.base import (
    Fence,
    PartitionStats,
    TimelineInfo,
    reason_of,
)
from digest_stream.store.memory.state import MemoryState


class MemoryAdmin:
    """``delete``, ``inspect``, ``stats``, the fence and ``expire`` of ``MemoryStore``."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state

    def expire(self, partition: int, timeline: str, *, digest_only: bool = False) -> None:
        """Drop the timeline's records and open digest (or only the digest), keeping its
        schedule entry: what Redis does when their TTLs run out (test aid; not part of
        ``DigestStore``)."""
        state = self.state.partition(partition)
        if not digest_only:
            state.timelines.pop(timeline, None)
        state.digests.pop(timeline, None)

    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        state = self.state.partition(partition)
        validate.name(timeline, "timeline")
        found = [
            state.timelines.pop(timeline, None),
            state.digests.pop(timeline, None),
            state.ready.pop(timeline, None),
            state.waiting.pop(timeline, None),
        ]
        return any(item is not None for item in found)

    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """Describe one timeline."""
        state = self.state.partition(partition)
        validate.name(timeline, "timeline")
        if timeline in state.ready:
            status, due = "ready", state.ready[timeline]
        elif timeline in state.waiting:
            status, due = "waiting", state.waiting[timeline]
        else:
            status, due = "absent", None
            cooling = self.state.cooling(state, timeline)
            if cooling is not None and cooling.last_delivery is not None:
                status = "cooling"
                due = cooling.last_delivery + self.state.timeline_policy(timeline).minimum_delay
        pending = state.timelines.get(timeline)
        digest = state.digests.get(timeline)
        last_delivery = self.state.last_delivery(state, timeline)
        cause = (pending.cause if pending is not None else None) or (
            digest.reason if digest is not None else None
        )
        return TimelineInfo(
            timeline=timeline,
            state=status,
            due=due,
            last_delivery=last_delivery,
            pending=len(pending.records) if pending is not None else 0,
            open_digest=digest.id if digest is not None else None,
            open_records=len(digest.records) if digest is not None else 0,
            dropped=pending.dropped if pending is not None else 0,
            reason=None if status == "absent" else reason_of(cause, last_delivery),
        )

    def stats(self, partition: int) -> PartitionStats:
        """Count WAITING and READY timelines of a partition."""
        state = self.state.partition(partition)
        return PartitionStats(
            partition=partition,
            waiting=len(state.waiting),
            ready=len(state.ready),
            oldest_due=min(state.waiting.values()) if state.waiting else None,
            applied_offset=state.fence,
        )

    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        return self.state.partition(partition).fence

    def fence(self, partition: int) -> Fence:
        """The partition's fence with the topic id it belongs to."""
        state = self.state.partition(partition)
        return Fence(state.fence, state.fence_topic)

    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """Write exactly this fence (a new topic, admin replays); both None remove it."""
        state = self.state.partition(partition)
        fence = None if offset is None else validate.offset(offset)
        state.fence, state.fence_topic = fence, validate.topic_id(topic_id)
