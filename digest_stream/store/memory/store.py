"""MemoryStore: a pure-Python reference model of the digest store semantics.

It follows DESIGN.md section 3 with the same conventions as the Redis functions
(ordering, tie-breaks, per-batch trimming), so tests can drive both with the
same operations and compare every observable result. It has no TTLs and no
eviction of its own: it is the specification, not a cache. ``expire`` plays what a TTL or
eviction does to a timeline's data in Redis, so callers can test how expiry is reported.
"""

from __future__ import annotations

from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.base import (
    DEFAULT_SLICE,
    AddResult,
    DigestTarget,
    DueBatch,
    DueTimeline,
    Fence,
    NewRecord,
    OpenDigest,
    PartitionStats,
    Readiness,
    TimelineInfo,
)
from digest_stream.store.errors import InvalidState
from digest_stream.store.memory import add
from digest_stream.store.memory.admin import MemoryAdmin
from digest_stream.store.memory.digests import MemoryDigests
from digest_stream.store.memory.state import MemoryState, score_key
from digest_stream.store.policy import PolicyResolver, TimelinePolicy


class MemoryStore:
    """In-memory ``DigestStore`` with the exact semantics of ``RedisStore``.

    It holds its state (``MemoryState``) and hands each call to a part given that state:
    ``add`` (adding, with the leading edge's opens), ``MemoryDigests`` (open/close) and
    ``MemoryAdmin`` (inspect, admin, the fence, ``expire``); the schedule is here.
    """

    def __init__(
        self,
        *,
        policy: TimelinePolicy | None = None,
        resolver: PolicyResolver | None = None,
    ) -> None:
        self.state = MemoryState(policy=policy, resolver=resolver)
        self._digests = MemoryDigests(self.state)
        self._admin = MemoryAdmin(self.state)

    @property
    def policy(self) -> TimelinePolicy:
        """The default timeline policy."""
        return self.state.policy

    def add(
        self,
        partition: int,
        records: Sequence[NewRecord],
        now: float,
        *,
        expected_fence: int | None = None,
        through_offset: int | None = None,
        topic_id: str | None = None,
        open_nonce: str | None = None,
    ) -> AddResult:
        """Store a batch of records of one partition, fenced by offset (the leading edge's
        digests opened in the same call when ``open_nonce`` asks)."""
        return add.add(
            self.state,
            self._digests.open,
            partition,
            records,
            now,
            expected_fence=expected_fence,
            through_offset=through_offset,
            topic_id=topic_id,
            open_nonce=open_nonce,
        )

    def schedule(
        self, partition: int, now: float, *, limit: int = DEFAULT_SLICE, nonce: str | None = None
    ) -> DueBatch:
        """Move up to ``limit`` due WAITING timelines to READY; ``.more`` when more are due
        (a call with the nonce of the last one that moved something answers its reply)."""
        state = self.state.partition(partition)
        now = validate.time_value(now, "now")
        limit = validate.limit(limit)
        nonce = validate.open_nonce(nonce, "schedule nonce")
        if nonce is not None and state.last_schedule is not None:
            kept_nonce, kept = state.last_schedule
            if kept_nonce == nonce:
                return DueBatch(kept, more=kept.more)
        due = sorted(((name, at) for name, at in state.waiting.items() if at <= now), key=score_key)
        for name, _ in due[:limit]:
            del state.waiting[name]
            state.ready[name] = now
        moved = DueBatch((DueTimeline(name, at) for name, at in due[:limit]), more=len(due) > limit)
        if nonce is not None and moved:
            state.last_schedule = (nonce, moved)
        return moved

    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """Move up to ``limit`` stale READY timelines back to WAITING; ``.more`` if more remain."""
        state = self.state.partition(partition)
        deadline = validate.time_value(deadline, "deadline")
        validate.time_value(now, "now")
        limit = validate.limit(limit)
        stale = sorted(
            ((name, at) for name, at in state.ready.items() if at < deadline), key=score_key
        )
        for name, at in stale[:limit]:
            del state.ready[name]
            state.waiting[name] = at
        return DueBatch(
            (DueTimeline(name, at) for name, at in stale[:limit]), more=len(stale) > limit
        )

    # ---------------------------------------------------------------- digests

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        return self._digests.open(partition, timeline, digest_id, now)

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        return self._digests.close(partition, timeline, digest_id, now)

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for each target, in order; a timeline that is not READY gives its error."""
        return self._digests.open_many(targets, now)

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for each target, in order."""
        return self._digests.close_many(targets, now)

    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close_many() for digests one add led (the model has no batch form)."""
        return self._digests.close_leading(nonce, targets, now)

    # ---------------------------------------------------------------- inspect, admin, fence

    def expire(self, partition: int, timeline: str, *, digest_only: bool = False) -> None:
        """Drop the timeline's records and open digest (or only the digest), keeping its
        schedule entry, as Redis's TTLs do (test aid; not part of ``DigestStore``)."""
        self._admin.expire(partition, timeline, digest_only=digest_only)

    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        return self._admin.delete(partition, timeline)

    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """Describe one timeline."""
        return self._admin.inspect(partition, timeline)

    def stats(self, partition: int) -> PartitionStats:
        """Count WAITING and READY timelines of a partition."""
        return self._admin.stats(partition)

    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        return self._admin.applied_offset(partition)

    def fence(self, partition: int) -> Fence:
        """The partition's fence with the topic id it belongs to."""
        return self._admin.fence(partition)

    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """Write exactly this fence (a new topic, admin replays); both None remove it."""
        self._admin.set_applied_offset(partition, offset, topic_id=topic_id)

    # ---------------------------------------------------------------- the service's checks

    def server_time(self) -> None:
        """None: the model keeps no clock of its own (every caller passes ``now``)."""
        return None

    def readiness(self) -> Readiness:
        """Always ready: the model has no server-side code to check."""
        return Readiness("")

    def disconnect(self) -> None:
        """Nothing to release: the model holds no connection."""
