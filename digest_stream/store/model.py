"""MemoryStore: a pure-Python reference model of the digest store semantics.

It follows DESIGN.md section 3 with the same conventions as the Redis functions
(ordering, tie-breaks, per-batch trimming), so tests can drive both with the
same operations and compare every observable result. It has no TTLs and no
eviction of its own: it is the specification, not a cache. ``expire`` plays what a TTL or
eviction does to a timeline's data in Redis, so callers can test how expiry is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from digest_stream.store import validate
from digest_stream.store.base import (
    CANCEL_ALL,
    DEFAULT_SLICE,
    FLUSH,
    FLUSH_AT_FLOOR,
    AddResult,
    DigestTarget,
    DueBatch,
    DueTimeline,
    Fence,
    InvalidState,
    NewRecord,
    OpenDigest,
    PartitionStats,
    PolicyResolver,
    StoredRecord,
    TimelineInfo,
    TimelinePolicy,
    reason_of,
)


def _age_key(record: StoredRecord) -> tuple[float, bytes]:
    # Oldest first by timestamp, ties by id bytes: the order of the Lua code.
    return (record.timestamp, record.id.encode("utf-8"))


def _score_key(item: tuple[str, float]) -> tuple[float, bytes]:
    # Zset order: score, then member bytes.
    return (item[1], item[0].encode("utf-8"))


@dataclass
class _Timeline:
    records: dict[str, StoredRecord] = field(default_factory=dict)
    dropped: int = 0  # trimmed since the last digest was opened
    last_delivery: float | None = None
    expired: bool = False  # earlier records of this still scheduled timeline expired
    behind_open: bool = False  # started while a digest was open: its records wait behind it
    cause: str | None = None  # why it is due (a REASON), when recorded


@dataclass
class _Digest:
    id: str
    opened_at: float
    dropped: int
    records: list[StoredRecord]  # newest first
    last_delivery: float | None
    expired: bool
    reason: str


@dataclass
class _Partition:
    fence: int | None = None
    fence_topic: str | None = None
    waiting: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    timelines: dict[str, _Timeline] = field(default_factory=dict)
    digests: dict[str, _Digest] = field(default_factory=dict)


class MemoryStore:
    """In-memory ``DigestStore`` with the exact semantics of ``RedisStore``."""

    def __init__(
        self,
        *,
        policy: TimelinePolicy | None = None,
        resolver: PolicyResolver | None = None,
    ) -> None:
        default = policy if policy is not None else TimelinePolicy()
        validate.policy(default, "<default>")
        self.policy = default
        self._resolver: PolicyResolver = resolver if resolver is not None else (lambda _: default)
        self._partitions: dict[int, _Partition] = {}

    def _partition(self, partition: int) -> _Partition:
        validate.partition(partition)
        return self._partitions.setdefault(partition, _Partition())

    def _policy(self, timeline: str) -> TimelinePolicy:
        return validate.policy(self._resolver(timeline), timeline)

    def add(
        self,
        partition: int,
        records: Sequence[NewRecord],
        now: float,
        *,
        expected_fence: int | None = None,
        through_offset: int | None = None,
        topic_id: str | None = None,
    ) -> AddResult:
        """Store a batch of records of one partition, fenced by offset."""
        state = self._partition(partition)
        now = validate.time_value(now, "now")
        expected, through = validate.fence_arguments(expected_fence, through_offset)
        topic = validate.topic_id(topic_id)
        validate.records(records, through)
        policies = {record.timeline: self._policy(record.timeline) for record in records}

        fence_before, topic_before = state.fence, state.fence_topic
        if topic is not None and topic_before is not None and topic_before != topic:
            # Another topic's offsets: they fence nothing here; the caller decides.
            return AddResult([], 0, 0, 0, fence_before, fence_before, topic_before)
        if expected is not None and (fence_before is None or fence_before < expected):
            # The store lost writes the caller made: apply nothing, let it replay.
            return AddResult([], 0, 0, 0, fence_before, fence_before, topic_before)
        fence = -1 if fence_before is None else fence_before
        ready: list[str] = []
        touched: list[str] = []
        added = skipped = dropped = cancelled = 0
        for record in records:
            if record.control is not None:
                # A control ends the segment of records before it (RedisStore makes one call
                # per segment), so they are trimmed and checked against flush_at first.
                dropped += self._finish(state, touched, policies, now)
                touched = []
                if record.offset > fence:
                    fence = record.offset
                    cancelled += self._control(state, record, now, ready)
                continue
            if record.offset <= fence:
                skipped += 1
                continue
            fence = record.offset
            added += 1
            name = record.timeline
            if name not in state.timelines:
                # Scheduled without records: they are in its open digest, or expired.
                scheduled = name in state.ready or name in state.waiting
                state.timelines[name] = _Timeline(
                    expired=scheduled and name not in state.digests,
                    behind_open=scheduled and name in state.digests,
                )
            timeline = state.timelines[name]
            if name not in touched:
                touched.append(name)
            timeline.records[record.id] = StoredRecord(
                record.id, float(record.timestamp), record.payload
            )
            policy = policies[name]
            if name in state.ready:
                continue
            if name in state.waiting:
                if policy.schedule is not None:
                    continue  # a calendar due time does not move
                last = self._last_delivery(state, name)
                due = state.waiting[name]
                if last is not None:
                    state.waiting[name] = min(
                        due + policy.increment_delay, last + policy.maximum_delay
                    )
                else:
                    state.waiting[name] = min(due, float(record.timestamp))
            elif policy.schedule is not None:
                # No leading edge: the first record waits for the schedule's next fire.
                state.waiting[name] = policy.next_fire(now) or now
                timeline.cause = "SCHEDULE"
            else:
                state.ready[name] = now
                ready.append(name)
        dropped += self._finish(state, touched, policies, now)

        if through is not None:
            fence = max(fence, through)
        moved = fence > -1 and (fence_before is None or fence > fence_before)
        if moved:
            state.fence = fence
        if (moved or fence_before is not None) and topic_before is None and topic is not None:
            state.fence_topic = topic  # a fence without a topic takes the caller's
        return AddResult(
            ready, added, skipped, dropped, fence_before, state.fence, topic_before, cancelled
        )

    def _finish(
        self,
        state: _Partition,
        touched: list[str],
        policies: dict[str, TimelinePolicy],
        now: float,
    ) -> int:
        """Trim each touched timeline to capacity once, then apply flush_at; returns drops."""
        dropped = 0
        for name in touched:
            policy = policies[name]
            timeline = state.timelines[name]
            capacity = policy.capacity
            if capacity is not None and len(timeline.records) > capacity:
                oldest = sorted(timeline.records.values(), key=_age_key)
                victims = oldest[: len(oldest) - capacity]
                for victim in victims:
                    del timeline.records[victim.id]
                timeline.dropped += len(victims)
                dropped += len(victims)
            flush_at = policy.flush_at
            if flush_at is not None and name in state.waiting and len(timeline.records) >= flush_at:
                last = self._last_delivery(state, name)
                due = now if last is None else max(now, last + FLUSH_AT_FLOOR)
                if due < state.waiting[name]:
                    state.waiting[name] = due
                    timeline.cause = "FLUSH_AT"
        return dropped

    @staticmethod
    def _control(state: _Partition, record: NewRecord, now: float, ready: list[str]) -> int:
        """Apply one control operation; returns the pending records it cancelled."""
        name = record.timeline
        timeline = state.timelines.get(name)
        if timeline is None:
            return 0
        if record.control == FLUSH:
            # Only a WAITING timeline with pending records: READY is already on its way.
            if name in state.waiting and timeline.records:
                del state.waiting[name]
                state.ready[name] = now
                timeline.cause = "FLUSHED"
                if name not in ready:
                    ready.append(name)
            return 0
        if record.control == CANCEL_ALL:
            count = len(timeline.records)
            timeline.records.clear()
            return count
        return 0 if timeline.records.pop(record.id, None) is None else 1

    @staticmethod
    def _last_delivery(state: _Partition, name: str) -> float | None:
        timeline = state.timelines.get(name)
        if timeline is not None and timeline.last_delivery is not None:
            return timeline.last_delivery
        digest = state.digests.get(name)
        return digest.last_delivery if digest is not None else None

    def schedule(self, partition: int, now: float, *, limit: int = DEFAULT_SLICE) -> DueBatch:
        """Move up to ``limit`` due WAITING timelines to READY; ``.more`` when more are due."""
        state = self._partition(partition)
        now = validate.time_value(now, "now")
        limit = validate.limit(limit)
        due = sorted(
            ((name, at) for name, at in state.waiting.items() if at <= now), key=_score_key
        )
        for name, _ in due[:limit]:
            del state.waiting[name]
            state.ready[name] = now
        return DueBatch((DueTimeline(name, at) for name, at in due[:limit]), more=len(due) > limit)

    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """Move up to ``limit`` stale READY timelines back to WAITING; ``.more`` if more remain."""
        state = self._partition(partition)
        deadline = validate.time_value(deadline, "deadline")
        validate.time_value(now, "now")
        limit = validate.limit(limit)
        stale = sorted(
            ((name, at) for name, at in state.ready.items() if at < deadline), key=_score_key
        )
        for name, at in stale[:limit]:
            del state.ready[name]
            state.waiting[name] = at
        return DueBatch(
            (DueTimeline(name, at) for name, at in stale[:limit]), more=len(stale) > limit
        )

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        self._policy(timeline)
        if timeline not in state.ready:
            raise InvalidState(f"timeline is not ready: {timeline}")
        digest = state.digests.get(timeline)
        if digest is None:
            # READY with neither records nor a digest: its data expired.
            pending = state.timelines.pop(timeline, None) or _Timeline(expired=True)
            digest = _Digest(
                id=digest_id,
                opened_at=now,
                dropped=pending.dropped,
                records=sorted(pending.records.values(), key=_age_key, reverse=True),
                last_delivery=pending.last_delivery,
                # records that waited behind a digest that is gone: it expired
                expired=pending.expired or pending.behind_open,
                reason=reason_of(pending.cause, pending.last_delivery),
            )
            state.digests[timeline] = digest
        return OpenDigest(
            digest.id,
            timeline,
            list(digest.records),
            digest.dropped,
            digest.opened_at,
            digest.expired,
            digest.reason,
        )

    def expire(self, partition: int, timeline: str, *, digest_only: bool = False) -> None:
        """Drop the timeline's records and open digest (or only the digest), keeping its
        schedule entry: what Redis does when their TTLs run out (test aid; not part of
        ``DigestStore``)."""
        state = self._partition(partition)
        if not digest_only:
            state.timelines.pop(timeline, None)
        state.digests.pop(timeline, None)

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        policy = self._policy(timeline)
        digest = state.digests.get(timeline)
        if digest is None or digest.id != digest_id:
            return False
        del state.digests[timeline]
        pending = state.timelines.get(timeline)
        if not digest.records and (pending is None or not pending.records):
            # An empty digest ends the cool-down: the timeline retires.
            state.timelines.pop(timeline, None)
            state.ready.pop(timeline, None)
            state.waiting.pop(timeline, None)
            return True
        if pending is None:
            pending = state.timelines[timeline] = _Timeline()
        pending.last_delivery = now
        pending.behind_open = False
        state.ready.pop(timeline, None)
        fire = policy.next_fire(now)
        # A calendar timeline waits for its next fire, others for the cool-down.
        pending.cause = "COOLDOWN" if fire is None else "SCHEDULE"
        state.waiting[timeline] = now + policy.minimum_delay if fire is None else fire
        return True

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for each target, in order; a timeline that is not READY gives its error."""
        results: list[OpenDigest | InvalidState] = []
        for partition, timeline, digest_id in targets:
            try:
                results.append(self.open(partition, timeline, digest_id, now))
            except InvalidState as state:
                results.append(state)
        return results

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for each target, in order."""
        return [self.close(p, timeline, digest_id, now) for p, timeline, digest_id in targets]

    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        state = self._partition(partition)
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
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        if timeline in state.ready:
            status, due = "ready", state.ready[timeline]
        elif timeline in state.waiting:
            status, due = "waiting", state.waiting[timeline]
        else:
            status, due = "absent", None
        pending = state.timelines.get(timeline)
        digest = state.digests.get(timeline)
        last_delivery = self._last_delivery(state, timeline)
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
        state = self._partition(partition)
        return PartitionStats(
            partition=partition,
            waiting=len(state.waiting),
            ready=len(state.ready),
            oldest_due=min(state.waiting.values()) if state.waiting else None,
            applied_offset=state.fence,
        )

    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        return self._partition(partition).fence

    def fence(self, partition: int) -> Fence:
        """The partition's fence with the topic id it belongs to."""
        state = self._partition(partition)
        return Fence(state.fence, state.fence_topic)

    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """Write exactly this fence (a new topic, admin replays); both None remove it."""
        state = self._partition(partition)
        fence = None if offset is None else validate.offset(offset)
        state.fence, state.fence_topic = fence, validate.topic_id(topic_id)
